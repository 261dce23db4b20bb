"""``sluice_kafka`` as a Structured Streaming source: ``spark.readStream.format("sluice_kafka")``.

Spark's own Kafka connector is a JVM jar that pip's pyspark lacks, so stream jobs read Kafka through this
Python ``DataSourceStreamReader``. Offsets are Kafka's own (``{"<partition>": next offset}``) and Spark keeps
them in the query's checkpoint: a micro-batch that failed or was interrupted is read again with exactly the
same ranges, which is what lets a stream job's state and sinks be exactly once.

Options, beside ``topic`` and ``consumerProperties`` (JSON) as for a batch read:

- ``startingOffsets``: ``earliest`` (default) or ``latest``, for partitions the checkpoint does not know yet;
  a partition that appears later is always read from its earliest offset, so no record written to it is
  missed;
- ``maxRecordsPerTrigger``: at most this many records per micro-batch, spread over the partitions in
  proportion to their backlog (Spark's ``ReadMaxRows``);
- ``maxRecordsPerSplit``, ``readTimeoutMs``, ``inputFormat`` and ``fields``, ``columns`` as in ``kafka_ranges``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from sluice.stream.kafka_ranges import (
    DEFAULT_READ_TIMEOUT_S,
    consumer_properties_option,
    read_partition,
    required_option,
    schema_and_decoder,
    split_ranges,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["KafkaMicroBatchReader", "cap_records"]

Offsets = dict[str, int]


def cap_records(start: Mapping[int, int], latest: Mapping[int, int], max_records: int) -> dict[int, int]:
    """End offsets that read at most ``max_records`` past ``start``, shared in proportion to each partition's
    backlog (Spark's Kafka source does the same), and at least one record of any partition with a backlog, so
    a batch always moves every partition that has something to read."""
    backlog = {p: max(latest[p] - start.get(p, latest[p]), 0) for p in latest}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(latest)
    return {p: start.get(p, latest[p]) + (max(1, backlog[p] * max_records // total) if backlog[p] else 0)
            for p in latest}


class KafkaMicroBatchReader(DataSourceStreamReader):
    """Plans micro-batches on the driver (one long-lived Python process per query); ``read`` runs on executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.topic = required_option(options, "topic")
        self.consumer_properties = consumer_properties_option(options)
        starting = (options.get("startingOffsets") or "earliest").lower()
        if starting not in ("earliest", "latest"):
            raise ValueError(f'option "startingOffsets" must be "earliest" or "latest", got {starting!r}')
        self.starting = starting
        self.max_records_per_trigger = int(options["maxRecordsPerTrigger"]) if options.get("maxRecordsPerTrigger") \
            else None
        self.max_records_per_split = int(options["maxRecordsPerSplit"]) if options.get("maxRecordsPerSplit") else None
        read_timeout_ms = options.get("readTimeoutMs")
        self.read_timeout = int(read_timeout_ms) / 1000 if read_timeout_ms else DEFAULT_READ_TIMEOUT_S
        self.decoder = schema_and_decoder(options)[1]
        self._stream: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_stream": None}  # executors get the plan, never the driver's consumer

    def _kafka(self) -> Any:
        if self._stream is None:  # created lazily: the reader is pickled before the driver process uses it
            from sluice.stream.kafka import KafkaStream

            self._stream = KafkaStream({k: str(v) for k, v in self.consumer_properties.items()}, self.topic)
        return self._stream

    def initialOffset(self) -> Offsets:
        stream = self._kafka()
        partitions = stream.partitions()
        offsets = stream.earliest_offsets(partitions) if self.starting == "earliest" \
            else stream.latest_offsets(partitions)
        return {str(p): o for p, o in offsets.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_records_per_trigger is None else ReadMaxRows(self.max_records_per_trigger)

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        stream = self._kafka()
        partitions = stream.partitions()
        known = {int(p): o for p, o in start.items()}
        new = [p for p in partitions if p not in known]
        if new:  # a partition added to the topic: nothing in it may be missed
            known.update(stream.earliest_offsets(new))
        latest = stream.latest_offsets(partitions)
        # a partition the topic lost (deleted and re-created smaller) keeps its offset: never go backwards
        latest = {p: max(latest.get(p, o), o) for p, o in known.items()}
        if isinstance(limit, ReadMaxRows):
            latest = cap_records(known, latest, limit.max_rows)
        return {str(p): o for p, o in sorted(latest.items())}

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        ranges = {int(p): (start.get(p, 0), o) for p, o in end.items()}
        if any(p not in start for p in end):  # a new partition: its range starts where its earliest offset is
            earliest = self._kafka().earliest_offsets([int(p) for p in end if p not in start])
            ranges.update({p: (earliest[p], ranges[p][1]) for p in earliest})
        return split_ranges({p: r for p, r in ranges.items() if r[1] > r[0]}, self.max_records_per_split)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.topic, self.consumer_properties, self.read_timeout, self.decoder)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, and Sluice never commits to a consumer group."""

    def stop(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None
