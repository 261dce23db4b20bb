"""The sketches Spark cannot build: Druid's quantilesDoublesSketch (DataSketches' classic quantiles sketch; Spark has
KLL) and the t-digest of the druid-tdigestsketch extension. A Python function on the executors builds one from a
group's numbers and merges the group's sketches; the broker reads the bytes with the same code (`sketches.py`, the
`datasketches` library, and `sluice.tdigest`)."""

from __future__ import annotations

import datasketches as ds
import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType

from sluice.task.ingest_plan import QUANTILES_FUNCTION, TDIGEST_FUNCTION
from sluice.tdigest import TDigest


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


def tdigest_sketch(values: list[float | None], digests: list[bytes | None], compression: int) -> bytes:
    """The t-digest of `values` (nulls are not values) merged with `digests`, serialized."""
    built = TDigest.of(np.array([v for v in values if v is not None], np.float64), compression)
    merged = [TDigest.deserialize(bytes(data)) for data in digests if data is not None]
    return TDigest.merged([built, *merged], compression).serialize() if merged else built.serialize()


def register(spark: SparkSession) -> None:
    """Make QUANTILES_FUNCTION and TDIGEST_FUNCTION callable from the session's SQL (registering again replaces
    them)."""
    spark.udf.register(QUANTILES_FUNCTION, F.udf(quantiles_sketch, BinaryType(), useArrow=True))
    spark.udf.register(TDIGEST_FUNCTION, F.udf(tdigest_sketch, BinaryType(), useArrow=True))
