"""``sluice``: a PySpark batch data source over the segment timeline the broker queries.

For data larger than one machine, a Spark job reads a data source the way Druid SQL sees it: only used
segments, and of those only what the versioned timeline shows (a higher version overshadows a lower one
where they overlap)::

    register(spark)
    df = (spark.read.format("sluice")
          .option("dataSource", "wiki")
          .option("metadataUri", "sqlite:///var/sluice/metadata.db")
          .option("deepStorage", "file:///var/sluice/segments")
          .option("interval", "2026-01-01/2026-01-02")   # optional, Druid's start/end
          .option("cacheDir", "/tmp/segment-cache")       # optional, where S3 segments are downloaded
          .load())

The driver resolves the timeline from the metadata store and makes one input partition per visible
segment file. Like the SegmentDescriptor Druid's broker sends to a historical, a partition carries the
parts of the segment's interval the timeline shows, not the whole interval: the rest is overshadowed or
outside the query, and the executor drops those rows. Executors fetch the file from deep storage and yield
Arrow batches. Comparisons of ``__time`` with a constant are pushed down (Spark's
``spark.sql.python.filterPushdown.enabled``, which `register` turns on): they prune segments, Parquet row
groups and rows.

The schema is read from the footers of the segment files to be read (``__time`` TIMESTAMP NOT NULL first,
then every other column in order of first appearance, typed as stored). ``.schema(...)`` skips that; its
columns missing from a file read as NULL. Every action plans on the timeline as it is then, as a broker
query does.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
from pyspark.sql.types import StructField, StructType

from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import DeepStorage, default_cache_dir
from sluice.segment.segment import ETERNITY, DataSegment, Interval
from sluice.segment.timeline import VersionedIntervalTimeline
from sluice.spark_worker import start_task

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["SOURCE_NAME", "ReadOptions", "SegmentInputPartition", "SluiceDataSource", "plan_partitions",
           "push_time_filters", "read_segment", "register", "spark_schema"]

SOURCE_NAME = "sluice"
TIME_COLUMN = "__time"

#: Half-open ``[start, end)`` in microseconds since the epoch: Spark's timestamp precision, so bounds taken
#: from Spark's filters are exact (Druid's instants are milliseconds, which microseconds hold exactly).
TimeRange = tuple[int, int]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_REQUIRED_OPTIONS = ("dataSource", "metadataUri", "deepStorage")
_OPTIONS = (*_REQUIRED_OPTIONS, "interval", "cacheDir")


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // _MICROSECOND


def _instant(micros: int) -> datetime:
    return _EPOCH + micros * _MICROSECOND


ETERNITY_RANGE: TimeRange = (_micros(ETERNITY.start), _micros(ETERNITY.end))


def _intersect(a: TimeRange, b: TimeRange) -> TimeRange | None:
    start, end = max(a[0], b[0]), min(a[1], b[1])
    return (start, end) if start < end else None


@dataclass(frozen=True)
class ReadOptions:
    """The reader's options, checked on the driver so a mistake fails ``load()`` rather than a task."""

    data_source: str
    metadata_uri: str
    deep_storage: str
    time_range: TimeRange = ETERNITY_RANGE
    cache_dir: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        """Spark passes option names lower-cased; errors name them as the user writes them."""
        by_key = {name.lower(): name for name in _OPTIONS}
        unknown = sorted(key for key in options if key.lower() not in by_key)
        if unknown:
            raise ValueError(f"data source {SOURCE_NAME!r}: unknown option(s) {unknown}; expected {list(_OPTIONS)}")
        values = {by_key[key.lower()]: value for key, value in options.items()}
        missing = [name for name in _REQUIRED_OPTIONS if not values.get(name)]
        if missing:
            raise ValueError(f"data source {SOURCE_NAME!r} needs option(s) {missing}")
        try:
            DeepStorage.from_uri(values["deepStorage"])
        except ValueError as error:
            raise ValueError(f"data source {SOURCE_NAME!r}, option deepStorage: {error}") from error
        time_range = ETERNITY_RANGE
        if values.get("interval"):
            try:
                interval = Interval.parse(values["interval"])
            except ValueError as error:
                raise ValueError(
                    f"data source {SOURCE_NAME!r}, option interval: expected ISO-8601 'start/end' such as "
                    f"'2026-01-01/2026-01-02', found {values['interval']!r} ({error})"
                ) from error
            time_range = (_micros(interval.start), _micros(interval.end))
        return cls(values["dataSource"], values["metadataUri"], values["deepStorage"], time_range,
                   values.get("cacheDir") or None)


