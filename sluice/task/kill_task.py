"""Druid's `kill` task (KillUnusedSegmentsTask): deletes a data source's unused segments inside an interval, their
rows in `druid_segments` and their files in deep storage, for good.

It first takes an EXCLUSIVE time-chunk lock on the interval, so no task writes there while it deletes (and no
task that allocated a pending segment there can still publish it: those rows go too). Then, `batchSize`
segments at a time and at most `limit` in all, it deletes the rows first and the files after (Druid's
order): a row whose file is gone would be a segment no one can load, while a file without a row is only
garbage. A segment marked used again meanwhile is not deleted, and a file that a used segment also names
stays. Only unused segments wholly inside the interval are touched. No Spark: it runs anywhere.
"""

from __future__ import annotations

import logging
import secrets
import string
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, ValidationError

from sluice.ids import DataSourceName
from sluice.segment.segment import DataSegment, Interval
from sluice.spec.context import TaskContext
from sluice.spec.errors import SpecError, from_validation_error
from sluice.spec.intervals import parse_interval
from sluice.spec.model import SpecModel
from sluice.task import actions
from sluice.task.task import PayloadTaskSpec, TaskFailure, TaskStatus, run_to_status, write_task_file
from sluice.task.toolbox import TaskToolbox
from sluice.timestamps import format_timestamp, parse_timestamp

log = logging.getLogger(__name__)

#: Druid's default kill batch: short metadata transactions and deep-storage calls, so the lock is yielded often
BATCH_SIZE = 100
#: Druid's Tasks.DEFAULT_TASK_PRIORITY: a kill waits for every writer of its interval
KILL_PRIORITY = 0
REPORT_KEY = "killUnusedSegments"


class KillTaskPayload(SpecModel):
    type: Literal["kill"]
    id: str | None = None
    data_source: DataSourceName
    interval: str
    versions: list[str] | None = None
    batch_size: int = Field(BATCH_SIZE, gt=0)
    limit: int | None = Field(None, gt=0)
    #: only segments marked unused at or before this instant are killed (the kill duty's buffer period)
    max_used_status_last_updated_time: str | None = None
    context: TaskContext = Field(default_factory=TaskContext)
    group_id: str | None = None
    resource: dict[str, Any] | None = None
    created_time: str | None = None


@dataclass(frozen=True)
class KillTaskSpec(PayloadTaskSpec):
    id: str
    payload: KillTaskPayload

    type = "kill"
    needs_spark = False
    #: deleting again from the start is safe: what was deleted is simply not found
    can_restore = False
    default_priority = KILL_PRIORITY

    @property
    def data_source(self) -> str:
        return self.payload.data_source

    @property
    def interval(self) -> Interval:
        return Interval(*parse_interval(self.payload.interval))

    def to_json(self) -> dict[str, Any]:
        document = {k: v for k, v in self.payload.to_json().items() if v is not None}
        return {**document, "id": self.id, "groupId": self.group_id, "dataSource": self.data_source,
                "interval": str(self.interval), "resource": {"availabilityGroup": self.group_id, "requiredCapacity": 1},
                "context": {**self.payload.context.to_json(), "priority": self.priority}}


def spec_from_json(payload: dict[str, Any]) -> KillTaskSpec:
    """Validate a submitted `kill` task; raises SpecError naming the field."""
    try:
        parsed = KillTaskPayload.model_validate(payload)
    except ValidationError as err:
        raise from_validation_error(err, payload) from None
    try:
        interval = Interval(*parse_interval(parsed.interval))
    except ValueError as error:
        raise SpecError("interval", str(error)) from None
    if parsed.max_used_status_last_updated_time is not None:
        try:
            parse_timestamp(parsed.max_used_status_last_updated_time)
        except ValueError as error:
            raise SpecError("maxUsedStatusLastUpdatedTime", str(error)) from None
    return KillTaskSpec(parsed.id or new_kill_task_id(parsed.data_source, interval), parsed)


