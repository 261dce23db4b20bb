"""The one sketch Spark cannot build: Druid's quantilesDoublesSketch (DataSketches' classic quantiles sketch; Spark
has KLL). A Python function on the executors builds it from a group's numbers and merges the group's sketches; the
broker's `sketches.py` reads the bytes with the same library."""

from __future__ import annotations

import datasketches as ds
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

from sluice.task.ingest_plan import QUANTILES_FUNCTION


def quantiles_sketch(values: list[float | None], sketches: list[bytes | None], k: int) -> bytes:
    """The sketch of `values` (nulls are not values) merged with `sketches`, serialized."""
    union = ds.quantiles_doubles_sketch(k)
    for value in values:
        if value is not None:
            union.update(value)
    for data in sketches:
        if data is not None:
            union.merge(ds.quantiles_doubles_sketch.deserialize(bytes(data)))
    return union.serialize()


def register(spark: SparkSession) -> None:
    """Make QUANTILES_FUNCTION callable from the session's SQL (registering again replaces it)."""
    spark.udf.register(QUANTILES_FUNCTION, F.udf(quantiles_sketch, BinaryType(), useArrow=True))
