"""Query latency: Druid SQL through Sluice against Spark SQL and DuckDB over the very same Parquet files.

Why generated files instead of ingesting: 10M rolled-up rows would take minutes through Kafka, and query
speed does not depend on how the files were made, only on their shape. So ~10M rows are written
directly with pyarrow, shaped like Sluice's segments (``__time`` TIMESTAMP_MILLIS UTC-adjusted, the
example spec's 11 string dimensions, 5 long metrics, one file per HOUR segment over a week). Their
dimension values are drawn from the bundled sample generator's events, so cardinalities and skew
(channels, ~60k pages, ~9k users, geo only for anonymous editors) are the realistic ones.

Four Druid query shapes, each as Druid SQL (what Sluice is sent) and as the equivalent Spark SQL and
DuckDB SQL:

  timeseries  SUM per hour over all rows
  topN        top 10 pages by edits over all rows (Druid's tutorial query)
  groupBy     three dimensions, one day, ordered by edits
  scan        the rows of five minutes, LIMIT 1000

Engines, one run, round robin per repetition so that background noise spreads evenly:

  sluice_engine  ``SqlEngine.execute`` over the files (translation + sandboxed DuckDB connection per query):
                 what a broker does with a data source it has not loaded (yet)
  sluice_http    ``POST /druid/v2/sql`` to Sluice's Broker + SQL router (uvicorn), whose metadata store
                 holds the files as published segments, after the broker has loaded the data source (its
                 loadstatus is 100%, as Druid's segments are queried once historicals load them): the whole
                 product path minus ingestion
  spark_sql      Spark SQL over the same files (Sluice's session settings), ``collect()``
  duckdb         DuckDB directly on the files, one long-lived connection

    python benchmarks/queries.py --rows 10000000 --json
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common import emit, free_port, log, machine, ms, percentile, ratio

DATA_SOURCE = "wikipedia"
FIRST_DAY = datetime(2015, 9, 12, tzinfo=UTC)
DIMENSIONS = ["channel", "cityName", "countryIsoCode", "countryName", "namespace", "page", "user",
              "isAnonymous", "isMinor", "isNew", "isRobot"]
METRICS = ["count", "added", "deleted", "delta", "maxDelta"]


# ---------------------------------------------------------------------------------------------- data

def build_segments(rows: int, days: int, out_dir: Path, seed: int) -> list[Path]:
    """Write ``rows`` rolled-up rows as one Parquet file per hour of ``days`` days; return the files.

    Each row takes its dimensions from a random sample event (so their joint distribution is real),
    a random minute of its hour (queryGranularity MINUTE), and a rolled-up ``count`` (geometric,
    mean ~1.8, as most dimension combinations of an edit stream are rare); the sums scale with it.
    """
    from sluice.dev.sample_data import generate

    pool = [r.event for r in generate(min(rows, 200_000), seed=seed) if r.kind == "valid"]
    rng = np.random.default_rng(seed)
    dims = {d: pa.array([_dimension(e[d]) for e in pool], pa.string()) for d in DIMENSIONS}
    added = np.array([e["added"] for e in pool], dtype=np.int64)
    deleted = np.array([e["deleted"] for e in pool], dtype=np.int64)
    hours = days * 24
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    start_ms = int(FIRST_DAY.timestamp() * 1000)
    for hour in range(hours):
        n = rows // hours + (1 if hour < rows % hours else 0)
        picked = rng.integers(0, len(pool), n)
        minutes = np.sort(rng.integers(0, 60, n))
        times = start_ms + hour * 3_600_000 + minutes * 60_000
        count = rng.geometric(0.55, n).astype(np.int64)
        row_added, row_deleted = added[picked] * count, deleted[picked] * count
        indices = pa.array(picked)
        table = pa.table({
            "__time": pa.array(times, pa.timestamp("ms", tz="UTC")),
            **{d: column.take(indices) for d, column in dims.items()},
            "count": count, "added": row_added, "deleted": row_deleted, "delta": row_added - row_deleted,
            "maxDelta": added[picked] - deleted[picked],
        })
        path = out_dir / f"{DATA_SOURCE}_{hour:04d}.parquet"
        pq.write_table(table, path)
        files.append(path)
    return files


def _dimension(value: Any) -> str | None:
    """Dimensions as Sluice stores them: strings, JSON booleans as "true"/"false"."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# ---------------------------------------------------------------------------------------------- queries

