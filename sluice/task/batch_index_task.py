"""Druid's native batch tasks, `index_parallel` and `index`: an input source read once into segments.

The input source's coordinator plans its splits onto `maxNumConcurrentSubTasks` readers, which Spark runs as
the tasks of one job; the same job parses, transforms and rolls the rows up (the streaming task's pipeline).
With dynamic partitioning each of those tasks also writes the segment files of its rows (cut at
maxRowsPerSegment; best-effort rollup, as Druid's); for perfect rollup the job writes a persist, and a second
job rolls it up into hashed or range shards. Then the segments get their ids under the task's locks and are
committed in one metadata transaction: until then nothing is visible, so a task that fails or is killed at
any point publishes nothing, and running it again gives the same answers.

Modes (Druid's BatchIngestionMode): APPEND allocates segments that join each time chunk's current version
next to what is there (a streaming supervisor's segments included); REPLACE_LEGACY locks every chunk it
writes and publishes a new version that overshadows the chunk's old segments; REPLACE does that for every
chunk of `granularitySpec.intervals`, and a chunk without rows gets a tombstone (an empty segment) that
overshadows what was there. The context key `sqlReplaceTimeChunks: "all"` (what SQL's REPLACE … OVERWRITE ALL
sets, as Druid's SQL layer does) makes every chunk the data source holds part of the replaced range.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sluice.connectors.coordination import ReadProgress
from sluice.emitter import metrics
from sluice.lookups.coordinator import read_lookups
from sluice.lookups.references import LookupReferences
from sluice.segment.nested import JSON_FIELD
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.spec.batch import BATCH_PRIORITY, BatchTaskPayload, DynamicPartitionsSpec, IngestionMode, parse_batch_task
from sluice.spec.errors import SpecError
from sluice.spec.expressions import Lookups
from sluice.spec.granularity import Granularity
from sluice.spec.input_format import JsonInputFormat
from sluice.spec.input_source import system_fields_of
from sluice.task import actions
from sluice.task.ingest_plan import TIME, IngestPlan, IntervalsWindow, compile_plan
from sluice.task.meters import BUILD_SEGMENTS, SavedParseExceptions, ingestion_metrics
from sluice.task.stats import RowStats
from sluice.task.task import PayloadTaskSpec, TaskFailure, TaskStatus, random_id_part, run_to_status, write_task_file
from sluice.task.toolbox import TaskToolbox
from sluice.timestamps import format_timestamp

log = logging.getLogger(__name__)

REPORT_FILE = "report.json"


@dataclass(frozen=True)
class BatchIndexTaskSpec(PayloadTaskSpec):
    id: str
    payload: BatchTaskPayload

    needs_spark = True
    #: a batch task that stops is run again from the start, as Druid's are
    can_restore = False
    default_priority = BATCH_PRIORITY

    @property
    def type(self) -> str:
        return self.payload.type

    @property
    def data_source(self) -> str:
        return self.payload.spec.data_schema.data_source

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> BatchIndexTaskSpec:
        """Validate a submitted task; one without an id gets Druid's kind of id. Raises SpecError.

        The input source is built once here too (it reads nothing yet), so that what only it can check (a SQL
        source's statements and driver, a Kafka message format, a combining source's delegates) is a 400 at
        submit rather than a failed task."""
        from sluice.connectors.sources import create_source

        parsed = parse_batch_task(payload)
        io = parsed.spec.io_config
        try:
            create_source(io.input_source, io.input_format, _plan(parsed).fields, parsed.spec.tuning_config.split_hint_spec,
                          druid=lambda spec, fields: None)  # type: ignore[arg-type, return-value]
        except SpecError as error:
            raise SpecError(f"spec.{error.path}", error.message) from None
        except ValueError as error:
            raise SpecError("spec.ioConfig.inputSource", str(error)) from None
        task_id = parsed.id or new_batch_task_id(parsed.type, parsed.spec.data_schema.data_source)
        return cls(task_id, parsed)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "id": self.id, "groupId": self.group_id, "dataSource": self.data_source,
                "resource": {"availabilityGroup": self.group_id, "requiredCapacity": 1},
                "spec": self.payload.spec.to_json(), "context": {**self.payload.context.to_json(), "priority": self.priority}}


def spec_from_json(payload: dict[str, Any]) -> BatchIndexTaskSpec:
    return BatchIndexTaskSpec.from_json(payload)


def create(spec: BatchIndexTaskSpec, toolbox: TaskToolbox) -> BatchIndexTask:
    return BatchIndexTask(spec, toolbox)


def new_batch_task_id(task_type: str, data_source: str) -> str:
    """Druid's shape: <type>_<dataSource>_<8 random letters>_<creation time>."""
    return f"{task_type}_{data_source}_{random_id_part()}_{format_timestamp(datetime.now(UTC))}"


