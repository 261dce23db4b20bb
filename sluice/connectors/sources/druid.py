"""Druid's `druid` input source: the rows of a data source's segments within an interval, to re-index them
(into the same data source, replacing it, or into another).

The coordinator lists the segments the timeline shows within the interval (a segment a newer version partly
overshadows is read only where it is visible); each is a split. A reader fetches the segment file from deep
storage and returns its rows within the split's visible ranges that pass the source's `filter`, as strings:
`__time` in epoch milliseconds (read it with `"timestampSpec": {"column": "__time", "format": "millis"}`),
dimensions and metrics by name.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sluice.connectors.base import BoundedSource
from sluice.connectors.formats import stringify
from sluice.connectors.records import column_records_schema
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import DeepStorage, default_cache_dir
from sluice.segment.segment import Interval
from sluice.segment.timeline import VersionedIntervalTimeline
from sluice.spec.filters import AndFilter, BoundFilter, DimFilter, InFilter, NotFilter, OrFilter, SelectorFilter
from sluice.spec.input_source import DruidInputSource
from sluice.spec.intervals import parse_interval

TIME = "__time"


@dataclass(frozen=True)
class SegmentSplit:
    segment_id: str
    load_spec: dict[str, Any]
    #: the parts of the segment's interval the split reads: visible in the timeline and inside the interval
    ranges: tuple[tuple[int, int], ...]
    size: int

    @property
    def split_id(self) -> str:
        return self.segment_id

    @property
    def size_bytes(self) -> int:
        return self.size


class DruidSource(BoundedSource[SegmentSplit]):
    def __init__(self, spec: DruidInputSource, fields: Sequence[str], splits: list[SegmentSplit],
                 deep_storage: DeepStorage) -> None:
        self.spec = spec
        self.fields = list(fields)
        self._splits = splits
        self._deep_storage = deep_storage

    @classmethod
    def for_task(cls, spec: DruidInputSource, fields: Sequence[str], metadata: MetadataStore,
                 deep_storage: DeepStorage) -> DruidSource:
        """Plan the splits from the metadata store now, on the driver: the segments a task re-indexes are the
        ones visible when it starts."""
        interval = Interval(*parse_interval(spec.interval))
        segments = metadata.used_segments(spec.data_source)
        if not segments:
            raise ValueError(f"dataSource: data source [{spec.data_source}] has no segments to read")
        parts = VersionedIntervalTimeline.from_segments(segments).visible_parts(interval)
        splits = []
        for segment in sorted((s for s in segments if s.id in parts), key=lambda s: s.id):
            ranges = tuple((_millis(p.start), _millis(p.end)) for part in parts[segment.id]
                           if (p := part.intersection(interval)) is not None)
            if ranges and segment.num_rows:
                splits.append(SegmentSplit(str(segment.id), dict(segment.load_spec), ranges, segment.size))
        return cls(spec, fields, splits, deep_storage)

    def output_schema(self) -> pa.Schema:
        return column_records_schema(self.fields)

    def enumerate_splits(self) -> list[SegmentSplit]:
        return list(self._splits)

    def read_split(self, split: SegmentSplit) -> Iterator[pa.RecordBatch]:
        path = self._deep_storage.fetch(split.load_spec, default_cache_dir())
        table = pq.read_table(path)
        millis = pc.cast(pc.cast(table[TIME], pa.timestamp("ms", tz="UTC")), pa.int64())
        keep = None
        for start, end in split.ranges:
            inside = pc.and_(pc.greater_equal(millis, start), pc.less(millis, end))
            keep = inside if keep is None else pc.or_(keep, inside)
        if self.spec.filter is not None:
            keep = pc.and_(keep, _matches(self.spec.filter, table))
        rows = table.filter(keep)
        rows = rows.set_column(rows.schema.get_field_index(TIME), TIME,
                               pc.cast(pc.cast(rows[TIME], pa.timestamp("ms", tz="UTC")), pa.int64()))
        wanted = self._wanted_columns()
        for batch in rows.to_batches(max_chunksize=65_536):
            n = batch.num_rows
            columns = [pa.array([f"{split.segment_id} row {i}" for i in range(n)], pa.string()), pa.nulls(n, pa.string())]
            for name in self.fields:
                present = name in batch.schema.names and (name == TIME or name in wanted)
                columns.append(stringify(batch.column(name)) if present else pa.nulls(n, pa.string()))
            yield pa.RecordBatch.from_arrays(columns, schema=self.output_schema())

    def _wanted_columns(self) -> set[str]:
        """The source's `dimensions` and `metrics` (all of the segment's when not given)."""
        if self.spec.dimensions is None and self.spec.metrics is None:
            return set(self.fields)
        return {*(self.spec.dimensions or []), *(self.spec.metrics or [])}


def _millis(instant: Any) -> int:
    return int(instant.timestamp() * 1000)


def _matches(dim_filter: DimFilter, table: pa.Table) -> pa.Array:
    """A Druid dimension filter over a segment's rows; values compare as strings, bounds by their ordering."""
    def column(name: str) -> pa.Array:
        if name not in table.column_names:
            return pa.nulls(table.num_rows, pa.string())
        return stringify(table[name].combine_chunks())

    if isinstance(dim_filter, SelectorFilter):
        values = column(dim_filter.dimension)
        return pc.is_null(values) if dim_filter.value is None else pc.fill_null(pc.equal(values, dim_filter.value), False)
    if isinstance(dim_filter, InFilter):
        values = column(dim_filter.dimension)
        found = pc.is_in(values, pa.array([v for v in dim_filter.values if v is not None], pa.string()))
        return pc.or_(found, pc.is_null(values)) if None in dim_filter.values else found
    if isinstance(dim_filter, BoundFilter):
        values: Any = column(dim_filter.dimension)
        numeric = dim_filter.ordering == "numeric"
        if numeric:
            values = pc.cast(values, pa.float64(), safe=False)
        keep = pc.is_valid(values)
        for bound, strict, op_strict, op in ((dim_filter.lower, dim_filter.lower_strict, pc.greater, pc.greater_equal),
                                             (dim_filter.upper, dim_filter.upper_strict, pc.less, pc.less_equal)):
            if bound is not None:
                limit = float(bound) if numeric else str(bound)
                keep = pc.and_(keep, (op_strict if strict else op)(values, limit))
        return pc.fill_null(keep, False)
    if isinstance(dim_filter, AndFilter | OrFilter):
        parts = [_matches(f, table) for f in dim_filter.fields]
        combine = pc.and_ if isinstance(dim_filter, AndFilter) else pc.or_
        result = parts[0]
        for part in parts[1:]:
            result = combine(result, part)
        return result
    if isinstance(dim_filter, NotFilter):
        return pc.invert(_matches(dim_filter.field, table))
    raise ValueError(f"filter type {getattr(dim_filter, 'type', dim_filter)!r} is not supported by the druid input source")

