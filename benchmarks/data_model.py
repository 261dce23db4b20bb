"""Issue 16's data-model latencies, on 10M raw rows, through Sluice's SqlEngine (translation and a sandboxed DuckDB
connection per query, as a broker runs a query over segment files):

  distinct   APPROX_COUNT_DISTINCT_DS_HLL over the HLL sketches a rollup kept (per hour and channel, built by Spark's
             hll_sketch_agg as Sluice's ingestion builds them) against an exact COUNT(DISTINCT) in DuckDB over the
             raw rows, per channel; the estimates' largest relative error beside Druid's bound for lgK 12
  lookup     a GROUP BY over LOOKUP(channel, 'names') on the raw rows
  nested     SUM over the rows whose json column matches JSON_VALUE(payload, '$.device') = 'phone', the column in
             Druid's nested layout (a field column per path, written by ingestion's Spark step), checked against
             DuckDB parsing every document of the raw rows

Why the files are written here rather than ingested: the latency depends on the files' shape, not on how they
were made, and 10M events through Kafka take minutes. The rolled-up files are made by Spark with the aggregate
Sluice's HLLSketchBuild compiles to.

    python benchmarks/data_model.py --rows 10000000 --json
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common import emit, log, machine, ms, percentile, ratio

START = datetime(2024, 1, 1, tzinfo=UTC)
CHANNELS = 40
#: DataSketches' relative standard error of an HLL sketch with lgK 12 is 1.04 / sqrt(4096) = 1.6%; Druid's docs
#: give the bound at 3 standard deviations (99.7%)
HLL_BOUND = 3 * 1.04 / 64


def build_raw(rows: int, out_dir: Path, seed: int) -> list[Path]:
    """Raw rows over 24 hours: a channel (Zipf-skewed), a user of ~rows/10 distinct ones, and a json payload."""
    rng = np.random.default_rng(seed)
    files = []
    per_file = -(-rows // 8)
    devices = np.array(['{"device":"phone","os":"android"}', '{"device":"desktop"}', '{"device":"tablet","v":2}'])
    for i in range(8):
        n = min(per_file, rows - i * per_file)
        millis = START.timestamp() * 1000 + np.sort(rng.integers(0, 24 * 3600 * 1000, n))
        channel = np.minimum(rng.zipf(1.6, n), CHANNELS) - 1
        table = pa.table({
            "__time": pa.array(millis.astype("int64"), pa.timestamp("ms", tz="UTC")),
            "channel": pa.array([f"#c{c}" for c in channel.tolist()], pa.string()),
            "user": pa.array([f"u{u}" for u in rng.integers(0, max(rows // 10, 1), n).tolist()], pa.string()),
            "payload": pa.array([{"json": devices[d]} for d in rng.integers(0, 3, n).tolist()],
                                pa.struct([("json", pa.string())])),
            "count": pa.array(np.ones(n, dtype="int64")),
        })
        files.append(out_dir / f"raw-{i}.parquet")
        pq.write_table(table, files[-1])
    return files


def build_nested(raw: list[Path], out_dir: Path) -> list[Path]:
    """The raw rows with their json column in Druid's nested layout, as Sluice's ingestion writes a segment's (a
    field column per string or long path beside the text), by the same Spark step."""
    from sluice.task import spark_session
    from sluice.task.pipeline import with_field_columns

    spark = spark_session.get_or_create(master="local[2]")
    with_field_columns(spark.read.parquet(*(str(p) for p in raw))).write.mode("overwrite").parquet(str(out_dir))
    return sorted(out_dir.glob("*.parquet"))


def build_rollup(raw: list[Path], out_dir: Path) -> list[Path]:
    """The raw rows rolled up per hour and channel by Spark, with the users' HLL sketch as Sluice stores one."""
    from pyspark.sql import functions as F

    from sluice.task import spark_session

    spark = spark_session.get_or_create(master="local[2]")
    rows = spark.read.parquet(*(str(p) for p in raw)).withColumn("__hour", F.expr("unix_seconds(`__time`) DIV 3600"))
    rolled = rows.groupBy("channel", "__hour").agg(F.sum("count").alias("count"),
                                                   F.expr("named_struct('HLLSketch', hll_sketch_agg(user, 12))")
                                                   .alias("users"))
    (rolled.selectExpr("timestamp_seconds(`__hour` * 3600) AS `__time`", "channel", "`count`", "users")
     .coalesce(1).write.mode("overwrite").parquet(str(out_dir)))
    return sorted(out_dir.glob("*.parquet"))