def lock_type(payload: BatchTaskPayload) -> str:
    """Druid's TaskLocks rules: `useConcurrentLocks` takes APPEND locks to append and REPLACE locks to overwrite;
    otherwise `taskLockType`, or SHARED with `useSharedLock`, else EXCLUSIVE. Only appends may share chunks."""
    context, mode = payload.context, payload.spec.io_config.mode
    if context.use_concurrent_locks:
        return "APPEND" if mode is IngestionMode.APPEND else "REPLACE"
    chosen = context.task_lock_type or ("SHARED" if context.use_shared_lock else "EXCLUSIVE")
    if chosen in ("SHARED", "APPEND") and mode is not IngestionMode.APPEND:
        return "EXCLUSIVE"
    return str(chosen)


class BatchIndexTask:
    #: dynamic partitioning rolls up best-effort, as Druid's: each subtask its own rows (RowPipeline.write_segments)
    perfect_rollup = False

    def __init__(self, spec: BatchIndexTaskSpec, toolbox: TaskToolbox) -> None:
        self.spec = spec
        self.toolbox = toolbox
        ingestion = spec.payload.spec
        self.parse_exceptions = SavedParseExceptions(ingestion.tuning_config.max_saved_parse_exceptions)
        self.state = "NOT_STARTED"
        self.row_stats = RowStats()
        self.segments: list[DataSegment] = []
        self._stopped = threading.Event()
        #: the coordinator of the read in progress, whose readers report what they have read
        self._read: Any = None
        self._progress = ReadProgress()

    # -- the task contract ---------------------------------------------------------------------------------

    def run(self) -> TaskStatus:
        status = run_to_status(self.spec.id, self._run, lambda error: _reason(error, self._stopped.is_set()))
        self.state = "COMPLETED"
        write_task_file(self.toolbox.task_dir, REPORT_FILE, self.report(status))
        shutil.rmtree(self.toolbox.task_dir / "work", ignore_errors=True)
        return status

    def stop(self) -> None:
        self._stopped.set()
        if self.toolbox.spark is not None:
            self.toolbox.spark.sparkContext.cancelJobGroup(self.spec.id)

    def stop_gracefully(self) -> None:
        self.stop()

    def report(self, status: TaskStatus | None = None) -> dict[str, Any]:
        """Druid's ingestionStatsAndErrors report."""
        return {"ingestionStatsAndErrors": {
            "type": "ingestionStatsAndErrors", "taskId": self.spec.id,
            "payload": {
                "ingestionState": self.state,
                "unparseableEvents": self.parse_exceptions.unparseable_events(),
                "rowStats": {"determinePartitions": RowStats().to_json(), BUILD_SEGMENTS: self.row_stats.to_json()},
                "segmentsPublished": len(self.segments),
                "progress": (self._read.host.progress() if self._read is not None else self._progress).to_json(),
                "errorMsg": status.error_msg if status else None,
                "segmentAvailabilityConfirmed": False, "segmentAvailabilityWaitTimeMs": 0,
            },
        }}

    # -- the work ------------------------------------------------------------------------------------------

    def _run(self) -> None:
        from sluice.connectors.sources import create_source
        from sluice.connectors.spark import ConnectorRead
        from sluice.task.pipeline import RowPipeline  # Spark is imported where it runs

        ingestion = self.spec.payload.spec
        schema, io, tuning = ingestion.data_schema, ingestion.io_config, ingestion.tuning_config
        work = self.toolbox.task_dir / "work"
        shutil.rmtree(work, ignore_errors=True)
        granularity = schema.granularity_spec.segment_granularity
        intervals = [Interval(*i) for i in schema.granularity_spec.parsed_intervals()]
        with self._phase("locking the intervals"):
            locked = (self._lock_up_front(intervals, granularity) if intervals and io.mode is not IngestionMode.APPEND
                      else {})

        plan = _plan(self.spec.payload, LookupReferences(lambda: read_lookups(self.toolbox.metadata)).map)
        source = create_source(io.input_source, io.input_format, plan.fields, tuning.split_hint_spec,
                               druid=self._druid_source)
        spark = self.toolbox.spark
        spark.sparkContext.setJobGroup(self.spec.id, f"Sluice task {self.spec.id}", True)
        pipeline = RowPipeline(spark, plan, IntervalsWindow(tuple((i.start, i.end) for i in intervals)))
        self.state = "BUILD_SEGMENTS"
        spec = tuning.effective_partitions_spec
        dynamic = isinstance(spec, DynamicPartitionsSpec)
        with self._phase("reading and writing the rows"), \
                ConnectorRead(spark, source, tuning.max_num_concurrent_sub_tasks) as read:
            self._read = read
            try:
                if dynamic:  # one job writes the segments
                    result, written = pipeline.write_segments(read.subtasks(), granularity,
                                                              spec.max_rows_per_segment, work / "merged",
                                                              self.perfect_rollup)
                else:  # rows are written as read, and rolled up as they are partitioned, in one shuffle
                    result = pipeline.persist(read.dataframe(), work / "persist", rollup=False)
                read.checkpoint_complete()
            finally:
                self._progress, self._read = read.host.progress(), None
        self._count(result.stats, result.parse_error_sample)
        self._check_stopped()

        if dynamic:
            files = [(f.bucket_start_millis, f.path, f.num_rows, None) for f in written]
        else:
            from sluice.task import partitioning

            dimensions = [d.name for d in schema.dimensions_spec.dimensions]
            with self._phase("partitioning the rows"):
                rows = partitioning.shard_rows(pipeline.merged_rows([work / "persist"], granularity), spec, dimensions)
                sharded = partitioning.write_shards(rows, work / "merged")
                shards = partitioning.shard_specs(sharded, spec, dimensions)
            files = [(f.bucket_start_millis, f.path, f.num_rows, shards[f.path]) for f in sharded]
        self._check_stopped()
        with self._phase("pushing the segments"):
            segments = self._segments(files, granularity, io.mode, locked, plan, intervals, work)
        self._check_stopped()
        with self._phase("publishing"):
            result_ = actions.publish_segments(self.toolbox.actions, schema.data_source, segments)
        if not result_.success:
            raise TaskFailure(result_.message or "publishing the segments failed")
        self.segments = segments
        emitter, dims = self.toolbox.emitter, {"dataSource": schema.data_source, "taskId": self.spec.id,
                                               "taskType": self.spec.type}
        emitter.metric(metrics.SEGMENT_ADDED_BYTES, sum(s.size for s in segments), **dims)
        log.info("task %s published %d segments (%d rows)", self.spec.id, len(segments),
                 sum(s.num_rows for s in segments))

    @contextmanager
    def _phase(self, what: str) -> Iterator[None]:
        """Logs how long a phase of the task took: where a slow task's time went."""
        began = time.monotonic()
        yield
        log.info("task %s: %s took %.2f s", self.spec.id, what, time.monotonic() - began)

    def _druid_source(self, spec: Any, fields: Any) -> Any:
        from sluice.connectors.sources.druid import DruidSource

        return DruidSource.for_task(spec, fields, self.toolbox.metadata, self.toolbox.deep_storage)

    def _count(self, stats: RowStats, sample: str | None) -> None:
        self.row_stats = stats
        tuning = self.spec.payload.spec.tuning_config
        dims = {"dataSource": self.spec.data_source, "taskId": self.spec.id, "taskType": self.spec.type}
        for name, value in ingestion_metrics(stats).items():
            self.toolbox.emitter.metric(name, value, **dims)
        if sample is not None:
            self.parse_exceptions.add(sample, [f"Unable to parse row [{sample}]"])
            if tuning.log_parse_exceptions:
                log.error("task %s: unparseable row: %s", self.spec.id, sample)
        errors = stats.unparseable + stats.processed_with_error
        if errors > tuning.effective_max_parse_exceptions():
            raise TaskFailure(f"Max parse exceptions[{tuning.effective_max_parse_exceptions()}] exceeded: "
                              f"{stats.unparseable} unparseable, {stats.processed_with_error} processed with error"
                              + (f"; e.g. {sample}" if sample else ""))

    def _check_stopped(self) -> None:
        if self._stopped.is_set():
            raise TaskFailure("task was stopped; nothing was published")

    def _lock(self, interval: Interval) -> str:
        """The version this task writes `interval` at, from its time-chunk lock."""
        lock = actions.lock_time_chunk(self.toolbox.actions, interval, lock_type(self.spec.payload),
                                   self.spec.payload.context.task_lock_timeout)
        return str(lock["version"])

    def _lock_up_front(self, intervals: list[Interval], granularity: Granularity) -> dict[Interval, str]:
        """With intervals given, Druid locks every time chunk before reading."""
        return {chunk: self._lock(chunk) for chunk in _chunks(intervals, granularity)}

    def _segments(self, files: list[tuple[int, Path, int, dict[str, Any] | None]], granularity: Granularity,
                  mode: IngestionMode, locked: dict[Interval, str], plan: IngestPlan, intervals: list[Interval],
                  work: Path) -> list[DataSegment]:
        """Ids for the files (and tombstones), pushed to deep storage."""
        schema = self.spec.payload.spec.data_schema
        pushed: list[DataSegment] = []
        if mode is IngestionMode.APPEND:
            previous: str | None = None
            for bucket_millis, path, rows, _ in files:
                bucket = datetime.fromtimestamp(bucket_millis / 1000, UTC)
                segment_id = actions.allocate_segment(self.toolbox.actions, schema.data_source, bucket, granularity,
                                                      self.spec.id, previous, lock_type(self.spec.payload))
                previous = str(segment_id)
                pushed.append(self._push(segment_id, path, rows, numbered_shard_spec(segment_id.partition_num)))
            return pushed
        by_chunk: dict[Interval, list[tuple[Path, int, dict[str, Any] | None]]] = {}
        for bucket_millis, path, rows, shard in files:
            start = datetime.fromtimestamp(bucket_millis / 1000, UTC)
            by_chunk.setdefault(Interval(start, granularity.bucket_end(start)), []).append((path, rows, shard))
        if mode is IngestionMode.REPLACE:
            for chunk in _chunks(intervals, granularity):
                by_chunk.setdefault(chunk, [])
        if self.spec.payload.context.sql_replace_time_chunks == "all":  # SQL's REPLACE … OVERWRITE ALL
            used = self.toolbox.metadata.used_segments(schema.data_source)
            for chunk in _chunks([s.interval for s in used], granularity):
                by_chunk.setdefault(chunk, [])
        for chunk, chunk_files in sorted(by_chunk.items()):
            version = locked.get(chunk) or self._lock(chunk)
            if not chunk_files:  # REPLACE: a tombstone overshadows what the chunk held
                tombstone = work / "tombstones" / f"{chunk.start.timestamp():.0f}.parquet"
                _write_empty_segment(tombstone, plan, schema)
                segment_id = SegmentId(schema.data_source, chunk, version, 0)
                pushed.append(self._push(segment_id, tombstone, 0, {"type": "tombstone", "partitionNum": 0,
                                                                       "partitions": 1}))
                continue
            for i, (path, rows, shard) in enumerate(chunk_files):
                shard = shard or numbered_shard_spec(i, len(chunk_files))
                segment_id = SegmentId(schema.data_source, chunk, version, shard["partitionNum"])
                pushed.append(self._push(segment_id, path, rows, shard))
        return pushed

    def _push(self, segment_id: SegmentId, path: Path, rows: int, shard_spec: dict[str, Any]) -> DataSegment:
        schema = self.spec.payload.spec.data_schema
        load_spec = self.toolbox.deep_storage.push(path, segment_id, unique_path=True)
        metrics = [m.name for m in schema.metrics_spec]
        # the file's own columns: discovered dimensions differ from file to file
        dimensions = [name for name in pq.read_schema(path).names if name != TIME and name not in metrics]
        return DataSegment(id=segment_id, dimensions=dimensions, metrics=metrics,
                           aggregators=[m.to_json() for m in schema.metrics_spec], shard_spec=shard_spec,
                           num_rows=rows, size=path.stat().st_size, load_spec=load_spec)