def shapes(days: int) -> dict[str, dict[str, str]]:
    """Each shape in Druid SQL, Spark SQL and DuckDB SQL (same meaning, each engine's dialect)."""
    day = FIRST_DAY + timedelta(days=min(2, days - 1))
    day_start, day_end = f"{day:%Y-%m-%d} 00:00:00", f"{day + timedelta(days=1):%Y-%m-%d} 00:00:00"
    scan_start, scan_end = f"{day:%Y-%m-%d} 12:00:00", f"{day:%Y-%m-%d} 12:05:00"
    time_filter = f"__time >= TIMESTAMP '{day_start}' AND __time < TIMESTAMP '{day_end}'"
    scan_filter = f"__time >= TIMESTAMP '{scan_start}' AND __time < TIMESTAMP '{scan_end}'"
    return {
        "timeseries": {
            "druid": 'SELECT FLOOR(__time TO HOUR) AS "hour", SUM("count") AS edits, SUM(added) AS added '
                     "FROM wikipedia GROUP BY 1 ORDER BY 1",
            "duckdb": "SELECT date_trunc('hour', __time) AS \"hour\", SUM(\"count\") AS edits, SUM(added) AS added "
                      "FROM wikipedia GROUP BY 1 ORDER BY 1",
            "spark": "SELECT date_trunc('HOUR', __time) AS hour, SUM(`count`) AS edits, SUM(added) AS added "
                     "FROM wikipedia GROUP BY 1 ORDER BY 1",
        },
        "topN": {
            "druid": 'SELECT page, SUM("count") AS edits FROM wikipedia GROUP BY page ORDER BY edits DESC, page LIMIT 10',
            "duckdb": 'SELECT page, SUM("count") AS edits FROM wikipedia GROUP BY page ORDER BY edits DESC, page LIMIT 10',
            "spark": "SELECT page, SUM(`count`) AS edits FROM wikipedia GROUP BY page ORDER BY edits DESC, page LIMIT 10",
        },
        "groupBy": {
            "druid": 'SELECT channel, namespace, isRobot, SUM("count") AS edits, SUM(delta) AS delta, '
                     f"MAX(maxDelta) AS max_delta FROM wikipedia WHERE {time_filter} "
                     "GROUP BY 1, 2, 3 ORDER BY edits DESC, 1, 2, 3 LIMIT 100",
            "duckdb": 'SELECT channel, namespace, isRobot, SUM("count") AS edits, SUM(delta) AS delta, '
                      f"MAX(maxDelta) AS max_delta FROM wikipedia WHERE {time_filter} "
                      "GROUP BY 1, 2, 3 ORDER BY edits DESC, 1, 2, 3 LIMIT 100",
            "spark": "SELECT channel, namespace, isRobot, SUM(`count`) AS edits, SUM(delta) AS delta, "
                     f"MAX(maxDelta) AS max_delta FROM wikipedia WHERE {time_filter} "
                     "GROUP BY 1, 2, 3 ORDER BY edits DESC, 1, 2, 3 LIMIT 100",
        },
        "scan": {
            "druid": f'SELECT __time, channel, page, "user", added, deleted FROM wikipedia WHERE {scan_filter} LIMIT 1000',
            "duckdb": f'SELECT __time, channel, page, "user", added, deleted FROM wikipedia WHERE {scan_filter} LIMIT 1000',
            "spark": f"SELECT __time, channel, page, `user`, added, deleted FROM wikipedia WHERE {scan_filter} LIMIT 1000",
        },
    }


# ---------------------------------------------------------------------------------------------- engines

Runner = Callable[[str], list[Any]]


def sluice_engine(files: list[str]) -> Runner:
    from sluice.broker.engine import SqlEngine

    engine = SqlEngine()
    return lambda sql: engine.execute(sql, {DATA_SOURCE: files}).rows


