"""SQL latency vs rows stored (issue 18 §3): p50/p95 of the timeseries, topN, groupBy and scan queries of
`queries.py` on 1M, 10M and 100M rolled-up rows, through Sluice's broker over HTTP, each answer checked against
DuckDB reading the same files.

The data and the broker are `queries.py`'s: hourly segment files over a week, published in a metadata store, loaded
by the broker into DuckDB's storage (its loadMaxRows raised to the largest size, as an operator sizes a
historical's cache to its data). Each size has a broker of its own, timed once it reports 100 % loaded. The plot
shows each shape's p50 against rows on log-log axes, with the line of linear growth from the smallest size.

    python benchmarks/scaling.py --json       # 1M, 10M, 100M: about 5 minutes on 2 cores, 6 GB of memory at 100M
    python benchmarks/scaling.py --rows 100000,1000000 --reps 3 --no-plot    # a smoke run
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import IMAGES, add_plot_arguments, emit, log, machine, ms, new_figure, percentile, save_figure
from queries import build_segments, duckdb_direct, normalize, shapes, sluice_http


def measure(rows: int, args: argparse.Namespace, work_dir: Path) -> dict[str, Any]:
    """One size: build it, load it, check every shape's answer, time each shape `reps` times."""
    log(f"writing {rows:,} rows as hourly segment files over {args.days} days")
    paths = build_segments(rows, args.days, work_dir / "segments", args.seed)
    queries = shapes(args.days)
    floor = duckdb_direct([str(p) for p in paths])
    run, close, load_s, _ = sluice_http(paths, work_dir, memory_limit=args.memory_limit,
                                        load_max_rows=max(args.rows))
    try:
        figures: dict[str, Any] = {}
        for shape, sql in queries.items():
            expected, got = normalize(floor(sql["duckdb"])), normalize(run(sql["druid"]))  # also the warm-up
            same = len(got) == len(expected) if shape == "scan" else got == expected
            samples = []
            for _ in range(args.reps):
                started = time.perf_counter()
                run(sql["druid"])
                samples.append(time.perf_counter() - started)
            figures[shape] = {"p50_ms": ms(percentile(samples, 50)), "p95_ms": ms(percentile(samples, 95)),
                              "runs": len(samples), "same_result_as_duckdb": same}
            log(f"{rows:,} rows, {shape}: p50 {figures[shape]['p50_ms']} ms")
    finally:
        close()
    return {"data_mb": round(sum(p.stat().st_size for p in paths) / 1024**2, 1), "load_s": round(load_s, 1),
            "shapes": figures}


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes: dict[str, Any] = {}
    for rows in args.rows:
        work_dir = Path(tempfile.mkdtemp(prefix="sluice-bench-scaling-"))
        try:
            sizes[str(rows)] = measure(rows, args, work_dir)
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)
    smallest, largest = str(args.rows[0]), str(args.rows[-1])
    growth = {shape: round(sizes[largest]["shapes"][shape]["p50_ms"] / sizes[smallest]["shapes"][shape]["p50_ms"], 2)
              for shape in sizes[smallest]["shapes"]}
    figures = {"benchmark": "scaling", "rows": args.rows, "days": args.days, "reps": args.reps, "sizes": sizes,
               # p50 growth from the smallest size to the largest, beside the growth of the rows: linear or better
               # when it is not larger
               "p50_growth": growth, "rows_growth": args.rows[-1] / args.rows[0],
               "sql": {shape: sql["druid"] for shape, sql in shapes(args.days).items()}, "machine": machine()}
    if args.plot:
        plot(figures, args.plot)
        figures["plot"] = str(args.plot)
    return figures


def plot(figures: dict[str, Any], path: Path) -> None:
    rows = figures["rows"]
    fig, axis = new_figure()
    for shape in figures["sizes"][str(rows[0])]["shapes"]:
        p50 = [figures["sizes"][str(n)]["shapes"][shape]["p50_ms"] for n in rows]
        line, = axis.plot(rows, p50, marker="o", label=f"{shape} p50")
        axis.plot(rows, [p50[0] * n / rows[0] for n in rows], linestyle=":", color=line.get_color(), alpha=0.5)
    axis.axhline(500, color="grey", linestyle="--", linewidth=0.8, label="500 ms")
    axis.set(xscale="log", yscale="log", xlabel="rolled-up rows stored", ylabel="p50 latency (ms)",
             title="Druid SQL over HTTP vs rows stored (dotted: linear growth)")
    axis.set_xticks(rows, [f"{n:,}" for n in rows])
    axis.legend(fontsize=8)
    save_figure(fig, path, figures["machine"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=lambda text: [int(n) for n in text.split(",")],
                        default=[1_000_000, 10_000_000, 100_000_000], help="sizes (default: 1M,10M,100M)")
    parser.add_argument("--days", type=int, default=7, help="days of hourly segment files")
    parser.add_argument("--reps", type=int, default=10, help="timed runs per shape and size")
    parser.add_argument("--memory-limit", default="12GB", help="the broker's sluice.broker.queryMemoryLimit")
    parser.add_argument("--seed", type=int, default=7)
    add_plot_arguments(parser, IMAGES / "scaling.png")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    args = parser.parse_args()
    emit(run(args), args.json)


if __name__ == "__main__":
    main()
