"""Request ids, and Druid's request logging (`druid.request.logging.*`).

`RequestIdMiddleware` is Sluice's own (Druid has none): every HTTP request gets an id, taken from its `X-Request-Id`
header when that is a sane one, made up otherwise; it is echoed in the response and carried by every log record
written while the request is served (see sluice.logs).

The request loggers are Druid's, with Druid's line format, so that tools written for Druid's request logs read
Sluice's: one line a query, tab-separated, as Druid 37's RequestLogLine writes it —

    native: <start time>\\t<remote address>\\t<queryStats JSON>\\t<query JSON>
    SQL:    <start time>\\t<remote address>\\t\\t<queryStats JSON>\\t{"context":…,"query":…}

(the native order is the one since Druid 32, apache/druid#17326, which put the stats first; Druid's docs still show
the older query-then-stats order). Types: `noop` (the default), `file`, `slf4j` (a Python logger of the name Druid logs
under) and `filtered`; Druid's `emitter`, `composing` and `switching` are refused as unknown.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Any, Callable, Mapping

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sluice.config import ConfigError, PropertyReader
from sluice.logs import REQUEST_ID, utc_millis

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-Request-Id"
#: an incoming id is kept only when it is this: short, and nothing that could break a log line or a header
_SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
#: the logger Druid's `slf4j` request logger writes to, so a logging config written for Druid's finds it
SLF4J_LOGGER = "org.apache.druid.server.log.LoggingRequestLogger"
PREFIX = "druid.request.logging."
TYPES = ("noop", "file", "slf4j", "filtered")


def accepted_request_id(incoming: str | None) -> str:
    """The client's id when it is safe to write into logs and headers, a new uuid4 (hex) otherwise."""
    if incoming is not None and _SAFE_REQUEST_ID.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


class RequestIdMiddleware:
    """Pure ASGI rather than BaseHTTPMiddleware: a streaming body passes through untouched, and the id is set in the
    context of the task that runs the route (Starlette's threadpool copies it into the thread of a sync handler).
    The id is also in `request.state.request_id`."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        request_id = accepted_request_id(Headers(scope=scope).get(REQUEST_ID_HEADER))
        scope.setdefault("state", {})["request_id"] = request_id
        started = False

        async def send_with_id(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message.setdefault("headers", [])
                MutableHeaders(scope=message)[REQUEST_ID_HEADER] = request_id
            await send(message)

        token = REQUEST_ID.set(request_id)
        try:
            await self._app(scope, receive, send_with_id)
        except Exception:
            # Starlette's ServerErrorMiddleware, outside every middleware, would answer 500 without the id, and the
            # server logs the exception once this raised: answer here, with the id, and leave the id set, so that the
            # server's record of the exception (written in this request's own task, which ends then) carries it.
            if not started:
                await PlainTextResponse("Internal Server Error", status_code=500)(scope, receive, send_with_id)
            raise
        REQUEST_ID.reset(token)


# --- queryStats, as Druid's QueryLifecycle and SqlExecutionReporter fill them ----------------------------------------

def request_identity(request: Request) -> str:
    """Druid's `identity` of a request: who authenticated it; `allowAll` on a node without security, as Druid's
    default authenticator names everyone."""
    who = getattr(request.state, "auth", None)
    return who.identity if who is not None else "allowAll"


def native_query_stats(time_ms: float, bytes_written: int, success: bool, identity: str | None = None,
                       exception: str | None = None, interrupted: bool = False) -> dict[str, Any]:
    """`bytes_written` -1 when unknown; `exception` as Java prints one (`class: message`); `interrupted` for a query
    cancelled or timed out."""
    stats: dict[str, Any] = {"query/time": int(time_ms), "query/bytes": bytes_written, "success": success}
    if identity is not None:
        stats["identity"] = identity
    return _failure(stats, exception, interrupted)


def sql_query_stats(time_ms: float, bytes_written: int, success: bool, identity: str | None,
                    context: Mapping[str, Any], planning_time_ms: float = 0, exception: str | None = None,
                    interrupted: bool = False) -> dict[str, Any]:
    """`context` is the SQL query's context as run (with `sqlQueryId`, and Druid's `nativeQueryIds`, "[]" here)."""
    stats: dict[str, Any] = {"sqlQuery/time": int(time_ms), "sqlQuery/planningTimeMs": int(planning_time_ms),
                             "sqlQuery/bytes": bytes_written, "success": success}
    if identity is not None:
        stats["identity"] = identity
    stats["context"] = dict(context)
    return _failure(stats, exception, interrupted)


def _failure(stats: dict[str, Any], exception: str | None, interrupted: bool) -> dict[str, Any]:
    if exception is not None:
        stats["exception"] = exception
        if interrupted:
            stats["interrupted"] = True
            stats["reason"] = exception
    return stats


# --- lines ----------------------------------------------------------------------------------------------------------

def _json(value: Any) -> str:
    """As Jackson writes it: compact, non-ASCII as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def native_query_line(started_at: float, remote_addr: str | None, query: Mapping[str, Any],
                      stats: Mapping[str, Any]) -> str:
    """Druid's RequestLogLine.getNativeQueryLine; `started_at` is when the query came (epoch seconds)."""
    return "\t".join((utc_millis(started_at), remote_addr or "", _json(stats), _json(query)))


