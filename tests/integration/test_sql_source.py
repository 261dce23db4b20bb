"""The sql input source against a real SQLite file and a real PostgreSQL server: rows in the database in ->
column records out, every row exactly once however the queries are cut."""

from __future__ import annotations

import pickle
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from hashlib import md5
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from sqlalchemy.engine import make_url

from sluice.connectors import read_all
from sluice.connectors.records import column_records_schema
from sluice.connectors.sources.sql import BATCH_ROWS, CONNECT_RETRIES, SqlSource, SqlSourceError
from sluice.spec.input_source import SqlInputSource
from sluice.dev import postgres as pg
from tests.integration.harness import free_port

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
T0 = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)


def millis(moment: datetime) -> str:
    return str((moment.replace(tzinfo=moment.tzinfo or timezone.utc) - EPOCH) // timedelta(milliseconds=1))


def sql_spec(database_type: str, connect_uri: str, sqls: list[str], **options: Any) -> SqlInputSource:
    return SqlInputSource(type="sql", sqls=sqls, database={"type": database_type,
                                                           "connector_config": {"connect_uri": connect_uri,
                                                                                **options.pop("config", {})}},
                          **options)


def rows_of(source: SqlSource, parallelism: int = 2) -> list[dict[str, Any]]:
    """What executors would read: each reads a pickled copy of the source."""
    table = read_all(pickle.loads(pickle.dumps(source)), parallelism)
    assert table.schema == source.output_schema()
    return table.to_pylist()


# -- SQLite ---------------------------------------------------------------------------------------------------

SQLITE_ROWS = 1000


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    """`edits`: id 0..999 (every 9th NULL), page, added, and an ISO text time (SQLite has no time type)."""
    path = tmp_path / "wiki.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE edits (id INTEGER, page TEXT, added INTEGER, ts TEXT)")
        conn.executemany("INSERT INTO edits VALUES (?, ?, ?, ?)", [
            (None if i % 9 == 0 else i, f"page-{i}", i * 3, (T0 + timedelta(minutes=i)).strftime("%Y-%m-%d %H:%M:%S"))
            for i in range(SQLITE_ROWS)])
    return path


def test_each_query_of_sqls_is_a_split_with_its_rows(sqlite_db: Path) -> None:
    source = SqlSource(sql_spec("sqlite", f"jdbc:sqlite:{sqlite_db}", [
        "SELECT page, added FROM edits WHERE added < 30 ORDER BY added",
        "SELECT page, added, 'x:y' AS note FROM edits WHERE page = 'page-500';",
    ]), ["page", "added", "note"])
    assert [s.split_id for s in source.enumerate_splits()] == ["sqls[0]", "sqls[1]"]
    assert source.output_schema() == column_records_schema(["page", "added", "note"])
    rows = sorted(rows_of(source), key=lambda r: r["__locator"])
    expected = [{"__locator": f"sqls[0] row {n}", "__error": None, "page": f"page-{i}", "added": str(i * 3),
                 "note": None} for n, i in enumerate(range(10), start=1)]
    expected.append({"__locator": "sqls[1] row 1", "__error": None, "page": "page-500", "added": "1500", "note": "x:y"})
    assert rows == sorted(expected, key=lambda r: r["__locator"])


