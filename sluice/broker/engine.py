"""Runs a Druid SQL query with DuckDB over the Parquet files of the visible segments.

Every query gets its own in-memory DuckDB connection that holds one view per data source the query reads, over exactly
that data source's files. Before the query runs, the connection is locked down: it may read those files and nothing
else, and its configuration can no longer change. This is the second wall of the sandbox; the first is the check in
`sql.translate_query`, which admits only read-only queries over known tables (DuckDB still lets `COPY … TO` write
inside allowed folders, so the locked-down connection alone would not do).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import duckdb
from sqlglot import exp

from sluice.broker.sql import DUCKDB_SETTINGS, TIME_COLUMN, SqlError, translate_query

DEFAULT_TIMEOUT_MS = 300_000  # Druid's druid.server.http.defaultQueryTimeout


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    druid_types: list[str]  # LONG, FLOAT, DOUBLE, STRING, ARRAY<…>, COMPLEX<json>
    sql_types: list[str]  # BIGINT, DOUBLE, FLOAT, VARCHAR, TIMESTAMP, BOOLEAN, …
    rows: list[tuple]


class SqlEngine:
    """Executes Druid SQL on DuckDB, one sandboxed connection per query."""

    def __init__(self, threads: int | None = None, memory_limit: str | None = None) -> None:
        self._config: dict[str, Any] = {
            "threads": threads or min(4, os.cpu_count() or 1),
            "autoload_known_extensions": False,
            "autoinstall_known_extensions": False,
        }
        if memory_limit:
            self._config["memory_limit"] = memory_limit

    def execute(
        self,
        sql: str,
        tables: Mapping[str, Sequence[str]],
        parameters: Sequence[dict] = (),
        context: Mapping[str, Any] | None = None,
    ) -> QueryResult:
        """Run `sql` over `tables` (data source → segment files; one with no files does not exist yet)."""
        readable = {name: list(files) for name, files in tables.items() if files}
        translation = translate_query(sql, readable.keys())
        values = bind_parameters(parameters, translation.parameter_count)
        timeout_ms = _timeout_ms(context)
        with closing(duckdb.connect(":memory:", config=self._config)) as conn, _deadline(conn, timeout_ms):
            try:
                lock_down(conn, {name: readable[name] for name in translation.data_sources})
                cursor = conn.execute(translation.sql, values)
                return _result(cursor.description, cursor.fetchall())
            except duckdb.InterruptException as e:
                raise SqlError.timeout() from e
            except duckdb.Error as e:
                raise _sql_error(e) from e


def _timeout_ms(context: Mapping[str, Any] | None) -> int:
    """Druid's context `timeout`, in milliseconds; 0 means none."""
    timeout = (context or {}).get("timeout", DEFAULT_TIMEOUT_MS)
    try:
        return int(timeout)
    except (TypeError, ValueError) as e:
        raise SqlError(f"Query context timeout must be a number of milliseconds, got {timeout!r}") from e


@contextmanager
def _deadline(conn: duckdb.DuckDBPyConnection, timeout_ms: int) -> Iterator[None]:
    """Interrupts whatever `conn` runs once `timeout_ms` have passed (the query then fails with InterruptException)."""
    if timeout_ms <= 0:
        yield
        return
    timer = threading.Timer(timeout_ms / 1000, conn.interrupt)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def lock_down(conn: duckdb.DuckDBPyConnection, data_sources: Mapping[str, list[str]]) -> None:
    """Views for the data sources, then no file access beyond their files and no configuration changes."""
    for name, value in DUCKDB_SETTINGS.items():
        conn.execute(f"SET {name} = ?", [value])
    for name, files in data_sources.items():
        conn.execute(_view_sql(name, files))
    conn.execute("SET allowed_paths = ?", [[path for files in data_sources.values() for path in files]])
    conn.execute("SET enable_external_access = false")
    conn.execute("SET lock_configuration = true")


def _view_sql(name: str, files: list[str]) -> str:
    """`CREATE VIEW "<name>"` over the files, columns unioned by name and `__time` as a UTC TIMESTAMP.

    Segment files are written by Spark with `__time` adjusted to UTC, which DuckDB reads as TIMESTAMPTZ; Druid SQL
    sees a TIMESTAMP. The session time zone is UTC, so the cast keeps the instant.
    """
    scan = exp.ReadParquet(
        expressions=[
            exp.array(*(exp.Literal.string(path) for path in files)),
            exp.EQ(this=exp.column("union_by_name"), expression=exp.true()),
        ]
    )
    time = exp.alias_(exp.cast(exp.column(TIME_COLUMN), exp.DType.TIMESTAMP), TIME_COLUMN)
    query = exp.select(exp.Star(replace=[time])).from_(exp.Table(this=scan))
    view = exp.Table(this=exp.to_identifier(name, quoted=True))
    return exp.Create(this=view, kind="VIEW", expression=query).sql(dialect="duckdb")