def sql_query_line(started_at: float, remote_addr: str | None, sql_query: Mapping[str, Any],
                   stats: Mapping[str, Any]) -> str:
    """Druid's RequestLogLine.getSqlQueryLine: the native-query field empty, then the stats, then the SQL with its
    context (and its parameters, when `sql_query` has them)."""
    sql = sql_query.get("query")
    line: dict[str, Any] = {"context": sql_query.get("context") or {}, "query": "<unavailable>" if sql is None else sql}
    if sql_query.get("parameters") is not None:
        line["parameters"] = sql_query["parameters"]
    return "\t".join((utc_millis(started_at), remote_addr or "", "", _json(stats), _json(line)))


# --- loggers --------------------------------------------------------------------------------------------------------

class RequestLogger:
    """Druid's `noop` request logger, and what every request logger answers. Called once a query is answered;
    `query` is the native query as run, `sql_query` the SQL request ({"query", "context", "parameters"?}), `stats`
    Druid's queryStats (see `native_query_stats`, `sql_query_stats`); `started_at` when the query came (epoch s,
    default now). Never raises: a request log that cannot be written must not fail the query."""

    def log_native(self, remote_addr: str | None, query: Mapping[str, Any], stats: Mapping[str, Any],
                   started_at: float | None = None) -> None:
        pass

    def log_sql(self, remote_addr: str | None, sql_query: Mapping[str, Any], stats: Mapping[str, Any],
                started_at: float | None = None) -> None:
        pass

    def close(self) -> None:
        pass


