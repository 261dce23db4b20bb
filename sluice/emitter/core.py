"""Druid's Emitter contract (seed 001): `emit` never blocks and never raises.

A process emits metrics from its hottest paths (a task's read loop, every query), so recording a
measurement must never slow that path down or fail it. An emitter that cannot keep up drops events and
counts them; an invalid event is counted and warned about, at most one log line per interval so a bad
caller cannot flood the log.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from typing import Any, Callable, Sequence

from sluice.emitter.events import Event, invalid_reason

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class RateLimitedLog:
    """At most one warning per `interval` seconds; the ones in between are counted and reported with the next."""

    def __init__(self, logger: logging.Logger, interval: float, clock: Clock = time.monotonic) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._next_at = -math.inf
        self._suppressed = 0
        self._lock = threading.Lock()

    def warn(self, message: str, *args: object) -> bool:
        """Log unless a warning was logged less than `interval` ago; True if this one was logged."""
        with self._lock:
            now = self._clock()
            if now < self._next_at:
                self._suppressed += 1
                return False
            suppressed, self._suppressed = self._suppressed, 0
            self._next_at = now + self._interval
        if suppressed:
            message, args = message + " (and %d more warnings since the last one)", (*args, suppressed)
        self._logger.warning(message, *args)
        return True


def event_json(event: Event) -> str:
    """An event as one line of JSON; values JSON has no word for (datetimes, sets) are written as text."""
    return json.dumps(event.to_map(), default=str, allow_nan=False, separators=(",", ":"))


class Emitter(ABC):
    """Base of every emitter: validates, counts and never lets an error reach the caller of `emit`."""

    def __init__(self, *, warn_interval: float = 60.0, clock: Clock = time.monotonic) -> None:
        self._warnings = RateLimitedLog(log, warn_interval, clock)
        self._counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()

    def start(self) -> None:
        """Start background work (a sending thread); a Lifecycle calls it at INIT."""

    def emit(self, event: Event) -> None:
        """Hand an event over; returns at once and never raises (an invalid one is counted and warned about)."""
        try:
            reason = invalid_reason(event)
            if reason is None:
                self._emit(event)
                return
        except Exception as error:  # a measurement that cannot be recorded must not fail the work it measures
            reason = f"{type(error).__name__}: {error}"
        self._count("invalid")
        self._warn(f"dropped an invalid event: {reason}")

    @abstractmethod
    def _emit(self, event: Event) -> None:
        """Hand over a valid event; must return at once (queue it, do not send it)."""

    def flush(self) -> None:
        """Deliver what is buffered before returning (best effort, bounded in time)."""

    def close(self) -> None:
        """Flush and stop background work (an HTTP emitter drops what it is given afterwards)."""

    @property
    def invalid(self) -> int:
        """Events refused because they were invalid (or could not be converted by this emitter)."""
        return self._counts["invalid"]

    @property
    def dropped(self) -> int:
        """Valid events lost because the emitter's queue was full or it was closed."""
        return self._counts["dropped"]

    @property
    def failed(self) -> int:
        """Events handed to the receiver that it never accepted, after every retry."""
        return self._counts["failed"]

    def _count(self, kind: str, n: int = 1) -> None:
        with self._counts_lock:
            self._counts[kind] += n

    def _warn(self, message: str) -> None:
        self._warnings.warn("%s: %s", type(self).__name__, message)


class NoopEmitter(Emitter):
    """Druid's default emitter: measurements go nowhere."""

    def _emit(self, event: Event) -> None:
        pass


class LoggingEmitter(Emitter):
    """Druid's LoggingEmitter: one JSON line per event on a logger, for development and debugging."""

    def __init__(self, logger: logging.Logger | None = None, level: int = logging.INFO, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._logger = logger or logging.getLogger(f"{__name__}.{type(self).__name__}")
        self._level = level

    def _emit(self, event: Event) -> None:
        if self._logger.isEnabledFor(self._level):
            self._logger.log(self._level, "%s", event_json(event))


class ComposingEmitter(Emitter):
    """Druid's ComposingEmitter: every event to each of several emitters (say Prometheus and HTTP)."""

    def __init__(self, emitters: Sequence[Emitter], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.emitters = tuple(emitters)

    def start(self) -> None:
        for emitter in self.emitters:
            emitter.start()

    def _emit(self, event: Event) -> None:
        for emitter in self.emitters:
            emitter.emit(event)

    def flush(self) -> None:
        for emitter in self.emitters:
            emitter.flush()

    def close(self) -> None:
        for emitter in self.emitters:
            try:
                emitter.close()
            except Exception:  # one emitter failing to close must not keep the others open
                log.exception("closing %s failed", type(emitter).__name__)
