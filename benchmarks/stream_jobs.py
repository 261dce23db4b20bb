"""Stream jobs: Sluice's DSL against the same job hand-written in PySpark Structured Streaming, one run.

Why hand-written as the yardstick: a user picks a Sluice stream job over their own Structured Streaming code only
if it costs about the same; what Sluice adds (the DSL, a checked topology, parse-error accounting, a status) must
not cost throughput. So each job runs twice over the same topics in the same Spark session
(``sluice.task.spark_session.get_or_create("local[2]")``), on the same RocksDB state store settings:

  1. ``count``: a windowed count of N events ``{"ts", "page" (100 pages, skewed), "user"}`` spread over event
     time (``--event-rate`` events per event-time second): 10 s tumbling windows, key ``page``, final results
     only (append mode), lateness ``--lateness``. A closing record per partition, far ahead in event time, makes
     every window of the N events final, so the output is checked exactly (rows, and the counts' sum is N).
  2. ``join``: an inner stream-stream join of two topics of ``--join-events`` events each, key ``user``, event
     times at most 10 s apart, grace 5 s; the output row count is checked against one computed in Python.

  Sluice's variant is the job built with ``StreamBuilder`` and run with ``start_job`` (``foreach`` sink); the
  hand-written one has its own minimal ``DataSourceStreamReader`` over confluent-kafka in this file (value bytes
  only, Arrow batches, the consumer settings Sluice's reader uses, so both read Kafka alike), ``from_json``,
  ``withWatermark``, ``groupBy(window(...), "page").count()`` or a time-bounded join, and ``foreachBatch``.
  Both sinks collect each batch's rows to the driver and count them. Both read at most ``N / --batches`` records
  per micro-batch, so the job runs as a stream does, batch after batch with state carried over, and not as one
  giant batch. Timed: from building the query until ``processAllAvailable`` returns (every record read, every
  window the watermark allows written), after an untimed warm-up run of each variant on a small topic (the
  session's first streaming query runs its batches 2-3 times slower), best of ``--runs`` runs and their median
  (``ratio_of_medians``: one run in a few lands 10-15 % off the others), the variants'
  order alternating between runs (the JVM keeps getting faster for a few queries more).

  3. ``latency``: a producer thread writes events stamped with the wall clock at ``--latency-rate`` events/s for
     ``--latency-seconds`` while Sluice's windowed count runs with ``trigger_interval`` ``--trigger``. A window's
     latency is the wall time its rows reach the sink minus ``window_end + lateness``, the earliest moment it
     can be final (a record stamped up to ``window_end`` may arrive until then). Also: state rows and bytes,
     and per batch the time of the trigger and of its checkpoint writes (offset log ``walCommit``, commit log
     ``commitOffsets``, state store commit).

    python benchmarks/stream_jobs.py --events 1000000 --join-events 500000 --latency-seconds 60 --json
    python benchmarks/stream_jobs.py --smoke
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import statistics
import tempfile
import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common import emit, log, machine, percentile, ratio
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from sluice.dev.tansu import DevKafkaBroker

#: event times of the pre-produced topics start here (aligned to every window)
EPOCH_MS = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
WINDOW_S = 10
JOIN_WITHIN_S = 10
JOIN_GRACE_S = 5
PAGES = 100
USERS = 10_000
#: the join's users: with 1,000 events per event-time second on each side, a left event meets about one right
#: event of its user within ±10 s, so the output is about as large as one input
JOIN_USERS = 20_000
#: the settings a user copies from Spark's docs for a stateful query (and what Sluice's runner sets; checked)
HANDWRITTEN_STREAMING_CONF = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.streaming.multipleWatermarkPolicy": "max",
}
#: a micro-batch's phases as Spark's progress reports them (ms)
DURATION_KEYS = ("triggerExecution", "latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit",
                 "commitOffsets")


# ------------------------------------------------------------------------------------------------ data

@dataclass(frozen=True, slots=True)
class Message:
    """What ``sluice.dev.sample_data.produce`` needs of a record."""

    value: bytes


def iso(epoch_ms: int) -> str:
    seconds, millis = divmod(epoch_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def page_names() -> list[str]:
    return [f"page-{i:03d}" for i in range(PAGES)]


def page_weights() -> list[float]:
    """Zipf-like popularity: a few pages take most of the traffic, as on a real site."""
    return [1.0 / rank for rank in range(1, PAGES + 1)]


@dataclass
class CountData:
    messages: list[Message]
    events: int
    output_rows: int  # (window, page) pairs with at least one event


def count_events(n: int, rate: float, partitions: int, seed: int) -> CountData:
    """``n`` events in event-time order, then a closing record per partition 60 s later: it moves the watermark
    past every window of the ``n`` (its own window stays open, so it is never output)."""
    rng = random.Random(seed)
    pages = rng.choices(page_names(), weights=page_weights(), k=n)
    step_ms = 1000.0 / rate
    messages, windows = [], set()
    for i, page in enumerate(pages):
        ts = EPOCH_MS + int(i * step_ms)
        windows.add((ts // (WINDOW_S * 1000), page))
        messages.append(Message(f'{{"ts":"{iso(ts)}","page":"{page}","user":"user-{rng.randrange(USERS)}"}}'
                                .encode()))
    closing = EPOCH_MS + int(n * step_ms) + 60_000
    messages.extend(Message(f'{{"ts":"{iso(closing)}","page":"closing","user":"none"}}'.encode())
                    for _ in range(partitions))
    return CountData(messages, n, len(windows))


@dataclass
class JoinData:
    left: list[Message]
    right: list[Message]
    matches: int  # the inner join's output rows


def join_events(n: int, rate: float, seed: int) -> JoinData:
    """Clicks (left) and impressions (right), ``n`` each over the same event-time span, users at random; the
    expected output counts, for each click, the impressions of its user at most ``JOIN_WITHIN_S`` apart
    (inclusive, as ``BETWEEN``)."""
    rng = random.Random(seed)
    step_ms = 1000.0 / rate
    left, right = [], []
    left_times: list[tuple[int, int]] = []
    right_times: dict[int, list[int]] = {}
    for i in range(n):
        user = rng.randrange(JOIN_USERS)
        ts = EPOCH_MS + int((i + rng.random()) * step_ms)
        left_times.append((user, ts))
        left.append(Message(f'{{"ts":"{iso(ts)}","user":"user-{user}","page":"page-{rng.randrange(PAGES):03d}"}}'
                            .encode()))
    for i in range(n):
        user = rng.randrange(JOIN_USERS)
        ts = EPOCH_MS + int((i + rng.random()) * step_ms)
        right_times.setdefault(user, []).append(ts)  # increasing: already sorted
        right.append(Message(f'{{"ts":"{iso(ts)}","user":"user-{user}","ad":"ad-{rng.randrange(500)}"}}'.encode()))
    within = JOIN_WITHIN_S * 1000
    matches = 0
    for user, ts in left_times:
        times = right_times.get(user)
        if times:
            matches += bisect_right(times, ts + within) - bisect_left(times, ts - within)
    return JoinData(left, right, matches)


# ------------------------------------------------------------------------------------------------ hand-written

@dataclass(frozen=True)
class PartitionRange(InputPartition):
    """Offsets ``[start, end)`` of one Kafka partition: one Spark task."""

    partition: int
    start: int
    end: int


class BenchKafkaStreamReader(DataSourceStreamReader):
    """The Kafka source a PySpark user writes without Sluice: offsets ``{"<partition>": next offset}`` in Spark's
    checkpoint, at most ``maxRecordsPerTrigger`` per batch shared in proportion to the partitions' backlogs, value
    bytes read with confluent-kafka and handed over as Arrow batches. Self-contained: this class is pickled by
    value to Spark's Python workers, which cannot import the benchmark's modules."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.topic = options["topic"]
        self.bootstrap = options["bootstrap"]
        self.max_records = int(options.get("maxRecordsPerTrigger") or 0)
        self._consumer: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_consumer": None}

    def _config(self) -> dict[str, Any]:
        # Sluice's reader settings (kafka_ranges.read_offset_range): librdkafka's 1 s fetch backoff stalls bulk reads
        return {"bootstrap.servers": self.bootstrap, "group.id": "bench-handwritten", "enable.auto.commit": False,
                "fetch.queue.backoff.ms": 10, "queued.min.messages": 20_000,
                "logger": logging.getLogger("bench-kafka")}

    def _watermarks(self) -> dict[int, tuple[int, int]]:
        from confluent_kafka import Consumer, TopicPartition

        if self._consumer is None:
            self._consumer = Consumer(self._config())
        partitions = self._consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions
        return {p: self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)
                for p in sorted(partitions)}

    def initialOffset(self) -> dict[str, int]:
        return {str(p): low for p, (low, _) in self._watermarks().items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        high = {str(p): hi for p, (_, hi) in self._watermarks().items()}
        begin = {p: start.get(p, 0) for p in high}
        backlog = {p: max(high[p] - begin[p], 0) for p in high}
        total = sum(backlog.values())
        if not isinstance(limit, ReadMaxRows) or total <= limit.max_rows:
            return high
        return {p: begin[p] + (max(1, backlog[p] * limit.max_rows // total) if backlog[p] else 0) for p in high}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        return [PartitionRange(int(p), start.get(p, 0), e) for p, e in end.items() if e > start.get(p, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        assert isinstance(partition, PartitionRange)
        consumer = Consumer({**self._config(), "enable.partition.eof": True})
        try:
            consumer.assign([TopicPartition(self.topic, partition.partition, partition.start)])
            next_offset, last_progress = partition.start, time.monotonic()
            while next_offset < partition.end:
                values = []
                for message in consumer.consume(min(20_000, partition.end - next_offset), timeout=1.0):
                    error = message.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise RuntimeError(error.str())
                    elif message.offset() < partition.end:
                        values.append(message.value())
                        next_offset = message.offset() + 1
                if values:
                    last_progress = time.monotonic()
                    yield pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], names=["value"])
                elif time.monotonic() - last_progress > 30:
                    raise RuntimeError(f"{self.topic}/{partition.partition}: nothing after offset {next_offset}")
        finally:
            consumer.close()

    def commit(self, end: dict[str, int]) -> None:
        """Nothing: the offsets live in the query's checkpoint."""

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class BenchKafkaSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench_kafka"

    def schema(self) -> str:
        return "value binary"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return BenchKafkaStreamReader(self.options)


def handwritten_events(spark: SparkSession, bootstrap: str, topic: str, max_records: int, schema: str) -> DataFrame:
    """A topic's JSON values parsed with ``schema``, and ``t``, the event time, from the ISO-8601 ``ts``."""
    from pyspark.sql import functions as F

    raw = (spark.readStream.format("bench_kafka").option("topic", topic).option("bootstrap", bootstrap)
           .option("maxRecordsPerTrigger", max_records).load())
    return (raw.select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select("e.*")
            .withColumn("t", F.col("ts").cast("timestamp")))


def handwritten_count(spark: SparkSession, bootstrap: str, topic: str, max_records: int, lateness_s: float,
                      checkpoint: Path, sink: CountingSink) -> StreamingQuery:
    from pyspark.sql import functions as F

    counts = (handwritten_events(spark, bootstrap, topic, max_records, "ts STRING, page STRING, user STRING")
              .withWatermark("t", f"{int(lateness_s * 1000)} milliseconds")
              .groupBy(F.window("t", f"{WINDOW_S} seconds"), "page").count()
              .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                      "page", F.col("count").alias("cnt")))

    def write(batch: DataFrame, batch_id: int) -> None:
        rows = batch.collect()
        sink.add(len(rows), sum(row["cnt"] for row in rows))

    return (counts.writeStream.queryName("handwritten_count").outputMode("append")
            .option("checkpointLocation", str(checkpoint)).foreachBatch(write).start())


def handwritten_join(spark: SparkSession, bootstrap: str, topics: tuple[str, str], max_records: int,
                     checkpoint: Path, sink: CountingSink) -> StreamingQuery:
    from pyspark.sql import functions as F

    grace = f"{JOIN_GRACE_S} seconds"
    clicks = (handwritten_events(spark, bootstrap, topics[0], max_records, "ts STRING, user STRING, page STRING")
              .withWatermark("t", grace))
    impressions = (handwritten_events(spark, bootstrap, topics[1], max_records, "ts STRING, user STRING, ad STRING")
                   .select(F.col("user").alias("r_user"), F.col("ts").alias("r_ts"), "ad", F.col("t").alias("r_t"))
                   .withWatermark("r_t", grace))
    joined = clicks.join(impressions, F.expr(
        f"user = r_user AND r_t BETWEEN t - INTERVAL {JOIN_WITHIN_S} SECONDS AND t + INTERVAL {JOIN_WITHIN_S} SECONDS"),
        "inner")

    def write(batch: DataFrame, batch_id: int) -> None:
        sink.add(len(batch.collect()), 0)

    return (joined.writeStream.queryName("handwritten_join").outputMode("append")
            .option("checkpointLocation", str(checkpoint)).foreachBatch(write).start())


def register_source(spark: SparkSession) -> None:
    """Make ``bench_kafka`` readable. Spark's Python workers cannot import this file: run as a script, its classes
    are pickled by value; imported as a module (an experiment, a test), the module must be registered for that."""
    if __name__ != "__main__":
        import sys

        from pyspark import cloudpickle

        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(BenchKafkaSource)


# ------------------------------------------------------------------------------------------------ Sluice

def sluice_count_job(job_id: str, bootstrap: str, topic: str, max_records: int | None, lateness_s: float,
                     function: Callable[[list[dict[str, Any]], int], None]) -> Any:
    from sluice.stream.builder import StreamBuilder, tumbling

    builder = StreamBuilder(job_id)
    (builder.source(topic, bootstrap_servers=bootstrap, columns={"ts": "string", "page": "string", "user": "string"},
                    timestamp=("ts", "iso"), max_records_per_trigger=max_records)
     .key_by("page").window(tumbling(WINDOW_S, lateness=lateness_s)).count("cnt").foreach(function))
    return builder.build()


def sluice_join_job(job_id: str, bootstrap: str, topics: tuple[str, str], max_records: int,
                    function: Callable[[list[dict[str, Any]], int], None]) -> Any:
    from sluice.stream.builder import StreamBuilder

    builder = StreamBuilder(job_id)
    clicks = builder.source(topics[0], bootstrap_servers=bootstrap, timestamp=("ts", "iso"),
                            columns={"ts": "string", "user": "string", "page": "string"},
                            max_records_per_trigger=max_records)
    impressions = builder.source(topics[1], bootstrap_servers=bootstrap, timestamp=("ts", "iso"),
                                 columns={"ts": "string", "user": "string", "ad": "string"},
                                 max_records_per_trigger=max_records)
    clicks.join(impressions, on="user", within=JOIN_WITHIN_S, grace=JOIN_GRACE_S, how="inner").foreach(function)
    return builder.build()


# ------------------------------------------------------------------------------------------------ measuring

@dataclass
class CountingSink:
    """What reached a sink: rows, and the sum of their window counts (the events they account for)."""

    rows: int = 0
    counted: int = 0
    batches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, rows: int, counted: int) -> None:
        with self.lock:
            self.rows += rows
            self.counted += counted
            self.batches += 1

    def sluice_function(self, count_column: str | None) -> Callable[[list[dict[str, Any]], int], None]:
        """Sluice's ``foreach`` callback: the rows arrive as dicts, already on the driver."""
        def collect(rows: list[dict[str, Any]], batch_id: int) -> None:
            self.add(len(rows), sum(row[count_column] for row in rows) if count_column else 0)
        return collect


