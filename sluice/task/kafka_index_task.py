"""A Kafka indexing task: Druid's SeekableStreamIndexTaskRunner.

The task owns its offsets. It reads from `startOffsets` in bounded Spark jobs (each one an
intermediate persist), until its supervisor pauses it and sets end offsets, and then publishes:
persists are merged into segments, pushed to deep storage, and committed together with the move of
the stream offsets from `startOffsets` to `endOffsets` in one metadata transaction. Until that
transaction commits nothing the task did is visible, so a task killed at any point loses nothing
and doubles nothing: the next task starts again from the committed offsets.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import string
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any, Callable

from sluice.emitter import NoopEmitter, ServiceEmitter, metrics
from sluice.metadata.offsets import StreamOffsets
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import DeepStorage
from sluice.segment.segment import DataSegment, Interval
from sluice.spec.supervisor import IngestionSpec, KafkaIOConfig, parse_supervisor_spec
from sluice.timestamps import format_timestamp, parse_timestamp
from sluice.stream.kafka import KafkaStream
from sluice.task.ingest_plan import MessageWindow, compile_plan
from sluice.task.offsets import END_OF_STREAM, is_finished, next_ranges
from sluice.task.meters import (BUILD_SEGMENTS, ParseExceptionReport, RowIngestionMeters, SavedParseExceptions,
                                ingestion_metrics)
from sluice.task.stats import RowStats
from sluice.task.task import TaskFailure, TaskStatus, write_task_file

log = logging.getLogger(__name__)

TASK_TYPE = "index_kafka"
#: how long a pause waits for a read in flight to unwind before it abandons it
PAUSE_GRACE_SECONDS = 2.0


class TaskState(str, Enum):
    """The runner's states in seed 001 (what `GET /chat/{id}/status` answers)."""

    NOT_STARTED = "NOT_STARTED"
    STARTING = "STARTING"
    READING = "READING"
    PAUSED = "PAUSED"
    PUBLISHING = "PUBLISHING"


@dataclass(frozen=True)
class KafkaIndexTaskSpec:
    """The task payload the supervisor creates; replicas of a task group get equal ones but for `id`."""

    id: str
    task_group_id: int
    base_sequence_name: str
    ingestion: IngestionSpec
    start_offsets: dict[int, int]
    #: the task group's creation: replicas share it, and with it their message window
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    #: the version of the time-chunk lock the supervisor's tasks share (Druid: one groupId, shared locks),
    #: so all its appending tasks allocate into one version of a chunk; None for a task run on its own
    lock_version: str | None = None

    type = TASK_TYPE
    needs_spark = True
    #: Druid's default priority of realtime tasks: they may revoke the locks of lower-priority batch tasks
    priority = 75

    @property
    def data_source(self) -> str:
        return self.ingestion.data_schema.data_source

    @property
    def group_id(self) -> str:
        """All tasks of one supervisor share a groupId (and so, later, their locks)."""
        return f"{TASK_TYPE}_{self.data_source}"

    @property
    def sequence_name(self) -> str:
        return f"{self.base_sequence_name}_0"

    @property
    def message_window(self) -> MessageWindow:
        return message_window(self.ingestion.io_config, self.created)

    def to_json(self) -> dict[str, Any]:
        window = self.message_window
        return {
            "type": TASK_TYPE,
            "id": self.id,
            "groupId": self.group_id,
            "dataSource": self.data_source,
            "taskGroupId": self.task_group_id,
            "baseSequenceName": self.base_sequence_name,
            "createdTime": format_timestamp(self.created),
            "dataSchema": self.ingestion.data_schema.to_json(),
            "ioConfig": {
                **self.ingestion.io_config.to_json(),
                "startSequenceNumbers": {"type": "start", "stream": self.ingestion.io_config.topic,
                                         "partitionSequenceNumberMap": {str(p): o for p, o in self.start_offsets.items()}},
                "minimumMessageTime": format_timestamp(window.minimum) if window.minimum else None,
                "maximumMessageTime": format_timestamp(window.maximum) if window.maximum else None,
            },
            "tuningConfig": self.ingestion.tuning_config.to_json(),
            "lockVersion": self.lock_version,
            "context": {"priority": self.priority},
        }

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> KafkaIndexTaskSpec:
        """The inverse of to_json: how a peon and a restarted overlord get the task back."""
        io = dict(payload["ioConfig"])
        start = io.pop("startSequenceNumbers")["partitionSequenceNumberMap"]
        for key in ("minimumMessageTime", "maximumMessageTime"):
            io.pop(key, None)
        ingestion = parse_supervisor_spec({"type": "kafka", "spec": {
            "dataSchema": payload["dataSchema"], "ioConfig": io, "tuningConfig": payload["tuningConfig"]}}).spec
        return cls(payload["id"], int(payload["taskGroupId"]), payload["baseSequenceName"], ingestion,
                   {int(p): int(o) for p, o in start.items()}, parse_timestamp(payload["createdTime"]),
                   payload.get("lockVersion"))


