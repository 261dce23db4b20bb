"""Druid's `sql` input source, read through SQLAlchemy Core instead of JDBC (no JVM drivers here).

Each query of `sqls` is a split, as in Druid. With `splitColumn` and `numSplits` (Sluice's addition, BitSail's
divide-split idea) the driver cuts each query into ranges of that column from its MIN and MAX, so one large
table is read by several executors. The ranges are open at both ends (the first also takes NULLs), so every
row is read exactly once whatever values the column holds, even ones written after the driver looked.

Rows arrive as Python values (DB-API has nothing else); each wanted field becomes one string column through
`stringify`, the same text a Parquet or ORC column of that type would give.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit
from uuid import UUID

import pyarrow as pa
import sqlglot
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError
from sqlalchemy.pool import NullPool

from sluice.connectors.base import BoundedSource
from sluice.connectors.formats.base import numbered_locators
from sluice.connectors.formats.values import stringify
from sluice.connectors.records import column_records_schema
from sluice.spec.input_source import SqlInputSource, reveal

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

__all__ = ["BATCH_ROWS", "CONNECT_RETRIES", "SqlSource", "SqlSourceError", "SqlSplit", "check_select", "cut_points",
           "sqlalchemy_url"]

_LOGGER = logging.getLogger(__name__)

#: rows fetched per round trip, and so rows per batch
BATCH_ROWS = 64 * 1024
#: how often a connection that fails (or drops before a split yielded anything) is tried again
CONNECT_RETRIES = 3
_BACKOFF_S = 0.5
_DRIVERS = {"postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql", "sqlite": "sqlite"}
_SQLGLOT_DIALECTS = {"postgresql": "postgres", "mysql": "mysql", "sqlite": "sqlite"}


class SqlSourceError(RuntimeError):
    """A query of `sqls` could not be read; the message names the database and the query's index."""


# -- connectURI ------------------------------------------------------------------------------------------------

#: pgjdbc's connection properties Sluice understands, as libpq's names (ssl and currentSchema are mapped apart)
_PG_PROPERTIES = {"sslmode": "sslmode", "sslrootcert": "sslrootcert", "sslcert": "sslcert", "sslkey": "sslkey",
                  "connectTimeout": "connect_timeout", "ApplicationName": "application_name", "options": "options"}
_MYSQL_PROPERTIES = {"connectTimeout", "characterEncoding", "useSSL", "sslMode"}


def sqlalchemy_url(connect_uri: str, database_type: str | None = None) -> URL:
    """`connectURI` as an SQLAlchemy URL: a JDBC URI (`jdbc:postgresql://h:5432/db?sslmode=require`,
    `jdbc:mysql://h/db`, `jdbc:sqlite:/path/x.db`) is translated, since Druid specs carry JDBC URIs; an
    SQLAlchemy URL is taken as it is (a bare `postgresql://` or `mysql://` gets the installed driver).
    Credentials are not added here: `user` and `password` are revealed where the engine is built."""
    match = re.fullmatch(r"jdbc:(postgresql|mysql|mariadb|sqlite):(.*)", connect_uri.strip(), re.IGNORECASE | re.DOTALL)
    if match:
        kind, rest = match.group(1).lower(), match.group(2)
        url = _sqlite_url(rest) if kind == "sqlite" else _server_url(kind, rest, connect_uri)
    else:
        try:
            url = make_url(connect_uri.strip())
        except ArgumentError:
            raise ValueError(f"connectURI {connect_uri!r} is neither a JDBC URI (jdbc:postgresql://host:5432/db) "
                             "nor an SQLAlchemy URL (postgresql+psycopg://host:5432/db)") from None
        backend = "mysql" if url.get_backend_name() == "mariadb" else url.get_backend_name()
        if "+" not in url.drivername and backend in _DRIVERS:
            url = url.set(drivername=_DRIVERS[backend])
    backend = url.get_backend_name()
    if database_type is not None and backend != database_type:
        raise ValueError(f"database.type is {database_type!r} but connectURI {_safe(url)} is a {backend} database")
    return url