def new_kill_task_id(data_source: str, interval: Interval, prefix: str | None = None) -> str:
    """Druid's IdUtils.newTaskId: [prefix_]kill_<dataSource>_<random>_<start>_<end>_<now>; the coordinator's kill
    endpoint uses the prefix `api-issued`."""
    random_part = "".join(secrets.choice(string.ascii_lowercase[:16]) for _ in range(8))  # Druid's getRandomId
    parts = [prefix, "kill", data_source, random_part, format_timestamp(interval.start),
             format_timestamp(interval.end), format_timestamp(datetime.now(UTC))]
    return "_".join(p for p in parts if p)


def create(spec: KillTaskSpec, toolbox: TaskToolbox) -> KillTask:
    return KillTask(spec, toolbox)


class KillTask:
    def __init__(self, spec: KillTaskSpec, toolbox: TaskToolbox) -> None:
        self.spec = spec
        self.toolbox = toolbox
        self.num_segments_killed = 0
        self.num_batches_processed = 0
        self.num_pending_segments_killed = 0
        self._stopped = threading.Event()

    def run(self) -> TaskStatus:
        status = run_to_status(self.spec.id, self._run)
        write_task_file(self.toolbox.task_dir, "report.json", self.report(status))
        return status

    def stop(self) -> None:
        self._stopped.set()

    def stop_gracefully(self) -> None:
        self.stop()

    def report(self, status: TaskStatus | None = None) -> dict[str, Any]:
        """Druid's KillTaskReport."""
        return {REPORT_KEY: {"type": REPORT_KEY, "taskId": self.spec.id, "payload": {
            "numSegmentsKilled": self.num_segments_killed, "numBatchesProcessed": self.num_batches_processed}}}

    def _run(self) -> None:
        payload, client, interval = self.spec.payload, self.toolbox.actions, self.spec.interval
        data_source = self.spec.data_source
        actions.lock_time_chunk(client, interval, "EXCLUSIVE", payload.context.task_lock_timeout)
        log.info("task %s kills unused segments of %s in %s (versions %s, batchSize %d, limit %s)", self.spec.id,
                 data_source, interval, payload.versions, payload.batch_size, payload.limit)
        shared = {_key(s.load_spec) for s in self.toolbox.metadata.used_segments(data_source)}
        while not self._stopped.is_set():
            size = payload.batch_size if payload.limit is None else min(payload.batch_size,
                                                                        payload.limit - self.num_segments_killed)
            if size <= 0:
                break
            batch = [DataSegment.from_payload(p) for p in client.submit({
                "type": "retrieveUnusedSegments", "dataSource": data_source, "interval": str(interval),
                "versions": payload.versions, "limit": size,
                "maxUsedStatusLastUpdatedTime": payload.max_used_status_last_updated_time})]
            if not batch:
                break
            self._check_lock(interval)
            deleted = set(client.submit({"type": "segmentNuke", "segments": [s.to_payload() for s in batch]}))
            if not deleted:
                break  # all of them were marked used again meanwhile: their rows and files stay
            for segment in batch:
                if str(segment.id) in deleted and segment.load_spec and _key(segment.load_spec) not in shared:
                    self.toolbox.deep_storage.delete(segment.load_spec)
            self.num_segments_killed += len(deleted)
            self.num_batches_processed += 1
        if self._stopped.is_set():
            raise TaskFailure(f"task was stopped after killing {self.num_segments_killed} segments")
        self.num_pending_segments_killed = client.submit({"type": "pendingSegmentsDelete", "interval": str(interval)})
        log.info("task %s killed %d unused segments of %s in %d batches, and %d pending segments", self.spec.id,
                 self.num_segments_killed, data_source, self.num_batches_processed, self.num_pending_segments_killed)

    def _check_lock(self, interval: Interval) -> None:
        """Before each batch, as Druid does: a task of higher priority may have revoked the lock meanwhile, and
        then someone else may be writing the interval."""
        locks = self.toolbox.actions.submit({"type": "lockList"})
        if not any(not lock.get("revoked") and Interval.parse(lock["interval"]).contains(interval) for lock in locks):
            raise TaskFailure(f"Locks{[lock['interval'] for lock in locks]} for task[{self.spec.id}] can't cover "
                              f"interval[{interval}]: revoked by a task of higher priority")


def _key(load_spec: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in load_spec.items()))
