"""Runs a translated Druid SQL query with DuckDB over the Parquet files of the segments it may read.

Every distinct set of files gets its own in-memory DuckDB database that holds one view per data source over exactly
those files, and is then locked down: it may read those files and nothing else, and its configuration can no longer
change. This is the second wall of the sandbox; the first is the check in `sql.translate_query`, which admits only
read-only queries over known tables (DuckDB still lets `COPY … TO` write inside allowed folders, so the locked-down
database alone would not do). Opening a database, binding views and reading Parquet footers cost more than a
small query itself, and segment files never change, so the databases of the most recent file sets are kept and each
query runs on its own cursor of one. System tables are registered on that cursor only, for that query.

A partially overshadowed segment comes as a `ClippedFile`: its view scan keeps only the rows within the intervals where
the timeline shows it, so a query never counts two versions of the same time.

Segment files written by Spark store `__time` as a UTC-adjusted timestamp, which DuckDB reads as TIMESTAMPTZ; Druid
SQL sees a TIMESTAMP. DuckDB's TIMESTAMPTZ→TIMESTAMP cast goes through ICU per value and costs more than a whole
timeseries query, so the views take the instant's microseconds instead. Files that store `__time` as a plain
TIMESTAMP need nothing and keep Parquet's min/max statistics usable for `__time` filters.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from datetime import time as time_of_day
from functools import lru_cache, partial
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
from sqlglot import exp

from sluice.broker.errors import SqlError
from sluice.broker.limits import DEFAULT_MAX_RESULT_BYTES
from sluice.broker.functions.rewrite import Zone
from sluice.broker.functions.lookups import relation
from sluice.broker.functions import bloom, python_functions, sketches, tdigest
from sluice.broker.sql.complex_types import COMPLEX_KINDS, arrow_complex_type, complex_type, struct_field
from sluice.broker.sql.multi_value import JOIN_UNSUPPORTED, MULTI_VALUE, is_output, row_value
from sluice.broker.sql.nested_fields import NESTED_FIELD, field_column, indexed_fields, json_document, view_fields
from sluice.broker.functions.sketches import to_base64
from sluice.broker.sql.translate import DUCKDB_SETTINGS, TIME_COLUMN, Translation, translate_query
from sluice.broker.system_tables import SystemTable
from sluice.lookups.references import LookupExtractor, LookupLoadError
from sluice.segment.columns import ARRAY_FIELD, is_multi_value, is_string_array
from sluice.segment.nested import is_json_column
from sluice.segment.segment import Interval


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    druid_types: list[str]  # LONG, FLOAT, DOUBLE, STRING, ARRAY<…>, COMPLEX<json>
    sql_types: list[str]  # BIGINT, DOUBLE, FLOAT, VARCHAR, TIMESTAMP, BOOLEAN, …
    # timestamps naive in UTC, or aware in the query's sqlTimeZone when it has one; a multi-value string null, its one
    # value or the list of its values (Druid's native value, which the SQL result writers write as JSON text)
    rows: list[tuple]


@dataclass(frozen=True)
class ClippedFile:
    """A segment file whose rows are visible only within `intervals` (sorted, disjoint): a higher version overshadows
    the rest of its segment. Druid's broker says the same to a historical with a SegmentDescriptor, which names the
    interval of the timeline piece to read rather than the segment's own."""

    path: str
    intervals: tuple[Interval, ...]


@dataclass(frozen=True)
class RealtimeFile:
    """A persist file of rows a task has not published. Its `multi_values` string columns hold a row of several values
    as their JSON array text (a persist writes its rows before it knows which dimensions have several; the merge at
    publish makes them lists): the view reads those as lists, as the segment will hold them."""

    path: str
    multi_values: tuple[str, ...] = ()


#: One file of a data source: a segment's path read whole, a clipped segment file, or a realtime persist file.
SegmentFile = str | ClippedFile | RealtimeFile