def _sqlite_url(rest: str) -> URL:
    """sqlite-jdbc's forms: `/abs/path`, `///abs/path`, `relative/path`, `:memory:`."""
    if rest in ("", ":memory:"):
        return URL.create("sqlite")
    if "?" in rest:
        raise ValueError(f"connectURI jdbc:sqlite:{rest}: connection properties are not supported for SQLite")
    return URL.create("sqlite", database="/" + rest.lstrip("/") if rest.startswith("/") else rest)


def _server_url(kind: str, rest: str, connect_uri: str) -> URL:
    if not rest.startswith("//"):  # jdbc:postgresql:db means localhost
        rest = "//localhost/" + rest
    parts = urlsplit("jdbc:" + rest)
    if "," in parts.netloc:
        raise ValueError(f"connectURI {connect_uri!r}: several hosts are not supported; give one host")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"connectURI {connect_uri!r}: the port is not a number") from None
    properties = dict(parse_qsl(parts.query, keep_blank_values=True))
    user, password = properties.pop("user", parts.username), properties.pop("password", parts.password)
    query = _pg_query(properties) if kind == "postgresql" else _mysql_query(properties)
    return URL.create(_DRIVERS["postgresql" if kind == "postgresql" else "mysql"], username=user,
                      password=password, host=parts.hostname, port=port,
                      database=unquote(parts.path.lstrip("/")) or None, query=query)


def _pg_query(properties: dict[str, str]) -> dict[str, str]:
    query: dict[str, str] = {}
    for name, value in properties.items():
        if name == "ssl":  # pgjdbc: ssl=true without sslmode verifies the server fully
            query.setdefault("sslmode", "verify-full" if value.lower() in ("", "true") else "disable")
        elif name == "currentSchema":
            query["options"] = f"{query.get('options', '')} -csearch_path={value}".strip()
        elif name in _PG_PROPERTIES:
            query[_PG_PROPERTIES[name]] = value
        else:
            raise ValueError(f"connectURI property {name!r} is not supported for PostgreSQL; supported: user, "
                             f"password, ssl, currentSchema, {', '.join(_PG_PROPERTIES)}")
    return query


