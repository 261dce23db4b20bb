"""Starting, watching and stopping a stream job's Spark query.

A job's checkpoint (Kafka offsets, Spark's offset and commit logs, RocksDB state) lives in one directory,
next to the job's fingerprint. Restarting on the same directory resumes where the last committed batch
ended, with the state it left; a job whose operators changed is refused there, unless it is reset (the
checkpoint deleted, the job starting over), because old state would not fit the new operators.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.listener import StreamingQueryProgress

from sluice.stream.compiler import INPUT_METRICS, SAMPLES, compile_job
from sluice.stream.data_source_table import NodeStorage
from sluice.stream.sinks import BatchWriter, batch_writer
from sluice.stream.topology import Join, KafkaSource, Pipeline, StreamJob, StreamJobError, TableJoin, fingerprint, validate

__all__ = ["JobStatus", "RunningJob", "start_job"]

#: the job's fingerprint beside its checkpoint
FINGERPRINT_FILE = "sluice-job.json"
#: the trigger of a job whose state expires by processing time, unless it names one
PROCESSING_TIME_TRIGGER = "1 second"
#: Spark's RocksDB state store, which checkpoints changelogs instead of whole snapshots every batch; event time
#: is the latest of all inputs' (a join's two sides), as Kafka Streams' stream time is
STREAMING_CONF = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.multipleWatermarkPolicy": "max",
}


@dataclass
class JobStatus:
    """What a job's task report and status line show, summed over the batches of this run."""

    batches: int = 0
    last_batch_id: int | None = None
    processed: int = 0
    unparseable: int = 0
    thrown_away: int = 0
    late_dropped: int = 0
    input_rows_per_second: float = 0.0
    state_rows: int = 0
    state_bytes: int = 0
    watermark: str | None = None
    last_batch_ms: int = 0
    #: when the last counted batch started (ISO-8601, as Spark reports it)
    timestamp: str = ""
    #: the latest parse-exception messages, as Druid's task reports sample them
    parse_exceptions: list[str] = field(default_factory=list)

    def to_report(self) -> dict[str, Any]:
        return {
            "batches": self.batches, "lastBatchId": self.last_batch_id, "processed": self.processed,
            "unparseable": self.unparseable, "thrownAway": self.thrown_away, "lateRecordsDropped": self.late_dropped,
            "inputRowsPerSecond": round(self.input_rows_per_second, 1), "stateRows": self.state_rows,
            "stateBytes": self.state_bytes, "watermark": self.watermark, "lastBatchMs": self.last_batch_ms,
            "parseExceptionMessages": list(self.parse_exceptions),
        }


class _ProgressFold:
    """Sums a query's progress reports into a status, each batch once.

    Not a ``StreamingQueryListener``: PySpark turns each of its events into Python with some fifty calls into the
    JVM, on a driver that shares its cores with the executors, which cost the windowed count benchmark 8 % of its
    throughput. The reports are read instead from the query, when a status is asked for and at the start of every
    batch (Spark records a batch's progress before it starts the next), so that none falls out of the query's
    last ``spark.sql.streaming.numRecentProgressUpdates`` reports unsummed.
    """

    def __init__(self) -> None:
        self.query: StreamingQuery | None = None
        self._status = JobStatus()
        self._lock = threading.Lock()

    def catch_up(self) -> JobStatus:
        """The status with every report the query has so far (a copy)."""
        with self._lock:
            status, query = self._status, self.query
            last = query.lastProgress if query is not None else None
            if last is not None and (status.last_batch_id is None or last.batchId > status.last_batch_id):
                reports = [last] if last.batchId - 1 == status.last_batch_id else query.recentProgress
                for progress in reports:
                    if status.last_batch_id is None or progress.batchId > status.last_batch_id:
                        _add(status, progress)
            return replace(status, parse_exceptions=list(status.parse_exceptions))

    def writer(self, write: BatchWriter) -> BatchWriter:
        def write_batch(batch: DataFrame, batch_id: int) -> None:
            self.catch_up()
            write(batch, batch_id)
        return write_batch


def _add(status: JobStatus, progress: StreamingQueryProgress) -> None:
    status.batches += 1
    status.last_batch_id = progress.batchId
    status.timestamp = progress.timestamp
    status.input_rows_per_second = progress.inputRowsPerSecond or 0.0
    status.last_batch_ms = (progress.durationMs or {}).get("triggerExecution", 0)
    status.watermark = (progress.eventTime or {}).get("watermark", status.watermark)
    operators = progress.stateOperators or []
    status.state_rows = sum(op.numRowsTotal for op in operators)
    status.state_bytes = sum(op.memoryUsedBytes for op in operators)
    status.late_dropped += sum(op.numRowsDroppedByWatermark for op in operators)
    for name, row in (progress.observedMetrics or {}).items():
        if name.startswith(INPUT_METRICS):
            status.processed += row["processed"]
            status.unparseable += row["unparseable"]
            status.thrown_away += row["thrownAway"]
            status.parse_exceptions = (status.parse_exceptions + list(row["samples"]))[-SAMPLES:]