@dataclass(frozen=True)
class RealtimeView:
    """What a running streaming task has persisted (its files) and from where it read: what the broker
    needs to query the task's rows before they are published (see sluice/broker/realtime.py)."""

    data_source: str
    #: replicas share it, so it names the task group's current generation
    base_sequence_name: str
    start_offsets: dict[int, int]
    #: records read so far, to pick the replica that read furthest
    progress: int
    files: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"dataSource": self.data_source, "baseSequenceName": self.base_sequence_name,
                "startOffsets": {str(p): o for p, o in self.start_offsets.items()}, "progress": self.progress,
                "files": list(self.files)}

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> RealtimeView:
        return cls(payload["dataSource"], payload["baseSequenceName"],
                   {int(p): int(o) for p, o in payload["startOffsets"].items()}, int(payload["progress"]),
                   tuple(payload["files"]))


def message_window(io: KafkaIOConfig, created: datetime) -> MessageWindow:
    """The instants the task keeps rows between (Druid's minimumMessageTime and maximumMessageTime).

    They are fixed from the task's creation time, not re-read from the clock, so a task keeps the same
    rows for its whole life, and replicas given the same `created` (their group's) keep the same rows.
    """
    minimum = io.late_message_rejection_start_date_time
    if minimum is None and io.late_message_rejection_period is not None:
        minimum = created - io.late_message_rejection_period
    maximum = None
    if io.early_message_rejection_period is not None:
        maximum = created + io.task_duration + io.early_message_rejection_period
    return MessageWindow(minimum, maximum)


def new_task_id(data_source: str, base_sequence_name: str) -> str:
    """Druid's shape: index_kafka_<dataSource>_<15 hex of the sequence>_<8 random letters>."""
    suffix = "".join(secrets.choice(string.ascii_lowercase) for _ in range(8))
    return f"{TASK_TYPE}_{data_source}_{base_sequence_name[-15:]}_{suffix}"


@dataclass
class TaskToolbox:
    """What a task needs from the process it runs in (Druid's TaskToolbox)."""

    spark: Any
    metadata: MetadataStore
    deep_storage: DeepStorage
    task_dir: Path
    stream_factory: Callable[[KafkaIOConfig], KafkaStream]
    emitter: ServiceEmitter = field(default_factory=lambda: ServiceEmitter("druid/peon", "localhost", NoopEmitter()))
    poll_interval: float = 0.5


