"""Query throughput vs concurrent clients (issue 18 §3): a small topN and a point filter on ~10M rolled-up rows,
from 1, 8 and 32 clients at once, through Sluice's broker over HTTP, with Druid's result-level cache off and on.

The data is `queries.py`'s: hourly segment files shaped like Sluice's, published in a metadata store, loaded by the
broker. The clients run in a process of their own (asyncio, one connection each, back to back for `--seconds`), so
that they do not take the broker's interpreter. With the cache off, every query runs in DuckDB; with it on, the same
two queries repeated are answered from the cache after their first run, as Druid's broker answers repeated
dashboards.

    python benchmarks/concurrency.py --rows 10000000 --json        # also writes docs/img/concurrency.png
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import IMAGES, add_plot_arguments, emit, log, machine, ms, new_figure, percentile, save_figure
from queries import DATA_SOURCE, FIRST_DAY, build_segments, sluice_http


def workload(files: list[Path]) -> dict[str, str]:
    """The two queries: the top pages of one hour, and one page's total over every row."""
    import duckdb

    page = duckdb.sql(f"SELECT page FROM read_parquet({[str(f) for f in files]}) GROUP BY page "
                      'ORDER BY SUM("count") DESC LIMIT 1').fetchall()[0][0]
    hour = FIRST_DAY.strftime("%Y-%m-%d %H:00:00")
    return {
        "topN": f'SELECT page, SUM("count") AS edits FROM {DATA_SOURCE} WHERE __time >= TIMESTAMP \'{hour}\' '
                f"AND __time < TIMESTAMP '{hour}' + INTERVAL '1' HOUR GROUP BY page ORDER BY edits DESC LIMIT 10",
        "point": f"SELECT SUM(added) AS added FROM {DATA_SOURCE} WHERE page = '{page.replace(chr(39), chr(39) * 2)}'",
    }


def load(url: str, clients: int, seconds: float, queries: list[str]) -> dict[str, Any]:
    """`clients` clients sending the queries in turn, back to back, for `seconds`: what they got and how fast.

    Each client is one keep-alive HTTP/1.1 connection written and read with asyncio's streams (on uvloop), as wrk
    does in C: on two cores the clients share the broker's machine, and httpx's ~1 ms of CPU per request made the
    client the bottleneck of the cached runs, not the broker.
    """
    import uvloop

    host, port = url.removeprefix("http://").split(":")
    requests = [(f"POST /druid/v2/sql HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(body)}\r\n\r\n").encode() + body
                for body in (json.dumps({"query": sql, "resultFormat": "array"}).encode() for sql in queries)]

    async def client(offset: int, deadline: float, latencies: list[float], errors: list[str]) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        i = offset
        while time.monotonic() < deadline:
            started = time.perf_counter()
            writer.write(requests[i % len(requests)])
            status, headers = await reader.readuntil(b"\r\n\r\n"), {}
            for line in status.decode("latin-1").split("\r\n")[1:]:
                name, _, value = line.partition(":")
                headers[name.lower()] = value.strip()
            body = await reader.readexactly(int(headers["content-length"]))
            latencies.append(time.perf_counter() - started)
            if not status.startswith(b"HTTP/1.1 200 "):
                errors.append(body[:200].decode(errors="replace"))
            i += 1
        writer.close()

    async def main() -> dict[str, Any]:
        latencies: list[float] = []
        errors: list[str] = []
        started = time.monotonic()
        deadline = started + seconds
        await asyncio.gather(*(client(n, deadline, latencies, errors) for n in range(clients)))
        elapsed = time.monotonic() - started
        return {"queries": len(latencies), "queries_per_s": round(len(latencies) / elapsed, 1),
                "p50_ms": ms(percentile(latencies, 50)), "p95_ms": ms(percentile(latencies, 95)),
                "errors": len(errors), "error_sample": errors[:1]}

    return uvloop.run(main())


def run(args: argparse.Namespace) -> dict[str, Any]:
    from sluice.broker.result_cache import ResultCacheConfig

    work_dir = Path(tempfile.mkdtemp(prefix="sluice-bench-concurrency-"))
    spawn = multiprocessing.get_context("spawn")
    results: dict[str, dict[str, Any]] = {}
    try:
        log(f"writing {args.rows:,} rows as hourly segment files over {args.days} days")
        files = build_segments(args.rows, args.days, work_dir / "segments", args.seed)
        queries = workload(files)
        for cache in ("off", "on"):
            config = ResultCacheConfig(use=True, populate=True) if cache == "on" else None
            runner, close, _, url = sluice_http(files, work_dir / f"cache-{cache}", config)
            try:
                answers = {name: runner(sql) for name, sql in queries.items()}  # warm, and the answers to check
                with spawn.Pool(1) as pool:
                    for clients in args.clients:
                        log(f"cache {cache}: {clients} client(s) for {args.seconds:.0f} s")
                        results.setdefault(cache, {})[str(clients)] = pool.apply(
                            load, (url, clients, args.seconds, list(queries.values())))
                results[cache]["answers"] = answers
            finally:
                close()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    figures = {
        "benchmark": "concurrency", "rows": args.rows, "seconds_per_level": args.seconds, "sql": queries,
        "result_cache_off": results["off"], "result_cache_on": results["on"], "machine": machine(),
    }
    if args.plot:
        plot(figures, args.clients, args.plot)
        figures["plot"] = str(args.plot)
    return figures


def plot(figures: dict[str, Any], clients: list[int], path: Path) -> None:
    fig, (qps, p95) = new_figure(2, (10, 4))
    for cache in ("off", "on"):
        levels = figures[f"result_cache_{cache}"]
        qps.plot(clients, [levels[str(c)]["queries_per_s"] for c in clients], marker="o", label=f"result cache {cache}")
        p95.plot(clients, [levels[str(c)]["p95_ms"] for c in clients], marker="o", label=f"result cache {cache}")
    qps.set(xlabel="concurrent clients", ylabel="queries/s", xscale="log", yscale="log", title="throughput")
    p95.set(xlabel="concurrent clients", ylabel="p95 latency (ms)", xscale="log", yscale="log", title="p95 latency")
    for axis in (qps, p95):
        axis.set_xticks(clients, [str(c) for c in clients])
        axis.legend()
    save_figure(fig, path, figures["machine"], f"a small topN and a point filter on {figures['rows']:,} rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--days", type=int, default=7, help="days of hourly segment files")
    parser.add_argument("--clients", type=lambda text: [int(c) for c in text.split(",")], default=[1, 8, 32],
                        help="concurrency levels (default: 1,8,32)")
    parser.add_argument("--seconds", type=float, default=15.0, help="per level")
    parser.add_argument("--seed", type=int, default=7)
    add_plot_arguments(parser, IMAGES / "concurrency.png")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    args = parser.parse_args()
    emit(run(args), args.json)


if __name__ == "__main__":
    main()
