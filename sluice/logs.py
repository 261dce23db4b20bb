"""Logging as an operator reads it: a message that repeats (a Kafka broker that is down, retried every run) is written
once, then at most once a minute with how many times it came meanwhile, instead of hundreds of identical lines."""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Callable

_NUMBERS = re.compile(r"\d+")


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


def configure(level: str) -> None:
    """The log format of every `sluice` command, with repeats collapsed (nothing changes where logging is set up
    already, as under pytest)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RepeatFilter())
    logging.basicConfig(level=level.upper(), handlers=[handler])
