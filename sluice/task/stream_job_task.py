"""A stream job's long-running task: its Spark query on the worker, and, for a data-source sink, the exactly-once
publish of every micro-batch.

The query's checkpoint (Kafka offsets, Spark's offset and commit logs, RocksDB state) is kept outside the task,
under local deep storage, so the next task of the job (after a crash, a suspend and resume, or on another worker
sharing that storage) carries on from it. A data-source sink publishes a batch's segments together with the move
of the job's committed batch number, in one metadata transaction; Spark runs a batch that did not commit again
with the same id, offsets and state, and a batch whose number is already committed is read (Spark insists its
state is) and not written again.
"""

from __future__ import annotations

import logging
import shutil
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sluice.ids import path_under
from sluice.emitter import metrics
from sluice.metadata.offsets import StreamOffsets
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.spec.granularity import parse_granularity
from sluice.stream.data_source_table import NodeStorage
from sluice.stream.runner import JobStatus, RunningJob, start_job
from sluice.stream.topology import TIME, WINDOW_END, WINDOW_START, DataSourceSink, StreamJob, output_fields
from sluice.task import actions
from sluice.task.pipeline import write_segment_files
from sluice.task.publisher import append_segments
from sluice.task.stream_job_spec import TASK_TYPE, StreamJobTaskSpec
from sluice.task.task import TaskFailure, TaskStatus, run_to_status
from sluice.task.toolbox import TaskToolbox

log = logging.getLogger(__name__)

#: rows per segment file of a batch (Druid's maxRowsPerSegment default)
MAX_ROWS_PER_SEGMENT = 5_000_000
#: the metadata "stream" of a job's committed batch numbers, beside the data source it writes
BATCH_STREAM_PREFIX = "stream_job:"


def create(spec: StreamJobTaskSpec, toolbox: TaskToolbox) -> StreamJobTask:
    return StreamJobTask(spec, toolbox)


def checkpoint_dir(toolbox: TaskToolbox, job_id: str) -> Path:
    """Local deep storage holds checkpoints where every worker sharing it finds them; with S3 deep storage they
    stay on the worker (Spark's S3 file system is a JVM jar pip's pyspark lacks), so the job resumes there."""
    root = toolbox.deep_storage.root if isinstance(toolbox.deep_storage, LocalDeepStorage) \
        else toolbox.task_dir.parent
    return path_under(root / "_stream_jobs", job_id)


class StreamJobTask:
    def __init__(self, spec: StreamJobTaskSpec, toolbox: TaskToolbox) -> None:
        self.spec = spec
        self.toolbox = toolbox
        self.started: datetime | None = None
        self._stop = threading.Event()
        self._graceful = False
        self._running: RunningJob | None = None

    def run(self) -> TaskStatus:
        status = run_to_status(self.spec.id, self._run)
        return TaskStatus(self.spec.id, "RUNNING") if self._graceful and status.status_code == "SUCCESS" else status

    def _run(self) -> None:
        job = self.spec.job.to_job()
        writer = DataSourceBatchWriter(job, self.spec.id, self.toolbox) \
            if isinstance(job.sink, DataSourceSink) else None
        self.started = datetime.now(UTC)
        storage = NodeStorage(self.toolbox.metadata.uri, self.toolbox.deep_storage.uri)
        running = start_job(self.toolbox.spark, job, checkpoint_dir(self.toolbox, job.job_id), writer=writer,
                            reset=self.spec.reset, storage=storage)
        self._running = running
        emitted = JobStatus()
        try:
            while not self._stop.wait(self.toolbox.poll_interval):
                if not running.query.isActive:
                    raise TaskFailure(f"stream job {job.job_id!r} failed: {running.exception()}")
                emitted = self._emit(running.status(), emitted)
        finally:
            running.stop()
        log.info("task %s: stream job %s stopped after batch %s", self.spec.id, job.job_id,
                 running.status().last_batch_id)

    @property
    def metric_dimensions(self) -> dict[str, str]:
        return {metrics.DATASOURCE: self.spec.data_source, metrics.TASK_ID: self.spec.id, metrics.TASK_TYPE: TASK_TYPE}

    def _emit(self, now: JobStatus, before: JobStatus) -> JobStatus:
        """Druid's realtime metrics monitor for a job: counters as the change since the last emission, gauges of
        its state, and the time of each batch."""
        if now.batches == before.batches:
            return before
        emit, dimensions = self.toolbox.emitter.metric, self.metric_dimensions
        for name, value in {metrics.INGEST_EVENTS_PROCESSED: now.processed - before.processed,
                            metrics.INGEST_EVENTS_UNPARSEABLE: now.unparseable - before.unparseable,
                            metrics.INGEST_EVENTS_THROWN_AWAY: now.thrown_away - before.thrown_away,
                            metrics.INGEST_STREAM_LATE_DROPPED: now.late_dropped - before.late_dropped,
                            metrics.INGEST_STREAM_STATE_ROWS: now.state_rows,
                            metrics.INGEST_STREAM_STATE_BYTES: now.state_bytes,
                            metrics.INGEST_STREAM_BATCH_TIME: now.last_batch_ms}.items():
            emit(name, value, **dimensions)
        return now

    def stop(self) -> None:
        self._stop.set()

    def stop_gracefully(self) -> None:
        self._graceful = True
        self._stop.set()

    def report(self, status: TaskStatus | None = None) -> dict[str, Any]:
        """Druid's ingestionStatsAndErrors report, with the job's own figures under ``streamJob``."""
        job = self._running.status() if self._running is not None else None
        figures = job.to_report() if job is not None else {}
        row_stats = {"processed": figures.get("processed", 0), "unparseable": figures.get("unparseable", 0),
                     "thrownAway": figures.get("thrownAway", 0), "processedWithError": 0}
        return {"ingestionStatsAndErrors": {"type": "ingestionStatsAndErrors", "taskId": self.spec.id, "payload": {
            "ingestionState": "COMPLETED" if status is not None and status.is_complete else "BUILD_SEGMENTS",
            "rowStats": {"buildSegments": row_stats},
            "unparseableEvents": {"buildSegments": figures.get("parseExceptionMessages", [])},
            "errorMsg": status.error_msg if status is not None else None,
            "streamJob": figures,
        }}}


