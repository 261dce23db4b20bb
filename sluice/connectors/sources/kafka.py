"""Sluice's bounded `kafka` input source: a batch task reads fixed offset ranges of a topic.

The ranges are fixed on the driver when the splits are listed (by default each partition's earliest offset to
its latest), so a retried split reads exactly the records the first attempt read, and records produced later
belong to a later task. Each partition's range is cut into splits of at most `MAX_RECORDS_PER_SPLIT` offsets, so
one hot partition does not leave the other readers idle.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from sluice.connectors.base import BoundedSource
from sluice.connectors.records import json_records_schema
from sluice.spec.input_format import LINE_FORMATS
from sluice.spec.input_source import KafkaInputSource
from sluice.stream.kafka import KafkaStream
from sluice.stream.kafka_ranges import OffsetRange, read_offset_range, split_ranges

if TYPE_CHECKING:
    from sluice.connectors.formats.base import RecordParser
    from sluice.spec.input_format import RecordFormat

__all__ = ["MAX_RECORDS_PER_SPLIT", "KafkaSource", "KafkaSplit", "offset_ranges"]

#: the most offsets one split reads
MAX_RECORDS_PER_SPLIT = 1_000_000


@dataclass(frozen=True)
class KafkaSplit:
    """Offsets [start, end) of one partition of `topic`."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def split_id(self) -> str:
        return f"{self.topic}-{self.partition}:{self.start}-{self.end}"

    @property
    def size_bytes(self) -> int:
        """Records, not bytes: what balancing readers needs is a measure proportional to the work."""
        return self.end - self.start


def offset_ranges(topic: str, partitions: Sequence[int], earliest: Mapping[int, int], latest: Mapping[int, int],
                  start_offsets: Mapping[int, int] | None, end_offsets: Mapping[int, int] | None
                  ) -> dict[int, tuple[int, int]]:
    """Each partition's [start, end): earliest to latest unless `startOffsets` / `endOffsets` name it. An
    offset the broker does not hold is refused here, on the driver, not found out by every reader."""
    for name, given in (("startOffsets", start_offsets), ("endOffsets", end_offsets)):
        if unknown := sorted(set(given or {}) - set(partitions)):
            raise ValueError(f"{name} names partitions {unknown}, which topic {topic!r} does not have "
                             f"(its partitions: {', '.join(map(str, partitions))})")
    ranges: dict[int, tuple[int, int]] = {}
    for p in partitions:
        start, end = (start_offsets or {}).get(p, earliest[p]), (end_offsets or {}).get(p, latest[p])
        if start < earliest[p]:
            raise ValueError(f"startOffsets[{p}] is {start}, but partition {p} of topic {topic!r} holds offsets "
                             f"from {earliest[p]} only")
        if end > latest[p]:
            raise ValueError(f"endOffsets[{p}] is {end}, beyond the latest offset {latest[p]} of partition {p} "
                             f"of topic {topic!r}")
        if end < start:
            raise ValueError(f"partition {p} of topic {topic!r}: start offset {start} is after end offset {end}")
        ranges[p] = (start, end)
    return ranges


class KafkaSource(BoundedSource[KafkaSplit]):
    """Message values of a topic's offset ranges as records: JSON values go on as bytes (parsed by Spark's
    `from_json`, as the stream's are), csv/tsv/regex values are parsed here into `fields`."""

    def __init__(self, spec: KafkaInputSource, input_format: RecordFormat | None, fields: Sequence[str]) -> None:
        if input_format is None:
            raise ValueError("inputFormat is required with a kafka input source: it says how message values are "
                             f"parsed ({', '.join(LINE_FORMATS)})")
        if input_format.type not in LINE_FORMATS:
            raise ValueError(f"inputFormat type {input_format.type!r} cannot read Kafka message values, one record "
                             f"per message; use {', '.join(LINE_FORMATS)}")
        self.spec = spec
        self.input_format = input_format
        self.fields = list(fields)
        self._parser: RecordParser | None = None
        self._schema = json_records_schema() if input_format.type == "json" else self._parser_().schema

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_parser": None}

    def output_schema(self) -> pa.Schema:
        return self._schema

    def enumerate_splits(self) -> list[KafkaSplit]:
        topic = self.spec.topic
        with KafkaStream(self.spec.consumer_properties, topic) as stream:
            partitions = stream.partitions()
            earliest, latest = stream.earliest_offsets(partitions), stream.latest_offsets(partitions)
        ranges = offset_ranges(topic, partitions, earliest, latest, self.spec.start_offsets, self.spec.end_offsets)
        return [KafkaSplit(topic, r.partition, r.start, r.end) for r in split_ranges(ranges, MAX_RECORDS_PER_SPLIT)]

    def read_split(self, split: KafkaSplit) -> Iterator[pa.RecordBatch]:
        prefix = pa.scalar(f"partition={split.partition} offset=", pa.string())
        offset_range = OffsetRange(split.partition, split.start, split.end)
        for batch in read_offset_range(split.topic, self.spec.consumer_properties, offset_range):
            locators = pc.binary_join_element_wise(prefix, batch.column("offset").cast(pa.string()), "")
            values = batch.column("value")
            if self.input_format.type == "json":
                yield pa.RecordBatch.from_arrays([locators, values], schema=self._schema)
            else:
                yield self._parser_().parse_values(values.to_pylist(), locators.to_pylist())

    def _parser_(self) -> RecordParser:
        if self._parser is None:
            from sluice.connectors.formats import record_parser

            self._parser = record_parser(self.input_format, self.fields)
        return self._parser