def progress_of(query: StreamingQuery) -> list[dict[str, Any]]:
    """The query's retained progress reports (the last ``spark.sql.streaming.numRecentProgressUpdates``, 100)."""
    return [json.loads(p.json) for p in query.recentProgress]


def merge_progress(query: StreamingQuery, into: dict[int, dict[str, Any]]) -> None:
    for progress in progress_of(query):
        into[progress["batchId"]] = progress


def _stats(values: Sequence[float]) -> dict[str, Any]:
    return {"p50": _r(percentile(values, 50)), "p95": _r(percentile(values, 95)), "max": _r(max(values, default=None)),
            "total": _r(sum(values))}


def _r(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def batch_figures(progress: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per micro-batch with input: each phase's ms, and the checkpoint's share (offset log, commit log, state store
    commit); the state at the end (rows, memory, RocksDB's files on disk)."""
    data = [p for p in progress if p.get("numInputRows")]
    durations = {key: _stats([p["durationMs"].get(key, 0) for p in data]) for key in DURATION_KEYS}
    state_commit = [sum(op.get("commitTimeMs", 0) for op in p.get("stateOperators", [])) for p in data]
    checkpoint = [p["durationMs"].get("walCommit", 0) + p["durationMs"].get("commitOffsets", 0) + commit
                  for p, commit in zip(data, state_commit)]
    last_ops = progress[-1].get("stateOperators", []) if progress else []
    custom = [op.get("customMetrics", {}) for op in last_ops]
    return {
        "batches": len(progress), "batches_with_input": len(data),
        "rows_per_batch": _r(sum(p["numInputRows"] for p in data) / len(data), 0) if data else None,
        "duration_ms": durations,
        "state_commit_ms": _stats(state_commit),
        "checkpoint_ms": _stats(checkpoint),
        "state_rows": sum(op.get("numRowsTotal", 0) for op in last_ops),
        "state_memory_bytes": sum(op.get("memoryUsedBytes", 0) for op in last_ops),
        "state_sst_bytes": sum(int(c.get("rocksdbSstFileSize", 0)) for c in custom),
        "rows_dropped_by_watermark": sum(op.get("numRowsDroppedByWatermark", 0)
                                         for p in progress for op in p.get("stateOperators", [])),
    }


@dataclass
class Variant:
    """One way to run a job: ``start(checkpoint, sink)`` returns a handle to wait on, stop and read from."""

    start: Callable[[Path, CountingSink], Any]
    wait: Callable[[Any], None]
    stop: Callable[[Any], None]
    query: Callable[[Any], StreamingQuery]
    status: Callable[[Any], dict[str, Any]] = lambda _: {}


def timed_run(variant: Variant, checkpoint: Path, events: int) -> dict[str, Any]:
    """Query start → every record processed and every window the watermark allows written."""
    sink = CountingSink()
    began = time.monotonic()
    handle = variant.start(checkpoint, sink)
    try:
        variant.wait(handle)
        seconds = time.monotonic() - began
        status = variant.status(handle)
    finally:
        query = variant.query(handle)
        variant.stop(handle)
    return {"seconds": round(seconds, 2), "events_per_s": round(events / seconds), "output_rows": sink.rows,
            "counted_events": sink.counted, "sink_batches": sink.batches,
            **({"sluice_status": status} if status else {}), **batch_figures(progress_of(query))}


def compare(variants: Mapping[str, Variant], runs: int, work_dir: Path, events: int,
            expected: Mapping[str, int]) -> dict[str, Any]:
    """Best of ``runs`` runs of each variant, alternating which goes first; each run is checked against
    ``expected`` (output rows, counted events)."""
    names = list(variants)
    results: dict[str, dict[str, Any]] = {name: {"runs": []} for name in names}
    for run in range(runs):
        for name in (names if run % 2 == 0 else names[::-1]):
            checkpoint = work_dir / f"{name}-{run}"
            log(f"  {name}, run {run + 1}/{runs}")
            try:
                figures = timed_run(variants[name], checkpoint, events)
                figures["correct"] = all(figures.get(key) == value for key, value in expected.items())
                log(f"  {name}: {figures['events_per_s']:,} events/s in {figures['seconds']} s, "
                    f"{figures['output_rows']:,} rows out, correct: {figures['correct']}")
            except Exception as error:  # noqa: BLE001 - one failed run must not lose the others' figures
                log(f"  {name} run {run + 1} failed: {error}")
                figures = {"error": f"{type(error).__name__}: {error}"[:2000]}
            finally:
                shutil.rmtree(checkpoint, ignore_errors=True)
            results[name]["runs"].append(figures)
    for name, result in results.items():
        good = [r for r in result["runs"] if "error" not in r]
        best = max(good, key=lambda r: r["events_per_s"], default=None)
        result["events_per_s"] = best["events_per_s"] if best else None
        result["seconds"] = best["seconds"] if best else None
        # one run in a few lands far from the others either way (the JVM, the VM): the median says what is usual
        result["median_events_per_s"] = round(statistics.median(r["events_per_s"] for r in good)) if good else None
        result["all_correct"] = bool(good) and all(r["correct"] for r in good) and len(good) == runs
    return results


def sluice_variant(spark: SparkSession, make_job: Callable[[CountingSink], Any]) -> Variant:
    from sluice.stream.runner import start_job

    return Variant(start=lambda checkpoint, sink: start_job(spark, make_job(sink), checkpoint),
                   wait=lambda job: job.process_all_available(), stop=lambda job: job.stop(),
                   query=lambda job: job.query, status=lambda job: job.status().to_report())


def handwritten_variant(spark: SparkSession, start: Callable[[Path, CountingSink], StreamingQuery]) -> Variant:
    def start_query(checkpoint: Path, sink: CountingSink) -> StreamingQuery:
        for key, value in HANDWRITTEN_STREAMING_CONF.items():
            spark.conf.set(key, value)
        return start(checkpoint, sink)

    return Variant(start=start_query, wait=lambda query: query.processAllAvailable(), stop=lambda query: query.stop(),
                   query=lambda query: query)


# ------------------------------------------------------------------------------------------------ sections

def publish(broker: DevKafkaBroker, topic: str, messages: Sequence[Message], partitions: int) -> None:
    from sluice.dev.sample_data import produce

    broker.create_topic(topic, partitions)
    produce(broker.bootstrap_servers, topic, messages, partitions)


def per_trigger(events: int, batches: int) -> int:
    return max(1, -(-events // batches))


def warm_up(variants: Mapping[str, Variant], work_dir: Path, events: int) -> dict[str, float]:
    """One untimed run of each variant on a small topic: the session's first streaming query runs its batches
    several times slower (JIT, Python workers, RocksDB's native library), and whichever variant went first would
    pay for both."""
    seconds = {}
    for name, variant in variants.items():
        figures = timed_run(variant, work_dir / f"warmup-{name}", events)
        shutil.rmtree(work_dir / f"warmup-{name}", ignore_errors=True)
        seconds[name] = figures["seconds"]
        log(f"  warm-up {name}: {figures['seconds']} s")
    return seconds


def window_count(spark: SparkSession, broker: DevKafkaBroker, args: argparse.Namespace,
                 work_dir: Path) -> dict[str, Any]:
    bootstrap = broker.bootstrap_servers

    def variants(topic: str, events: int) -> dict[str, Variant]:
        max_records = per_trigger(events, args.batches)
        return {
            "sluice": sluice_variant(spark, lambda sink: sluice_count_job(
                "bench-count", bootstrap, topic, max_records, args.lateness, sink.sluice_function("cnt"))),
            "handwritten": handwritten_variant(spark, lambda checkpoint, sink: handwritten_count(
                spark, bootstrap, topic, max_records, args.lateness, checkpoint, sink)),
        }

    data = count_events(args.events, args.event_rate, args.partitions, args.seed)
    started = time.monotonic()
    publish(broker, "bench-clicks", data.messages, args.partitions)
    log(f"count: produced {len(data.messages):,} records in {time.monotonic() - started:.1f}s")
    del data.messages
    warmup = min(args.warmup_events, args.events)
    warmup_s = {}
    if warmup:
        publish(broker, "bench-clicks-warmup", count_events(warmup, args.event_rate, args.partitions,
                                                            args.seed + 10).messages, args.partitions)
        warmup_s = warm_up(variants("bench-clicks-warmup", warmup), work_dir / "count", warmup)
    results = compare(variants("bench-clicks", args.events), args.runs, work_dir / "count", args.events,
                      {"output_rows": data.output_rows, "counted_events": data.events})
    return {
        "events": args.events, "pages": PAGES, "event_time_s": round(args.events / args.event_rate),
        "window_s": WINDOW_S, "lateness_s": args.lateness,
        "max_records_per_trigger": per_trigger(args.events, args.batches),
        "expected_output_rows": data.output_rows, "warmup_events": warmup, "warmup_s": warmup_s,
        "variants": results,
        "ratio_sluice_vs_handwritten": ratio(results["sluice"]["events_per_s"],
                                             results["handwritten"]["events_per_s"]),
        "ratio_of_medians": ratio(results["sluice"]["median_events_per_s"],
                                  results["handwritten"]["median_events_per_s"]),
    }


def stream_join(spark: SparkSession, broker: DevKafkaBroker, args: argparse.Namespace,
                work_dir: Path) -> dict[str, Any]:
    bootstrap = broker.bootstrap_servers

    def variants(topics: tuple[str, str], events_per_side: int) -> dict[str, Variant]:
        max_records = per_trigger(events_per_side, args.batches)  # per side
        return {
            "sluice": sluice_variant(spark, lambda sink: sluice_join_job(
                "bench-join", bootstrap, topics, max_records, sink.sluice_function(None))),
            "handwritten": handwritten_variant(spark, lambda checkpoint, sink: handwritten_join(
                spark, bootstrap, topics, max_records, checkpoint, sink)),
        }

    topics = ("bench-join-clicks", "bench-join-impressions")
    data = join_events(args.join_events, args.event_rate, args.seed + 1)
    publish(broker, topics[0], data.left, args.partitions)
    publish(broker, topics[1], data.right, args.partitions)
    log(f"join: produced {args.join_events:,} records on each of {topics}; {data.matches:,} matches expected")
    del data.left, data.right
    warmup = min(args.warmup_events // 2, args.join_events)
    warmup_s = {}
    if warmup:
        warmup_topics = ("bench-join-clicks-warmup", "bench-join-impressions-warmup")
        warmup_data = join_events(warmup, args.event_rate, args.seed + 11)
        publish(broker, warmup_topics[0], warmup_data.left, args.partitions)
        publish(broker, warmup_topics[1], warmup_data.right, args.partitions)
        warmup_s = warm_up(variants(warmup_topics, warmup), work_dir / "join", 2 * warmup)
    events = 2 * args.join_events
    results = compare(variants(topics, args.join_events), args.runs, work_dir / "join", events,
                      {"output_rows": data.matches})
    return {
        "events_per_side": args.join_events, "events": events, "users": JOIN_USERS,
        "event_time_s": round(args.join_events / args.event_rate), "within_s": JOIN_WITHIN_S,
        "grace_s": JOIN_GRACE_S, "max_records_per_trigger_per_side": per_trigger(args.join_events, args.batches),
        "expected_output_rows": data.matches, "warmup_events": 2 * warmup, "warmup_s": warmup_s,
        "variants": results,
        "ratio_sluice_vs_handwritten": ratio(results["sluice"]["events_per_s"],
                                             results["handwritten"]["events_per_s"]),
        "ratio_of_medians": ratio(results["sluice"]["median_events_per_s"],
                                  results["handwritten"]["median_events_per_s"]),
    }


class PacedProducer(threading.Thread):
    """Writes events stamped with the wall clock at ``rate`` per second, round-robin over the partitions, for
    ``seconds``; a thread of this process, as a real source would be another process's."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float, seconds: float, seed: int) -> None:
        super().__init__(name="paced-producer", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rate, self.seconds = rate, seconds
        self.rng = random.Random(seed)
        self.sent = 0
        self.first_ms: int | None = None
        self.last_ms: int | None = None
        self.elapsed_s = 0.0
        self.error: str | None = None

    def run(self) -> None:
        from confluent_kafka import Producer

        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                                 "logger": logging.getLogger("paced-producer")})
            pages = self.rng.choices(page_names(), weights=page_weights(), k=100_003)
            began = time.monotonic()
            while (elapsed := time.monotonic() - began) < self.seconds:
                due = int(elapsed * self.rate)
                while self.sent < due:
                    now_ms = int(time.time() * 1000)
                    value = (f'{{"ts":"{iso(now_ms)}","page":"{pages[self.sent % len(pages)]}",'
                             f'"user":"user-{self.sent % USERS}"}}').encode()
                    try:
                        producer.produce(self.topic, value, partition=self.sent % self.partitions)
                    except BufferError:
                        producer.poll(0.05)
                        continue
                    self.first_ms = self.first_ms or now_ms
                    self.last_ms = now_ms
                    self.sent += 1
                producer.poll(0)
                time.sleep(0.002)
            self.elapsed_s = time.monotonic() - began
            producer.flush(30)
        except Exception as error:  # noqa: BLE001 - reported in the figures; the job's side must not hang on it
            self.error = f"{type(error).__name__}: {error}"


def epoch_s(value: datetime) -> float:
    """A collected timestamp in epoch seconds: PySpark hands TIMESTAMPs over as naive local datetimes."""
    return value.timestamp()


def latency(spark: SparkSession, broker: DevKafkaBroker, args: argparse.Namespace,
            work_dir: Path) -> dict[str, Any]:
    """Sluice's windowed count on a live stream: how long after a window could be final its rows are in the sink."""
    from sluice.stream.runner import start_job

    topic = "bench-live-clicks"
    broker.create_topic(topic, args.partitions)
    arrivals: dict[float, dict[str, Any]] = {}  # window end (epoch s) -> arrival, rows, events
    lock = threading.Lock()

    def sink(rows: list[dict[str, Any]], batch_id: int) -> None:
        arrived = time.time()
        with lock:
            for row in rows:
                window = arrivals.setdefault(epoch_s(row["window_end"]),
                                             {"arrived": arrived, "rows": 0, "events": 0, "batch_id": batch_id})
                window["rows"] += 1
                window["events"] += row["cnt"]

    job = sluice_count_job("bench-latency", broker.bootstrap_servers, topic, None, args.lateness, sink)
    running = start_job(spark, job, work_dir / "latency", trigger_interval=args.trigger)
    progress: dict[int, dict[str, Any]] = {}
    peak_state = {"state_rows": 0, "state_bytes": 0}
    producer = PacedProducer(broker.bootstrap_servers, topic, args.partitions, args.latency_rate,
                             args.latency_seconds, args.seed + 2)
    try:
        deadline = time.monotonic() + 120
        while running.query.lastProgress is None and time.monotonic() < deadline:  # its first (empty) batch
            time.sleep(0.2)
        log(f"latency: job running; producing {args.latency_rate:,.0f} events/s for {args.latency_seconds:.0f}s")
        producer.start()
        while producer.is_alive():
            producer.join(2.0)
            merge_progress(running.query, progress)
            status = running.status()
            peak_state["state_rows"] = max(peak_state["state_rows"], status.state_rows)
            peak_state["state_bytes"] = max(peak_state["state_bytes"], status.state_bytes)
            if running.query.exception() is not None:
                raise RuntimeError(f"the job failed: {running.exception()}")
        # every window that ends at least `lateness` before the last record can be final: wait for those
        last_s = (producer.last_ms or 0) / 1000
        first_s = (producer.first_ms or 0) / 1000
        closable = [end for end in _window_ends(first_s, last_s) if end + args.lateness <= last_s]
        deadline = time.monotonic() + 3 * WINDOW_S + 30
        while time.monotonic() < deadline:
            with lock:
                if all(end in arrivals for end in closable):
                    break
            time.sleep(0.5)
        merge_progress(running.query, progress)
        status = running.status().to_report()
    finally:
        running.stop()
    windows = []
    with lock:
        for end, seen in sorted(arrivals.items()):
            windows.append({"window_end": datetime.fromtimestamp(end, UTC).isoformat(), "rows": seen["rows"],
                            "events": seen["events"], "batch_id": seen["batch_id"],
                            "latency_s": round(seen["arrived"] - (end + args.lateness), 3)})
    delays = [w["latency_s"] for w in windows]
    produced_s = producer.elapsed_s or args.latency_seconds
    return {
        "rate": args.latency_rate, "seconds": args.latency_seconds, "trigger": args.trigger,
        "window_s": WINDOW_S, "lateness_s": args.lateness,
        "events_produced": producer.sent, "rate_achieved": round(producer.sent / produced_s),
        **({"producer_error": producer.error} if producer.error else {}),
        "windows_closable": len(closable), "windows_seen": len(windows),
        "latency_s": {"p50": _r(percentile(delays, 50), 3), "p95": _r(percentile(delays, 95), 3),
                      "max": _r(max(delays, default=None), 3)},
        "windows": windows,
        "sluice_status": status, "peak_state": peak_state,
        **batch_figures([progress[b] for b in sorted(progress)]),
    }


def _window_ends(first_s: float, last_s: float) -> list[float]:
    """Ends of the windows holding records stamped ``first_s`` .. ``last_s``."""
    start = first_s // WINDOW_S * WINDOW_S
    return [float(end) for end in range(int(start) + WINDOW_S, int(last_s) + 2 * WINDOW_S, WINDOW_S)
            if end - WINDOW_S <= last_s]


# ------------------------------------------------------------------------------------------------ main

SECTIONS = ("count", "join", "latency")


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    from sluice.dev.tansu import DevKafkaBroker
    from sluice.stream.runner import STREAMING_CONF
    from sluice.task import spark_session

    if STREAMING_CONF != HANDWRITTEN_STREAMING_CONF:  # the comparison is only fair on the same state store
        raise SystemExit(f"Sluice's streaming settings changed: {STREAMING_CONF}; update HANDWRITTEN_STREAMING_CONF")
    work_dir = Path(tempfile.mkdtemp(prefix="sluice-bench-stream-"))
    results: dict[str, Any] = {}
    try:
        with DevKafkaBroker(log_dir=work_dir) as broker:
            began = time.monotonic()
            spark = spark_session.get_or_create("local[2]")
            register_source(spark)
            log(f"Spark session up in {time.monotonic() - began:.1f}s")
            sections: dict[str, Callable[..., dict[str, Any]]] = {
                "count": window_count, "join": stream_join, "latency": latency}
            for name in args.sections:
                log(f"=== {name}")
                try:
                    results[name] = sections[name](spark, broker, args, work_dir)
                except Exception as error:  # noqa: BLE001 - one failed section must not lose the others' figures
                    log(f"section {name} failed: {error}")
                    results[name] = {"error": f"{type(error).__name__}: {error}"[:2000]}
            spark.stop()
    finally:
        if args.keep:
            log(f"kept {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    return {"benchmark": "stream_jobs", "smoke": args.smoke, "partitions": args.partitions, "runs": args.runs,
            "batches": args.batches, "event_rate": args.event_rate, **results, "machine": machine()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events of the windowed count")
    parser.add_argument("--join-events", type=int, default=500_000, help="events on each side of the join")
    parser.add_argument("--latency-seconds", type=float, default=60.0)
    parser.add_argument("--latency-rate", type=float, default=10_000.0, help="events/s of the live stream")
    parser.add_argument("--trigger", default="500 milliseconds", help="trigger interval of the latency job")
    parser.add_argument("--lateness", type=float, default=1.0, help="allowed lateness of the windows, seconds")
    parser.add_argument("--event-rate", type=float, default=1000.0,
                        help="events per event-time second in the count's and the join's topics")
    parser.add_argument("--batches", type=int, default=10,
                        help="micro-batches a job takes to read a topic (maxRecordsPerTrigger = events / batches)")
    parser.add_argument("--runs", type=int, default=4,
                        help="timed runs of each variant; the best and the median are printed")
    parser.add_argument("--warmup-events", type=int, default=20_000,
                        help="events of each variant's untimed warm-up run before the count and the join (0: none)")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help="comma-separated subset of " + ", ".join(SECTIONS))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (about a minute): proves the script works")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (broker log, checkpoints)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    args = parser.parse_args()
    if args.smoke:
        args.events, args.join_events, args.runs, args.batches, args.warmup_events = 20_000, 10_000, 1, 4, 0
        args.latency_seconds, args.latency_rate = 15.0, 2_000.0
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    if unknown := set(args.sections) - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}")
    emit(orchestrate(args), args.json)


if __name__ == "__main__":
    main()