def sluice_http(files: list[Path], work_dir: Path, result_cache: Any = None, memory_limit: str = "4GB",
                load_max_rows: int | None = None) -> tuple[Runner, Callable[[], None], float, str]:
    """Sluice's Broker and SQL API over a metadata store in which the files are published segments; `result_cache`: a
    `ResultCacheConfig` for Druid's result-level cache (off by default, as in Druid).

    Only the broker side of a node is started (no Spark): the same Broker, routers and HTTP server a
    node uses, so a query pays exactly what it pays on a node — metadata read, timeline, DuckDB,
    JSON rendering and HTTP. Returns the runner, its closer, how long the data source took to load, and its URL.
    `memory_limit` and `load_max_rows` are the node's sluice.broker.queryMemoryLimit and loadMaxRows (None: 50M).
    """
    import httpx
    from fastapi import FastAPI

    from sluice.broker.broker import Broker
    from sluice.broker.engine import SqlEngine
    from sluice.broker.loaded import LoadedDataSources
    from sluice.broker.result_cache import ResultLevelCache
    from sluice.metadata.store import MetadataStore
    from sluice.segment.deep_storage import LocalDeepStorage
    from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
    from sluice.server.api_native import native_router
    from sluice.server.api_sql import sql_router
    from sluice.server.http_server import HttpServer

    metadata = MetadataStore(f"sqlite:///{work_dir / 'metadata.db'}")
    metadata.create_tables()
    aggregators = [{"type": "count", "name": "count"}] + [
        {"type": "longSum", "name": m, "fieldName": m} for m in ("added", "deleted", "delta")
    ] + [{"type": "longMax", "name": "maxDelta", "fieldName": "delta"}]
    segments = []
    for path in files:
        hour = int(path.stem.rsplit("_", 1)[1])
        start = FIRST_DAY + timedelta(hours=hour)
        segments.append(DataSegment(
            id=SegmentId(DATA_SOURCE, Interval(start, start + timedelta(hours=1)), "2026-01-01T00:00:00.000Z", 0),
            dimensions=DIMENSIONS, metrics=METRICS, aggregators=aggregators, shard_spec=numbered_shard_spec(0),
            num_rows=pq.ParquetFile(path).metadata.num_rows, size=path.stat().st_size,
            load_spec={"type": "local", "path": str(path)},
        ))
    result = metadata.commit_segments_and_metadata(segments, DATA_SOURCE, None, None)
    if not result.success:
        raise RuntimeError(result.message)
    engine = SqlEngine(memory_limit=memory_limit)
    loaded = LoadedDataSources(engine.duckdb_config, **({} if load_max_rows is None else {"max_rows": load_max_rows}))
    broker = Broker(metadata, LocalDeepStorage(files[0].parent), work_dir / "segment-cache", engine, loaded=loaded,
                    result_cache=ResultLevelCache(result_cache) if result_cache is not None else None)
    app = FastAPI()
    app.include_router(sql_router(broker))
    app.include_router(native_router(broker, metadata))
    port = free_port()
    server = HttpServer(app, "127.0.0.1", port)
    server.start()
    http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120.0)
    # like Druid's segments, the data source serves from its files until the broker has loaded it
    started = time.monotonic()
    while http.get("/druid/coordinator/v1/loadstatus").json().get(DATA_SOURCE) != 100.0:
        time.sleep(0.2)
    load_s = time.monotonic() - started

    def run(sql: str) -> list[Any]:
        response = http.post("/druid/v2/sql", json={"query": sql, "resultFormat": "array"})
        response.raise_for_status()
        return response.json()

    def close() -> None:
        http.close()
        server.stop()
        loaded.stop()
        metadata.close()

    return run, close, load_s, f"http://127.0.0.1:{port}"


def duckdb_direct(files: list[str]) -> Runner:
    import duckdb

    conn = duckdb.connect(":memory:")
    conn.execute("SET TimeZone = 'UTC'")
    conn.execute(f"CREATE VIEW {DATA_SOURCE} AS SELECT * FROM read_parquet({files!r})")
    return lambda sql: conn.execute(sql).fetchall()


def spark_sql(files: list[str]) -> tuple[Runner, float]:
    started = time.monotonic()
    from sluice.task import spark_session

    spark = spark_session.get_or_create(app_name="bench-queries")
    spark.read.parquet(*files).createOrReplaceTempView(DATA_SOURCE)
    return (lambda sql: [tuple(row) for row in spark.sql(sql).collect()]), time.monotonic() - started


# ---------------------------------------------------------------------------------------------- checks

_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$")


