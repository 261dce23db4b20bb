"""A Kafka indexing task: Druid's SeekableStreamIndexTaskRunner.

The task owns its offsets. It reads from `startOffsets` in bounded Spark jobs (each one an intermediate
persist) into its current sequence (see `sequences.py`), until its supervisor pauses it and sets end
offsets. A checkpoint (finish=false) ends the current sequence and the task reads on into the next while
the ended one is published in the background; the final end (finish=true) makes it publish the rest and
stop. Publishing a sequence merges its persists into segments, pushes them to deep storage, and commits
them together with the move of the stream offsets from the sequence's start to its end in one metadata
transaction, through the overlord's task actions. Until that transaction commits nothing the sequence
holds is visible, so a task killed at any point loses nothing and doubles nothing: the next task starts
again from the committed offsets. A task stopped gracefully, or whose process died, resumes from
`sequences.json` when its process restarts.
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.emitter import metrics
from sluice.lookups.coordinator import read_lookups
from sluice.lookups.references import LookupReferences
from sluice.metadata.offsets import StreamOffsets
from sluice.realtime import RealtimeView
from sluice.spec.supervisor import IngestionSpec, KafkaIOConfig, parse_supervisor_spec
from sluice.task import actions, sequences
from sluice.task.ingest_plan import MessageWindow, compile_plan
from sluice.task.meters import (BUILD_SEGMENTS, ParseExceptionReport, RowIngestionMeters, SavedParseExceptions,
                                ingestion_metrics)
from sluice.task.persists import multi_values
from sluice.task.publisher import SequencePublisher, already_committed
from sluice.task.rollup_policy import PersistMode, PersistRollup
from sluice.task.sequences import HandoffLimits, SequenceMetadata, initial_sequences
from sluice.task.stats import RowStats
from sluice.task.task import TaskFailure, TaskStatus, random_id_part, run_to_status, write_task_file
from sluice.task.toolbox import TaskToolbox
from sluice.timestamps import format_timestamp, parse_timestamp

if TYPE_CHECKING:
    from sluice.task.pipeline import IngestPipeline

log = logging.getLogger(__name__)

TASK_TYPE = "index_kafka"
#: how long a pause waits for a read in flight to unwind before it abandons it
PAUSE_GRACE_SECONDS = 2.0
#: where a task keeps its sequences, persists and offsets, to resume from after a restart
SEQUENCES_FILE = "sequences.json"


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
    #: the task group's checkpoints, sequence id -> start offsets (Druid's "checkpoints" task context): a replica
    #: started after its group checkpointed reads the same sequences as the others; None: one sequence from start
    checkpoints: dict[int, dict[int, int]] | None = None
    #: the supervisor's context `useConcurrentLocks`: segments are allocated under APPEND locks, which batch appends
    #: (and a REPLACE) share, instead of EXCLUSIVE ones (Druid's concurrent append and replace)
    use_concurrent_locks: bool = False

    type = TASK_TYPE
    needs_spark = True
    #: it resumes from its task directory (sequences.json and its persists)
    can_restore = True
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
    def sequence_checkpoints(self) -> dict[int, dict[int, int]]:
        return self.checkpoints or {0: dict(self.start_offsets)}

    @property
    def message_window(self) -> MessageWindow:
        return message_window(self.ingestion.io_config, self.created)

    @property
    def lock_type(self) -> str:
        return "APPEND" if self.use_concurrent_locks else "EXCLUSIVE"

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
            "context": {"priority": self.priority,
                        "checkpoints": {str(i): {str(p): o for p, o in start.items()}
                                        for i, start in self.sequence_checkpoints.items()},
                        **({"useConcurrentLocks": True} if self.use_concurrent_locks else {})},
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
        context = payload.get("context") or {}
        checkpoints = context.get("checkpoints")
        return cls(payload["id"], int(payload["taskGroupId"]), payload["baseSequenceName"], ingestion,
                   {int(p): int(o) for p, o in start.items()}, parse_timestamp(payload["createdTime"]),
                   {int(i): {int(p): int(o) for p, o in c.items()} for i, c in checkpoints.items()}
                   if checkpoints else None, bool(context.get("useConcurrentLocks", False)))


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


def spec_from_json(payload: dict[str, Any]) -> KafkaIndexTaskSpec:
    if not isinstance(payload.get("id"), str) or not payload["id"]:
        raise TaskFailure("a task needs a JSON object with a non-empty string 'id'")
    return KafkaIndexTaskSpec.from_json(payload)


def create(spec: KafkaIndexTaskSpec, toolbox: TaskToolbox) -> KafkaIndexTask:
    return KafkaIndexTask(spec, toolbox)


def spark_tasks_per_job(cores: int, reading_tasks: int) -> int:
    """At most how many Spark tasks one persist job of a task runs: its share of Spark's cores (`cores`, Spark's
    default parallelism) among its supervisor's `reading_tasks` (taskCount × replicas), which persist at the same time.

    Each Spark task of a persist costs the same whatever it reads (a Python worker's round trip, a Parquet writer, a
    file to commit, and to query until the publish), and tasks beyond the job's share of the cores only wait for one.
    One Spark task per partition read made the two tasks of a 4-partition supervisor on 2 cores queue four: their
    jobs took 0.83 s at 20k events/s, 0.6 s with one Spark task each (README, Performance)."""
    return max(1, cores // reading_tasks)


def new_task_id(data_source: str, base_sequence_name: str) -> str:
    """Druid's shape: index_kafka_<dataSource>_<15 hex of the sequence>_<8 random letters>."""
    return f"{TASK_TYPE}_{data_source}_{base_sequence_name[-15:]}_{random_id_part()}"