# ------------------------------------------------------------------------------------------------------ parameters

_INTEGER_TYPES = {"BIGINT", "INTEGER", "SMALLINT", "TINYINT"}
_REAL_TYPES = {"DOUBLE", "FLOAT", "REAL", "DECIMAL"}


def bind_parameters(parameters: Sequence[dict], expected: int) -> list[Any]:
    """Druid's typed `parameters` ([{"type": "VARCHAR", "value": "bar"}, …]) as values for `?` placeholders."""
    if len(parameters) != expected:
        raise SqlError(f"The query has {expected} parameter placeholders but {len(parameters)} parameters were given")
    return [_parameter_value(position, parameter) for position, parameter in enumerate(parameters)]


def _parameter_value(position: int, parameter: Mapping[str, Any]) -> Any:
    kind, value = str(parameter.get("type", "")).upper(), parameter.get("value")
    try:
        if value is None:
            return None
        if kind in ("TIMESTAMP", "DATE"):
            return _timestamp(value)
        if kind in _INTEGER_TYPES:
            return int(value)
        if kind in _REAL_TYPES:
            return float(value)
        if kind == "BOOLEAN":
            return value if isinstance(value, bool) else str(value).lower() == "true"
        return value
    except (TypeError, ValueError) as e:
        raise SqlError(f"Parameter at position [{position}] is not a valid {kind}: {value!r}") from e


def _timestamp(value: Any) -> datetime:
    """Druid accepts a TIMESTAMP parameter as epoch milliseconds or as text; the result is UTC without a zone."""
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000, UTC).replace(tzinfo=None)
    parsed = datetime.fromisoformat(str(value))
    return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed


# --------------------------------------------------------------------------------------------------------- results

# DuckDB type id → (Druid type, SQL type). Druid has no DECIMAL or small integers natively: they are DOUBLE / LONG.
_TYPES: dict[str, tuple[str, str]] = {
    "boolean": ("LONG", "BOOLEAN"),
    "integer": ("LONG", "INTEGER"),
    "float": ("FLOAT", "FLOAT"),
    "double": ("DOUBLE", "DOUBLE"),
    "decimal": ("DOUBLE", "DECIMAL"),
    "varchar": ("STRING", "VARCHAR"),
    "uuid": ("STRING", "VARCHAR"),
    "null": ("STRING", "VARCHAR"),
    "date": ("LONG", "DATE"),
    **dict.fromkeys(("tinyint", "smallint", "bigint", "hugeint"), ("LONG", "BIGINT")),
    **dict.fromkeys(("utinyint", "usmallint", "uinteger", "ubigint", "uhugeint"), ("LONG", "BIGINT")),
    **dict.fromkeys(
        ("timestamp", "timestamp with time zone", "timestamp_ms", "timestamp_s", "timestamp_ns"), ("LONG", "TIMESTAMP")
    ),
}
_OTHER = ("COMPLEX<json>", "OTHER")


def _druid_type(duckdb_type: Any) -> tuple[str, str]:
    if duckdb_type.id == "list":
        return f"ARRAY<{_druid_type(duckdb_type.child)[0]}>", "ARRAY"
    return _TYPES.get(duckdb_type.id, _OTHER)


def _result(description: list[tuple], rows: list[tuple]) -> QueryResult:
    types = [_druid_type(column[1]) for column in description]
    return QueryResult(
        columns=_unique([column[0] for column in description]),
        druid_types=[druid for druid, _ in types],
        sql_types=[sql for _, sql in types],
        rows=[tuple(_value(v) for v in row) for row in rows],
    )


def _unique(names: list[str]) -> list[str]:
    """Calcite's names for repeated output columns: `page`, `page0`, `page1`…, so that no key is lost in JSON."""
    seen: set[str] = set()
    unique = []
    for name in names:
        candidate, n = name, 0
        while candidate in seen:
            candidate, n = f"{name}{n}", n + 1
        seen.add(candidate)
        unique.append(candidate)
    return unique


def _value(value: Any) -> Any:
    """DuckDB's Python values as the plain values Druid returns: floats for decimals, naive UTC timestamps."""
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, list):
        return [_value(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str | date | dict):
        return value
    return str(value)


# DuckDB errors that mean the query itself is wrong (unknown column, bad cast, wrong argument…).
_USER_ERRORS = (
    duckdb.ParserException,
    duckdb.BinderException,
    duckdb.CatalogException,
    duckdb.ConversionException,
    duckdb.InvalidInputException,
    duckdb.OutOfRangeException,
    duckdb.PermissionException,
    duckdb.NotImplementedException,
)


def _sql_error(error: duckdb.Error) -> SqlError:
    # DuckDB's message points into the translated SQL after its first line, which the user never wrote.
    message = str(error).split("\n", 1)[0]
    return SqlError(message) if isinstance(error, _USER_ERRORS) else SqlError.internal(message)