@dataclass(frozen=True)
class SegmentInputPartition(InputPartition):
    """One segment file and the visible parts of its interval (sorted, disjoint): one Spark task."""

    segment_id: str
    load_spec: Mapping[str, Any]
    ranges: tuple[TimeRange, ...]


def push_time_filters(filters: Iterable[Filter], time_range: TimeRange) -> tuple[TimeRange | None, list[Filter]]:
    """Narrow ``time_range`` by the comparisons of ``__time`` with an instant; return it (None: no row can
    match) and the filters Spark must still apply. Spark ANDs the filters, so each one narrows the range."""
    remaining: list[Filter] = []
    narrowed: TimeRange | None = time_range
    for item in filters:
        bound = _time_bound(item)
        if bound is None:
            remaining.append(item)
        elif narrowed is not None:
            narrowed = _intersect(narrowed, bound)
    return narrowed, remaining


def _time_bound(item: Filter) -> TimeRange | None:
    """The range a ``__time`` comparison keeps, or None when it is not one (``__time`` is never NULL, so
    ``<=>`` is ``=``)."""
    attribute, value = getattr(item, "attribute", None), getattr(item, "value", None)
    if attribute != (TIME_COLUMN,) or not isinstance(value, datetime) or value.tzinfo is None:
        return None
    at = _micros(value)
    low, high = ETERNITY_RANGE
    if isinstance(item, GreaterThan):
        return at + 1, high
    if isinstance(item, GreaterThanOrEqual):
        return at, high
    if isinstance(item, LessThan):
        return low, at
    if isinstance(item, LessThanOrEqual):
        return low, at + 1
    if isinstance(item, EqualTo | EqualNullSafe):
        return at, at + 1
    return None


