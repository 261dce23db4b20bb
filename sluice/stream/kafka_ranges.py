"""``sluice_kafka``: a PySpark batch data source that reads exact Kafka offset ranges.

The pip ``pyspark`` ships no Kafka connector, and Sluice owns its offsets anyway (the metadata store, not
Spark, is the source of truth for exactly-once), so a read asks Spark for ``[start, end)`` per partition and
gets exactly those records back::

    register(spark)
    df = (spark.read.format("sluice_kafka")
          .option("topic", "wikipedia")
          .option("consumerProperties", json.dumps({"bootstrap.servers": "127.0.0.1:9092"}))
          .option("ranges", json.dumps({"0": [0, 5000], "1": [120, 4000]}))   # end exclusive
          .option("maxRecordsPerSplit", 100000)                              # optional
          .load())

Each InputPartition is one slice of one Kafka partition; executors read it with confluent-kafka and
yield Arrow batches that match :data:`SCHEMA` exactly (Spark 4.3 rejects any mismatch).

A streaming task reads its partitions through the connector framework instead
(``sluice.connectors.sources.kafka_stream``), with this module's reading and decoding.

The records are JSON message values as they are (:data:`SCHEMA`; Spark's ``from_json`` parses them) unless the
``inputFormat`` option (a supervisor's ``ioConfig.inputFormat``, JSON) with ``fields`` (the ingestion's raw
fields, a JSON list) says otherwise; the declared schema then follows them (:func:`source_schema`):

- csv, tsv, regex: the executor parses each value into one string column per field, after ``__locator``
  (``partition=P offset=O``), ``__error`` (why the value did not parse) and ``__message`` (the value itself, for
  parse-exception samples and processedBytes);
- ``kafka`` around a json value: :data:`SCHEMA`, then ``__key_error`` and one ``kafka:<field>`` column per field
  the message's metadata supplies (its key, timestamp, topic, headers), which a null payload field falls back to;
- ``kafka`` around csv, tsv or regex: the csv shape, its fields already blended with the metadata.

Only those formats read message keys and headers; a plain json read does no more work than it did before.
"""

from __future__ import annotations

