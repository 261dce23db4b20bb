"""``sluice_kafka``: a PySpark batch data source that reads exact Kafka offset ranges.

The pip ``pyspark`` ships no Kafka connector, and a streaming task owns its offsets anyway (the
metadata store, not Spark, is the source of truth for exactly-once), so a task asks Spark for a
bounded read of ``[start, end)`` per partition and gets exactly those records back::

    register(spark)
    df = (spark.read.format("sluice_kafka")
          .option("topic", "wikipedia")
          .option("consumerProperties", json.dumps({"bootstrap.servers": "127.0.0.1:9092"}))
          .option("ranges", json.dumps({"0": [0, 5000], "1": [120, 4000]}))   # end exclusive
          .option("maxRecordsPerSplit", 100000)                              # optional
          .load())

Each InputPartition is one slice of one Kafka partition; executors read it with confluent-kafka and
yield Arrow batches that match :data:`SCHEMA` exactly (Spark 4.3 rejects any mismatch).

A task reads many ranges of the same partitions, one Spark job each. Building and analysing a new
DataFrame per job costs more than reading a small range, so the ranges can instead be the job's::

    df = (spark.read.format("sluice_kafka").option("topic", "wikipedia")
          .option("consumerProperties", ...).option("partitions", "0,2")
          .option("rangesProperty", JOB_RANGES).load())           # built and analysed once
    spark.sparkContext.setLocalProperty(JOB_RANGES, json.dumps({"0": [0, 5000]}))
    df.write...                                                     # this job reads [0, 5000) of partition 0

One input partition per listed Kafka partition; each reads the range the job's local property (set in the
thread that starts the job, carried by Spark with every task of it) gives it, or nothing.
"""

from __future__ import annotations

import json
import time
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType, TimestampType

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = [
    "JOB_RANGES",
    "SCHEMA",
    "SOURCE_NAME",
    "KafkaRangeDataSource",
    "OffsetRange",
    "parse_ranges",
    "read_offset_range",
    "register",
    "split_ranges",
]

SOURCE_NAME = "sluice_kafka"

SCHEMA = StructType(
    [
        StructField("partition", IntegerType(), nullable=False),
        StructField("offset", LongType(), nullable=False),
        StructField("timestamp", TimestampType(), nullable=True),
        StructField("value", BinaryType(), nullable=True),
    ]
)

#: the local property a job's ranges are in, for a reader built with the ``rangesProperty`` option
JOB_RANGES = "sluice.kafka.ranges"

#: records fetched per ``consume`` call, and so rows per yielded Arrow batch
BATCH_RECORDS = 20_000
#: how long a read may go without receiving a record before it gives up
DEFAULT_READ_TIMEOUT_S = 30.0
_POLL_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one Kafka partition: one Spark task's share of the read."""

    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class JobRange(InputPartition):
    """One Kafka partition whose range each job gives in its local property ``ranges_property``."""

    partition: int
    ranges_property: str

    def offset_range(self) -> OffsetRange | None:
        from pyspark import TaskContext

        context = TaskContext.get()
        text = context.getLocalProperty(self.ranges_property) if context is not None else None
        bounds = parse_ranges(text).get(self.partition) if text else None
        return OffsetRange(self.partition, *bounds) if bounds else None


def split_ranges(ranges: Mapping[int, tuple[int, int]], max_records: int | None = None) -> list[OffsetRange]:
    """Cut each partition's ``[start, end)`` into slices of at most ``max_records`` offsets.

    One Kafka partition is otherwise one Spark task, so few hot partitions would leave cores idle.
    Empty ranges produce no slice. ``max_records=None`` keeps one slice per partition.
    """
    if max_records is not None and max_records <= 0:
        raise ValueError(f"max_records must be positive, got {max_records}")
    splits: list[OffsetRange] = []
    for partition in sorted(ranges):
        start, end = ranges[partition]
        if start < 0 or end < start:
            raise ValueError(f"partition {partition}: invalid offset range [{start}, {end})")
        step = max_records or max(end - start, 1)
        splits.extend(OffsetRange(partition, lo, min(lo + step, end)) for lo in range(start, end, step))
    return splits


def parse_ranges(text: str) -> dict[int, tuple[int, int]]:
    """Parse the ``ranges`` option, ``{"<partition>": [start, end], ...}``."""
    try:
        raw = json.loads(text)
        ranges = {int(partition): (int(bounds[0]), int(bounds[1])) for partition, bounds in raw.items()}
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise ValueError(f'option "ranges" must be a JSON object {{"<partition>": [start, end]}}: {text!r}') from exc
    return ranges


