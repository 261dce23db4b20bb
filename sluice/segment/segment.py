"""Segment identity: intervals, segment ids and the DataSegment descriptor.

A segment is an immutable Parquet file plus the descriptor defined here. Its identity follows
Druid's ``SegmentId``: data source, interval, version and partition number. The descriptor's JSON
(`DataSegment.to_payload`) is Druid's DataSegment JSON, stored as the ``payload`` column of
``druid_segments``, so the metadata store holds the same documents a Druid user knows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sluice.spec.granularity import ETERNITY_END, ETERNITY_START
from sluice.timestamps import format_timestamp, parse_timestamp

#: Druid's on-disk format version of a segment; Sluice writes it for compatibility only.
BINARY_VERSION = 9


def _floor_to_millis(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(f"interval bound {value!r} has no time zone; expected a tz-aware UTC datetime")
    utc = value.astimezone(timezone.utc)
    return utc.replace(microsecond=utc.microsecond - utc.microsecond % 1000)


@dataclass(frozen=True, order=True)
class Interval:
    """A half-open time range ``[start, end)`` in UTC with millisecond precision.

    Bounds are floored to milliseconds because Druid's instants are milliseconds: that keeps
    ``Interval.parse(str(i)) == i`` and therefore segment ids stable across a round trip
    through the metadata store. Ordering is (start, end), the order Druid sorts segments by.
    """

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        object.__setattr__(self, "start", _floor_to_millis(self.start))
        object.__setattr__(self, "end", _floor_to_millis(self.end))
        if self.end < self.start:
            raise ValueError(f"interval end {self.end.isoformat()} is before its start {self.start.isoformat()}")

    @classmethod
    def parse(cls, text: str) -> Interval:
        """Parse Druid's ``start/end`` form, e.g. ``2015-09-12T00:00:00.000Z/2015-09-13T00:00:00.000Z``."""
        start, sep, end = text.partition("/")
        if not sep or "/" in end:
            raise ValueError(f"interval {text!r} is not of the form 'start/end'")
        return cls(parse_timestamp(start), parse_timestamp(end))

    def __str__(self) -> str:
        return f"{format_timestamp(self.start)}/{format_timestamp(self.end)}"

    def overlaps(self, other: Interval) -> bool:
        """True when the two intervals share at least one instant (abutting ones do not)."""
        return self.start < other.end and other.start < self.end

    def contains(self, other: Interval | datetime) -> bool:
        """True when ``other`` (an interval or an instant) lies entirely within this interval."""
        if isinstance(other, Interval):
            return self.start <= other.start and other.end <= self.end
        return self.start <= other < self.end

    def intersection(self, other: Interval) -> Interval | None:
        """The common part of two overlapping intervals, or None when they do not overlap."""
        if not self.overlaps(other):
            return None
        return Interval(max(self.start, other.start), min(self.end, other.end))


#: Every instant Sluice can represent; the range of a lookup that should see everything.
ETERNITY = Interval(ETERNITY_START, ETERNITY_END)


@dataclass(frozen=True, order=True)
class SegmentId:
    """Druid's segment identity. Sorts as Druid does: data source, start, end, version, partition.

    ``str()`` is Druid's ``dataSource_start_end_version`` with ``_partitionNum`` appended only when
    the partition is not 0, so ids written by Sluice read exactly like Druid's.
    """

    data_source: str
    interval: Interval
    version: str
    partition_num: int = 0

    def __str__(self) -> str:
        start, end = format_timestamp(self.interval.start), format_timestamp(self.interval.end)
        text = f"{self.data_source}_{start}_{end}_{self.version}"
        return text if self.partition_num == 0 else f"{text}_{self.partition_num}"


def numbered_shard_spec(partition_num: int, partitions: int = 0) -> dict[str, Any]:
    """Druid's NumberedShardSpec JSON.

    ``partitions`` is the number of *core* partitions: a time chunk is complete (queryable) only
    when partitions ``0..partitions-1`` are all present. Streaming appends use 0 core partitions,
    so every appended partition is queryable on its own.
    """
    return {"type": "numbered", "partitionNum": partition_num, "partitions": partitions}


@dataclass(frozen=True)
class DataSegment:
    """The descriptor of one immutable segment file, as published to the metadata store.

    Invariant: ``shard_spec["partitionNum"] == id.partition_num`` (the id is derived from the
    shard spec in Druid's JSON, so the two can never disagree once stored).
    """

    id: SegmentId
    dimensions: list[str]
    metrics: list[str]
    #: The metricsSpec entries that produced ``metrics``; needed to merge or re-aggregate rows.
    aggregators: list[dict[str, Any]]
    shard_spec: dict[str, Any]
    num_rows: int
    size: int
    #: Where the file lives: ``{"type":"local","path":...}`` or ``{"type":"s3","bucket":..,"key":..}``.
    load_spec: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        shard_partition = self.shard_spec.get("partitionNum", 0)
        if shard_partition != self.id.partition_num:
            raise ValueError(
                f"segment {self.id}: shardSpec.partitionNum is {shard_partition}, "
                f"expected the id's partition {self.id.partition_num}"
            )

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def data_source(self) -> str:
        return self.id.data_source

    @property
    def interval(self) -> Interval:
        return self.id.interval

    @property
    def version(self) -> str:
        return self.id.version

    @property
    def core_partitions(self) -> int:
        """Core partitions of the shard spec (0 for linear/none specs: any subset is complete); Druid's range
        shard specs call them numCorePartitions."""
        return int(self.shard_spec.get("partitions", self.shard_spec.get("numCorePartitions", 0)) or 0)

    def to_payload(self) -> dict[str, Any]:
        """Druid's DataSegment JSON plus the ``num_rows`` and ``aggregators`` Sluice needs."""
        return {
            "dataSource": self.id.data_source,
            "interval": str(self.id.interval),
            "version": self.id.version,
            "loadSpec": self.load_spec,
            "dimensions": ",".join(self.dimensions),
            "metrics": ",".join(self.metrics),
            "shardSpec": self.shard_spec,
            "binaryVersion": BINARY_VERSION,
            "size": self.size,
            "identifier": str(self.id),
            "num_rows": self.num_rows,
            "aggregators": self.aggregators,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> DataSegment:
        """Read Druid's DataSegment JSON (a Druid-written payload lacks num_rows/aggregators)."""
        shard_spec = payload.get("shardSpec") or {"type": "none"}
        return cls(
            id=SegmentId(
                data_source=payload["dataSource"],
                interval=Interval.parse(payload["interval"]),
                version=payload["version"],
                partition_num=int(shard_spec.get("partitionNum", 0)),
            ),
            dimensions=_split_names(payload.get("dimensions", "")),
            metrics=_split_names(payload.get("metrics", "")),
            aggregators=list(payload.get("aggregators", [])),
            shard_spec=shard_spec,
            num_rows=int(payload.get("num_rows", 0)),
            size=int(payload.get("size", 0)),
            load_spec=dict(payload.get("loadSpec", {})),
        )


def _split_names(joined: str) -> list[str]:
    return [name for name in joined.split(",") if name]