def _path(file: SegmentFile) -> str:
    return file if isinstance(file, str) else file.path


_CANCEL_WAIT_S = 5.0


class SegmentFileGone(Exception):
    """A file the query was to read has vanished (a segment dropped, a realtime piece handed off) since the caller
    decided which files to read; asking again for the files to read and rerunning the query is the remedy."""


#: the lookup of a name, loaded; None when there is none of that name (see lookups/references.py)
Lookups = Callable[[str], LookupExtractor | None]

_VARIABLE_SIZE = frozenset({"varchar", "blob", "list", "array", "struct", "map", "union", "bit"})
_FETCH_CHUNK_ROWS = 10_000


class SqlEngine:
    """Executes translated Druid SQL on DuckDB."""

    def __init__(self, threads: int | None = None, memory_limit: str | None = None,
                 max_result_rows: int | None = None, databases: int = 8, temp_directory: str | None = None,
                 max_result_bytes: int | None = DEFAULT_MAX_RESULT_BYTES, lookups: Lookups | None = None) -> None:
        """`memory_limit` (DuckDB's, e.g. "2GB") bounds each database: the queries running at once over one file set
        share it (DuckDB has no per-connection limit, and a database per query would lose what keeping one saves);
        past it, DuckDB spills sorts and hash tables to `temp_directory` (its default: `.tmp` in the working
        directory). `max_result_rows` and `max_result_bytes` bound what one query may return; `databases` is how
        many file sets keep an open database. `lookups` gives the query-time lookups queries may read (none
        without)."""
        self._config: dict[str, Any] = {
            "threads": threads or min(4, os.cpu_count() or 1),
            "autoload_known_extensions": False,
            "autoinstall_known_extensions": False,
        }
        if memory_limit:
            self._config["memory_limit"] = memory_limit
        if temp_directory:
            self._config["temp_directory"] = temp_directory
        self._memory_limit = memory_limit
        self._max_result_rows = max_result_rows
        self._max_result_bytes = max_result_bytes
        self._capacity = databases
        self._databases: OrderedDict[tuple, duckdb.DuckDBPyConnection] = OrderedDict()
        self._lock = threading.Lock()
        self._running: dict[str, list[duckdb.DuckDBPyConnection]] = {}
        self._cancelled: set[str] = set()
        self._lookups = lookups

    @property
    def duckdb_config(self) -> dict[str, Any]:
        """What every database of this engine is opened with (threads, memory limit, no extensions)."""
        return dict(self._config)

    def execute(
        self,
        sql: str,
        tables: Mapping[str, Sequence[SegmentFile]],
        parameters: Sequence[dict] = (),
        context: Mapping[str, Any] | None = None,
    ) -> QueryResult:
        """Run `sql` over `tables` (data source → segment files; one with no files does not exist yet)."""
        readable = {name: files for name, files in tables.items() if files}
        try:
            query = translate_query(sql, readable.keys(), context,
                                    complex_columns=lambda source, _: complex_columns(readable[source]))
            return self.run(query, readable, parameters)
        except SegmentFileGone as e:
            raise SqlError.internal(str(e)) from e

    def run(
        self,
        query: Translation,
        tables: Mapping[str, Sequence[SegmentFile]],
        parameters: Sequence[dict] = (),
        system_tables: Mapping[SystemTable, pa.Table] | None = None,
        database: duckdb.DuckDBPyConnection | None = None,
    ) -> QueryResult:
        """Run a translated query; `tables` holds the files of (at least) the data sources it reads, each non-empty.
        With `database` (a loaded data source, see loaded.py, which has the Python functions registered) the query
        runs there instead of over the files.

        Raises SqlError, or SegmentFileGone when a file is missing.
        """
        values = bind_parameters(parameters, query.parameter_count)
        lookups = {name: self._lookup(name) for name in query.lookups}
        query_id = query.context.query_id
        try:
            cursor = database.cursor() if database is not None else \
                self._cursor({name: list(tables[name]) for name in query.data_sources}, query.python_functions)
            with cursor, self._registered(query_id, cursor), _deadline(cursor, query.context.timeout_ms):
                for table, rows in (system_tables or {}).items():
                    cursor.register(table.relation, rows)
                for name, lookup in lookups.items():
                    cursor.register(relation(name), lookup.table)
                if query.explain:
                    return _explain(cursor, query, values, tables)
                cursor.execute(query.sql, values)
                return _result(cursor.description, self._fetch(cursor), query.context.session.time_zone)
        except duckdb.InterruptException as e:
            if query_id is not None and query_id in self._cancelled:
                raise SqlError.cancelled(query_id) from e
            raise SqlError.timeout() from e
        except duckdb.IOException as e:
            raise SegmentFileGone(_first_line(e)) from e
        except duckdb.PermissionException as e:
            # DuckDB reads a path that no longer exists as a folder to glob, which the sandbox refuses
            gone = next((path for name in query.data_sources for path in map(_path, tables[name])
                         if not os.path.exists(path)), None)
            if gone is not None:
                raise SegmentFileGone(f"Segment file {gone} no longer exists") from e
            raise _sql_error(e) from e
        except duckdb.OutOfMemoryException as e:
            raise SqlError.resource_limit(
                f"Query needs more memory than the broker's limit of {self._memory_limit}: {_first_line(e)}") from e
        except duckdb.Error as e:
            raise _sql_error(e) from e
        finally:
            if query_id is not None:
                self._cancelled.discard(query_id)

    def _lookup(self, name: str) -> LookupExtractor:
        try:
            found = None if self._lookups is None else self._lookups(name)
        except LookupLoadError as error:
            raise SqlError.internal(str(error)) from error
        if found is None:
            raise SqlError(f"Lookup [{name}] not found")
        return found

    def cancel(self, query_id: str) -> bool:
        """Interrupt the running queries with this sqlQueryId; False when no such query runs."""
        with self._lock:
            cursors = list(self._running.get(query_id, ()))
            if cursors:
                self._cancelled.add(query_id)
        # An interrupt that comes before DuckDB has started the query is lost: repeat it until the query stopped.
        deadline = time.monotonic() + _CANCEL_WAIT_S
        while self._still_running(query_id, cursors) and time.monotonic() < deadline:
            for cursor in cursors:
                cursor.interrupt()
            time.sleep(0.005)
        return bool(cursors)

    def _still_running(self, query_id: str, cursors: list[duckdb.DuckDBPyConnection]) -> bool:
        with self._lock:
            return any(cursor in self._running.get(query_id, ()) for cursor in cursors)

    def _fetch(self, cursor: duckdb.DuckDBPyConnection) -> list[tuple]:
        """The result's rows, in chunks so that one past the row or byte limit stops the query before the rest
        is read. Only values of variable size count towards the bytes (a fixed-size value is small)."""
        sized = [i for i, column in enumerate(cursor.description) if column[1].id in _VARIABLE_SIZE]
        rows: list[tuple] = []
        size = 0
        while chunk := cursor.fetchmany(_FETCH_CHUNK_ROWS):
            rows += chunk
            if self._max_result_rows is not None and len(rows) > self._max_result_rows:
                raise SqlError.resource_limit(
                    f"Query returned more than the {self._max_result_rows} rows a query may return (the broker's "
                    "--max-query-rows); add a LIMIT or a narrower WHERE clause")
            if sized and self._max_result_bytes is not None:
                size += sum(len(value if isinstance(value, str | bytes) else str(value))
                            for row in chunk for i in sized if (value := row[i]) is not None)
                if size > self._max_result_bytes:
                    raise SqlError.resource_limit(
                        f"Query returned more than the {self._max_result_bytes} bytes a query may return (the "
                        "broker's --max-query-bytes); select fewer or shorter values")
        return rows

    @contextmanager
    def _registered(self, query_id: str | None, cursor: duckdb.DuckDBPyConnection) -> Iterator[None]:
        if query_id is None:
            yield
            return
        with self._lock:
            self._running.setdefault(query_id, []).append(cursor)
        try:
            yield
        finally:
            with self._lock:
                running = self._running[query_id]
                running.remove(cursor)
                if not running:
                    del self._running[query_id]

    def _cursor(self, data_sources: dict[str, list[SegmentFile]], python_functions: bool) -> duckdb.DuckDBPyConnection:
        """A cursor of the locked-down database for exactly these files, opened if none is kept, with the Python
        functions registered if the query needs them."""
        key = tuple(sorted((name, tuple(files)) for name, files in data_sources.items()))
        with self._lock:
            database = self._databases.pop(key, None)
            if database is None:
                database = _Database(duckdb.connect(":memory:", config=self._config))
                lock_down(database.connection, data_sources)
            if python_functions and not database.python_functions:
                register_python_functions(database.connection)
                database.python_functions = True
            self._databases[key] = database
            while len(self._databases) > self._capacity:
                # Dropped, not closed: queries running on its cursors keep the database alive until they end.
                self._databases.popitem(last=False)
            return database.connection.cursor()


