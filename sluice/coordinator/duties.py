"""The coordinator's duties that Sluice runs on the overlord, each every period of its own:

- retention (Druid's RunRules): each data source's used segments meet its rules; those a drop rule takes are marked
  unused, which takes them out of queries at the brokers' next snapshot;
- kill (Druid's KillUnusedSegments, with `druid.coordinator.kill.on`): unused segments that end before
  `durationToRetain` ago and were marked unused before `bufferPeriod` ago are deleted, metadata and deep storage,
  by a kill task per data source of at most `maxSegments`;
- clean-up, every `druid.coordinator.kill.period`: pending segments (ids allocated, never published) older than a
  day before the data source's oldest active task (Druid's KillStalePendingSegments), and files in deep storage that
  no segment names, older than `sluice.coordinator.kill.orphanFiles.durationToRetain` (a replica that lost the
  publish race, a task that died between its push and its commit).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sluice.config import PropertyReader
from sluice.coordinator.rules import DEFAULT, DEFAULT_RULES, InvalidRule, parse_rules, segments_to_drop
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import DeepStorage
from sluice.task.kill_task import KillTaskPayload, KillTaskSpec, new_kill_task_id
from sluice.task.task import TaskSpec
from sluice.timestamps import EpochInterval, format_timestamp, parse_timestamp, to_millis

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class PeriodicDuty:
    """Runs `duty` every `period_s` seconds in a thread of its own; a failure is logged and the next period tries
    again."""

    def __init__(self, name: str, period_s: float, duty: Callable[[], object]) -> None:
        self._name = name
        self._period = period_s
        self._duty = duty
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stopped.wait(self._period):
            try:
                self._duty()
            except Exception:
                log.exception("coordinator duty %s failed", self._name)


class RetentionDuty:
    def __init__(self, metadata: MetadataStore, clock: Clock = time.time) -> None:
        self._metadata = metadata
        self._clock = clock

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


@dataclass(frozen=True)
class KillConfig:
    """druid.coordinator.kill.*, with Druid's defaults."""

    on: bool = False
    period: timedelta = timedelta(days=1)
    duration_to_retain: timedelta = timedelta(days=90)
    buffer_period: timedelta = timedelta(days=30)
    max_segments: int = 100
    pending_segments_on: bool = True
    orphan_files_on: bool = True
    orphan_files_retain: timedelta = timedelta(days=1)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> KillConfig:
        """Raises ConfigError naming the key that is wrong."""
        read, kill, orphans = PropertyReader(properties), "druid.coordinator.kill.", "sluice.coordinator.kill.orphanFiles."
        defaults = cls()
        return cls(on=read.boolean(kill + "on", defaults.on),
                   period=read.duration(kill + "period", defaults.period),
                   duration_to_retain=read.duration(kill + "durationToRetain", defaults.duration_to_retain,
                                                    allow_zero=True),
                   buffer_period=read.duration(kill + "bufferPeriod", defaults.buffer_period, allow_zero=True),
                   max_segments=read.integer(kill + "maxSegments", defaults.max_segments, minimum=1),
                   pending_segments_on=read.boolean(kill + "pendingSegments.on", defaults.pending_segments_on),
                   orphan_files_on=read.boolean(orphans + "on", defaults.orphan_files_on),
                   orphan_files_retain=read.duration(orphans + "durationToRetain", defaults.orphan_files_retain,
                                                     allow_zero=True))


class KillUnusedSegments:
    def __init__(self, metadata: MetadataStore, submit: Callable[[TaskSpec], None],
                 active: Callable[[str], list[TaskSpec]], config: KillConfig, clock: Clock = time.time) -> None:
        """`submit` queues a task; `active` lists a data source's active tasks (a kill still running is waited
        for, not doubled)."""
        self._metadata = metadata
        self._submit = submit
        self._active = active
        self._config = config
        self._clock = clock

    def run_once(self) -> list[str]:
        """The ids of the kill tasks submitted."""
        now = datetime.fromtimestamp(self._clock(), UTC)
        marked_by = now - self._config.buffer_period
        submitted = []
        for data_source, interval in sorted(self._metadata.killable_intervals(
                now - self._config.duration_to_retain, marked_by).items()):
            if any(task.type == "kill" for task in self._active(data_source)):
                continue
            task_id = new_kill_task_id(data_source, interval, prefix="coordinator-issued")
            payload = KillTaskPayload(type="kill", id=task_id, data_source=data_source, interval=str(interval),
                                      limit=self._config.max_segments,
                                      max_used_status_last_updated_time=format_timestamp(marked_by))
            self._submit(KillTaskSpec(task_id, payload))
            submitted.append(task_id)
            log.info("kill duty: task %s kills the unused segments of %s in %s", task_id, data_source, interval)
        return submitted


class CleanUp:
    def __init__(self, metadata: MetadataStore, deep_storage: DeepStorage, config: KillConfig,
                 clock: Clock = time.time) -> None:
        self._metadata = metadata
        self._deep_storage = deep_storage
        self._config = config
        self._clock = clock

    def run_once(self) -> tuple[int, int]:
        """The pending segments and the files deleted."""
        now = datetime.fromtimestamp(self._clock(), UTC)
        return (self._kill_stale_pending_segments(now) if self._config.pending_segments_on else 0,
                self._kill_orphan_files(now) if self._config.orphan_files_on else 0)

    def _kill_stale_pending_segments(self, now: datetime) -> int:
        """A pending segment a running task may still publish is kept: those allocated after a day before the data
        source's oldest active task started (Druid keeps the same day)."""
        deleted = 0
        for data_source in self._metadata.pending_segment_data_sources():
            started = [parse_timestamp(t.created_date) for t in self._metadata.list_tasks(True, data_source)]
            deleted += self._metadata.delete_pending_segments_created_before(
                data_source, min([*started, now]) - timedelta(days=1))
        if deleted:
            log.info("clean-up: deleted %d stale pending segments", deleted)
        return deleted

    def _kill_orphan_files(self, now: datetime) -> int:
        """Files no segment row names, written before the retention: the segment rows are read first, so a file
        pushed and committed meanwhile is young, and kept."""
        named = set()
        for load_spec in self._metadata.segment_load_specs():
            try:
                named.add(self._deep_storage.location(load_spec))
            except ValueError:  # another storage's segment: not this one's to judge
                continue
        deleted = 0
        for load_spec, written in list(self._deep_storage.files()):
            if written <= now - self._config.orphan_files_retain and self._deep_storage.location(load_spec) not in named:
                self._deep_storage.delete(load_spec)
                deleted += 1
        if deleted:
            log.info("clean-up: deleted %d files in deep storage that no segment names", deleted)
        return deleted
