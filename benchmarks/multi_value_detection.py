"""What finding multi-value string dimensions costs a persist (issue 16): every persist checks each string dimension
of each kept row for a JSON array of strings, so that the merge at publish stores those dimensions as lists.

Three noop Spark jobs over the same rows (8 string dimensions, one of them holding an array in 1 row of 97), one
run after another, best of `--reps`:

  none        the rows' count alone: what reading and typing them costs without the check
  per_column  a count of the rows with several values per dimension (8 aggregates: how persists counted them before)
  mask        Sluice's check: one BIGINT of bits or-ed over the rows (`pipeline.multi_value_mask`)

Both checks must find the same dimension. The per-row cost is (check - none) / rows.

    python benchmarks/multi_value_detection.py --rows 4000000 --json
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from common import emit, log, machine

DIMENSIONS = 8


def run(args: argparse.Namespace) -> dict[str, Any]:
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from sluice.task import spark_session
    from sluice.task.ingest_plan import IS_MULTI_VALUE_SQL
    from sluice.task.pipeline import multi_value_mask

    spark = spark_session.get_or_create(master="local[2]")
    names = [f"d{i}" for i in range(DIMENSIONS)]
    rows = spark.range(args.rows, numPartitions=4).select(
        *(F.concat(F.lit(f"v{i}-"), (F.col("id") % 97).cast("string")).alias(name) for i, name in enumerate(names)))
    rows = rows.withColumn("d0", F.when(F.col("d0") == "v0-3", F.lit('["a","b"]')).otherwise(F.col("d0")))
    variants = {
        "none": [],
        "per_column": [F.count_if(F.expr(IS_MULTI_VALUE_SQL.format(c=name))).alias(name) for name in names],
        "mask": [multi_value_mask("TRUE", names).alias("mask")],
    }

    def job(counters: list) -> tuple[float, dict[str, Any]]:
        observation = Observation(f"detection-{time.monotonic_ns()}")
        began = time.perf_counter()
        rows.observe(observation, F.count(F.lit(1)).alias("rows"), *counters).write.format("noop").mode(
            "overwrite").save()
        return time.perf_counter() - began, observation.get

    found: dict[str, Any] = {}
    best: dict[str, float] = {}
    for variant, counters in variants.items():
        job(counters)  # warm: code generated, Python workers started
        times = []
        for _ in range(args.reps):
            took, found[variant] = job(counters)
            times.append(took)
        best[variant] = min(times)
        log(f"{variant}: {best[variant]:.2f} s")
    per_column = sorted(name for name in names if found["per_column"][name])
    mask = sorted(name for i, name in enumerate(names) if found["mask"]["mask"] >> i & 1)
    extra = {variant: round((best[variant] - best["none"]) / args.rows * 1e6, 3) for variant in ("per_column", "mask")}
    return {"benchmark": "multi_value_detection", "rows": args.rows, "string_dimensions": DIMENSIONS,
            "reps": args.reps, "machine": machine(), "seconds": {k: round(v, 3) for k, v in best.items()},
            "check_us_per_row": extra, "found": {"per_column": per_column, "mask": mask},
            "targets": {"both checks find the same dimensions": per_column == mask == ["d0"],
                        "mask cheaper than a count per column": extra["mask"] < extra["per_column"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    args = parser.parse_args()
    emit(run(args), args.json)


if __name__ == "__main__":
    main()