@dataclass
class _Database:
    """A locked-down database of one set of files. Registering the Python functions costs more than many queries,
    and most databases never run a query that calls one (every persist of a streaming task makes a new set of
    files), so they are registered once the first query that calls one comes."""

    connection: duckdb.DuckDBPyConnection
    python_functions: bool = False


def _first_line(error: Exception) -> str:
    return str(error).split("\n", 1)[0]


class _Watchdog:
    """Interrupts each query that runs past its timeout (it then fails with InterruptException), from one thread for
    every query: a `threading.Timer` per query started a thread per query, an eighth of a short query's time on a
    broker answering dashboards (benchmarks/concurrency.py)."""

    def __init__(self) -> None:
        self._running: dict[int, tuple[float, duckdb.DuckDBPyConnection]] = {}  # token → deadline, its cursor
        self._tokens = itertools.count()
        self._changed = threading.Condition()
        self._wakes_at = math.inf
        self._thread: threading.Thread | None = None

    @contextmanager
    def __call__(self, cursor: duckdb.DuckDBPyConnection, timeout_ms: int) -> Iterator[None]:
        if timeout_ms <= 0:
            yield
            return
        token, deadline = next(self._tokens), time.monotonic() + timeout_ms / 1000
        with self._changed:
            self._running[token] = (deadline, cursor)
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, name="query-watchdog", daemon=True)
                self._thread.start()
            if deadline < self._wakes_at:
                self._changed.notify()
        try:
            yield
        finally:
            with self._changed:  # under the lock: a cursor is interrupted only while its query still runs
                self._running.pop(token, None)  # gone already when the watchdog interrupted it

    def _watch(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                for token, (deadline, cursor) in list(self._running.items()):
                    if deadline <= now:
                        del self._running[token]
                        cursor.interrupt()
                self._wakes_at = min((deadline for deadline, _ in self._running.values()), default=math.inf)
                self._changed.wait(None if self._wakes_at == math.inf else self._wakes_at - now)


_deadline = _Watchdog()


# ---------------------------------------------------------------------------------------------------------- views


def register_python_functions(conn: duckdb.DuckDBPyConnection) -> None:
    """The functions translated queries call that run in Python (sketches…); a locked-down database takes them."""
    sketches.register(conn)
    bloom.register(conn)
    tdigest.register(conn)
    python_functions.register(conn)


def lock_down(conn: duckdb.DuckDBPyConnection, data_sources: Mapping[str, Sequence[SegmentFile]]) -> None:
    """Views for the data sources, then no file access beyond their files and no configuration changes."""
    for name, value in DUCKDB_SETTINGS.items():
        conn.execute(f"SET GLOBAL {name} = ?", [value])
    conn.execute("SET parquet_metadata_cache = true")
    for name, files in data_sources.items():
        conn.execute(_view_sql(name, files))
    conn.execute("SET allowed_paths = ?", [[_path(file) for files in data_sources.values() for file in files]])
    conn.execute("SET enable_external_access = false")
    conn.execute("SET lock_configuration = true")


def _view_sql(name: str, files: Sequence[SegmentFile]) -> str:
    """`CREATE VIEW "<name>"`: one scan per group of files with the same schema and visible intervals, united by
    column name.

    Grouping by schema here spares DuckDB's `union_by_name`, which reads every file's footer each time a query binds.
    The partitions of one partially overshadowed time chunk share their visible intervals, hence one scan. A column
    that some files hold as a multi-value string (a list) and others, older, as a plain string is read as a list.
    """
    groups: dict[tuple[pa.Schema, tuple[Interval, ...], tuple[str, ...]], list[str]] = {}
    for file in files:
        intervals = file.intervals if isinstance(file, ClippedFile) else ()
        as_text = file.multi_values if isinstance(file, RealtimeFile) else ()
        groups.setdefault((file_schema(_path(file)), intervals, as_text), []).append(_path(file))
    multi_value = multi_value_columns(files)
    fields = indexed_fields(file_schema(_path(file)) for file in files)
    scans = [_scan(schema, paths, intervals, multi_value, fields, as_text)
             for (schema, intervals, as_text), paths in groups.items()]
    query = scans[0]
    for scan in scans[1:]:
        query = exp.Union(this=query, expression=scan, distinct=False, by_name=True)
    view = exp.Table(this=exp.to_identifier(name, quoted=True))
    return exp.Create(this=view, kind="VIEW", expression=query).sql(dialect="duckdb")


def _scan(schema: pa.Schema, files: list[str], intervals: tuple[Interval, ...], multi_value: Collection[str],
          fields: Mapping[str, Collection[str]], as_text: Collection[str] = ()) -> exp.Select:
    """The files' rows (only those within `intervals`, unless empty) with `__time` as a TIMESTAMP, the
    `multi_value` columns these files hold as plain strings as lists (a value v as [v], null as null, and the JSON
    array text of a row of several values in an `as_text` column as their list), and the view's field columns of
    json dimensions (`fields`: the path keys by dimension, nested_fields.py)."""
    scan = exp.ReadParquet(expressions=[exp.array(*(exp.Literal.string(path) for path in files))])
    replaced: list[exp.Expr] = []
    time_type = schema.field(TIME_COLUMN).type if TIME_COLUMN in schema.names else None
    zoned = time_type is not None and pa.types.is_timestamp(time_type) and time_type.tz is not None
    if zoned:
        # make_timestamp(epoch_us(t)) is the same instant as CAST(t AS TIMESTAMP) in UTC, without ICU.
        micros = exp.Anonymous(this="EPOCH_US", expressions=[exp.column(TIME_COLUMN)])
        replaced.append(exp.alias_(exp.Anonymous(this="MAKE_TIMESTAMP", expressions=[micros]), TIME_COLUMN))
    for field in schema:
        if is_json_column(field.type):  # a struct of its text and field columns: read as JSON
            replaced.append(exp.alias_(json_document(exp.column(field.name, quoted=True)), field.name, quoted=True))
        elif is_string_array(field.type):  # an ARRAY<STRING>, stored in a struct not to be read as multi-value
            replaced.append(exp.alias_(struct_field(exp.column(field.name, quoted=True), ARRAY_FIELD), field.name,
                                       quoted=True))
        elif field.name in multi_value and not is_multi_value(field.type):  # a plain string of an older segment
            value = exp.column(field.name, quoted=True)
            present = exp.Not(this=exp.Is(this=value, expression=exp.null()))
            ifs = [exp.If(this=present, true=exp.array(value.copy()))]
            if field.name in as_text:  # as the merge at publish reads it (ingest_plan.MULTI_VALUE_SQL)
                ifs.insert(0, exp.If(this=_json_array(value), true=_string_list(value)))
            replaced.append(exp.alias_(exp.Case(ifs=ifs), field.name, quoted=True))
    select = exp.select(exp.Star(replace=replaced) if replaced else exp.Star(), *view_fields(schema, fields)).from_(
        exp.Table(this=scan))
    return select.where(_within(intervals, zoned)) if intervals else select


def _json_array(text: exp.Expr) -> exp.Expr:
    return exp.and_(exp.Anonymous(this="STARTS_WITH", expressions=[text.copy(), exp.Literal.string("[")]),
                    exp.Anonymous(this="JSON_VALID", expressions=[text.copy()]),
                    exp.EQ(this=exp.Anonymous(this="JSON_TYPE", expressions=[text.copy()]),
                           expression=exp.Literal.string("ARRAY")))


def _string_list(text: exp.Expr) -> exp.Expr:
    return exp.cast(exp.cast(text.copy(), exp.DataType.build("JSON", dialect="duckdb")),
                    exp.DataType.build("VARCHAR[]", dialect="duckdb"))


def _within(intervals: tuple[Interval, ...], zoned: bool) -> exp.Expr:
    """`__time` in any of `intervals`, compared with constants of the stored type: the WHERE of a scan sees the file's
    column, not the replaced one, and like-typed bounds are pushed into the Parquet reader (row groups are skipped by
    their min/max) with no per-row cast."""
    kind = exp.DataType.build("TIMESTAMPTZ" if zoned else "TIMESTAMP")

    def instant(at: datetime) -> exp.Expr:
        text = (at if zoned else at.replace(tzinfo=None)).isoformat(sep=" ", timespec="milliseconds")
        return exp.cast(exp.Literal.string(text), kind)

    column = exp.column(TIME_COLUMN)
    return exp.or_(*(exp.and_(exp.GTE(this=column.copy(), expression=instant(interval.start)),
                              exp.LT(this=column.copy(), expression=instant(interval.end)))
                     for interval in intervals))


def file_version(path: str, kind: str = "Segment") -> tuple[int, int]:
    """(mtime, size): what a footer read once per version of a file is cached under; SegmentFileGone once the file
    is gone (handed off, or dropped by the coordinator)."""
    try:
        stat = os.stat(path)
    except FileNotFoundError as e:
        raise SegmentFileGone(f"{kind} file {path} no longer exists") from e
    return stat.st_mtime_ns, stat.st_size


def file_schema(path: str) -> pa.Schema:
    """The Arrow schema of a Parquet file (its footer is read once per version of the file)."""
    return _schema(path, *file_version(path))


@lru_cache(maxsize=65536)
def _schema(path: str, _mtime_ns: int, _size: int) -> pa.Schema:
    return pq.read_schema(path).remove_metadata()


def complex_columns(files: Sequence[SegmentFile]) -> dict[str, str]:
    """The complex type (a first/last pair, a sketch) of each complex column these files hold, and MULTI_VALUE for
    each column that one of them holds as a multi-value string, by column name.

    Worked out once per set of file versions: every query asks it of the files it reads, and going through the
    schemas of a week of hourly segments took 12 ms a query, more than DuckDB's run (benchmarks/concurrency.py)."""
    return dict(_complex_columns(tuple(files), tuple(map(_version, files))))


def _version(file: SegmentFile) -> tuple[int, int]:
    """A published segment's file never changes under its path (a segment id names one version of its data): only a
    task's persists are looked at again. A gone segment file shows once DuckDB reads it (SegmentFileGone); a stat
    of each of a week of hourly segments was a third of a point query's time."""
    return file_version(file.path, "Realtime") if isinstance(file, RealtimeFile) else (0, 0)


@lru_cache(maxsize=256)
def _complex_columns(files: tuple[SegmentFile, ...], _versions: tuple[tuple[int, int], ...]
                     ) -> tuple[tuple[str, str], ...]:
    kinds = {name: kind for name, arrow_type in table_columns(files)
             if (kind := arrow_complex_type(arrow_type)) is not None}
    fields = indexed_fields(file_schema(_path(file)) for file in files)
    return tuple((kinds | dict.fromkeys(multi_value_columns(files), MULTI_VALUE) | {
        field_column(dimension, key): NESTED_FIELD for dimension, keys in fields.items() for key in keys}).items())


def multi_value_columns(files: Sequence[SegmentFile]) -> set[str]:
    """The columns some of these files hold as multi-value strings (others may hold them as plain strings)."""
    return {column.name for file in files for column in file_schema(_path(file)) if is_multi_value(column.type)} | \
        {name for file in files if isinstance(file, RealtimeFile) for name in file.multi_values}


def table_columns(files: Sequence[SegmentFile]) -> list[tuple[str, pa.DataType]]:
    """A data source's columns over these files, in the order its view shows them (first appearance)."""
    found: dict[str, pa.DataType] = {}
    for file in files:
        for column in file_schema(_path(file)):
            found.setdefault(column.name, column.type)
    return list(found.items())


# ------------------------------------------------------------------------------------------------------ parameters

_INTEGER_TYPES = {"BIGINT", "INTEGER", "SMALLINT", "TINYINT"}
_REAL_TYPES = {"DOUBLE", "FLOAT", "REAL", "DECIMAL"}


def bind_parameters(parameters: Sequence[dict], expected: int) -> list[Any]:
    """Druid's typed `parameters` ([{"type": "VARCHAR", "value": "bar"}, …]) as values for `?` placeholders."""
    if not isinstance(parameters, Sequence) or not all(isinstance(p, Mapping) for p in parameters):
        raise SqlError('"parameters" must be a JSON array of {"type", "value"} objects')
    if len(parameters) != expected:
        raise SqlError(f"The query has {expected} parameter placeholders but {len(parameters)} parameters were given")
    return [_parameter_value(position, parameter) for position, parameter in enumerate(parameters)]


def _parameter_value(position: int, parameter: Mapping[str, Any]) -> Any:
    kind, value = str(parameter.get("type", "")).upper(), parameter.get("value")
    if isinstance(value, dict) or (isinstance(value, list) and kind != "ARRAY"):
        raise SqlError(f"Parameter at position [{position}] is not a valid {kind}: a {type(value).__name__} value "
                       "(only ARRAY parameters take a list, none takes an object)")
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
    "enum": ("STRING", "VARCHAR"),  # a loaded data source's dictionary-encoded strings
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


#: DuckDB's JSON type, Druid's COMPLEX<json>: a VARCHAR by its id, with an alias
_JSON = duckdb.sqltype("JSON")


def _is_json(duckdb_type: Any) -> bool:
    """By type equality: naming a result column's type (`str`) took 2-6 ms per VARCHAR column of a query over a loaded
    data source (benchmarks/concurrency.py's profile), more than the query's own run."""
    return duckdb_type == _JSON


def _druid_type(duckdb_type: Any) -> tuple[str, str]:
    if is_output(duckdb_type):  # a multi-value string: Druid SQL types it VARCHAR
        return "STRING", "VARCHAR"
    if duckdb_type.id == "list":
        return f"ARRAY<{_druid_type(duckdb_type.child)[0]}>", "ARRAY"
    if (kind := complex_type(duckdb_type)) is not None:
        return f"COMPLEX<{kind}>", "OTHER"
    return _OTHER if _is_json(duckdb_type) else _TYPES.get(duckdb_type.id, _OTHER)


def _result(description: list[tuple], rows: list[tuple], zone: Zone | None) -> QueryResult:
    for column in description:
        if column[1].id == "blob":
            raise SqlError(f"Column [{column[0]}] is of type VARBINARY, which Druid SQL does not return; CAST it to "
                           "VARCHAR")
    types = [_druid_type(column[1]) for column in description]
    converters = [_converter(column[1], zone) for column in description]
    if any(converters):
        rows = [tuple(v if convert is None or v is None else convert(v) for v, convert in zip(row, converters))
                for row in rows]
    return QueryResult(
        columns=_unique([column[0] for column in description]),
        druid_types=[druid for druid, _ in types],
        sql_types=[sql for _, sql in types],
        rows=rows,
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


def _converter(duckdb_type: Any, zone: Zone | None) -> Callable[[Any], Any] | None:
    """How a column's DuckDB Python values become the plain values Druid returns (None: they already are)."""
    kind = duckdb_type.id
    if _is_json(duckdb_type):  # a nested value, which the result writers write as JSON, not as text
        return json.loads
    if is_output(duckdb_type):
        return row_value
    if complex_type(duckdb_type) in COMPLEX_KINDS:  # a first/last pair stays an object: Druid writes {"lhs", "rhs"}
        return to_base64
    if kind == "list":
        element = _converter(duckdb_type.child, zone)
        return None if element is None else (lambda values: [None if v is None else element(v) for v in values])
    if kind == "decimal":
        return float
    if kind.startswith("timestamp"):
        return partial(_timestamp_value, zone=zone) if zone is not None or "zone" in kind else None
    if kind == "date" and zone is not None:  # a day of the session's calendar
        return lambda day: datetime.combine(day, time_of_day(), zone.tzinfo)
    if kind in _TYPES and kind != "uuid" or kind in ("struct", "map"):
        return None
    return str  # UUID, INTERVAL, TIME, BLOB…: their text


def _timestamp_value(value: datetime, zone: Zone | None) -> datetime:
    """An instant as a naive UTC datetime, or an aware one in the query's time zone."""
    utc = value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)
    return utc.replace(tzinfo=None) if zone is None else utc.astimezone(zone.tzinfo)


def _explain(cursor: duckdb.DuckDBPyConnection, query: Translation, values: list[Any],
             tables: Mapping[str, Sequence[str]]) -> QueryResult:
    """EXPLAIN PLAN FOR: Druid's PLAN / RESOURCES / ATTRIBUTES row, the plan being the DuckDB query Sluice runs, the
    intervals and files it reads, its output signature and DuckDB's physical plan."""
    relation = cursor.sql(query.sql, params=values or None)
    signature = [{"name": name, "type": _druid_type(kind)[0]} for name, kind in zip(relation.columns, relation.types)]
    plan = [{
        "query": {
            "queryType": "sql",
            "sql": query.sql,
            "dataSources": {name: {"intervals": [str(i) for i in query.intervals[name]],
                                   "files": len(tables[name])} for name in sorted(query.data_sources)},
            "context": {"sqlQueryId": query.context.query_id} if query.context.query_id else {},
            "physicalPlan": relation.explain(),
        },
        "signature": signature,
        "columnMappings": [{"queryColumn": s["name"], "outputColumn": s["name"]} for s in signature],
    }]
    resources = [{"name": name, "type": "DATASOURCE"} for name in sorted(query.data_sources)]
    row = tuple(json.dumps(value, ensure_ascii=False) for value in (plan, resources, {"statementType": "SELECT"}))
    return QueryResult(["PLAN", "RESOURCES", "ATTRIBUTES"], ["STRING"] * 3, ["VARCHAR"] * 3, [row])


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
    message = _first_line(error)
    if JOIN_UNSUPPORTED in message:
        return SqlError.unsupported(JOIN_UNSUPPORTED)
    return SqlError(message) if isinstance(error, _USER_ERRORS) else SqlError.internal(message)