import json
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sluice.connectors.records import ERROR, LOCATOR
from sluice.spark_worker import start_task

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = [
    "SCHEMA",
    "SOURCE_NAME",
    "KafkaRangeDataSource",
    "OffsetRange",
    "parse_ranges",
    "read_offset_range",
    "read_partition",
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

#: the raw message value beside the fields parsed from it (column-shaped records)
MESSAGE = "__message"
#: why a message's key did not parse with the kafka inputFormat's keyFormat: the record is unparseable, as in Druid
KEY_ERROR = "__key_error"
#: the column of a field that the kafka inputFormat takes from the message's metadata: `kafka:kafka.key`
METADATA_PREFIX = "kafka:"

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
    decode: Callable[[int, list[Any]], pa.RecordBatch] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``split`` as Arrow batches matching :data:`SCHEMA`, or as ``decode(partition,
    messages)`` makes them.

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
                yield _to_batch(arrow_schema, split.partition, records) if decode is None else \
                    decode(split.partition, records)
            elif next_offset < split.end and time.monotonic() - last_progress > read_timeout:
                raise StreamError(
                    f"reading {where}: no record after offset {next_offset - 1} for {read_timeout}s "
                    f"(the broker does not hold offsets up to {split.end - 1}"
                    + (f"; last error: {last_error.str()})" if last_error is not None else ")")
                )
    finally:
        consumer.close()


class MessageColumns:
    """Some of :data:`SCHEMA`'s columns only (option ``columns``): a stream job reads the values and timestamps,
    and every column costs the reader Python work per message."""

    def __init__(self, names: Sequence[str]) -> None:
        if unknown := sorted(set(names) - set(SCHEMA.fieldNames())):
            raise ValueError(f'option "columns": {unknown} are not among {SCHEMA.fieldNames()}')
        self.schema = StructType([f for f in SCHEMA.fields if f.name in names])
        self._arrow_schema: pa.Schema | None = None

    def __call__(self, partition: int, records: list[Any]) -> pa.RecordBatch:
        from pyspark.sql.pandas.types import to_arrow_schema

        if self._arrow_schema is None:
            self._arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        return _to_batch(self._arrow_schema, partition, records)


def _timestamps(records: list[Any]) -> pa.Array:
    """Kafka timestamps are epoch ms, with type 0 meaning none."""
    import pyarrow as pa

    return pa.array([stamp if kind else None for kind, stamp in (record.timestamp() for record in records)],
                    pa.timestamp("ms", tz="UTC"))


def _to_batch(arrow_schema: pa.Schema, partition: int, records: list[Any]) -> pa.RecordBatch:
    """The columns of :data:`SCHEMA` that ``arrow_schema`` names, of consumed messages."""
    import pyarrow as pa

    columns = {
        "partition": lambda: pa.array([partition] * len(records), pa.int32()),
        "offset": lambda: pa.array([record.offset() for record in records], pa.int64()),
        "timestamp": lambda: _timestamps(records).cast(arrow_schema.field("timestamp").type),
        "value": lambda: pa.array([record.value() for record in records], pa.binary()),
    }
    return pa.RecordBatch.from_arrays([columns[name]() for name in arrow_schema.names], schema=arrow_schema)


def required_option(options: Mapping[str, str], name: str) -> str:
    value = options.get(name)
    if not value:
        raise ValueError(f'data source {SOURCE_NAME!r} needs option "{name}"')
    return value


def consumer_properties_option(options: Mapping[str, str]) -> dict[str, Any]:
    properties = json.loads(required_option(options, "consumerProperties"))
    if not isinstance(properties, dict):
        raise ValueError('option "consumerProperties" must be a JSON object')
    return properties


def schema_and_decoder(options: Mapping[str, str]) -> tuple[StructType, Callable[[int, list[Any]], pa.RecordBatch] | None]:
    """The records' schema and the decoder that makes them, from the ``inputFormat`` / ``fields`` or ``columns``
    options; no decoder for :data:`SCHEMA` itself."""
    input_format, fields = format_options(options)
    decoder: MessageDecoder | MessageColumns | None = None
    if input_format is not None:
        decoder = MessageDecoder(input_format, fields)
    elif options.get("columns"):
        decoder = MessageColumns(options["columns"].split(","))
    return (SCHEMA, None) if decoder is None else (decoder.schema, decoder)


def format_options(options: Mapping[str, str]) -> tuple[Any, list[str]]:
    """The ``inputFormat`` and ``fields`` options; (None, []) for JSON values read as they are."""
    text = options.get("inputFormat")
    if not text:
        return None, []
    from pydantic import TypeAdapter

    from sluice.spec.supervisor import StreamFormat

    input_format = TypeAdapter(StreamFormat).validate_python(json.loads(text))
    if input_format.type == "json":
        return None, []
    fields = json.loads(options.get("fields") or "[]")
    if not isinstance(fields, list) or not all(isinstance(f, str) for f in fields):
        raise TypeError('option "fields" must be a JSON list of field names')
    return input_format, fields


def source_schema(input_format: Any, fields: Sequence[str]) -> StructType:
    """The records' schema for a non-json ``input_format`` reading ``fields`` (see the module's shapes)."""
    kafka = input_format if input_format.type == "kafka" else None
    if kafka is not None and kafka.value_format.type == "json":
        return StructType([*SCHEMA.fields, StructField(KEY_ERROR, StringType()),
                           *(StructField(METADATA_PREFIX + f, StringType()) for f in kafka.metadata_fields(fields))])
    return StructType([StructField(LOCATOR, StringType()), StructField(ERROR, StringType()),
                       StructField(MESSAGE, BinaryType()), *(StructField(f, StringType()) for f in fields)])


class MessageDecoder:
    """Consumed messages -> Arrow batches of :func:`source_schema`, in the executor; for every inputFormat but
    a plain json one, whose values go to Spark as they are.

    The kafka inputFormat blends each value with the message's metadata as Druid's KafkaInputReader does: the
    headers (with a headerFormat), then, where no header took the name, the timestamp in epoch millis, the topic,
    and the key (keyFormat's first column); a payload field that is not null wins over them all, and a tombstone
    (no value) is a record of the metadata alone.
    """

    def __init__(self, input_format: Any, fields: Sequence[str]) -> None:
        self.kafka = input_format if input_format.type == "kafka" else None
        self.value_format = self.kafka.value_format if self.kafka is not None else input_format
        self.fields = list(fields)
        self.metadata = self.kafka.metadata_fields(self.fields) if self.kafka is not None else []
        self.schema = source_schema(input_format, self.fields)
        self._arrow_schema: pa.Schema | None = None
        self._message_schema: pa.Schema | None = None
        self._value_parser: Any = None
        self._key_parser: Any = None

    def __call__(self, partition: int, records: list[Any]) -> pa.RecordBatch:
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyspark.sql.pandas.types import to_arrow_schema

        if self._arrow_schema is None:
            self._arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
            self._message_schema = to_arrow_schema(SCHEMA, timezone="UTC")
        metadata, key_errors = self._metadata(records) if self.kafka is not None else ({}, [None] * len(records))
        if self.value_format.type == "json":
            base = _to_batch(self._message_schema, partition, records)
            arrays = [*base.columns, pa.array(key_errors, pa.string()),
                      *(pa.array(metadata[f], pa.string()) for f in self.metadata)]
            return pa.RecordBatch.from_arrays(arrays, schema=self._arrow_schema)
        values = [record.value() for record in records]
        locators = [f"partition={partition} offset={record.offset()}" for record in records]
        parsed = self._parser().parse_values(values, locators)
        errors = parsed.column(ERROR).to_pylist()
        if self.kafka is not None:  # a tombstone is no error here, and a key that does not parse is one
            errors = [key_error or (error if value is not None else None)
                      for key_error, error, value in zip(key_errors, errors, values)]
        columns = [pc.coalesce(parsed.column(f), pa.array(metadata[f], pa.string())) if f in metadata
                   else parsed.column(f) for f in self.fields]
        arrays = [parsed.column(LOCATOR), pa.array(errors, pa.string()), pa.array(values, pa.binary()), *columns]
        return pa.RecordBatch.from_arrays(arrays, schema=self._arrow_schema)

    def _parser(self) -> Any:
        if self._value_parser is None:
            from sluice.connectors.formats import record_parser

            self._value_parser = record_parser(self.value_format, self.fields)
        return self._value_parser

    def _metadata(self, records: list[Any]) -> tuple[dict[str, list[str | None]], list[str | None]]:
        """The metadata fields of each message, and why its key did not parse (or None)."""
        kafka = self.kafka
        keys, key_errors = self._keys(records)
        header_encoding = kafka.header_format.encoding if kafka.header_format is not None else None
        prefix = kafka.header_column_prefix
        wanted = set(self.metadata)
        read_headers = header_encoding is not None and any(f.startswith(prefix) for f in wanted)
        columns: dict[str, list[str | None]] = {f: [] for f in self.metadata}
        for record, key in zip(records, keys):
            found: dict[str, str | None] = {}
            if read_headers:
                for name, raw in record.headers() or ():
                    found[prefix + name] = None if raw is None else raw.decode(header_encoding, errors="replace")
            kind, stamp = record.timestamp()
            found.setdefault(kafka.timestamp_column_name, str(stamp) if kind else None)
            found.setdefault(kafka.topic_column_name, record.topic())
            if kafka.key_format is not None:
                found.setdefault(kafka.key_column_name, key)
            for field in self.metadata:
                columns[field].append(found.get(field))
        return columns, key_errors

    def _keys(self, records: list[Any]) -> tuple[list[str | None], list[str | None]]:
        """Each message's key as keyFormat reads it (its first column), and why it did not parse. Keys are parsed
        whenever there is a keyFormat, used or not, as Druid does: a key that does not parse fails its record."""
        n = len(records)
        key_format = self.kafka.key_format
        if key_format is None:
            return [None] * n, [None] * n
        raw = [record.key() for record in records]
        present = [i for i, key in enumerate(raw) if key is not None]
        keys: list[str | None] = [None] * n
        errors: list[str | None] = [None] * n
        if key_format.type == "json":
            for i in present:
                keys[i], errors[i] = _json_key(raw[i])
            return keys, errors
        first = (key_format.columns or ["column_1"])[0]
        if self._key_parser is None:
            from sluice.connectors.formats import record_parser

            self._key_parser = record_parser(key_format, [first])
        parsed = self._key_parser.parse_values([raw[i] for i in present], ["key"] * len(present))
        for i, key, error in zip(present, parsed.column(first).to_pylist(), parsed.column(ERROR).to_pylist()):
            keys[i], errors[i] = key, None if error is None else f"key: {error}"
        return keys, errors


def _json_key(raw: bytes) -> tuple[str | None, str | None]:
    """The first field of a JSON object key, as text (nested values as compact JSON), or why it is not one."""
    text = raw.decode("utf-8", errors="replace")
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        return None, f"key: Unable to parse row [{text}]"
    value = next(iter(document.values()), None)
    if value is None or isinstance(value, str):
        return value, None
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False), None