class FilePattern:
    """Druid's filePattern, a Joda date format; Sluice knows the fields a daily file name needs: yyyy yy MM dd HH mm
    ss, 'quoted text' ('' for a quote) and any other character but a letter as itself."""

    _FIELDS = {"yyyy": "%Y", "yy": "%y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
    _TOKENS = re.compile(r"'((?:[^']|'')*)'|(([A-Za-z])\3*)|(.)", re.DOTALL)

    def __init__(self, pattern: str) -> None:
        strftime: list[str] = []
        regex: list[str] = []
        for quoted, letters, _letter, other in self._TOKENS.findall(pattern):
            if letters:
                if letters not in self._FIELDS:
                    raise ValueError(f"[{letters}] in [{pattern}] is not a date field Sluice knows (yyyy, yy, MM, "
                                     "dd, HH, mm, ss); quote text in it as 'text'")
                strftime.append(self._FIELDS[letters])
                regex.append(rf"\d{{{4 if letters == 'yyyy' else 2}}}")
            else:
                text = other or (quoted.replace("''", "'") if quoted else "'")
                strftime.append(text.replace("%", "%%"))
                regex.append(re.escape(text))
        self._strftime = "".join(strftime)
        self._regex = re.compile("".join(regex))
        if "/" in self.name(datetime(2000, 1, 1, tzinfo=timezone.utc)) or not self._strftime:
            raise ValueError(f"[{pattern}] does not name a file in the request log directory")

    def name(self, day: datetime) -> str:
        return day.strftime(self._strftime)

    def matches(self, name: str) -> bool:
        return self._regex.fullmatch(name) is not None


class FileRequestLogger(RequestLogger):
    """Druid's `file` request logger: one file a UTC day, named by `file_pattern`, appended to (a restart continues
    the day's file), a line written and flushed at once under a lock. Past `duration_to_retain`, files this logger
    names (and no others) are deleted, looked at whenever a new day's file is opened."""

    def __init__(self, directory: Path, file_pattern: str = "yyyy-MM-dd'.log'",
                 duration_to_retain: timedelta | None = None, clock: Callable[[], float] = time.time) -> None:
        self._dir = directory
        self._pattern = FilePattern(file_pattern)
        self._retain = duration_to_retain
        self._clock = clock
        self._lock = threading.Lock()
        self._name: str | None = None
        self._file: IO[str] | None = None

    def log_native(self, remote_addr: str | None, query: Mapping[str, Any], stats: Mapping[str, Any],
                   started_at: float | None = None) -> None:
        self._write(native_query_line(self._clock() if started_at is None else started_at, remote_addr, query, stats))

    def log_sql(self, remote_addr: str | None, sql_query: Mapping[str, Any], stats: Mapping[str, Any],
                started_at: float | None = None) -> None:
        self._write(sql_query_line(self._clock() if started_at is None else started_at, remote_addr, sql_query,
                                   stats))

    def _write(self, line: str) -> None:
        with self._lock:
            now = self._clock()
            day = datetime.fromtimestamp(now, timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
            name = self._pattern.name(day)
            try:
                if name != self._name or self._file is None:
                    self._close()
                    self._dir.mkdir(parents=True, exist_ok=True)
                    self._file = open(self._dir / name, "a", encoding="utf-8", buffering=1)
                    self._name = name
                    self._remove_expired(now)
                self._file.write(line + "\n")
            except OSError as error:
                log.warning("request log %s: cannot write: %s", self._dir / name, error)

    def _remove_expired(self, now: float) -> None:
        if self._retain is None:
            return
        oldest = now - self._retain.total_seconds()
        for path in self._dir.iterdir():
            try:
                if (path.name != self._name and self._pattern.matches(path.name) and path.is_file()
                        and path.stat().st_mtime < oldest):
                    path.unlink()
            except OSError as error:
                log.warning("request log %s: cannot delete: %s", path, error)

    def _close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
            self._file = None

    def close(self) -> None:
        with self._lock:
            self._close()


def table_names(data_source: Any) -> list[str]:
    """The tables a native data source's JSON reads: a union's, a join's sides', a query data source's query's."""
    if isinstance(data_source, str):
        return [data_source]
    if not isinstance(data_source, Mapping):
        return []
    if data_source.get("type") == "table":
        return [str(data_source.get("name"))]
    names: list[str] = []
    for key in ("dataSources", "left", "right", "base", "query"):  # union, join, unnest/filter, query data sources
        inner = data_source.get(key)
        for part in inner if isinstance(inner, list) else [inner]:
            names += table_names(part.get("dataSource") if key == "query" and isinstance(part, Mapping) else part)
    return names


class LoggingRequestLogger(RequestLogger):
    """Druid's `slf4j` request logger: the line at INFO on the logger Druid names. `set_mdc` adds Druid's MDC fields
    of a native query (queryId, sqlQueryId, dataSource, queryType, isNested, hasFilters, remoteAddr; not duration) as
    the record's `mdc`, which Sluice's JSON log format writes; `set_context_mdc` adds the query context's entries."""

    def __init__(self, set_mdc: bool = False, set_context_mdc: bool = False,
                 clock: Callable[[], float] = time.time) -> None:
        self._log = logging.getLogger(SLF4J_LOGGER)
        self._set_mdc = set_mdc
        self._set_context_mdc = set_context_mdc
        self._clock = clock

    def log_native(self, remote_addr: str | None, query: Mapping[str, Any], stats: Mapping[str, Any],
                   started_at: float | None = None) -> None:
        if not self._log.isEnabledFor(logging.INFO):
            return
        line = native_query_line(self._clock() if started_at is None else started_at, remote_addr, query, stats)
        self._log.info("%s", line, extra={"mdc": self._mdc(remote_addr, query)} if self._set_mdc else None)

    def log_sql(self, remote_addr: str | None, sql_query: Mapping[str, Any], stats: Mapping[str, Any],
                started_at: float | None = None) -> None:
        if self._log.isEnabledFor(logging.INFO):
            self._log.info("%s", sql_query_line(self._clock() if started_at is None else started_at, remote_addr,
                                                sql_query, stats))

    def _mdc(self, remote_addr: str | None, query: Mapping[str, Any]) -> dict[str, str]:
        context = query.get("context") if isinstance(query.get("context"), Mapping) else {}
        data_source = query.get("dataSource")
        mdc = {"queryId": str(context.get("queryId", "")), "sqlQueryId": str(context.get("sqlQueryId") or ""),
               "dataSource": ",".join(table_names(data_source)), "queryType": str(query.get("queryType", "")),
               "isNested": str(not (isinstance(data_source, str) or (isinstance(data_source, Mapping)
                                                                     and data_source.get("type") == "table"))).lower(),
               "hasFilters": str(query.get("filter") is not None).lower(), "remoteAddr": remote_addr or ""}
        if self._set_context_mdc:
            mdc.update({key: "NULL" if value is None else str(value) for key, value in context.items()})
        return mdc


class FilteredRequestLogger(RequestLogger):
    """Druid's `filtered` request logger: a native query reaches the delegate when its query/time is at least
    `query_time_threshold_ms` and its type is not muted; a SQL query when its sqlQuery/time is at least
    `sql_query_time_threshold_ms` (muted types do not apply to SQL, as in Druid)."""

    def __init__(self, delegate: RequestLogger, query_time_threshold_ms: int = 0, sql_query_time_threshold_ms: int = 0,
                 muted_query_types: tuple[str, ...] = ()) -> None:
        self._delegate = delegate
        self._native_threshold = query_time_threshold_ms
        self._sql_threshold = sql_query_time_threshold_ms
        self._muted = frozenset(muted_query_types)

    def log_native(self, remote_addr: str | None, query: Mapping[str, Any], stats: Mapping[str, Any],
                   started_at: float | None = None) -> None:
        took = stats.get("query/time")
        if took is not None and took >= self._native_threshold and query.get("queryType") not in self._muted:
            self._delegate.log_native(remote_addr, query, stats, started_at)

    def log_sql(self, remote_addr: str | None, sql_query: Mapping[str, Any], stats: Mapping[str, Any],
                started_at: float | None = None) -> None:
        took = stats.get("sqlQuery/time")
        if took is not None and took >= self._sql_threshold:
            self._delegate.log_sql(remote_addr, sql_query, stats, started_at)

    def close(self) -> None:
        self._delegate.close()


# --- configuration --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RequestLogConfig:
    """`druid.request.logging.*`; `delegate` is the filtered logger's (`druid.request.logging.delegate.*`)."""

    type: str = "noop"
    #: file: dir, filePattern (a Joda date format), durationToRetain (at least a day; None: keep every file)
    dir: Path | None = None
    file_pattern: str = "yyyy-MM-dd'.log'"
    duration_to_retain: timedelta | None = None
    #: slf4j: setMDC, setContextMDC
    set_mdc: bool = False
    set_context_mdc: bool = False
    #: filtered: queryTimeThresholdMs, sqlQueryTimeThresholdMs, mutedQueryTypes, delegate
    query_time_threshold_ms: int = 0
    sql_query_time_threshold_ms: int = 0
    muted_query_types: tuple[str, ...] = ()
    delegate: RequestLogConfig | None = None

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], prefix: str = PREFIX,
                        read: PropertyReader | None = None) -> RequestLogConfig:
        """Raises ConfigError naming the key that is wrong; warns about the keys of the family it does not read."""
        properties = _with_json_delegate(properties, prefix)
        top, read = read is None, read or PropertyReader(properties)
        kind = read.string(prefix + "type", "noop")
        if kind not in TYPES:
            raise ConfigError(f"{prefix}type: [{kind}] is not one of {', '.join(TYPES)} (Sluice has no emitter, "
                              "composing or switching request logger)")
        values: dict[str, Any] = {"type": kind}
        if kind == "file":
            values["dir"] = Path(read.string(prefix + "dir"))
            values["file_pattern"] = read.string(prefix + "filePattern", cls.file_pattern)
            try:
                FilePattern(values["file_pattern"])
            except ValueError as error:
                raise ConfigError(f"{prefix}filePattern: {error}") from None
            if read.raw(prefix + "durationToRetain") is not None:
                retain = read.duration(prefix + "durationToRetain", timedelta(days=1))
                if retain < timedelta(days=1):
                    raise ConfigError(f"{prefix}durationToRetain: [{read.raw(prefix + 'durationToRetain')}] is "
                                      "shorter than a day; today's file would be deleted")
                values["duration_to_retain"] = retain
        elif kind == "slf4j":
            values.update(set_mdc=read.boolean(prefix + "setMDC", False),
                          set_context_mdc=read.boolean(prefix + "setContextMDC", False))
        elif kind == "filtered":
            values.update(query_time_threshold_ms=read.integer(prefix + "queryTimeThresholdMs", 0, minimum=0),
                          sql_query_time_threshold_ms=read.integer(prefix + "sqlQueryTimeThresholdMs", 0, minimum=0),
                          muted_query_types=tuple(read.names(prefix + "mutedQueryTypes", [])))
            read.string(prefix + "delegate.type")  # required: where the queries that pass go
            read.raw(prefix + "delegate")  # the same as one JSON object: read as the dotted keys
            values["delegate"] = cls.from_properties(properties, prefix + "delegate.", read)
        if top:
            read.warn_unread((PREFIX,))
        return cls(**values)


