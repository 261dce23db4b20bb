"""Druid's RowIngestionMeters for a streaming task (totals and moving averages of rowStats.buildSegments),
and its ParseExceptionHandler's saved parse exceptions.

The task adds one RowStats delta per persist; `GET /rowStats` on the task and `GET /supervisor/{id}/stats`
answer with `row_stats()`. Rates follow Dropwizard's Meter, which Druid uses: what is counted between two
5-second ticks becomes a per-second rate, blended into each window's exponentially weighted moving average.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from sluice.emitter import metrics
from sluice.task.stats import RowStats

BUILD_SEGMENTS = "buildSegments"
TICK_SECONDS = 5.0
#: Druid's moving-average windows, in minutes
WINDOWS = {"1m": 1, "5m": 5, "15m": 15}


class _Ewma:
    """Dropwizard's EWMA: alpha = 1 - e^(-5 s / window); the first tick takes the rate as it is."""

    def __init__(self, minutes: int) -> None:
        self.alpha = 1 - math.exp(-TICK_SECONDS / 60 / minutes)
        self.rate = 0.0
        self.uncounted = 0
        self.initialized = False

    def tick(self, ticks: int) -> None:
        """`ticks` ticks at once: the first turns what was counted into a rate, the others counted nothing."""
        instant = self.uncounted / TICK_SECONDS
        self.uncounted = 0
        if self.initialized:
            self.rate += self.alpha * (instant - self.rate)
        else:
            self.rate, self.initialized = instant, True
        self.rate *= (1 - self.alpha) ** (ticks - 1)


class RowIngestionMeters:
    """Thread-safe: the task's read loop adds while HTTP threads read."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last_tick = clock()
        self._totals = RowStats()
        self._averages = {window: {name: _Ewma(minutes) for name in RowStats().to_json()}
                          for window, minutes in WINDOWS.items()}
        self._lock = threading.Lock()

    def add(self, delta: RowStats) -> None:
        with self._lock:
            self._tick_if_necessary()
            self._totals += delta
            for name, value in delta.to_json().items():
                for ewmas in self._averages.values():
                    ewmas[name].uncounted += value

    @property
    def totals(self) -> RowStats:
        return self._totals

    def moving_averages(self) -> dict[str, dict[str, float]]:
        """Per-second rates over the last 1, 5 and 15 minutes: {"1m": {"processed": .., ...}, "5m": .., "15m": ..}."""
        with self._lock:
            return self._rates()

    def row_stats(self) -> dict[str, Any]:
        """Druid's live rowStats: {"movingAverages": {"buildSegments": ..}, "totals": {"buildSegments": ..}}."""
        with self._lock:
            return {"movingAverages": {BUILD_SEGMENTS: self._rates()},
                    "totals": {BUILD_SEGMENTS: self._totals.to_json()}}

    def _rates(self) -> dict[str, dict[str, float]]:
        self._tick_if_necessary()
        return {window: {name: ewma.rate for name, ewma in ewmas.items()} for window, ewmas in self._averages.items()}

    def _tick_if_necessary(self) -> None:
        age = self._clock() - self._last_tick
        if age > TICK_SECONDS:
            ticks = int(age // TICK_SECONDS)
            self._last_tick += ticks * TICK_SECONDS
            for ewmas in self._averages.values():
                for ewma in ewmas.values():
                    ewma.tick(ticks)


def ingestion_metrics(delta: RowStats) -> dict[str, int]:
    """The metrics Druid's TaskRealtimeMetricsMonitor emits for a change of the row counters."""
    return {metrics.INGEST_EVENTS_PROCESSED: delta.processed,
            metrics.INGEST_EVENTS_PROCESSED_WITH_ERROR: delta.processed_with_error,
            metrics.INGEST_EVENTS_UNPARSEABLE: delta.unparseable,
            metrics.INGEST_EVENTS_THROWN_AWAY: delta.thrown_away,
            metrics.INGEST_INPUT_BYTES: delta.processed_bytes}


# ---- parse exceptions ----

UNPARSEABLE = "unparseable"
PROCESSED_WITH_ERROR = "processedWithError"


@dataclass(frozen=True)
class ParseExceptionReport:
    """Druid's ParseExceptionReport: the input, whether the whole row failed (unparseable) or some columns
    did (processedWithError), the messages, and when."""

    input: str
    error_type: str
    details: tuple[str, ...]
    time_of_exception_millis: int

    def to_json(self) -> dict[str, Any]:
        return {"input": self.input, "errorType": self.error_type, "details": list(self.details),
                "timeOfExceptionMillis": self.time_of_exception_millis}

    @classmethod
    def from_json(cls, payload: Mapping[str, Any]) -> ParseExceptionReport:
        return cls(str(payload["input"]), str(payload["errorType"]), tuple(payload.get("details") or ()),
                   int(payload["timeOfExceptionMillis"]))


def _now_millis() -> int:
    return time.time_ns() // 1_000_000


class SavedParseExceptions:
    """The last `maxSavedParseExceptions` parse exceptions of a task (0 keeps none), newest first."""

    def __init__(self, max_saved: int, clock_millis: Callable[[], int] = _now_millis) -> None:
        self._saved: deque[ParseExceptionReport] = deque(maxlen=max_saved)
        self._clock_millis = clock_millis
        self._lock = threading.Lock()

    def add(self, input: str, details: Sequence[str], error_type: str = UNPARSEABLE) -> None:  # noqa: A002
        report = ParseExceptionReport(input, error_type, tuple(details), self._clock_millis())
        with self._lock:
            self._saved.append(report)

    def reports(self) -> list[ParseExceptionReport]:
        with self._lock:
            return list(reversed(self._saved))

    def unparseable_events(self) -> dict[str, list[dict[str, Any]]]:
        """The task report's `unparseableEvents`; empty when the task keeps none, as Druid's."""
        if not self._saved.maxlen:
            return {}
        return {BUILD_SEGMENTS: [r.to_json() for r in self.reports()]}


def latest_parse_errors(reports: Iterable[ParseExceptionReport], limit: int) -> list[ParseExceptionReport]:
    """Druid's supervisor `/parseErrors`: its tasks' reports (and those it showed before) without duplicates,
    newest first, at most `limit` (Druid: maxSavedParseExceptions x taskCount)."""
    unique = {(r.time_of_exception_millis, r.error_type, r.input): r for r in reports}
    return [unique[key] for key in sorted(unique, reverse=True)[:max(limit, 0)]]