def read_partition(partition: InputPartition, topic: str, consumer_properties: Mapping[str, Any], read_timeout: float,
                   decode: Callable[[int, list[Any]], pa.RecordBatch] | None) -> Iterator[pa.RecordBatch]:
    """A Kafka reader's Spark task: its `OffsetRange` read (`read_offset_range`) in an executor's Python worker."""
    start_task()
    if not isinstance(partition, OffsetRange) or partition.start >= partition.end:
        # Spark replaces an empty plan with one placeholder InputPartition(None): nothing to read.
        return iter(())
    return read_offset_range(topic, consumer_properties, partition, read_timeout, decode)


class _KafkaRangeReader(DataSourceReader):
    """Parses the options once on the driver; instances are pickled to the executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.topic = required_option(options, "topic")
        self.consumer_properties = consumer_properties_option(options)
        self.ranges = parse_ranges(required_option(options, "ranges"))
        max_records = options.get("maxRecordsPerSplit")
        self.max_records = int(max_records) if max_records else None
        read_timeout_ms = options.get("readTimeoutMs")
        self.read_timeout = int(read_timeout_ms) / 1000 if read_timeout_ms else DEFAULT_READ_TIMEOUT_S
        self.decoder = schema_and_decoder(options)[1]

    def partitions(self) -> list[InputPartition]:
        return split_ranges(self.ranges, self.max_records)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.topic, self.consumer_properties, self.read_timeout, self.decoder)


class KafkaRangeDataSource(DataSource):
    """Options: ``topic``, ``consumerProperties`` (JSON) and ``ranges`` (JSON); optional ``maxRecordsPerSplit``,
    ``readTimeoutMs`` (default 30000), ``inputFormat`` with ``fields`` (the module's shapes), or ``columns`` (some of
    :data:`SCHEMA`'s, comma-separated)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return schema_and_decoder(self.options)[0]

    def reader(self, schema: StructType) -> DataSourceReader:
        return _KafkaRangeReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from sluice.stream.kafka_micro_batch import KafkaMicroBatchReader

        return KafkaMicroBatchReader(self.options)


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("sluice_kafka")`` (and ``spark.readStream``) available in this session."""
    spark.dataSource.register(KafkaRangeDataSource)