def _mysql_query(properties: dict[str, str]) -> dict[str, str]:
    query: dict[str, str] = {}
    for name, value in properties.items():
        if name not in _MYSQL_PROPERTIES:
            raise ValueError(f"connectURI property {name!r} is not supported for MySQL; supported: user, password, "
                             f"{', '.join(sorted(_MYSQL_PROPERTIES))}")
        if name == "connectTimeout":  # milliseconds in Connector/J, seconds in PyMySQL
            query["connect_timeout"] = str(max(1, -(-int(value) // 1000)))
        elif name == "characterEncoding":
            query["charset"] = "utf8mb4" if value.upper().replace("-", "") in ("UTF8", "UTF8MB4") else value
        elif (name, value.lower()) not in (("useSSL", "false"), ("sslMode", "disabled")):
            raise ValueError(f"connectURI property {name}={value} is not supported: give an SQLAlchemy URL "
                             "(mysql+pymysql://…?ssl_ca=…) to read MySQL over TLS")
    return query


def _safe(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def _where(url: URL) -> str:
    """The database as an error names it: host, port and database, or the SQLite file."""
    if url.get_backend_name() == "sqlite":
        return f"SQLite database {url.database or ':memory:'}"
    host = f"[{url.host}]" if url.host and ":" in url.host else url.host or "localhost"
    return f"{url.get_backend_name()} database {host}{f':{url.port}' if url.port else ''}/{url.database or ''}"


# -- sqls --------------------------------------------------------------------------------------------------------

_MODIFYING = (sqlglot.exp.Insert, sqlglot.exp.Update, sqlglot.exp.Delete, sqlglot.exp.Merge, sqlglot.exp.Create,
              sqlglot.exp.Drop, sqlglot.exp.Command)


def check_select(sql: str, index: int, database_type: str) -> str:
    """The query without its trailing `;`, or a ValueError: Druid's sql input source runs only SELECT queries
    (a task must not change the database it reads), one per entry of `sqls`."""
    query = sql.strip().rstrip(";").rstrip()
    try:
        statements = [s for s in sqlglot.parse(query, read=_SQLGLOT_DIALECTS[database_type]) if s is not None]
    except sqlglot.errors.SqlglotError:  # a dialect sqlglot cannot parse: fall back to the first keyword
        if re.match(r"(\s|--[^\n]*\n|/\*.*?\*/|\()*(select|with)\b", query, re.IGNORECASE | re.DOTALL):
            return query
        raise ValueError(f"sqls[{index}] must be a SELECT query; found {query[:40]!r}") from None
    if len(statements) != 1:
        raise ValueError(f"sqls[{index}] holds {len(statements)} statements; each entry of sqls is one SELECT query")
    statement = statements[0]
    changes = statement.find(*_MODIFYING)
    if not isinstance(statement, sqlglot.exp.Query) or changes is not None or statement.find(sqlglot.exp.Into):
        found = (changes or statement).key.upper() if not statement.find(sqlglot.exp.Into) else "SELECT INTO"
        raise ValueError(f"sqls[{index}] must be a SELECT query (Druid's sql input source only reads); "
                         f"found {found}: {query[:60]!r}")
    return query


def _escape_binds(sql: str) -> str:
    """User SQL inside `text()`: a `:name` in it is the user's text, not a bind parameter of ours."""
    return re.sub(r"(?<![:\w$\\]):([\w$]+)(?![:\w$])", r"\\:\1", sql)


def _wrapped(sql: str, columns: str = "*") -> str:
    """The query as a derived table `t`; on lines of its own, so a trailing `-- comment` ends before `) t`."""
    return f"SELECT {columns} FROM (\n{_escape_binds(sql)}\n) t"


# -- ranges ------------------------------------------------------------------------------------------------------

def cut_points(low: Any, high: Any, num_splits: int) -> list[Any]:
    """The inner boundaries cutting [low, high] into at most `num_splits` ranges of equal width, strictly
    increasing, each > low and <= high (fewer when the column has fewer distinct values than splits).
    Integers, floats, decimals, datetimes, dates, and ISO-8601 text (SQLite's timestamps) are cut."""
    if isinstance(low, str) and isinstance(high, str):
        as_time = [_iso(low), _iso(high)]
        sep = "T" if "T" in low else " "
        spec = "auto" if as_time[0].microsecond or "." in low else "seconds"
        return [p.isoformat(sep=sep, timespec=spec) for p in cut_points(*as_time, num_splits)]
    if {type(low), type(high)} == {int, float}:  # SQLite: a REAL column may hold integers too
        low, high = float(low), float(high)
    if isinstance(low, bool) or not isinstance(low, (int, float, Decimal, datetime, date)) or type(low) is not type(high):
        raise TypeError(f"cannot cut a range of {type(low).__name__} values; use an integer, float or time column")
    points: list[Any] = []
    for i in range(1, num_splits):
        if isinstance(low, int):
            point = low + (high - low + 1) * i // num_splits  # high - low + 1 values: equal counts
        elif isinstance(low, Decimal):
            point = low + (high - low) * Decimal(i) / Decimal(num_splits)
        else:
            point = low + (high - low) * i / num_splits
        if point > low and point <= high and (not points or point > points[-1]):
            points.append(point)
    return points


def _iso(value: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise TypeError(f"cannot cut a range of text values such as {value!r}; use an integer, float or time "
                        "column (or ISO-8601 timestamps)") from None


@dataclass(frozen=True)
class SqlSplit:
    """One query of `sqls`, or one range of its `splitColumn` (`lower <= column < upper`; a None bound is open,
    and the first range also takes NULLs)."""

    index: int
    sql: str
    column: str | None = None
    lower: Any = None
    upper: Any = None
    part: int = 0
    parts: int = 1

    @property
    def split_id(self) -> str:
        return f"sqls[{self.index}]" + (f" range {self.part + 1}/{self.parts}" if self.parts > 1 else "")


# -- the source --------------------------------------------------------------------------------------------------

class SqlSource(BoundedSource[SqlSplit]):
    """Rows of `sqls` as column records of `fields`. Picklable: the engine is built lazily in each process."""

    def __init__(self, spec: SqlInputSource, fields: Sequence[str]) -> None:
        self.spec = spec
        self.fields = list(fields)
        self._type = spec.database.type
        self._url = sqlalchemy_url(spec.database.connector_config.connect_uri, self._type)
        self._sqls = [check_select(sql, i, self._type) for i, sql in enumerate(spec.sqls)]
        try:
            self._url.get_dialect().import_dbapi()
        except ImportError as error:
            raise ValueError(f"connectURI {_safe(self._url)} needs the {self._url.drivername} driver, which is not "
                             f"installed ({error}); install it (for MySQL: pip install pymysql)") from None
        self._engine: Engine | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_engine": None}

    def output_schema(self) -> pa.Schema:
        return column_records_schema(self.fields)

    def enumerate_splits(self) -> list[SqlSplit]:
        column, parts = self.spec.split_column, self.spec.num_splits or 1
        if not column or parts <= 1:
            return [SqlSplit(i, sql) for i, sql in enumerate(self._sqls)]
        return [split for i, sql in enumerate(self._sqls) for split in self._range_splits(i, sql, column, parts)]

    def _range_splits(self, index: int, sql: str, wanted: str, parts: int) -> list[SqlSplit]:
        """Cut one query by `splitColumn`: its name as the query's result spells it, then MIN and MAX."""
        def bounds(conn: Connection) -> tuple[str, Any, Any]:
            names = list(conn.execute(text(f"{_wrapped(sql)} WHERE 1 = 0")).keys())
            same = [n for n in names if n == wanted] or [n for n in names if n.lower() == wanted.lower()]
            if len(same) != 1:
                raise ValueError(f"splitColumn {wanted!r} is {'ambiguous in' if same else 'not a column of'} "
                                 f"sqls[{index}] (its columns: {', '.join(names)})")
            quoted = f"t.{conn.dialect.identifier_preparer.quote_identifier(same[0])}"
            low, high = conn.execute(text(_wrapped(sql, f"MIN({quoted}), MAX({quoted})"))).one()
            return same[0], low, high

        column, low, high = self._with_retries(index, bounds)
        if low is None:  # no rows, or NULLs only
            return [SqlSplit(index, sql)]
        try:
            points = cut_points(low, high, parts)
        except TypeError as error:
            raise ValueError(f"splitColumn {column!r} of sqls[{index}]: {error}") from None
        edges = [None, *points, None]
        return [SqlSplit(index, sql, column, edges[i], edges[i + 1], i, len(edges) - 1) for i in range(len(edges) - 1)]

    def read_split(self, split: SqlSplit) -> Iterator[pa.RecordBatch]:
        """Stream the split's rows. A connection that fails before any row is tried again (`CONNECT_RETRIES`);
        once rows went out they cannot be taken back, so a later failure fails the read (Spark's retried attempt
        reads the split again whole)."""
        statement, params = self._statement(split)
        prefix = f"{split.split_id} row "
        for attempt in range(CONNECT_RETRIES + 1):
            rows_out = 0
            try:
                conn = self._engine_().connect()
            except DBAPIError as error:
                self._retry_or_raise(split, attempt, error)
                continue
            try:
                # a server-side cursor (PostgreSQL, MySQL): rows arrive a batch at a time, never all at once
                streamed = conn.execution_options(stream_results=True, max_row_buffer=BATCH_ROWS)
                result = streamed.execute(statement, params)
                columns = self._columns(list(result.keys()), split)
                for rows in result.partitions(BATCH_ROWS):
                    yield self._batch(rows, columns, prefix, rows_out)
                    rows_out += len(rows)
                return
            except DBAPIError as error:
                if rows_out or not error.connection_invalidated:
                    read = f"after {rows_out} rows " if rows_out else ""
                    raise SqlSourceError(f"reading {split.split_id} from {_where(self._url)} failed {read}"
                                         f"({error.orig or error})") from error
                self._retry_or_raise(split, attempt, error)
            finally:
                conn.close()

    def _retry_or_raise(self, split: SqlSplit, attempt: int, error: DBAPIError) -> None:
        if attempt >= CONNECT_RETRIES:
            raise SqlSourceError(f"cannot read {split.split_id}: no connection to {_where(self._url)} after "
                                 f"{CONNECT_RETRIES + 1} attempts ({str(error.orig or error).strip()})") from error
        _LOGGER.warning("connecting to %s for %s failed (attempt %d): %s", _where(self._url), split.split_id,
                        attempt + 1, error.orig or error)
        time.sleep(_BACKOFF_S * 2**attempt)

    def _with_retries(self, index: int, call: Any) -> Any:
        """Run `call(connection)` on the driver, connecting again as `read_split` does."""
        split = SqlSplit(index, self._sqls[index])
        for attempt in range(CONNECT_RETRIES + 1):
            try:
                conn = self._engine_().connect()
            except DBAPIError as error:
                self._retry_or_raise(split, attempt, error)
                continue
            try:
                return call(conn)
            except DBAPIError as error:
                if not error.connection_invalidated:
                    raise SqlSourceError(f"sqls[{index}] failed on {_where(self._url)}: "
                                         f"{str(error.orig or error).strip()}") from error
                self._retry_or_raise(split, attempt, error)
            finally:
                conn.close()
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _statement(self, split: SqlSplit) -> tuple[Any, dict[str, Any]]:
        if split.column is None:
            return text(_escape_binds(split.sql)), {}
        column = f"t.{self._engine_().dialect.identifier_preparer.quote_identifier(split.column)}"
        conditions, params = [], {}
        if split.lower is not None:
            conditions.append(f"{column} >= :lower")
            params["lower"] = split.lower
        if split.upper is not None:
            conditions.append(f"{column} < :upper")
            params["upper"] = split.upper
        where = " AND ".join(conditions)
        if split.part == 0:
            where = f"({where} OR {column} IS NULL)"
        return text(f"{_wrapped(split.sql)} WHERE {where}"), params

    def _columns(self, names: list[str], split: SqlSplit) -> list[int | None]:
        """Each field's position in the result. Druid's foldCase keys the row by lower-cased column name (a
        later column wins a clash) and looks fields up lower-cased; without it names match exactly."""
        fold = self.spec.fold_case
        position = {(n.lower() if fold else n): i for i, n in enumerate(names)}
        columns = [position.get(f.lower() if fold else f) for f in self.fields]
        if not fold:
            lowered = {n.lower() for n in names}
            if missed := [f for f, c in zip(self.fields, columns) if c is None and f.lower() in lowered]:
                _LOGGER.warning("%s: fields %s match columns only ignoring case; set foldCase to read them",
                                split.split_id, missed)
        return columns

    def _batch(self, rows: Sequence[Any], columns: list[int | None], prefix: str, first: int) -> pa.RecordBatch:
        count = len(rows)
        arrays = [numbered_locators(prefix, first + 1, count), pa.nulls(count, pa.string())]
        arrays += [pa.nulls(count, pa.string()) if column is None else _stringified([row[column] for row in rows])
                   for column in columns]
        return pa.RecordBatch.from_arrays(arrays, schema=self.output_schema())

    def _engine_(self) -> Engine:
        """Built on first use in each process (executors get the source pickled without it). No pool: a split
        is one long read, and an executor should not keep idle connections open once its task is done."""
        if self._engine is None:
            config = self.spec.database.connector_config
            url = self._url
            if config.user is not None:
                url = url.set(username=config.user)
            if config.password is not None:
                url = url.set(password=reveal(config.password))
            connect_args = {}
            if url.get_backend_name() == "postgresql" and "connect_timeout" not in url.query:
                connect_args["connect_timeout"] = 10  # libpq waits forever for a host that drops packets
            self._engine = create_engine(url, poolclass=NullPool, connect_args=connect_args)
        return self._engine


def _stringified(values: list[Any]) -> pa.Array:
    """A result column as canonical text. SQLite columns may mix types, and some driver types (UUID, ranges)
    are not Arrow's: those values go one by one, falling back to Python's own text. A UUID is its text, as
    Druid's JDBC reader hands it on (Arrow would make it 16 raw bytes)."""
    if isinstance(next((v for v in values if v is not None), None), UUID):
        return pa.array([None if v is None else str(v) for v in values], pa.string())
    try:
        return stringify(pa.array(values))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError):
        if len(values) == 1:
            return pa.array([str(values[0])], pa.string())
        return pa.array([None if v is None else _stringified([v])[0].as_py() for v in values], pa.string())