def _with_json_delegate(properties: Mapping[str, str], prefix: str) -> Mapping[str, str]:
    """Druid also takes the delegate as one JSON object (`…delegate={"type":"slf4j"}`); as dotted keys here, which
    win where both are given."""
    key = prefix + "delegate"
    if key not in properties:
        return properties
    try:
        delegate = json.loads(properties[key])
    except json.JSONDecodeError:
        delegate = None
    if not isinstance(delegate, dict):
        raise ConfigError(f"{key}: [{properties[key]}] is not a JSON object such as {{\"type\": \"slf4j\"}}")
    nested = {f"{key}.{name}": value if isinstance(value, str) else json.dumps(value)
              for name, value in delegate.items()}
    return {**nested, **properties}


def build_request_logger(config: RequestLogConfig, clock: Callable[[], float] = time.time) -> RequestLogger:
    if config.type == "file":
        assert config.dir is not None
        return FileRequestLogger(config.dir, config.file_pattern, config.duration_to_retain, clock)
    if config.type == "slf4j":
        return LoggingRequestLogger(config.set_mdc, config.set_context_mdc, clock)
    if config.type == "filtered":
        assert config.delegate is not None
        return FilteredRequestLogger(build_request_logger(config.delegate, clock), config.query_time_threshold_ms,
                                     config.sql_query_time_threshold_ms, config.muted_query_types)
    return RequestLogger()