class KafkaIndexTask:
    def __init__(self, spec: KafkaIndexTaskSpec, toolbox: TaskToolbox) -> None:
        self.spec = spec
        self.toolbox = toolbox
        self.state = TaskState.NOT_STARTED
        self.meters = RowIngestionMeters()
        self.parse_exceptions = SavedParseExceptions(spec.ingestion.tuning_config.max_saved_parse_exceptions)
        self._current = dict(spec.start_offsets)
        self._end = {p: END_OF_STREAM for p in spec.start_offsets}
        self._cond = threading.Condition()
        self._pause_requested = False
        self._stop_requested = False
        self._reading = False  # a Spark read job is in flight (it runs in job group = task id)
        self._read_epoch = 0  # moved on by pause and stop: a read started in an earlier epoch does not count
        self._persists: list[Path] = []
        self.started: datetime | None = None

    # ---- the control API the supervisor uses (Druid's /druid/worker/v1/chat/{taskId}/...) ----

    def current_offsets(self) -> dict[int, int]:
        with self._cond:
            return dict(self._current)

    def end_offsets(self) -> dict[int, int]:
        with self._cond:
            return dict(self._end)

    @property
    def row_stats(self) -> RowStats:
        return self.meters.totals

    def row_stats_report(self) -> dict[str, Any]:
        return self.meters.row_stats()

    def parse_errors(self) -> list[ParseExceptionReport]:
        return self.parse_exceptions.reports()

    def realtime_view(self) -> RealtimeView:
        with self._cond:
            persists, current = list(self._persists), dict(self._current)
        files = tuple(str(f) for directory in persists for f in sorted(directory.glob("*.parquet")))
        progress = sum(current[p] - self.spec.start_offsets[p] for p in current)
        return RealtimeView(self.spec.data_source, self.spec.base_sequence_name, dict(self.spec.start_offsets),
                            progress, files)

    def checkpoints(self) -> dict[int, dict[int, int]]:
        """Each sequence's start offsets, by sequence id (one sequence until checkpoints split a task)."""
        return {0: dict(self.spec.start_offsets)}

    def start_time(self) -> datetime | None:
        return self.started

    def pause(self, timeout: float = 30.0) -> dict[int, int] | None:
        """Stop reading and return the current offsets; None if the task is not reading.

        A read in flight is abandoned, not waited for: it has not been persisted and its offsets have not
        moved, so the task pauses at the offsets before it. Its Spark job is cancelled, and whatever it
        returns is thrown away (the read epoch moved on), so pausing is immediate even when Spark is slow
        to unwind a job (a cold first job on a loaded machine can take longer than taskDuration).
        """
        with self._cond:
            if self.state not in (TaskState.STARTING, TaskState.READING, TaskState.PAUSED):
                return None
            self._pause_requested = True
            self._abandon_read()
            self._cond.wait_for(lambda: self.state not in (TaskState.STARTING, TaskState.READING),
                                min(timeout, PAUSE_GRACE_SECONDS))
            if self.state in (TaskState.STARTING, TaskState.READING):
                self.state = TaskState.PAUSED  # the reading thread pauses as soon as its read returns
            return dict(self._current) if self.state is TaskState.PAUSED else None

    def resume(self) -> None:
        with self._cond:
            self._pause_requested = False
            self._cond.notify_all()

    def set_end_offsets(self, end: dict[int, int], finish: bool = True) -> None:
        """With finish=true the task reads up to `end` and publishes (only `finish=true` exists until checkpoints)."""
        with self._cond:
            if self.state is not TaskState.PAUSED:
                raise TaskFailure("Task must be paused before changing the end offsets")
            unknown = set(end) - set(self._current)
            if unknown:
                raise TaskFailure(f"Request contains partitions not being handled by this task: {sorted(unknown)}")
            for partition, offset in end.items():
                if offset < self._current[partition]:
                    raise TaskFailure(f"End sequence must be >= current sequence for partition [{partition}] "
                                      f"(current: {self._current[partition]})")
            if not finish:
                raise TaskFailure("checkpoints (finish=false) are not supported yet")
            self._end.update(end)
            self._pause_requested = False
            self._cond.notify_all()

    def stop(self) -> None:
        """Stop now without publishing (Druid's /stop after a kill): nothing read so far is committed."""
        with self._cond:
            self._stop_requested = True
            self._abandon_read()

    def _abandon_read(self) -> None:
        """Called holding the condition: a read in flight will not count, and its Spark job is cancelled."""
        self._read_epoch += 1
        self._cond.notify_all()
        if self._reading:
            self.toolbox.spark.sparkContext.cancelJobGroup(self.spec.id)

    # ---- running ----

    def run(self) -> TaskStatus:
        started = time.monotonic()
        try:
            self._run()
            status = TaskStatus(self.spec.id, "SUCCESS")
        except TaskFailure as failure:
            status = TaskStatus(self.spec.id, "FAILED", str(failure))
        except Exception as error:  # a task must always end with a status its supervisor can act on
            log.exception("task %s failed", self.spec.id)
            status = TaskStatus(self.spec.id, "FAILED", f"{type(error).__name__}: {error}")
        duration = int((time.monotonic() - started) * 1000)
        status = TaskStatus(status.id, status.status_code, status.error_msg, duration)
        self._write("report.json", self.report(status))
        return status

    def report(self, status: TaskStatus | None = None) -> dict[str, Any]:
        """Druid's ingestionStatsAndErrors report; live (RUNNING) until the task has a final status."""
        return {"ingestionStatsAndErrors": {
            "type": "ingestionStatsAndErrors",
            "taskId": self.spec.id,
            "payload": {
                "ingestionState": "COMPLETED" if status else ("NOT_STARTED" if self.state is TaskState.NOT_STARTED
                                                              else "BUILD_SEGMENTS"),
                "unparseableEvents": self.parse_exceptions.unparseable_events(),
                "rowStats": {BUILD_SEGMENTS: self.row_stats.to_json()} if status else self.meters.row_stats(),
                "errorMsg": status.error_msg if status else None,
                "segmentAvailabilityConfirmed": False,
                "segmentAvailabilityWaitTimeMs": 0,
            },
        }}

    def _run(self) -> None:
        self.state = TaskState.STARTING
        self.started = datetime.now(UTC)
        self.toolbox.task_dir.mkdir(parents=True, exist_ok=True)
        self._write("task.json", self.spec.to_json())
        from sluice.task.pipeline import IngestPipeline  # Spark is imported where it runs

        io = self.spec.ingestion.io_config
        pipeline = IngestPipeline(self.toolbox.spark, compile_plan(self.spec.ingestion.data_schema),
                                  io.topic, io.consumer_properties, self.spec.message_window)
        stream = self.toolbox.stream_factory(io)
        # this thread's Spark jobs carry the task id, so pause and stop can cancel a read in flight
        self.toolbox.spark.sparkContext.setJobGroup(self.spec.id, f"Sluice task {self.spec.id}", True)
        try:
            self._read(pipeline, stream)
        finally:
            stream.close()
        if self._stop_requested:
            raise TaskFailure("task was stopped before publishing; nothing was committed")
        self._publish(pipeline)

    def _read(self, pipeline: Any, stream: KafkaStream) -> None:
        with self._cond:
            self.state = TaskState.READING
        while True:
            with self._cond:
                while self._pause_requested and not self._stop_requested:
                    self.state = TaskState.PAUSED
                    self._cond.notify_all()
                    self._cond.wait()
                self.state = TaskState.READING
                if self._stop_requested or is_finished(self._current, self._end):
                    return
                current, end = dict(self._current), dict(self._end)
            ranges = next_ranges(current, stream.latest_offsets(list(current)), end, self._batch_records())
            if not ranges:
                with self._cond:
                    self._cond.wait(self.toolbox.poll_interval)
                continue
            self._persist(pipeline, ranges)

    def _batch_records(self) -> int:
        """maxRowsInMemory caps a read; maxBytesInMemory too, at the average record size seen so far."""
        tuning = self.spec.ingestion.tuning_config
        cap = tuning.max_rows_in_memory
        seen = self.row_stats.processed + self.row_stats.processed_with_error + self.row_stats.unparseable
        if tuning.max_bytes_in_memory > 0 and seen and self.row_stats.processed_bytes:
            cap = min(cap, max(1, tuning.max_bytes_in_memory * seen // self.row_stats.processed_bytes))
        return cap

    def _persist(self, pipeline: Any, ranges: dict[int, tuple[int, int]]) -> None:
        directory = self.toolbox.task_dir / "persist" / str(len(self._persists))
        with self._cond:
            if self._pause_requested or self._stop_requested:
                return
            self._reading = True
            epoch = self._read_epoch
        try:
            result = pipeline.read_and_persist(ranges, directory)
        except Exception:
            with self._cond:
                abandoned = epoch != self._read_epoch
            if not abandoned:
                raise
            result = None
        finally:
            with self._cond:
                self._reading = False
        tuning = self.spec.ingestion.tuning_config
        with self._cond:
            if result is None or epoch != self._read_epoch:
                shutil.rmtree(directory, ignore_errors=True)  # an abandoned read: never persisted, offsets unmoved
                return
            self._persists.append(directory)
            self.meters.add(result.stats)
            self._current.update({p: stop for p, (_, stop) in ranges.items()})
        self._write("sequences.json", [{"sequenceName": self.spec.sequence_name,
                                        "startOffsets": self.spec.start_offsets,
                                        "endOffsets": self._end, "currentOffsets": self._current}])
        for name, value in ingestion_metrics(result.stats).items():
            self.toolbox.emitter.metric(name, value, **self._dimensions)
        self.toolbox.emitter.metric(metrics.INGEST_PERSISTS_COUNT, 1, **self._dimensions)
        if result.parse_error_sample:
            self.parse_exceptions.add(result.parse_error_sample, [f"Unable to parse row [{result.parse_error_sample}]"])
        if tuning.log_parse_exceptions and result.parse_error_sample:
            log.warning("task %s: unparseable row (%d so far), e.g. %s", self.spec.id,
                        self.row_stats.parse_exceptions, result.parse_error_sample)
        limit = tuning.effective_max_parse_exceptions()
        if self.row_stats.parse_exceptions > limit:
            raise TaskFailure(f"Max parse exceptions [{limit}] exceeded "
                              f"({self.row_stats.unparseable} unparseable, {self.row_stats.processed_with_error} "
                              f"processed with error); last: {result.parse_error_sample}")

    # ---- publishing ----

    def _publish(self, pipeline: Any) -> None:
        with self._cond:
            self.state = TaskState.PUBLISHING
        schema = self.spec.ingestion.data_schema
        tuning = self.spec.ingestion.tuning_config
        segments: list[DataSegment] = []
        if self._persists:
            files = pipeline.merge(self._persists, schema.granularity_spec.segment_granularity,
                                   tuning.effective_max_rows_per_segment(), self.toolbox.task_dir / "staging")
            previous: str | None = None
            for file in files:
                segment = self._push(file, previous)
                previous = str(segment.id)
                segments.append(segment)
        start = StreamOffsets(self.spec.ingestion.io_config.topic, dict(self.spec.start_offsets))
        end = StreamOffsets(start.stream, self.current_offsets())
        if segments or start.offsets != end.offsets:
            self._commit(segments, start, end)
        self.toolbox.emitter.metric(metrics.INGEST_HANDOFF_COUNT, len(segments), **self._dimensions)
        self.toolbox.emitter.metric(metrics.INGEST_ROWS_OUTPUT, sum(s.num_rows or 0 for s in segments), **self._dimensions)
        self.toolbox.emitter.metric(metrics.SEGMENT_ADDED_BYTES, sum(s.size for s in segments), **self._dimensions)
        shutil.rmtree(self.toolbox.task_dir / "persist", ignore_errors=True)
        shutil.rmtree(self.toolbox.task_dir / "staging", ignore_errors=True)
        log.info("task %s published %d segments, offsets %s -> %s", self.spec.id, len(segments), start.offsets, end.offsets)

    def _push(self, file: Any, previous: str | None) -> DataSegment:
        schema = self.spec.ingestion.data_schema
        granularity = schema.granularity_spec.segment_granularity
        bucket = datetime.fromtimestamp(file.bucket_start_millis / 1000, UTC)
        interval = Interval(bucket, granularity.bucket_end(bucket))
        segment_id = self.toolbox.metadata.allocate_segment(
            schema.data_source, interval, self.spec.sequence_name, previous,
            self.spec.lock_version or format_timestamp(self.spec.created))
        # replicas push the same segment id; unique paths keep a losing replica from touching the winner's file
        load_spec = self.toolbox.deep_storage.push(file.path, segment_id, unique_path=True)
        return DataSegment(
            id=segment_id,
            dimensions=[d.name for d in schema.dimensions_spec.dimensions],
            metrics=[m.name for m in schema.metrics_spec],
            aggregators=[m.to_json() for m in schema.metrics_spec],
            shard_spec={"type": "numbered", "partitionNum": segment_id.partition_num, "partitions": 0},
            num_rows=file.num_rows,
            size=file.path.stat().st_size,
            load_spec=load_spec,
        )

    def _commit(self, segments: list[DataSegment], start: StreamOffsets, end: StreamOffsets) -> None:
        """The exactly-once step. A task of the next generation waits here until the previous one has
        committed the offsets it starts from; a replica that lost the race finds its segments there."""
        metadata = self.toolbox.metadata
        while True:
            result = metadata.commit_segments_and_metadata(segments, self.spec.data_source, start, end)
            if result.success:
                return
            stored = metadata.get_stream_offsets(self.spec.data_source)
            if self._published_by_replica(stored, end, segments):
                log.info("task %s: a replica already published the same segments and offsets", self.spec.id)
                return
            if not _earlier_generation_pending(stored, start):
                raise TaskFailure(result.message or "publish failed")
            with self._cond:
                if self._stop_requested:
                    raise TaskFailure("task was stopped while waiting to publish; nothing was committed")
                self._cond.wait(self.toolbox.poll_interval)

    def _published_by_replica(self, stored: StreamOffsets | None, end: StreamOffsets, segments: list[DataSegment]) -> bool:
        if stored is None or any(stored.offsets.get(p) != o for p, o in end.offsets.items()):
            return False
        used = {str(s.id) for s in self.toolbox.metadata.used_segments(self.spec.data_source)}
        return all(str(s.id) in used for s in segments)

    @property
    def _dimensions(self) -> dict[str, str]:
        """What every metric this task emits is tagged with."""
        return {metrics.DATASOURCE: self.spec.data_source, metrics.TASK_ID: self.spec.id, metrics.TASK_TYPE: TASK_TYPE}

    def _write(self, name: str, payload: Any) -> None:
        write_task_file(self.toolbox.task_dir, name, payload)


def _earlier_generation_pending(stored: StreamOffsets | None, start: StreamOffsets) -> bool:
    """True while the stored offsets are still behind this task's start (an earlier task is publishing)."""
    if stored is None:
        return False
    common = [p for p in start.offsets if p in stored.offsets]
    return bool(common) and all(stored.offsets[p] <= start.offsets[p] for p in common)



__all__ = ["KafkaIndexTask", "KafkaIndexTaskSpec", "RealtimeView", "TaskState", "TaskToolbox", "new_task_id"]
