"""Query control as Druid's broker does it: the timeout a query runs under (druid.server.http.defaultQueryTimeout,
capped by druid.server.http.maxQueryTimeout) and how many queries run at once (druid.query.scheduler.numThreads:
one more is refused with 429 "Query capacity exceeded", not queued)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sluice.broker.errors import SqlError
from sluice.broker.sql import DEFAULT_TIMEOUT_MS
from sluice.config import PropertyReader


@dataclass(frozen=True)
class QueryLimits:
    default_timeout_ms: int = DEFAULT_TIMEOUT_MS
    #: None: no cap (Druid's default, Long.MAX_VALUE)
    max_timeout_ms: int | None = None
    #: None: as many as ask
    max_running: int | None = None

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> QueryLimits:
        read = PropertyReader(properties)
        return cls(default_timeout_ms=read.integer("druid.server.http.defaultQueryTimeout", None, minimum=0)
                   or DEFAULT_TIMEOUT_MS,
                   max_timeout_ms=read.integer("druid.server.http.maxQueryTimeout", None, minimum=1),
                   max_running=read.integer("druid.query.scheduler.numThreads", None, minimum=1))

    def context(self, context: Any) -> Any:
        """The query context with the timeout the server enforces: the default (at most the cap) when the query gives
        none, a refusal (400, Druid's message) above the cap, and the cap for a timeout of 0 ("none") when there is
        a cap. Anything but an object is returned as it is, for the query's own validation to refuse."""
        if not isinstance(context, Mapping):
            return context
        if "timeout" not in context:
            return {**context, "timeout": min(self.default_timeout_ms, self.max_timeout_ms or self.default_timeout_ms)}
        given = context["timeout"]
        try:
            if isinstance(given, bool):
                raise TypeError
            timeout = int(given)
        except (TypeError, ValueError, OverflowError):
            raise SqlError(f"Query context parameter [timeout] must be a number, got {given!r}") from None
        if timeout < 0:
            raise SqlError(f"Timeout must be a non negative value, but was [{timeout}]")
        if self.max_timeout_ms is not None:
            if timeout > self.max_timeout_ms:
                raise SqlError(f"Configured timeout = {timeout} is more than enforced limit of "
                               f"{self.max_timeout_ms}.")
            timeout = timeout or self.max_timeout_ms
        return {**context, "timeout": timeout}


class QueryScheduler:
    """What the query APIs run each query under: its limits' timeout and one of their slots."""

    def __init__(self, limits: QueryLimits = QueryLimits()) -> None:
        self.limits = limits
        self._slots = None if limits.max_running is None else threading.BoundedSemaphore(limits.max_running)

    @contextmanager
    def running(self) -> Iterator[None]:
        """Holds one of the slots while the query runs; SqlError (429) when none is free."""
        if self._slots is None:
            yield
            return
        if not self._slots.acquire(blocking=False):
            raise SqlError.capacity_exceeded(self.limits.max_running)
        try:
            yield
        finally:
            self._slots.release()