def read_offset_range(
    topic: str,
    consumer_properties: Mapping[str, Any],
    split: OffsetRange,
    read_timeout: float = DEFAULT_READ_TIMEOUT_S,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``split`` as Arrow batches matching :data:`SCHEMA`.

    Stops at the first offset ``>= end`` or at a partition EOF at or beyond ``end`` (offsets may
    have gaps: compaction, transaction markers). Raises :class:`sluice.stream.kafka.StreamError` if
    no record arrives for ``read_timeout`` seconds before ``end`` is reached, so a range the broker
    does not hold fails the Spark task instead of hanging it; connection errors are retried by
    librdkafka within that window. ``auto.offset.reset=error`` makes a ``start`` that is no longer
    stored an error rather than a silent skip.
    """
    # Imported here, not at module level: this runs in executor Python workers.
    from confluent_kafka import KafkaError, TopicPartition
    from pyspark.sql.pandas.types import to_arrow_schema

    from sluice.stream.kafka import StreamError, consumer_config, new_consumer

    arrow_schema = to_arrow_schema(SCHEMA, timezone="UTC")
    where = f"topic {topic!r} partition {split.partition} range [{split.start}, {split.end})"
    retried_codes = {KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}
    consumer = new_consumer(
        consumer_config(
            consumer_properties,
            # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s) whenever its local queue is
            # full; draining 20k records takes milliseconds, so the default stalls a bulk read. Prefetching
            # one batch ahead keeps the fetch pipelined; librdkafka's 100k-record default only grows the
            # worker's memory (~40 MB at 300-byte records) and reads past the range's end.
            defaults={"isolation.level": "read_committed", "fetch.queue.backoff.ms": 10,
                      "queued.min.messages": BATCH_RECORDS},
            overrides={"enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "error"},
        )
    )
    try:
        consumer.assign([TopicPartition(topic, split.partition, split.start)])
        next_offset = split.start
        last_progress = time.monotonic()
        last_error: KafkaError | None = None
        while next_offset < split.end:
            # Asking for exactly the records still due lets consume() return at once at the tail.
            messages = consumer.consume(num_messages=min(BATCH_RECORDS, split.end - next_offset), timeout=_POLL_TIMEOUT_S)
            records = [message for message in messages if message.error() is None]
            if len(records) < len(messages):
                for message in messages:
                    error = message.error()
                    if error is None:
                        continue
                    if error.code() == KafkaError._PARTITION_EOF:
                        if message.offset() >= split.end:
                            next_offset = split.end
                    elif error.code() in retried_codes:
                        last_error = error
                    else:
                        raise StreamError(f"reading {where}: {error.str()}")
            due = bisect_left(records, split.end, key=lambda message: message.offset())
            if due < len(records):
                records, next_offset = records[:due], split.end
            if records:
                next_offset = max(next_offset, records[-1].offset() + 1)
                last_progress = time.monotonic()
                yield _to_batch(arrow_schema, split.partition, records)
            elif next_offset < split.end and time.monotonic() - last_progress > read_timeout:
                raise StreamError(
                    f"reading {where}: no record after offset {next_offset - 1} for {read_timeout}s "
                    f"(the broker does not hold offsets up to {split.end - 1}"
                    + (f"; last error: {last_error.str()})" if last_error is not None else ")")
                )
    finally:
        consumer.close()


def _to_batch(arrow_schema: pa.Schema, partition: int, records: list[Any]) -> pa.RecordBatch:
    """Columns of consumed messages; Kafka timestamps are epoch ms, with type 0 meaning none."""
    import pyarrow as pa

    stamps = [stamp if kind else None for kind, stamp in (record.timestamp() for record in records)]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([partition] * len(records), pa.int32()),
            pa.array([record.offset() for record in records], pa.int64()),
            pa.array(stamps, pa.timestamp("ms", tz="UTC")).cast(arrow_schema.field("timestamp").type),
            pa.array([record.value() for record in records], pa.binary()),
        ],
        schema=arrow_schema,
    )


class _KafkaRangeReader(DataSourceReader):
    """Parses the options once on the driver; instances are pickled to the executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        def required(name: str) -> str:
            value = options.get(name)
            if not value:
                raise ValueError(f'data source {SOURCE_NAME!r} needs option "{name}"')
            return value

        self.topic = required("topic")
        self.consumer_properties: dict[str, Any] = json.loads(required("consumerProperties"))
        if not isinstance(self.consumer_properties, dict):
            raise ValueError('option "consumerProperties" must be a JSON object')
        self.ranges_property = options.get("rangesProperty")
        if self.ranges_property:
            self.job_partitions = [int(p) for p in required("partitions").split(",")]
        else:
            self.ranges = parse_ranges(required("ranges"))
        max_records = options.get("maxRecordsPerSplit")
        self.max_records = int(max_records) if max_records else None
        read_timeout_ms = options.get("readTimeoutMs")
        self.read_timeout = int(read_timeout_ms) / 1000 if read_timeout_ms else DEFAULT_READ_TIMEOUT_S

    def partitions(self) -> list[InputPartition]:
        if self.ranges_property:
            return [JobRange(p, self.ranges_property) for p in self.job_partitions]
        return split_ranges(self.ranges, self.max_records)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, JobRange):
            partition = partition.offset_range()
        if not isinstance(partition, OffsetRange) or partition.start >= partition.end:
            # Spark replaces an empty plan with one placeholder InputPartition(None): nothing to read.
            return iter(())
        return read_offset_range(self.topic, self.consumer_properties, partition, self.read_timeout)


class KafkaRangeDataSource(DataSource):
    """Options: ``topic``, ``consumerProperties`` (JSON), and ``ranges`` (JSON) or ``partitions`` (comma-separated)
    with ``rangesProperty`` (the local property each job's ranges are in); optional ``maxRecordsPerSplit`` (with
    ``ranges``) and ``readTimeoutMs`` (default 30000)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _KafkaRangeReader(self.options)


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("sluice_kafka")`` available in this session."""
    spark.dataSource.register(KafkaRangeDataSource)