def _plan(payload: BatchTaskPayload, lookups: Lookups | None = None) -> IngestPlan:
    io = payload.spec.io_config
    flatten = io.input_format.flatten_spec if isinstance(io.input_format, JsonInputFormat) else None
    return compile_plan(payload.spec.data_schema, flatten, lookups, system_fields_of(io.input_source))


def _chunks(intervals: list[Interval], granularity: Granularity) -> list[Interval]:
    """The segmentGranularity time chunks that the intervals touch."""
    chunks: set[Interval] = set()
    for interval in intervals:
        start = granularity.bucket_start(interval.start)
        while start < interval.end:
            end = granularity.bucket_end(start)
            chunks.add(Interval(start, end))
            start = end
    return sorted(chunks)


_ARROW_TYPES = {"string": pa.string(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
                "json": pa.struct([(JSON_FIELD, pa.string())])}


def _write_empty_segment(path: Path, plan: IngestPlan, schema: Any) -> None:
    """A segment file with the data source's columns and no row: what a tombstone reads as."""
    fields = [pa.field(TIME, pa.timestamp("ms", tz="UTC"))]
    fields += [pa.field(d.name, _ARROW_TYPES[d.type]) for d in schema.dimensions_spec.dimensions]
    fields += [pa.field(a.name, a.arrow_type) for a in plan.aggregators]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.schema(fields).empty_table(), path)


def _reason(error: Exception, stopped: bool) -> str:
    """A failed Spark job's reason, without the JVM stack: the Python error a reader raised, if one did."""
    if stopped:
        return "task was stopped; nothing was published"
    text = str(error)
    for marker in ("Error: ", "Exception: "):
        lines = [line.strip() for line in text.splitlines() if marker in line and not line.strip().startswith("at ")]
        python = [line for line in lines if not line.startswith(("org.", "java.", "py4j", "scala."))]
        if python:
            return python[-1][:2000]
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:2000]