class RunningJob:
    """A started job: its query, and the status summed from its progress."""

    def __init__(self, job: StreamJob, query: StreamingQuery, progress: _ProgressFold,
                 processing_time: bool = False) -> None:
        self.job = job
        self.query = query
        self.processing_time = processing_time
        self._progress = progress

    def status(self) -> JobStatus:
        return self._progress.catch_up()

    def process_all_available(self) -> None:
        """Block until every record in Kafka when called has gone through (and its windows, as far as the
        watermark lets them, have been written)."""
        if self.processing_time:
            self._await_offsets(_latest_offsets(self.job.pipeline))
        else:
            self.query.processAllAvailable()

    def _await_offsets(self, targets: list[dict[str, int]], timeout: float = 120.0) -> None:
        """Spark's processAllAvailable waits for a batch without new data, which a job whose state expires by
        processing time never has: wait instead for the sources to reach ``targets``, then two batches more
        (one moves the watermark, the next emits what it closed)."""
        deadline = time.monotonic() + timeout
        caught_up_at: int | None = None
        while time.monotonic() < deadline:
            if (error := self.query.exception()) is not None:
                raise RuntimeError(f"stream job {self.job.job_id!r} failed: {error}")
            progress = self.query.lastProgress
            if progress is not None:
                if caught_up_at is None and _covers([_offsets(s["endOffset"]) for s in progress["sources"]], targets):
                    caught_up_at = progress["batchId"]
                elif caught_up_at is not None and progress["batchId"] >= caught_up_at + 2:
                    return
            time.sleep(0.1)
        raise TimeoutError(f"stream job {self.job.job_id!r} did not read up to {targets} in {timeout}s")

    def stop(self) -> None:
        self.query.stop()

    def exception(self) -> str | None:
        error = self.query.exception()
        return None if error is None else str(error)


def _latest_offsets(pipeline: Pipeline) -> list[dict[str, int]]:
    """The end offsets of every topic the job reads (its joins' and tables' too), as Spark's offsets name them."""
    from sluice.stream.kafka import KafkaStream

    sources = [pipeline.source, *(op.right.source for op in pipeline.operators if isinstance(op, Join)),
               *(op.table.source for op in pipeline.operators if isinstance(op, TableJoin))]
    targets = []
    for source in (s for s in sources if isinstance(s, KafkaSource)):
        with KafkaStream({k: str(v) for k, v in source.consumer_properties.items()}, source.topic) as stream:
            targets.append({str(p): o for p, o in stream.latest_offsets(stream.partitions()).items()})
    return targets


def _offsets(value: Any) -> dict[str, int]:
    return json.loads(value) if isinstance(value, str) else dict(value or {})


def _covers(ends: list[dict[str, int]], targets: list[dict[str, int]]) -> bool:
    """Every target reached by a source of its own (the progress does not say which topic a source reads)."""
    left = list(ends)
    for target in targets:
        match = next((end for end in left if all(end.get(p, 0) >= o for p, o in target.items())), None)
        if match is None:
            return False
        left.remove(match)
    return True


def start_job(spark: SparkSession, job: StreamJob, checkpoint_dir: Path, *, writer: BatchWriter | None = None,
              reset: bool = False, trigger_interval: str | None = None, storage: NodeStorage | None = None
              ) -> RunningJob:
    """Validate ``job``, check its checkpoint and start its query; ``writer`` overrides the sink's own writer
    and ``storage`` gives the node's data sources (a data-source sink and table need a node)."""
    validate(job)
    _claim_checkpoint(job, checkpoint_dir, reset)
    for key, value in STREAMING_CONF.items():
        spark.conf.set(key, value)
    compiled = compile_job(spark, job, storage)
    progress = _ProgressFold()
    stream = (compiled.rows.writeStream.queryName(job.job_id).outputMode(compiled.output_mode)
              .option("checkpointLocation", str(checkpoint_dir / "spark"))
              .foreachBatch(progress.writer(writer or batch_writer(job.sink))))
    if trigger_interval is None and compiled.processing_time:
        trigger_interval = PROCESSING_TIME_TRIGGER  # such a job runs a batch every trigger: not back to back
    if trigger_interval is not None:
        stream = stream.trigger(processingTime=trigger_interval)
    progress.query = stream.start()
    return RunningJob(job, progress.query, progress, compiled.processing_time)


def _claim_checkpoint(job: StreamJob, checkpoint_dir: Path, reset: bool) -> None:
    if reset:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    stored = checkpoint_dir / FINGERPRINT_FILE
    current = fingerprint(job)
    if stored.exists():
        previous = json.loads(stored.read_text())
        if previous != current:
            raise StreamJobError(
                "job", f"{job.job_id!r} changed since its checkpoint in {checkpoint_dir} was written (before: "
                       f"{json.dumps(previous, sort_keys=True)}; now: {json.dumps(current, sort_keys=True)}); its "
                       "state would not fit the new operators. Reset the job to start over from the source's "
                       "earliest (or latest) offsets with empty state")
    else:
        stored.write_text(json.dumps(current, sort_keys=True))