class DataSourceBatchWriter:
    """A micro-batch of final rows as segments of the sink's data source, exactly once (see the module)."""

    def __init__(self, job: StreamJob, task_id: str, toolbox: TaskToolbox) -> None:
        assert isinstance(job.sink, DataSourceSink)
        self.sink = job.sink
        self.task_id = task_id
        self.toolbox = toolbox
        self.stream = BATCH_STREAM_PREFIX + job.job_id
        self.granularity = parse_granularity(job.sink.segment_granularity)
        fields = output_fields(job.pipeline)
        self.time_field = WINDOW_START if WINDOW_START in fields else TIME
        rest = {name: kind for name, kind in fields.items() if name not in (TIME, WINDOW_START, WINDOW_END)}
        self.metrics = {name: kind for name, kind in rest.items() if kind in ("long", "double", "any")}
        self.dimensions = [name for name in rest if name not in self.metrics]

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        data_source = self.sink.data_source
        stored = self.toolbox.metadata.get_stream_offsets(data_source)
        committed = stored.offsets.get(0, 0) if stored is not None and stored.stream == self.stream else 0
        if batch_id < committed:  # Spark ran a batch again whose rows are already published
            batch.write.format("noop").mode("overwrite").save()
            log.info("task %s: batch %d is already in %s; not written again", self.task_id, batch_id, data_source)
            return
        staging = self.toolbox.task_dir / "batches" / str(batch_id)
        shutil.rmtree(staging, ignore_errors=True)
        rows = batch.select(F.col(self.time_field).alias(TIME), *(F.col(d).cast("string").alias(d) for d in
                                                                   self.dimensions),
                            *(F.col(m) for m in self.metrics))
        files = write_segment_files(rows, self.granularity, MAX_ROWS_PER_SEGMENT, staging)
        aggregators = [{"type": "longSum" if kind == "long" else "doubleSum", "name": name, "fieldName": name}
                       for name, kind in self.metrics.items()]
        segments = append_segments(self.toolbox, data_source, files, self.granularity, f"{self.stream}_{batch_id}",
                                   "APPEND", aggregators)
        if segments:
            start = stored if stored is not None else StreamOffsets(self.stream, {0: 0})
            result = actions.publish_segments(self.toolbox.actions, data_source, segments, start,
                                              StreamOffsets(self.stream, {0: batch_id + 1}))
            if not result.success:
                raise TaskFailure(f"publishing batch {batch_id} to {data_source} failed: {result.message}")
            dimensions = {metrics.DATASOURCE: data_source, metrics.TASK_ID: self.task_id, metrics.TASK_TYPE: TASK_TYPE}
            self.toolbox.emitter.metric(metrics.INGEST_ROWS_OUTPUT, sum(s.num_rows or 0 for s in segments), **dimensions)
            self.toolbox.emitter.metric(metrics.INGEST_HANDOFF_COUNT, len(segments), **dimensions)
            self.toolbox.emitter.metric(metrics.SEGMENT_ADDED_BYTES, sum(s.size for s in segments), **dimensions)
            # a job runs for days: it holds a chunk's lock only while it writes there, as a task's handoff ends it
            for interval in sorted({str(s.interval) for s in segments}):
                self.toolbox.actions.submit({"type": "lockRelease", "interval": interval})
        shutil.rmtree(staging, ignore_errors=True)
