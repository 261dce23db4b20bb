"""Alembic migrations of the metadata store's schema (see sluice.metadata.schema); each revision in `versions/` is
frozen as it was released, never edited afterwards."""
