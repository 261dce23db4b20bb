"""A task's Parquet files that its Spark jobs write and read: persists, staged segments, shards.

In local mode the executors are threads of the task's driver and share its disk: Spark's writer and reader do the
work in parallel. On a cluster an executor's disk is another machine's: a path of the task's work directory does not
exist there, and a file an executor wrote to it would stay on that machine (with the output committer's algorithm 2,
the driver would find an empty directory and the rows would be lost without an error). There, the rows come back to
the task as Arrow batches (as a `collect` does) and the task writes the files with pyarrow, in Spark's layout; the
files it reads go to the executors as Arrow tables. Druid's peons hold their persists the same way: the executors
read, parse and roll up, the task keeps what it has read.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

__all__ = ["executors_share_disk", "read_parquet", "write_parquet"]


def executors_share_disk(spark: SparkSession) -> bool:
    """Whether the executors see the driver's files: only in local mode."""
    return spark.sparkContext.master.startswith("local")


def write_parquet(rows: DataFrame, directory: Path, *, partition_by: Sequence[str] = (),
                  max_rows_per_file: int | None = None, dictionary: bool = True) -> None:
    """`rows` in `directory`, replacing what it held: one folder per value of the `partition_by` columns
    (``name=value``, without those columns, as Spark's `partitionBy`), files of at most `max_rows_per_file` rows in
    the order of `rows`' partitions."""
    if executors_share_disk(rows.sparkSession):
        writer = rows.write.mode("overwrite").option("parquet.enable.dictionary", str(dictionary).lower())
        if max_rows_per_file:
            writer = writer.option("maxRecordsPerFile", max_rows_per_file)
        writer.partitionBy(*partition_by).parquet(str(directory))
        return
    table = rows.toArrow()
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    if not partition_by:  # Spark writes an empty file too: a reader finds the columns
        _write_files(table, directory, max_rows_per_file, dictionary)
        return
    for key in table.select(list(partition_by)).group_by(list(partition_by)).aggregate([]).to_pylist():
        mask = None
        for name, value in key.items():
            equal = pc.equal(table[name], value)
            mask = equal if mask is None else pc.and_(mask, equal)
        folder = directory.joinpath(*(f"{name}={value}" for name, value in key.items()))
        folder.mkdir(parents=True)
        _write_files(table.filter(mask).drop_columns(list(partition_by)), folder, max_rows_per_file, dictionary)


def read_parquet(spark: SparkSession, directories: Sequence[Path], *, merge_schema: bool = False) -> DataFrame:
    """The rows of the Parquet files under `directories`, with the columns of ``name=value`` folders (as Spark's
    partition discovery: integers as INT or BIGINT). `merge_schema`: files with different columns are read as one
    table of all of them, null where a file has none (on a cluster, always).

    Sluice partitions files by integers only (bucket millis, shard numbers), never by a null."""
    if executors_share_disk(spark):
        return spark.read.option("mergeSchema", merge_schema).parquet(*map(str, directories))
    tables = [_with_folder_columns(pq.read_table(path), path.relative_to(directory).parent)
              for directory in directories for path in sorted(directory.rglob("*.parquet"))]
    if not tables:
        raise FileNotFoundError(f"no Parquet file under {', '.join(map(str, directories))}")
    return spark.createDataFrame(pa.concat_tables(tables, promote_options="permissive"))


def _write_files(table: pa.Table, folder: Path, max_rows_per_file: int | None, dictionary: bool) -> None:
    size = max_rows_per_file or max(table.num_rows, 1)
    job = uuid.uuid4()
    for index, start in enumerate(range(0, max(table.num_rows, 1), size)):
        # Spark's segments hold __time as TIMESTAMP_MILLIS (spark_session); Arrow hands microseconds
        pq.write_table(table.slice(start, size), folder / f"part-{index:05d}-{job}.parquet", use_dictionary=dictionary,
                       coerce_timestamps="ms", allow_truncated_timestamps=True)


def _with_folder_columns(table: pa.Table, folders: Path) -> pa.Table:
    for part in folders.parts:
        name, _, text = part.partition("=")
        value = int(text)
        kind = pa.int32() if -2**31 <= value < 2**31 else pa.int64()
        table = table.append_column(name, pa.repeat(pa.scalar(value, kind), table.num_rows))
    return table