def normalize(rows: list[Any]) -> list[tuple]:
    """Rows as comparable tuples: instants as epoch ms, decimals and floats rounded, whatever each
    engine (or JSON) made of them."""
    def value(v: Any) -> Any:
        if isinstance(v, datetime):
            return int((v if v.tzinfo else v.replace(tzinfo=UTC)).timestamp() * 1000)
        if isinstance(v, str) and _ISO.match(v):
            return int(datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp() * 1000)
        if isinstance(v, Decimal | float):
            return round(float(v), 3)
        return v
    return [tuple(value(v) for v in row) for row in rows]


# ---------------------------------------------------------------------------------------------- run

def run(args: argparse.Namespace) -> dict[str, Any]:
    work_dir = Path(tempfile.mkdtemp(prefix="sluice-bench-queries-"))
    closers: list[Callable[[], None]] = []
    try:
        log(f"writing {args.rows:,} rows as hourly segment files over {args.days} days")
        began = time.monotonic()
        paths = build_segments(args.rows, args.days, work_dir / "segments", args.seed)
        build_s = time.monotonic() - began
        files = [str(p) for p in paths]
        size_mb = sum(p.stat().st_size for p in paths) / 1024**2
        engines: dict[str, Runner] = {"sluice_engine": sluice_engine(files), "duckdb": duckdb_direct(files)}
        http_runner, close_http, load_s, _ = sluice_http(paths, work_dir)
        engines["sluice_http"] = http_runner
        closers.append(close_http)
        spark_runner, spark_start_s = spark_sql(files)
        engines["spark_sql"] = spark_runner
        dialect = {"sluice_engine": "druid", "sluice_http": "druid", "duckdb": "duckdb", "spark_sql": "spark"}
        queries = shapes(args.days)

        times: dict[str, dict[str, list[float]]] = {s: {e: [] for e in engines} for s in queries}
        agree: dict[str, dict[str, bool]] = {s: {} for s in queries}
        rows_returned: dict[str, int] = {}
        for shape, sql in queries.items():  # warm-up, and the correctness check against the floor
            floor = normalize(engines["duckdb"](sql["duckdb"]))
            rows_returned[shape] = len(floor)
            for name, runner in engines.items():
                got = normalize(runner(sql[dialect[name]]))
                agree[shape][name] = len(got) == len(floor) if shape == "scan" else got == floor
        log(f"timing {len(queries)} shapes x {len(engines)} engines, {args.reps} reps (spark: {args.spark_reps})")
        for rep in range(args.reps):
            for shape, sql in queries.items():
                for name, runner in engines.items():
                    if name == "spark_sql" and rep >= args.spark_reps:
                        continue
                    started = time.perf_counter()
                    runner(sql[dialect[name]])
                    times[shape][name].append(time.perf_counter() - started)
    finally:
        for close in closers:
            close()
        shutil.rmtree(work_dir, ignore_errors=True)

    results: dict[str, Any] = {}
    for shape, by_engine in times.items():
        stats = {name: {"p50_ms": ms(percentile(samples, 50)), "p95_ms": ms(percentile(samples, 95)),
                        "runs": len(samples), "same_result_as_duckdb": agree[shape][name]}
                 for name, samples in by_engine.items()}
        results[shape] = {
            "rows_returned": rows_returned[shape],
            "engines": stats,
            "sluice_engine_vs_duckdb": ratio(stats["sluice_engine"]["p50_ms"], stats["duckdb"]["p50_ms"]),
            "sluice_http_vs_duckdb": ratio(stats["sluice_http"]["p50_ms"], stats["duckdb"]["p50_ms"]),
            "spark_vs_sluice_http": ratio(stats["spark_sql"]["p50_ms"], stats["sluice_http"]["p50_ms"]),
        }
    return {
        "benchmark": "queries",
        "rows": args.rows, "days": args.days, "segment_files": len(files), "data_mb": round(size_mb, 1),
        "build_s": round(build_s, 1), "sluice_load_s": round(load_s, 1), "spark_startup_s": round(spark_start_s, 1),
        "shapes": results, "sql": {shape: sql["druid"] for shape, sql in queries.items()},
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=7, help="days of hourly segment files")
    parser.add_argument("--reps", type=int, default=20, help="timed runs per shape and engine")
    parser.add_argument("--spark-reps", type=int, default=7, help="timed runs per shape for Spark SQL")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    args = parser.parse_args()
    emit(run(args), args.json)


if __name__ == "__main__":
    main()
