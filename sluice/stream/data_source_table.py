"""``sluice_table``: a Sluice data source as the changelog of a table, for a stream job's table join.

An offset is the set of segments the data source's timeline shows (each with the visible parts of its interval),
so a micro-batch replayed after a crash reads exactly the segments it read the first time. When the set changes
(a handoff, a compaction, a re-index), the batch carries the whole table again, plus a tombstone for every key of
each segment that left the set: the table join drops the tombstoned keys first, then takes the new rows, so a key
no segment holds any more is gone and every other key has its latest row. Rows not handed off yet (a running
task's) are not read. A tombstone's segment already deleted from deep storage (killed) cannot be read; its keys
then stay until they are overwritten.

Options: ``dataSource``, ``metadataUri``, ``deepStorage`` (as for ``spark.read.format("sluice")``), ``columns``
(JSON ``[[name, type], …]``, read besides ``__time``) and ``keys`` (JSON, the columns a tombstone keeps).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import BooleanType, StructField, StructType, TimestampType

from sluice.broker.spark_reader import ETERNITY_RANGE, SegmentInputPartition, plan_partitions, read_segment
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import DeepStorage, default_cache_dir
from sluice.spark_worker import start_task
from sluice.stream.topology import TIME

__all__ = ["DELETED", "SOURCE_NAME", "DataSourceTableReader", "NodeStorage", "register"]

log = logging.getLogger(__name__)

SOURCE_NAME = "sluice_table"
#: true on a tombstone: the key's row is gone from the table
DELETED = "sluice_deleted"

#: ``{"segments": [[segment id, loadSpec, [[start µs, end µs], …]], …]}``
Offsets = dict[str, Any]


@dataclass(frozen=True)
class NodeStorage:
    """Where a node keeps its data sources: what a job needs to read one."""

    metadata_uri: str
    deep_storage: str


@dataclass(frozen=True)
class RemovedSegment(InputPartition):
    """A segment that left the table: its keys, as tombstones."""

    segment: SegmentInputPartition


def _partition(entry: list[Any]) -> SegmentInputPartition:
    segment_id, load_spec, ranges = entry
    return SegmentInputPartition(segment_id, load_spec, tuple((start, end) for start, end in ranges))


class DataSourceTableReader(DataSourceStreamReader):
    """Plans on the driver from the metadata store; executors read segment files from deep storage."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.data_source = options["dataSource"]
        self.metadata_uri = options["metadataUri"]
        self.deep_storage = options["deepStorage"]
        self.keys = json.loads(options["keys"])
        self.rows = StructType([f for f in schema.fields if f.name != DELETED])
        self._metadata: MetadataStore | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_metadata": None}

    def initialOffset(self) -> Offsets:
        return {"segments": []}

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        if self._metadata is None:
            self._metadata = MetadataStore(self.metadata_uri)
        visible = plan_partitions(self._metadata.used_segments(self.data_source), ETERNITY_RANGE)
        return {"segments": [[p.segment_id, dict(p.load_spec), [list(r) for r in p.ranges]] for p in visible]}

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        if start == end:
            return []
        now = [_partition(entry) for entry in end["segments"]]
        removed = [RemovedSegment(p) for p in map(_partition, start["segments"]) if p not in now]
        return [*removed, *now]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        start_task()
        if isinstance(partition, SegmentInputPartition):
            return self._rows(partition, deleted=False)
        if isinstance(partition, RemovedSegment):
            return self._rows(partition.segment, deleted=True)
        return iter(())

    def _rows(self, segment: SegmentInputPartition, *, deleted: bool) -> Iterator[pa.RecordBatch]:
        try:
            path = DeepStorage.from_uri(self.deep_storage).fetch(segment.load_spec, default_cache_dir())
            if not path.exists():
                raise FileNotFoundError(path)
        except OSError as error:
            if not deleted:
                raise
            log.warning("segment %s left data source %s but its file is gone (%s): its keys are not dropped",
                        segment.segment_id, self.data_source, error)
            return
        schema = to_arrow_schema(StructType([*self.rows.fields, StructField(DELETED, BooleanType(), False)]),
                                 timezone="UTC")
        # a tombstone needs its key only: the segment's other columns are not read
        read = StructType([f for f in self.rows.fields if f.name in (TIME, *self.keys)]) if deleted else self.rows
        for batch in read_segment(str(path), segment, read):
            n = batch.num_rows
            columns = [batch.column(f.name) if f.name in read.fieldNames() else pa.nulls(n, f.type) for f in schema]
            columns[-1] = pa.array([deleted] * n, pa.bool_())
            yield pa.RecordBatch.from_arrays(columns, schema=schema)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint."""

    def stop(self) -> None:
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None


class DataSourceTableSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        from sluice.stream.compiler import spark_type

        columns = [StructField(name, spark_type(kind)) for name, kind in json.loads(self.options["columns"])]
        return StructType([StructField(TIME, TimestampType(), False), *columns,
                           StructField(DELETED, BooleanType(), False)])

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return DataSourceTableReader(self.options, schema)


def register(spark: Any) -> None:
    spark.dataSource.register(DataSourceTableSource)
