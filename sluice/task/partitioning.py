"""Perfect-rollup partitioning of a batch task's segments (Druid's hashed, single_dim and range partitionsSpecs).

The persists are rolled up across the whole input (every row of one rollup key becomes one row: perfect
rollup), then each time chunk's rows are cut into shards, one segment file each:

- hashed: a row's shard is the hash of its partition dimensions (all dimensions when none are named) modulo
  the chunk's shard count (numShards, or the chunk's rows over targetRowsPerSegment, rounded up). Spark's
  murmur3 `hash`, not Druid's murmur3_32_abs of its serialized key: Sluice does not prune hashed shards.
- single_dim / range: rows ordered by the partition dimensions are cut into runs of about targetRowsPerSegment
  rows; rows with equal partition values always land in one shard, as a range shard spec promises. Each shard's
  spec carries its start (inclusive) and end (exclusive) values, null at the open ends.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from sluice.spec.batch import HashedPartitionsSpec, RangePartitionsSpec, SingleDimPartitionsSpec
from sluice.spec.expressions import quote_identifier
from sluice.task.ingest_plan import TIME
from sluice.task.spark_files import write_parquet


@dataclass(frozen=True)
class ShardedFile:
    bucket_start_millis: int
    shard: int
    path: Path
    num_rows: int


def shard_rows(rows: DataFrame, spec: HashedPartitionsSpec | SingleDimPartitionsSpec | RangePartitionsSpec,
               dimensions: list[str]) -> DataFrame:
    """`rows` (rolled up, with `__bucket`) with `__shard`, each (bucket, shard) in one Spark partition and
    sorted for its segment file."""
    counts = rows.groupBy("__bucket").agg(F.count(F.lit(1)).alias("__rows"))
    if isinstance(spec, HashedPartitionsSpec):
        keys = spec.partition_dimensions or dimensions
        shards = F.lit(spec.num_shards) if spec.num_shards else F.greatest(
            F.lit(1), F.ceil(F.col("__rows") / F.lit(spec.target_rows))).cast("int")
        sharded = rows.join(F.broadcast(counts.select("__bucket", shards.alias("__shards"))), "__bucket").withColumn(
            "__shard", F.pmod(F.hash(*(_col(k) for k in keys)), F.col("__shards")))
        order = [TIME, *dimensions]
    else:
        keys = spec.dimensions
        by_keys = Window.partitionBy("__bucket").orderBy(*(_col(k).asc_nulls_first() for k in keys))
        sharded = rows.join(F.broadcast(counts), "__bucket").withColumn("__rank", F.rank().over(by_keys)).withColumn(
            "__shard", F.floor((F.col("__rank") - 1) / F.lit(spec.target_rows)).cast("int"))
        order = [*keys, TIME]
    return (sharded.drop("__rows", "__shards", "__rank").repartition("__bucket", "__shard")
            .sortWithinPartitions("__bucket", "__shard", *(_col(c) for c in order)))


def write_shards(rows: DataFrame, staging_dir: Path) -> list[ShardedFile]:
    write_parquet(rows, staging_dir, partition_by=["__bucket", "__shard"])
    files = []
    for path in sorted(staging_dir.glob("__bucket=*/__shard=*/*.parquet")):
        files.append(ShardedFile(int(path.parent.parent.name.split("=", 1)[1]), int(path.parent.name.split("=", 1)[1]),
                                 path, pq.ParquetFile(path).metadata.num_rows))
    return [f for f in files if f.num_rows]


def shard_specs(files: list[ShardedFile], spec: HashedPartitionsSpec | SingleDimPartitionsSpec | RangePartitionsSpec,
                dimensions: list[str]) -> dict[Path, dict[str, Any]]:
    """Each file's Druid shard spec; partition numbers are 0..n-1 within a time chunk, n its core partitions."""
    by_bucket: dict[int, list[ShardedFile]] = {}
    for file in sorted(files, key=lambda f: (f.bucket_start_millis, f.shard)):
        by_bucket.setdefault(file.bucket_start_millis, []).append(file)
    specs: dict[Path, dict[str, Any]] = {}
    for shards in by_bucket.values():
        n = len(shards)
        if isinstance(spec, HashedPartitionsSpec):
            buckets = max(f.shard for f in shards) + 1
            for i, file in enumerate(shards):
                specs[file.path] = {"type": "hashed", "partitionNum": i, "partitions": n, "bucketId": file.shard,
                                    "numBuckets": buckets, "partitionDimensions": spec.partition_dimensions or [],
                                    "partitionFunction": spec.partition_function}
            continue
        starts = [_first_values(f.path, spec.dimensions) for f in shards]
        for i, file in enumerate(shards):
            start, end = (starts[i] if i else None), (starts[i + 1] if i + 1 < n else None)
            if isinstance(spec, SingleDimPartitionsSpec):
                specs[file.path] = {"type": "single", "dimension": spec.partition_dimension,
                                    "start": start[0] if start else None, "end": end[0] if end else None,
                                    "partitionNum": i, "numCorePartitions": n}
            else:
                specs[file.path] = {"type": "range", "partitionDimensions": spec.dimensions, "start": start,
                                    "end": end, "partitionNum": i, "numCorePartitions": n}
    return specs


def _first_values(path: Path, columns: list[str]) -> list[Any]:
    """The partition values of a shard's first row: its file is sorted on them."""
    first = pq.ParquetFile(path).read_row_group(0, columns=columns).slice(0, 1).to_pylist()[0]
    return [None if first[c] is None else str(first[c]) for c in columns]


def _col(name: str) -> Any:
    return F.col(quote_identifier(name))