class KafkaIndexTask:
    def __init__(self, spec: KafkaIndexTaskSpec, toolbox: TaskToolbox) -> None:
        self.spec = spec
        self.toolbox = toolbox
        self.state = TaskState.NOT_STARTED
        self.meters = RowIngestionMeters()
        self.parse_exceptions = SavedParseExceptions(spec.ingestion.tuning_config.max_saved_parse_exceptions)
        self._current = dict(spec.start_offsets)
        self._sequences = initial_sequences(spec.base_sequence_name, spec.sequence_checkpoints)
        #: the final end offsets were set (setEndOffsets with finish=true): publish once read there
        self._finished = False
        self._cond = threading.Condition()
        self._pause_requested = False
        self._stop_requested = False
        #: stopped to be restored when its process comes back (Druid's stopGracefully of a restorable task)
        self._stop_for_restore = False
        self._reading = False  # a Spark read job is in flight (it runs in job group = task id)
        self._read_epoch = 0  # moved on by pause and stop: a read started in an earlier epoch does not count
        self._persist_count = 0
        self._persist_rollup = PersistRollup()
        #: the sequence a checkpoint was asked for, so it is asked once
        self._checkpoint_requested: int | None = None
        self._last_checkpoint = datetime.now(UTC)
        self._publish_error: BaseException | None = None
        self.started: datetime | None = None
        # before anyone asks: a supervisor adopting a restored task reads its checkpoints and offsets at once
        self._restore()

    # ---- the control API the supervisor uses (Druid's /druid/worker/v1/chat/{taskId}/...) ----

    def current_offsets(self) -> dict[int, int]:
        with self._cond:
            return dict(self._current)

    def end_offsets(self) -> dict[int, int]:
        with self._cond:
            return dict(self._sequences[-1].end_offsets)

    @property
    def row_stats(self) -> RowStats:
        return self.meters.totals

    def row_stats_report(self) -> dict[str, Any]:
        return self.meters.row_stats()

    def parse_errors(self) -> list[ParseExceptionReport]:
        return self.parse_exceptions.reports()

    def realtime_views(self) -> list[RealtimeView]:
        """One view per unpublished sequence that has rows persisted."""
        with self._cond:
            unpublished, current = [s for s in self._sequences if not s.published and s.persists], dict(self._current)
        task_dir = self.toolbox.task_dir
        return [RealtimeView(self.spec.data_source, s.sequence_name, dict(s.start_offsets),
                             sum(min(current[p], s.end_offsets[p]) - start for p, start in s.start_offsets.items()),
                             tuple(str(f) for persist in s.persists
                                   for f in sorted((task_dir / persist).glob("*.parquet"))),
                             multi_values([task_dir / persist for persist in s.persists]))
                for s in unpublished]

    def checkpoints(self) -> dict[int, dict[int, int]]:
        """Each sequence's start offsets, by sequence id (Druid's GET …/checkpoints)."""
        with self._cond:
            return {s.sequence_id: dict(s.start_offsets) for s in self._sequences}

    def start_time(self) -> datetime | None:
        return self.started

    def pause(self, timeout: float = 30.0) -> dict[int, int] | None:
        """Stop reading and return the current offsets; None if the task is not reading.

        A read in flight is abandoned, not waited for: it has not been persisted and its offsets have not
        moved, so the task pauses at the offsets before it. Its Spark job is cancelled, and whatever it
        returns is thrown away (the read epoch moved on), so pausing is immediate even when Spark is slow
        to unwind a job (a cold first job on a loaded machine can take longer than taskDuration). A sequence
        being published in the background goes on: publishing is not reading.
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
        """Druid's setEndOffsets on a paused task, which then resumes. finish=true: the task reads up to `end`
        and publishes what it has not yet. finish=false (a checkpoint): its current sequence ends at `end` and
        is published once read, while the task reads on into a new sequence."""
        with self._cond:
            if self.state is not TaskState.PAUSED:
                raise TaskFailure("Task must be paused before changing the end offsets")
            if self._finished:
                raise TaskFailure("The task's end offsets are set already; it is finishing")
            unknown = set(end) - set(self._current)
            if unknown:
                raise TaskFailure(f"Request contains partitions not being handled by this task: {sorted(unknown)}")
            for partition, offset in end.items():
                if offset < self._current[partition]:
                    raise TaskFailure(f"End sequence must be >= current sequence for partition [{partition}] "
                                      f"(current: {self._current[partition]})")
            last = self._sequences[-1]
            if not finish and all(last.start_offsets[p] == o for p, o in end.items()):
                log.warning("task %s: ignoring a checkpoint at the current sequence's start %s", self.spec.id, end)
            elif finish:
                self._sequences = sequences.finish(self._sequences, end)
                self._finished = True
            else:
                self._sequences = sequences.checkpoint(self._sequences, end, self.spec.base_sequence_name)
                self._checkpoint_requested = None
                self._last_checkpoint = datetime.now(UTC)
            self._save_sequences()
            self._pause_requested = False
            self._cond.notify_all()

    def stop(self) -> None:
        """Stop now without publishing more (Druid's /stop after a kill): what is not committed stays so. A
        merge in flight is cancelled; a commit in flight either happens whole or not at all."""
        with self._cond:
            self._stop_requested = True
            self._abandon_read()
            if self.toolbox.spark is not None:  # a peon's task may be stopped before its Spark is up
                self.toolbox.spark.sparkContext.cancelJobGroup(self._publish_job_group)

    def stop_gracefully(self) -> None:
        """Its process is going down and will restore it: stop reading, keep every persist and sequence, and end
        without a final status, so that the restarted process's task picks up from sequences.json."""
        with self._cond:
            self._stop_for_restore = True
        self.stop()

    def _abandon_read(self) -> None:
        """Called holding the condition: a read in flight will not count, and its Spark job is cancelled."""
        self._read_epoch += 1
        self._cond.notify_all()
        if self._reading:
            self.toolbox.spark.sparkContext.cancelJobGroup(self.spec.id)

    @property
    def _publish_job_group(self) -> str:
        return f"{self.spec.id}-publish"

    def wait(self, seconds: float) -> None:
        """Sleep, woken early by a stop."""
        with self._cond:
            self._cond.wait(seconds)

    @property
    def metric_dimensions(self) -> dict[str, str]:
        """What every metric this task emits is tagged with."""
        return {metrics.DATASOURCE: self.spec.data_source, metrics.TASK_ID: self.spec.id, metrics.TASK_TYPE: TASK_TYPE}

    # ---- running ----

    def run(self) -> TaskStatus:
        status = run_to_status(self.spec.id, self._run)
        if self._stop_for_restore and not (status.is_complete and status.status_code == "SUCCESS"):
            log.info("task %s stopped; it resumes from %s when its process restarts", self.spec.id, SEQUENCES_FILE)
            return TaskStatus(self.spec.id, "RUNNING")
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
        from sluice.connectors.sources.kafka_stream import KafkaStreamSource  # Spark is imported where it runs
        from sluice.connectors.spark import ConnectorRead
        from sluice.task.pipeline import IngestPipeline

        io = self.spec.ingestion.io_config
        plan = compile_plan(self.spec.ingestion.data_schema, io.flatten_spec,
                            LookupReferences(lambda: read_lookups(self.toolbox.metadata)).map)
        source = KafkaStreamSource(io.topic, io.consumer_properties, self.current_offsets(),
                                   lambda: self.toolbox.stream_factory(io), io.input_format, plan.fields,
                                   discovery_interval=io.poll_timeout_s)
        stream = ConnectorRead(self.toolbox.spark, source, source.parallelism)
        pipeline = IngestPipeline(self.toolbox.spark, plan, stream, self.spec.message_window, spark_tasks_per_job(
            self.toolbox.spark.sparkContext.defaultParallelism, io.task_count * io.replicas))
        publisher = threading.Thread(target=self._publish_loop, args=(SequencePublisher(self, pipeline),),
                                     name=f"{self.spec.id}-publish", daemon=True)
        publisher.start()
        # this thread's Spark jobs carry the task id, so pause and stop can cancel a read in flight
        self.toolbox.spark.sparkContext.setJobGroup(self.spec.id, f"Sluice task {self.spec.id}", True)
        try:
            with stream:
                self._read(pipeline)
            with self._cond:
                if not self._stop_requested:
                    self.state = TaskState.PUBLISHING
                self._cond.wait_for(lambda: self._stop_requested or self._publish_error is not None
                                    or all(s.published for s in self._sequences))
        except BaseException:
            self.stop()  # the publisher too: a failing task commits nothing more
            raise
        finally:
            publisher.join()
        if self._publish_error is not None and not self._stop_requested:
            raise self._publish_error
        if self._stop_requested:
            raise TaskFailure("task was stopped before it published everything it read; what it did not publish "
                              "was not committed")
        shutil.rmtree(self.toolbox.task_dir / "persist", ignore_errors=True)

    def _read(self, pipeline: IngestPipeline) -> None:
        with self._cond:
            self.state = TaskState.READING
        while True:
            with self._cond:
                while self._pause_requested and not self._stop_requested:
                    self.state = TaskState.PAUSED
                    self._cond.notify_all()
                    self._cond.wait()
                self.state = TaskState.READING
                if self._stop_requested or self._publish_error is not None:
                    return
                sequence = sequences.reading_sequence(self._sequences, self._current)
                if sequence is None:
                    return  # read up to the final end offsets
            ranges = pipeline.plan_read(sequence.end_offsets, self._batch_records())
            if not ranges:
                with self._cond:
                    self._cond.wait(self.spec.ingestion.io_config.poll_timeout_s)
                self._maybe_checkpoint()  # intermediateHandoffPeriod passes while there is nothing to read, too
                continue
            self._persist(pipeline, ranges, sequence.sequence_id)
            self._maybe_checkpoint()

    def _batch_records(self) -> int:
        """maxRowsInMemory caps a read; maxBytesInMemory too, at the average record size seen so far."""
        tuning = self.spec.ingestion.tuning_config
        cap = tuning.max_rows_in_memory
        seen = self.row_stats.processed + self.row_stats.processed_with_error + self.row_stats.unparseable
        if tuning.max_bytes_in_memory > 0 and seen and self.row_stats.processed_bytes:
            cap = min(cap, max(1, tuning.max_bytes_in_memory * seen // self.row_stats.processed_bytes))
        return cap

    def _persist(self, pipeline: IngestPipeline, ranges: dict[int, tuple[int, int]], sequence_id: int) -> None:
        relative = f"persist/{sequence_id}/{self._persist_count}"
        directory = self.toolbox.task_dir / relative
        with self._cond:
            if self._pause_requested or self._stop_requested:
                return
            self._reading = True
            read_epoch = self._read_epoch
        mode = (self._persist_rollup.next_persist() if self.spec.ingestion.data_schema.granularity_spec.rollup
                else PersistMode(rollup=False, count_keys=False))
        try:
            source_epoch, result = pipeline.read_and_persist(directory, mode.rollup, mode.count_keys)
            bucket_rows = pipeline.bucket_rows(directory, self.spec.ingestion.data_schema.granularity_spec
                                               .segment_granularity)
        except Exception:
            with self._cond:
                abandoned = read_epoch != self._read_epoch
            if not abandoned:
                raise
            result = None
        finally:
            with self._cond:
                self._reading = False
        tuning = self.spec.ingestion.tuning_config
        with self._cond:
            if result is None or read_epoch != self._read_epoch:
                shutil.rmtree(directory, ignore_errors=True)  # an abandoned read: never persisted, offsets unmoved
                return
            pipeline.commit(source_epoch)
            self._persist_count += 1
            self._persist_rollup.measured(result.stats.processed + result.stats.processed_with_error,
                                          sum(bucket_rows.values()) if mode.rollup else result.rollup_keys)
            self._sequences = sequences.add_persist(self._sequences, sequence_id, relative, bucket_rows)
            self.meters.add(result.stats)
            self._current.update({p: stop for p, (_, stop) in ranges.items()})
            self._save_sequences()
            self._cond.notify_all()  # the publisher: a checkpointed sequence may be read to its end now
        for name, value in ingestion_metrics(result.stats).items():
            self.toolbox.emitter.metric(name, value, **self.metric_dimensions)
        self.toolbox.emitter.metric(metrics.INGEST_PERSISTS_COUNT, 1, **self.metric_dimensions)
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

    # ---- incremental handoff ----

    def _maybe_checkpoint(self) -> None:
        """Ask the supervisor to end the current sequence when a handoff limit is reached (Druid's checkpoint
        request); the supervisor pauses the group's replicas and sets the same end on all of them."""
        tuning = self.spec.ingestion.tuning_config
        limits = HandoffLimits(tuning.effective_max_rows_per_segment(), tuning.effective_max_total_rows(),
                               tuning.intermediate_handoff_period)
        with self._cond:
            if self._finished or self._stop_requested:
                return
            reason = sequences.checkpoint_reason(self._sequences, limits, datetime.now(UTC), self._last_checkpoint)
            last = self._sequences[-1]
            if reason is None or self._checkpoint_requested == last.sequence_id:
                return
            self._checkpoint_requested = last.sequence_id
        log.info("task %s asks for a checkpoint: %s", self.spec.id, reason)
        topic = self.spec.ingestion.io_config.topic
        if not actions.checkpoint(self.toolbox.actions, self.spec.data_source, self.spec.task_group_id,
                                  StreamOffsets(topic, dict(last.start_offsets))):
            raise TaskFailure(f"Checkpoint request with sequences [{last.start_offsets}] failed, dying")

    def _publish_loop(self, publisher: SequencePublisher) -> None:
        """Publishes sequences in order, as they become publishable, while the reading thread reads on."""
        self.toolbox.spark.sparkContext.setJobGroup(self._publish_job_group, f"Sluice task {self.spec.id} publish",
                                                    True)
        def done() -> bool:
            return self._stop_requested or (self._finished and all(s.published for s in self._sequences))

        while True:
            with self._cond:
                self._cond.wait_for(lambda: done()
                                    or bool(sequences.publishable(self._sequences, self._current, self._finished)))
                if done():
                    return
                sequence = sequences.publishable(self._sequences, self._current, self._finished)[0]
            try:
                publisher.publish(sequence, lambda: self._stop_requested)
            except BaseException as error:  # the reading thread raises it: the task fails with it
                with self._cond:
                    self._publish_error = error
                    self._cond.notify_all()
                return
            with self._cond:
                self._sequences = sequences.mark_published(self._sequences, sequence.sequence_id)
                self._save_sequences()
                self._cond.notify_all()
            for persist in sequence.persists:
                shutil.rmtree(self.toolbox.task_dir / persist, ignore_errors=True)

    # ---- sequences.json: what a restarted task resumes from ----

    def _save_sequences(self) -> None:
        """Called holding the condition, after every change: persists listed here are complete."""
        self._write(SEQUENCES_FILE, {"sequences": [s.to_json() for s in self._sequences],
                                     "currentOffsets": {str(p): o for p, o in self._current.items()},
                                     "finished": self._finished, "rowStats": self.row_stats.to_json()})

    def _restore(self) -> None:
        """Resume from sequences.json when the task ran in this directory before (its process stopped or died).

        Persists the file does not list were being written when the process stopped: they are dropped, and those
        offsets are read again. A sequence the stored offsets have already reached was committed before the stop
        (by this task or a replica): it is never published again, so its segments are never written twice or
        replaced (Druid #6124).
        """
        path = self.toolbox.task_dir / SEQUENCES_FILE
        if not path.exists():
            return
        saved = json.loads(path.read_text())
        restored = [SequenceMetadata.from_json(s) for s in saved["sequences"]]
        stored = self.toolbox.metadata.get_stream_offsets(self.spec.data_source)
        for s in restored:
            if not s.published and (s.checkpointed or saved["finished"]) and already_committed(stored, s):
                restored = sequences.mark_published(restored, s.sequence_id)
        listed = {persist for s in restored for persist in s.persists}
        for directory in (self.toolbox.task_dir / "persist").glob("*/*"):
            if str(directory.relative_to(self.toolbox.task_dir)) not in listed:
                shutil.rmtree(directory, ignore_errors=True)
        with self._cond:
            self._sequences = restored
            self._current = {int(p): int(o) for p, o in saved["currentOffsets"].items()}
            self._finished = bool(saved["finished"])
            self._persist_count = 1 + max((int(Path(p).name) for p in listed), default=-1)
            self.meters.add(RowStats.from_json(saved["rowStats"]))
            self._save_sequences()
        log.info("task %s restored at offsets %s with %d unpublished sequences", self.spec.id, self._current,
                 sum(not s.published for s in restored))

    def _write(self, name: str, payload: Any) -> None:
        write_task_file(self.toolbox.task_dir, name, payload)


__all__ = ["KafkaIndexTask", "KafkaIndexTaskSpec", "RealtimeView", "TaskState", "TaskToolbox", "new_task_id",
           "spark_tasks_per_job"]