@pytest.mark.parametrize("column", ["id", "ts"])
def test_range_splits_read_every_row_once_nulls_included(sqlite_db: Path, column: str) -> None:
    source = SqlSource(sql_spec("sqlite", f"jdbc:sqlite:///{sqlite_db}", ["SELECT * FROM edits"],
                                split_column=column, num_splits=4), ["id", "page"])
    splits = source.enumerate_splits()
    assert [s.split_id for s in splits] == [f"sqls[0] range {n}/4" for n in (1, 2, 3, 4)]
    counts = [sum(b.num_rows for b in source.read_split(s)) for s in splits]
    assert all(count > SQLITE_ROWS // 8 for count in counts), counts
    rows = rows_of(source, parallelism=3)
    assert Counter(r["page"] for r in rows) == Counter(f"page-{i}" for i in range(SQLITE_ROWS))
    assert sum(r["id"] is None for r in rows) == len(range(0, SQLITE_ROWS, 9))


def test_a_missing_sqlite_file_fails_after_retries_naming_the_database(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir" / "x.db"
    source = SqlSource(sql_spec("sqlite", f"jdbc:sqlite:{missing}", ["SELECT 1 AS a"]), ["a"])
    with pytest.raises(SqlSourceError, match=rf"cannot read sqls\[0\]: no connection to SQLite database {missing} "
                                             rf"after {CONNECT_RETRIES + 1} attempts"):
        rows_of(source)


def test_a_statement_error_is_not_retried(sqlite_db: Path) -> None:
    source = SqlSource(sql_spec("sqlite", f"jdbc:sqlite:{sqlite_db}", ["SELECT 1 AS a", "SELECT * FROM missing"]),
                       ["a"])
    began = time.monotonic()
    with pytest.raises(SqlSourceError, match=r"reading sqls\[1\] from SQLite database .* failed \(no such table: missing\)"):
        rows_of(source, parallelism=1)
    assert time.monotonic() - began < 1


# -- PostgreSQL -----------------------------------------------------------------------------------------------

PG_ROWS = 5000


@pytest.fixture(scope="module")
def pg_db(postgres_uri: str) -> Iterator[str]:
    """A database with `edits` (typed columns, NULLs, a mixed-case unquoted column) and an empty table."""
    uri = pg.fresh_database(postgres_uri)
    with psycopg.connect(uri.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute("""CREATE TABLE edits (id BIGINT, countryName TEXT, "Page" TEXT, added INTEGER,
                        delta NUMERIC(10, 2), ratio DOUBLE PRECISION, robot BOOLEAN, at TIMESTAMPTZ,
                        local_at TIMESTAMP, uid UUID)""")
        conn.execute("""INSERT INTO edits
                        SELECT i, 'country-' || mod(i, 7), 'page-' || i, i * 3, i / 4.0, i + 0.5, mod(i, 2) = 0,
                               CASE WHEN mod(i, 10) = 0 THEN NULL ELSE %(t0)s + i * INTERVAL '1 minute' END,
                               TIMESTAMP '2024-03-01 12:00:00' + i * INTERVAL '1 second', md5(i::text)::uuid
                        FROM generate_series(0, %(last)s) AS i""", {"t0": T0, "last": PG_ROWS - 1})
        conn.execute("CREATE TABLE nothing (id INTEGER)")
    yield uri


def jdbc(uri: str) -> str:
    url = make_url(uri)
    return f"jdbc:postgresql://{url.host}:{url.port}/{url.database}"


def test_postgres_values_become_canonical_text(pg_db: str) -> None:
    fields = ["id", "countryname", "Page", "added", "delta", "ratio", "robot", "at", "local_at", "uid", "absent"]
    source = SqlSource(sql_spec("postgresql", jdbc(pg_db), ["SELECT * FROM edits WHERE id IN (3, 10)"],
                                config={"user": pg.SUPERUSER}), fields)
    rows = sorted(rows_of(source), key=lambda r: int(r["id"]))
    assert [{k: r[k] for k in fields} for r in rows] == [
        {"id": "3", "countryname": "country-3", "Page": "page-3", "added": "9", "delta": "0.75", "ratio": "3.5",
         "robot": "false", "at": millis(T0 + timedelta(minutes=3)), "local_at": millis(datetime(2024, 3, 1, 12, 0, 3)),
         "uid": str(UUID(md5(b"3").hexdigest())), "absent": None},
        {"id": "10", "countryname": "country-3", "Page": "page-10", "added": "30", "delta": "2.50", "ratio": "10.5",
         "robot": "true", "at": None, "local_at": millis(datetime(2024, 3, 1, 12, 0, 10)),
         "uid": str(UUID(md5(b"10").hexdigest())), "absent": None},
    ]


def test_password_from_the_environment(pg_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_TEST_PG_PASSWORD", "unused-with-trust-auth")
    source = SqlSource(sql_spec("postgresql", jdbc(pg_db), ["SELECT count(*) AS n FROM edits"], config={
        "user": pg.SUPERUSER, "password": {"type": "environment", "variable": "SLUICE_TEST_PG_PASSWORD"}}), ["n"])
    assert [r["n"] for r in rows_of(source)] == [str(PG_ROWS)]


def test_fold_case_matches_fields_to_columns_ignoring_case(pg_db: str) -> None:
    """PostgreSQL folds the unquoted countryName to countryname: Druid's foldCase is what finds it again."""
    spec = sql_spec("postgresql", pg_db, ['SELECT id, countryName, "Page" FROM edits WHERE id < 3'])
    fields = ["id", "countryName", "page"]
    assert {(r["countryName"], r["page"]) for r in rows_of(SqlSource(spec, fields))} == {(None, None)}
    folded = rows_of(SqlSource(spec.model_copy(update={"fold_case": True}), fields))
    assert sorted((r["id"], r["countryName"], r["page"]) for r in folded) == [
        ("0", "country-0", "page-0"), ("1", "country-1", "page-1"), ("2", "country-2", "page-2")]


@pytest.mark.parametrize(("column", "num_splits"), [("id", 6), ("at", 5), ("local_at", 3), ("delta", 4),
                                                    ("ratio", 4)])
def test_postgres_range_splits_read_every_row_once(pg_db: str, column: str, num_splits: int) -> None:
    source = SqlSource(sql_spec("postgresql", pg_db, ["SELECT * FROM edits", "SELECT id FROM edits WHERE id < 100"],
                                split_column=column if column == "id" else column.upper(), num_splits=num_splits),
                       ["id"])
    if column != "id":  # the second query has no such column
        with pytest.raises(ValueError, match=rf"splitColumn '{column.upper()}' is not a column of sqls\[1\]"):
            source.enumerate_splits()
        source = SqlSource(source.spec.model_copy(update={"sqls": ["SELECT * FROM edits"]}), ["id"])
    splits = source.enumerate_splits()
    assert len([s for s in splits if s.index == 0]) == num_splits
    assert all(s.column == column for s in splits)
    ids = Counter(int(r["id"]) for r in rows_of(source, parallelism=3))
    expected = Counter(range(PG_ROWS)) + (Counter(range(100)) if column == "id" else Counter())
    assert ids == expected


def test_an_empty_result_is_one_split(pg_db: str) -> None:
    source = SqlSource(sql_spec("postgresql", pg_db, ["SELECT * FROM nothing"], split_column="id", num_splits=8),
                       ["id"])
    assert [s.split_id for s in source.enumerate_splits()] == ["sqls[0]"]
    assert rows_of(source) == []


def test_a_large_result_streams_in_bounded_batches(pg_db: str) -> None:
    rows = 2 * BATCH_ROWS + 123
    source = SqlSource(sql_spec("postgresql", pg_db, [f"SELECT i FROM generate_series(1, {rows}) AS i"]), ["i"])
    (split,) = source.enumerate_splits()
    sizes = [batch.num_rows for batch in source.read_split(split)]
    assert sizes == [BATCH_ROWS, BATCH_ROWS, 123]


def test_a_connection_dropped_after_rows_went_out_fails_the_split(pg_db: str) -> None:
    """Rows already handed on cannot be taken back: the split fails, and Spark's next attempt reads it whole."""
    source = SqlSource(sql_spec("postgresql", pg_db, ["SELECT i FROM generate_series(1, 1000000) AS i"]), ["i"])
    batches = source.read_split(source.enumerate_splits()[0])
    assert next(batches).num_rows == BATCH_ROWS
    with psycopg.connect(pg_db.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = current_database() AND pid <> pg_backend_pid()")
    began = time.monotonic()
    with pytest.raises(SqlSourceError, match=rf"reading sqls\[0\] from postgresql database 127\.0\.0\.1:\d+/\w+ "
                                             rf"failed after {BATCH_ROWS} rows"):
        list(batches)
    assert time.monotonic() - began < 1


def test_an_unreachable_database_fails_after_retries_naming_host_and_query() -> None:
    port = free_port()
    source = SqlSource(sql_spec("postgresql", f"jdbc:postgresql://127.0.0.1:{port}/wiki",
                                ["SELECT 1 AS a", "SELECT 2 AS a"], config={"user": "druid", "password": "diurd"}),
                       ["a"])
    began = time.monotonic()
    with pytest.raises(SqlSourceError) as raised:
        rows_of(source, parallelism=1)
    message = str(raised.value)
    assert f"no connection to postgresql database 127.0.0.1:{port}/wiki after {CONNECT_RETRIES + 1} attempts" in message
    assert message.startswith("cannot read sqls[0]") and "diurd" not in message
    assert time.monotonic() - began >= 0.5 * (2 ** CONNECT_RETRIES - 1)


def test_the_driver_side_range_query_retries_too() -> None:
    port = free_port()
    source = SqlSource(sql_spec("postgresql", f"postgresql://127.0.0.1:{port}/wiki", ["SELECT 1 AS a"],
                                split_column="a", num_splits=2), ["a"])
    with pytest.raises(SqlSourceError, match=rf"no connection to postgresql database 127.0.0.1:{port}/wiki"):
        source.enumerate_splits()


def test_only_select_queries_are_accepted(sqlite_db: Path) -> None:
    with pytest.raises(ValueError, match=r"sqls\[1\] must be a SELECT query .* found DELETE"):
        SqlSource(sql_spec("sqlite", f"jdbc:sqlite:{sqlite_db}", ["SELECT * FROM edits", "DELETE FROM edits"]), ["id"])
    with sqlite3.connect(sqlite_db) as conn:
        assert conn.execute("SELECT count(*) FROM edits").fetchone() == (SQLITE_ROWS,)



def test_a_connection_dropped_before_any_row_is_tried_again(pg_db: str) -> None:
    """The server ends the session while the query still runs: nothing went out yet, so the split reconnects."""
    sql = "SELECT i FROM generate_series(1, 3) AS i, pg_sleep(1.5) AS nap"
    source = SqlSource(sql_spec("postgresql", pg_db, [sql]), ["i"])

    def terminate_once() -> None:
        with psycopg.connect(pg_db.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                ended = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                     "WHERE query LIKE %s AND pid <> pg_backend_pid()", ("%pg_sleep(1.5)%",)).fetchall()
                if ended:
                    return
                time.sleep(0.05)

    killer = threading.Thread(target=terminate_once)
    killer.start()
    try:
        began = time.monotonic()
        (batch,) = source.read_split(source.enumerate_splits()[0])
    finally:
        killer.join()
    assert batch.column("i").to_pylist() == ["1", "2", "3"]
    assert time.monotonic() - began > 1.5 + 0.5  # the first attempt was cut off, then the backoff, then a whole run


@pytest.mark.parametrize("num_splits", [None, 3])
def test_the_query_text_is_the_users(pg_db: str, num_splits: int | None) -> None:
    """`%`, `:name` and a trailing line comment mean what they mean in SQL, whole or cut into ranges."""
    sql = """SELECT id, 'at :noon' AS note FROM edits WHERE "Page" LIKE 'page-1%' AND id < 20 -- the first pages"""
    source = SqlSource(sql_spec("postgresql", pg_db, [sql], split_column="id" if num_splits else None,
                                num_splits=num_splits), ["id", "note"])
    assert len(source.enumerate_splits()) == (num_splits or 1)
    rows = rows_of(source)
    assert sorted(int(r["id"]) for r in rows) == [1, *range(10, 20)]
    assert {r["note"] for r in rows} == {"at :noon"}
