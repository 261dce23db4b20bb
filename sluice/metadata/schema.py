"""The metadata store's schema, versioned with Alembic: a node brings the store it starts on up to the schema it
knows (Druid creates its tables at start too, `druid.metadata.storage.connector.createTables`), and `sluice
migrate` does it alone. A store from before migrations existed is taken as the first revision; a store newer than
this Sluice is refused, with a message that says so, rather than written to."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text

#: the revision of the schema before migrations existed
BASELINE = "0001"


class SchemaError(RuntimeError):
    pass


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    return config


def head() -> str:
    """The revision this Sluice writes."""
    return ScriptDirectory.from_config(_config()).get_current_head() or BASELINE


def current(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def migrate(engine: Engine) -> tuple[str | None, str]:
    """Upgrade the store to this Sluice's schema, in one transaction; (the revision before, the revision now)."""
    config = _config()
    scripts = ScriptDirectory.from_config(config)
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":  # nodes starting together migrate one after the other
            connection.execute(text("SELECT pg_advisory_xact_lock(4242424242)"))
        config.attributes["connection"] = connection
        before = MigrationContext.configure(connection).get_current_revision()
        if before is None and "druid_segments" in inspect(connection).get_table_names():
            command.stamp(config, BASELINE)  # made by a Sluice from before migrations: that schema is the baseline
            before = BASELINE
        elif before is not None:
            try:
                scripts.get_revision(before)
            except Exception:
                raise SchemaError(
                    f"the metadata store's schema is at revision {before}, which this Sluice (schema {head()}) does "
                    "not know: it was written by a newer Sluice; run that version, or a newer one, on it") from None
        command.upgrade(config, "head")
        return before, MigrationContext.configure(connection).get_current_revision() or BASELINE