def plan_partitions(segments: Sequence[DataSegment], time_range: TimeRange | None) -> list[SegmentInputPartition]:
    """One partition per segment visible within ``time_range``, in segment id order.

    A partially overshadowed segment is visible in several pieces of the timeline; it is still read once,
    with every piece as a range.
    """
    if time_range is None or not segments:
        return []
    start, end = max(time_range[0], ETERNITY_RANGE[0]), min(time_range[1], ETERNITY_RANGE[1])
    if start >= end:
        return []
    # Interval floors to milliseconds: round the end up so the lookup covers the whole range.
    lookup = Interval(_instant(start), _instant(-(-end // 1000) * 1000))
    parts = VersionedIntervalTimeline.from_segments(segments).visible_parts(lookup)
    partitions = []
    for segment in sorted((s for s in segments if s.id in parts), key=lambda s: s.id):
        ranges = [visible for part in parts[segment.id]
                  if (visible := _intersect((_micros(part.start), _micros(part.end)), (start, end))) is not None]
        if ranges:
            partitions.append(SegmentInputPartition(str(segment.id), dict(segment.load_spec), tuple(ranges)))
    return partitions


def spark_schema(file_schemas: Sequence[pa.Schema]) -> StructType:
    """The columns of a data source over these files: ``__time`` (TIMESTAMP NOT NULL) first, then the others
    in order of first appearance, nullable (a column one file lacks reads as NULL there).

    A column stored with different types in different files gets their common type (a long dimension that
    became double reads as double); types with none (a long and a string) read as string, which is what
    Druid SQL reports for such a column.
    """
    types: dict[str, list[pa.DataType]] = {TIME_COLUMN: []}
    for schema in file_schemas:
        for field in schema:
            value_type = field.type.value_type if pa.types.is_dictionary(field.type) else field.type
            types.setdefault(field.name, []).append(value_type)
    if not types[TIME_COLUMN]:
        raise ValueError(f"the segment files have no {TIME_COLUMN} column")
    fields = []
    for name, found in types.items():
        try:
            common = pa.unify_schemas([pa.schema([(name, kind)]) for kind in found],
                                      promote_options="permissive").field(name).type
        except (pa.ArrowTypeError, pa.ArrowInvalid):
            common = pa.string()
        fields.append(StructField(name, from_arrow_type(common, prefer_timestamp_ntz=False),
                                  nullable=name != TIME_COLUMN))
    return StructType(fields)


def _used_segments(options: ReadOptions) -> list[DataSegment]:
    """The data source's used segments; a data source without any is an error naming it."""
    metadata = MetadataStore(options.metadata_uri)
    try:
        segments = metadata.used_segments(options.data_source)
        if not segments:
            raise ValueError(
                f"data source {SOURCE_NAME!r}: dataSource [{options.data_source}] has no used segments in the "
                f"metadata store; data sources there: {metadata.data_sources()}"
            )
        return segments
    finally:
        metadata.close()


def _cache_dir(options: ReadOptions) -> Path:
    return Path(options.cache_dir) if options.cache_dir else default_cache_dir()


def _fetch(options: ReadOptions, partition: SegmentInputPartition) -> str:
    return str(DeepStorage.from_uri(options.deep_storage).fetch(partition.load_spec, _cache_dir(options)))


class _SegmentReader(DataSourceReader):
    """Plans on the driver, reads on the executors; holds only options, so it pickles small."""

    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self.time_range: TimeRange | None = options.time_range

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802 (PySpark's name)
        self.time_range, remaining = push_time_filters(filters, self.options.time_range)
        return remaining

    def partitions(self) -> list[InputPartition]:
        if self.time_range is None:
            return []
        return list(plan_partitions(_used_segments(self.options), self.time_range))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        start_task()
        if not isinstance(partition, SegmentInputPartition):
            # Spark replaces an empty plan with one placeholder InputPartition(None): nothing to read.
            return iter(())
        return read_segment(_fetch(self.options, partition), partition, self.schema)


def read_segment(path: str, partition: SegmentInputPartition, schema: StructType) -> Iterator[pa.RecordBatch]:
    """The rows of one segment file within the partition's ranges, as batches of exactly ``schema``."""
    target = to_arrow_schema(schema, timezone="UTC")
    dataset = ds.dataset(path, format="parquet")
    if TIME_COLUMN not in dataset.schema.names:
        raise ValueError(f"segment {partition.segment_id} ({path}) has no {TIME_COLUMN} column")
    # Bounds in the file's own time zone (none or UTC): Arrow compares timestamps of any unit, not of both kinds.
    bound_type = pa.timestamp("us", tz=dataset.schema.field(TIME_COLUMN).type.tz)
    column = ds.field(TIME_COLUMN)
    keep = None
    for start, end in partition.ranges:
        piece = (column >= pa.scalar(start, bound_type)) & (column < pa.scalar(end, bound_type))
        keep = piece if keep is None else keep | piece
    stored = [name for name in target.names if name in dataset.schema.names]
    for batch in dataset.to_batches(columns=stored, filter=keep):
        if batch.num_rows:
            yield _conform(batch, target)


def _conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Cast to the declared types (Spark rejects any other) and fill the columns this file lacks."""
    columns = [
        batch.column(field.name).cast(field.type) if field.name in batch.schema.names
        else pa.nulls(batch.num_rows, field.type)
        for field in target
    ]
    return pa.RecordBatch.from_arrays(columns, schema=target)


class SluiceDataSource(DataSource):
    """``spark.read.format("sluice")``; options in the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        options = ReadOptions.parse(self.options)
        segments = _used_segments(options)
        # Nothing visible in the interval: the columns still come from one of the data source's files, as
        # the broker's do.
        partitions = plan_partitions(segments, options.time_range) or plan_partitions(segments, ETERNITY_RANGE)[:1]
        return spark_schema([pq.read_schema(_fetch(options, partition)) for partition in partitions])

    def reader(self, schema: StructType) -> DataSourceReader:
        return _SegmentReader(ReadOptions.parse(self.options), schema)


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("sluice")`` available in this session.

    Also turns on Spark's filter pushdown for Python data sources (off by default, and a reader that
    implements ``pushFilters`` fails while it is off); readers that do not implement it are unaffected.
    """
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(SluiceDataSource)
