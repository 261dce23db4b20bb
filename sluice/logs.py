"""Logging as an operator reads it: a message that repeats (a Kafka broker that is down, retried every run) is written
once, then at most once a minute with how many times it came meanwhile, instead of hundreds of identical lines.

With `json_format`, every record is one JSON object a line (for a log shipper), carrying the id of the HTTP request it
was written for and the ids of the query being run, so that one request's lines can be found among a busy node's."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timezone
from types import MappingProxyType
from typing import IO, Callable, Iterator, Mapping

_NUMBERS = re.compile(r"\d+")

#: the id of the HTTP request being served (set by sluice.server.request_log.RequestIdMiddleware). A contextvar, not a
#: thread-local: requests interleave on the event loop, and Starlette's threadpool copies the context into the thread
#: that runs a handler's blocking part, so records written there carry the id too.
REQUEST_ID: ContextVar[str | None] = ContextVar("sluice_request_id", default=None)
#: the ids of the query being run (`sqlQueryId`, `queryId`), as Druid's context names them; never mutated, only replaced
QUERY_IDS: ContextVar[Mapping[str, str]] = ContextVar("sluice_query_ids", default=MappingProxyType({}))

PLAIN_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def utc_millis(epoch_s: float) -> str:
    """An instant as Druid (Joda) prints one in UTC: `2019-01-14T10:00:00.000Z`."""
    instant = datetime.fromtimestamp(epoch_s, timezone.utc)
    return f"{instant:%Y-%m-%dT%H:%M:%S}.{instant.microsecond // 1000:03d}Z"


@contextmanager
def query_ids(**ids: str | None) -> Iterator[None]:
    """Records written inside carry these ids (None ones are left out), on top of any set outside."""
    token = QUERY_IDS.set(MappingProxyType({**QUERY_IDS.get(), **{k: v for k, v in ids.items() if v is not None}}))
    try:
        yield
    finally:
        QUERY_IDS.reset(token)


class RepeatFilter(logging.Filter):
    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._interval = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        #: (logger, level, message with its numbers blanked) → (when last written, repeats held back since)
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, _NUMBERS.sub("#", record.getMessage()))
        now = self._clock()
        with self._lock:
            written, held = self._seen.get(key, (None, 0))
            if written is not None and now - written < self._interval:
                self._seen[key] = (written, held + 1)
                return False
            self._seen[key] = (now, 0)
            if len(self._seen) > 10_000:  # messages that never repeat must not pile up
                self._seen = {k: v for k, v in self._seen.items() if now - v[0] < self._interval}
        if held:
            record.msg = f"{record.getMessage()} ({held} more like it in the last {self._interval:.0f} s)"
            record.args = None
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line. The ids are read from the contextvars when the record is formatted, which is in the
    thread that logged it as long as the handler writes synchronously (StreamHandler, FileHandler do)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {"timestamp": utc_millis(record.created), "level": record.levelname,
                                    "logger": record.name, "message": record.getMessage(), "thread": record.threadName}
        if (request_id := REQUEST_ID.get()) is not None:
            entry["requestId"] = request_id
        entry.update(QUERY_IDS.get())
        if mdc := getattr(record, "mdc", None):  # what Druid's request logger puts in SLF4J's MDC (setMDC)
            entry["mdc"] = mdc
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def log_handler(json_format: bool = False, stream: IO[str] | None = None) -> logging.Handler:
    """The handler `configure` installs: to stderr (or `stream`), plain or JSON, with repeats collapsed."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if json_format else logging.Formatter(PLAIN_FORMAT))
    handler.addFilter(RepeatFilter())
    return handler


def configure(level: str, json_format: bool = False) -> None:
    """The log format of every `sluice` command, with repeats collapsed (nothing changes where logging is set up
    already, as under pytest)."""
    logging.basicConfig(level=level.upper(), handlers=[log_handler(json_format)])
