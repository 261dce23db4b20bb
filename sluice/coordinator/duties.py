"""The retention duty: every `druid.coordinator.period`, each data source's used segments meet its rules (Druid's
RunRules duty); those a drop rule takes are marked unused, which takes them out of queries at the brokers' next
snapshot. Deleting them is a kill task's work."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sluice.coordinator.rules import DEFAULT, DEFAULT_RULES, InvalidRule, parse_rules, segments_to_drop
from sluice.metadata.store import MetadataStore
from sluice.timestamps import EpochInterval, to_millis

log = logging.getLogger(__name__)


class RetentionDuty:
    def __init__(self, metadata: MetadataStore, period_s: float = 60.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._metadata = metadata
        self._period = period_s
        self._clock = clock
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="coordinator-duties", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stopped.wait(self._period):
            try:
                self.run_once()
            except Exception:  # the next period tries again
                log.exception("retention duty failed")

    def run_once(self) -> dict[str, int]:
        """Apply the rules now; the number of segments marked unused per data source."""
        stored = self._metadata.rules()
        now = int(self._clock() * 1000)
        default = parse_rules(stored.get(DEFAULT, DEFAULT_RULES))
        dropped: dict[str, int] = {}
        for data_source in self._metadata.data_sources():
            try:
                rules = parse_rules(stored.get(data_source, []))
            except InvalidRule as error:  # stored by an older version that took it: keep everything, say why
                log.error("retention rules of %s cannot be applied: %s", data_source, error)
                continue
            segments = [(str(s.id), EpochInterval(to_millis(s.interval.start), to_millis(s.interval.end)))
                        for s in self._metadata.used_segments(data_source)]
            ids = segments_to_drop(segments, rules, default, now)
            if ids:
                dropped[data_source] = self._metadata.mark_segments_unused(data_source, segment_ids=ids)
                log.info("retention rules of %s dropped %d segments", data_source, dropped[data_source])
        return dropped
