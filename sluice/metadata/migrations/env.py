"""Alembic's environment: migrations run on the connection `sluice.metadata.schema.migrate` hands over."""

from alembic import context

from sluice.metadata import tables

context.configure(connection=context.config.attributes["connection"], target_metadata=tables.metadata,
                  render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
