"""Query control as Druid's broker does it: the timeout a query runs under (druid.server.http.defaultQueryTimeout,
capped by druid.server.http.maxQueryTimeout) and how many queries run at once (druid.query.scheduler.numThreads:
one more is refused with 429 "Query capacity exceeded", not queued). With Druid's `hilo` laning
(druid.query.scheduler.laning.strategy, …maxLowPercent), queries of a negative context `priority` share at most that
percentage of the slots, so that reports cannot crowd out interactive queries."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sluice.broker.errors import SqlError
from sluice.broker.limits import DEFAULT_TIMEOUT_MS
from sluice.config import ConfigError, PropertyReader
from sluice.spec.context import as_int, context_value


@dataclass(frozen=True)
class QueryLimits:
    default_timeout_ms: int = DEFAULT_TIMEOUT_MS
    #: None: no cap (Druid's default, Long.MAX_VALUE)
    max_timeout_ms: int | None = None
    #: None: as many as ask
    max_running: int | None = None
    #: the hilo laning's maxLowPercent; None: no laning (Druid's `none`)
    max_low_percent: int | None = None

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> QueryLimits:
        read = PropertyReader(properties)
        max_running = read.integer("druid.query.scheduler.numThreads", None, minimum=1)
        laning = read.string("druid.query.scheduler.laning.strategy", "none")
        if laning not in ("none", "hilo"):
            raise ConfigError(f"druid.query.scheduler.laning.strategy: [{laning}] is not one Sluice has (none, hilo)")
        max_low_percent = None
        if laning == "hilo":
            if max_running is None:
                raise ConfigError("druid.query.scheduler.laning.strategy: hilo shares out "
                                  "druid.query.scheduler.numThreads, which is not set")
            max_low_percent = read.integer("druid.query.scheduler.laning.maxLowPercent", None, minimum=1)
            if max_low_percent is None or max_low_percent > 100:
                raise ConfigError("druid.query.scheduler.laning.maxLowPercent: a percentage from 1 to 100 is needed "
                                  "with the hilo strategy")
        return cls(default_timeout_ms=read.integer("druid.server.http.defaultQueryTimeout", None, minimum=0)
                   or DEFAULT_TIMEOUT_MS,
                   max_timeout_ms=read.integer("druid.server.http.maxQueryTimeout", None, minimum=1),
                   max_running=max_running, max_low_percent=max_low_percent)

    @property
    def low_lane_capacity(self) -> int | None:
        """Druid's HiLoQueryLaningStrategy: the percentage of the total, rounded up."""
        if self.max_low_percent is None or self.max_running is None:
            return None
        return math.ceil(self.max_running * self.max_low_percent / 100)

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
    """What the query APIs run each query under: its limits' timeout and one of their slots (and of its lane's)."""

    def __init__(self, limits: QueryLimits = QueryLimits()) -> None:
        self.limits = limits
        self._slots = None if limits.max_running is None else threading.BoundedSemaphore(limits.max_running)
        low = limits.low_lane_capacity
        self._low = None if low is None else threading.BoundedSemaphore(low)

    @contextmanager
    def running(self, context: Any = None) -> Iterator[None]:
        """Holds one of the slots while the query runs, and one of the low lane's for a negative `priority`;
        SqlError 429 when none is free, 400 for a priority that is not a number."""
        priority = _priority(context)
        with self._slot(self._slots, lambda: SqlError.capacity_exceeded(self.limits.max_running)):
            if self._low is not None and priority < 0:
                with self._slot(self._low, lambda: SqlError.lane_capacity_exceeded(LOW_LANE,
                                                                                   self.limits.low_lane_capacity)):
                    yield
            else:
                yield

    @staticmethod
    @contextmanager
    def _slot(slots: threading.BoundedSemaphore | None, refusal: Callable[[], SqlError]) -> Iterator[None]:
        if slots is None:
            yield
            return
        if not slots.acquire(blocking=False):
            raise refusal()
        try:
            yield
        finally:
            slots.release()


#: Druid's name of the hilo strategy's lane for queries of a negative priority
LOW_LANE = "low"


def _priority(context: Any) -> int:
    """The context's `priority` (0 without one), as Druid's QueryContext.getAsInt reads it; SqlError (400) else."""
    try:
        return context_value(context if isinstance(context, Mapping) else None, "priority", 0, as_int)
    except ValueError as e:
        raise SqlError(str(e)) from None