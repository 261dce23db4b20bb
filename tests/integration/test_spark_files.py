"""A task's files through the driver (`sluice/task/spark_files.py`), as on a cluster, against Spark's own writer and
reader, as in local mode: the same folders, files of at most the asked rows, and the same rows and types read back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from sluice.task import spark_files

pytestmark = pytest.mark.spark


def test_files_through_the_driver_are_the_ones_spark_writes(spark: SparkSession, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    start = datetime(2024, 1, 1, tzinfo=UTC)
    rows = spark.createDataFrame(
        [(start + timedelta(minutes=i), 1704067200000 + 3600000 * (i % 2), f"p{i % 3}", [f"t{i}", "x"],
          {"json": f'{{"n": {i}}}'}, i) for i in range(7)],
        "__time timestamp, __bucket bigint, page string, tags array<string>, payload struct<json: string>, "
        "added bigint").repartition("__bucket").sortWithinPartitions("__bucket", "__time")

    def files_and_rows(through_driver: bool, folder: Path) -> tuple[list[tuple[str, int]], list[tuple], Any]:
        monkeypatch.setattr(spark_files, "executors_share_disk", lambda _: not through_driver)
        spark_files.write_parquet(rows, folder, partition_by=["__bucket"], max_rows_per_file=3)
        files = sorted((p.parent.name, pq.ParquetFile(p).metadata.num_rows) for p in folder.rglob("*.parquet"))
        read = spark_files.read_parquet(spark, [folder])
        return files, sorted(read.select(*rows.columns).collect()), read.schema

    by_spark, spark_rows, spark_schema = files_and_rows(False, tmp_path / "spark")
    driver_files, driver_rows, driver_schema = files_and_rows(True, tmp_path / "driver")
    assert driver_files == by_spark == [("__bucket=1704067200000", 1), ("__bucket=1704067200000", 3),
                                            ("__bucket=1704070800000", 3)]
    assert driver_rows == spark_rows and len(driver_rows) == 7
    assert {f.name: f.dataType for f in driver_schema} == {f.name: f.dataType for f in spark_schema}
    schema = pq.read_schema(next((tmp_path / "driver").rglob("*.parquet")))
    assert str(schema.field("__time").type) == "timestamp[ms, tz=UTC]"  # as Spark writes segments (TIMESTAMP_MILLIS)
