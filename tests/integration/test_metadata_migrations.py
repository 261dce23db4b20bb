"""The metadata store's schema under Alembic, on SQLite and PostgreSQL: a new store gets exactly the tables Sluice
describes, a store made by the previous schema (before migrations) is upgraded in place with its rows intact, and a
store of a newer Sluice is refused with a message that says so."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from sluice.cli import main
from sluice.metadata import tables
from sluice.metadata.schema import BASELINE, SchemaError, _config, current, head, migrate
from sluice.metadata.store import MetadataStore


@pytest.fixture(params=["sqlite", "postgresql"])
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'metadata.db'}"
    from sluice.dev import postgres as pg

    return pg.fresh_database(request.getfixturevalue("postgres_uri"))


def test_a_new_store_gets_exactly_the_schema_sluice_describes(uri: str) -> None:
    store = MetadataStore(uri)
    store.create_tables()
    assert current(store.engine) == head()
    with store.engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), tables.metadata)
    assert _unfolded(differences) == []
    store.create_tables()  # again: nothing to do
    store.close()


def _unfolded(differences: list) -> list:
    """The differences left once PostgreSQL's folding of Druid's unquoted `dataSource` to `datasource` is allowed
    for: reflection reports the folded column as another one than the model's."""
    added = {(d[2], d[3].name.lower()) for d in differences if isinstance(d, tuple) and d[0] == "add_column"}
    removed = {(d[2], d[3].name.lower()) for d in differences if isinstance(d, tuple) and d[0] == "remove_column"}
    folded = added & removed
    return [d for d in differences if not (isinstance(d, tuple) and d[0] in ("add_column", "remove_column")
                                            and (d[2], d[3].name.lower()) in folded)]


def test_a_store_of_the_previous_schema_is_upgraded_in_place_with_its_rows(uri: str) -> None:
    engine = create_engine(uri)
    config = _config()
    with engine.begin() as connection:  # what a Sluice from before migrations left: the baseline tables, no version
        config.attributes["connection"] = connection
        command.upgrade(config, BASELINE)
        connection.execute(text("DROP TABLE alembic_version"))
        connection.execute(text("INSERT INTO druid_supervisors (spec_id, created_date, payload) "
                                "VALUES ('wiki', '2026-01-01T00:00:00.000Z', :payload)"), {"payload": b'{"type":"kafka"}'})
    assert "druid_config" not in inspect(engine).get_table_names()
    engine.dispose()

    store = MetadataStore(uri)
    store.create_tables()  # what a node does as it starts
    assert current(store.engine) == head()
    assert {"druid_config", "druid_rules", "druid_audit"} <= set(inspect(store.engine).get_table_names())
    assert store.active_supervisors() == {"wiki": {"type": "kafka"}}
    store.set_rules("wiki", [{"type": "loadForever"}], "me", "", None)  # the new tables work
    assert store.rules() == {"wiki": [{"type": "loadForever"}]}
    store.close()


def test_a_store_of_a_newer_sluice_is_refused_and_left_alone(uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    store = MetadataStore(uri)
    store.create_tables()
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '9999'"))
    with pytest.raises(SchemaError, match="revision 9999, which this Sluice .* does not know"):
        migrate(store.engine)
    with pytest.raises(SystemExit):
        main(["migrate", "--metadata-uri", uri])
    assert "written by a newer Sluice" in capsys.readouterr().err
    assert current(store.engine) == "9999"
    store.close()


def test_sluice_migrate_upgrades_a_store_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["migrate", "--work-dir", str(tmp_path)])
    assert capsys.readouterr().out.strip() == f"metadata store schema: {head()} (was empty)"
    main(["migrate", "--work-dir", str(tmp_path)])
    assert capsys.readouterr().out.strip() == f"metadata store schema: {head()} (up to date)"