def timed(run: Callable[[], Any], reps: int) -> tuple[list[float], Any]:
    run()  # warm: footers cached, functions registered
    times, result = [], None
    for _ in range(reps):
        began = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - began)
    return times, result


def figures(times: list[float]) -> dict[str, float | None]:
    return {"p50_ms": ms(percentile(times, 50)), "p95_ms": ms(percentile(times, 95))}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from sluice.broker.engine import SqlEngine
    from sluice.lookups.references import LookupExtractor

    work = Path(tempfile.mkdtemp(prefix="sluice-data-model-"))
    try:
        log(f"writing {args.rows:,} raw rows")
        raw = build_raw(args.rows, work, args.seed)
        log("rolling them up with Spark")
        rolled = build_rollup(raw, work / "rolled")
        log("writing their json column's field columns with Spark")
        nested_files = {"raw": [str(p) for p in build_nested(raw, work / "nested")]}
        rolled_rows = sum(pq.ParquetFile(p).metadata.num_rows for p in rolled)
        names = LookupExtractor({f"#c{c}": f"channel {c % 7}" for c in range(CHANNELS)})
        engine = SqlEngine(lookups=lambda name: names if name == "names" else None)
        raw_files, rolled_files = {"raw": [str(p) for p in raw]}, {"rolled": [str(p) for p in rolled]}

        approx_times, approx = timed(lambda: engine.execute(
            "SELECT channel, APPROX_COUNT_DISTINCT_DS_HLL(users) AS u FROM rolled GROUP BY channel",
            rolled_files).rows, args.reps)
        duck = duckdb.connect()
        exact_sql = f"SELECT channel, COUNT(DISTINCT \"user\") FROM read_parquet({[str(p) for p in raw]}) " \
                    "GROUP BY channel"
        exact_times, exact = timed(lambda: duck.execute(exact_sql).fetchall(), args.reps)
        truth = dict(exact)
        errors = [abs(estimate - truth[channel]) / truth[channel] for channel, estimate in approx]
        lookup_times, _ = timed(lambda: engine.execute(
            "SELECT LOOKUP(channel, 'names') AS name, SUM(\"count\") FROM raw GROUP BY 1", raw_files).rows, args.reps)
        nested_times, nested = timed(lambda: engine.execute(
            "SELECT SUM(\"count\") FROM raw WHERE JSON_VALUE(payload, '$.device') = 'phone'", nested_files).rows,
            args.reps)
        truth_phone = duck.execute(f"SELECT SUM(\"count\") FROM read_parquet({raw_files['raw']}) "
                                   "WHERE json_extract_string(payload.json, '$.device') = 'phone'").fetchone()[0]
        distinct = {"approx_rolled_up": figures(approx_times), "exact_raw_duckdb": figures(exact_times),
                    "speedup_p50": ratio(percentile(exact_times, 50), percentile(approx_times, 50)),
                    "max_relative_error": round(max(errors), 5), "druid_error_bound": round(HLL_BOUND, 5),
                    "channels": len(truth)}
        return {"benchmark": "data_model", "rows": args.rows, "rolled_up_rows": rolled_rows, "reps": args.reps,
                "machine": machine(), "distinct": distinct, "lookup": figures(lookup_times),
                "nested": {**figures(nested_times), "rows_matched": nested[0][0], "rows_expected": truth_phone},
                "targets": {"distinct: approx >= 5 x exact": (distinct["speedup_p50"] or 0) >= 5,
                            "distinct: within Druid's error bound": max(errors) <= HLL_BOUND,
                            "lookup p50 < 200 ms": percentile(lookup_times, 50) < 0.2,
                            "nested filter p50 < 200 ms": percentile(nested_times, 50) < 0.2,
                            "nested filter exact": nested[0][0] == truth_phone}}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--reps", type=int, default=10, help="timed runs per query")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    args = parser.parse_args()
    emit(run(args), args.json)


if __name__ == "__main__":
    main()
