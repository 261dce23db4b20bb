"""Run every benchmark, each in its own process, and print their figures side by side.

Why one driver: the issue's targets compare figures from one run on one machine (Sluice vs a
hand-written PySpark job vs plain Python; Sluice's SQL vs Spark SQL vs DuckDB), so they are
collected together, checked against the targets and written to ``benchmarks/results.json``.

Other work on the machine skews everything here (2 cores), so the driver waits for the machine to be
quiet before it starts (``--quiet-wait``) and measures the CPU time other processes used during the
run; both are in the results.

    make bench          # full sizes, about an hour on 2 cores (--only ingest,freshness: 18 minutes)
    make bench-smoke    # tiny sizes: proves every script works
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.markup import escape
from rich.table import Table

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from batch import print_tables as print_batch_tables  # noqa: E402
from common import log, machine  # noqa: E402

#: (script, full-size arguments, smoke arguments)
BENCHMARKS: list[tuple[str, list[str], list[str]]] = [
    ("ingest", ["--events", "1000000", "--rounds", "3"],
     ["--events", "20000", "--rounds", "1", "--task-duration", "PT3S", "--max-rows-in-memory", "2000"]),
    ("freshness", ["--rate", "20000", "--seconds", "60"],
     ["--rate", "1000", "--seconds", "6", "--task-duration", "PT2S", "--warmup", "1", "--warmup-events", "0",
      "--no-plot"]),
    ("queries", ["--rows", "10000000", "--reps", "20", "--spark-reps", "7"],
     ["--rows", "50000", "--days", "1", "--reps", "2", "--spark-reps", "1"]),
    ("concurrency", ["--rows", "10000000", "--seconds", "15"],
     ["--rows", "20000", "--days", "1", "--seconds", "1", "--clients", "1,4", "--no-plot"]),
    ("scaling", ["--rows", "1000000,10000000,100000000", "--reps", "10"],
     ["--rows", "20000,100000", "--days", "1", "--reps", "2", "--no-plot"]),
    ("task_count", ["--events", "1000000"], ["--events", "20000", "--task-counts", "1,2", "--no-plot"]),
    ("memory", ["--events", "500000", "--settings", "20000,150000"],
     ["--events", "10000", "--settings", "5000", "--task-duration", "PT3S"]),
    ("stages", ["--events", "1000000"], ["--events", "20000"]),
    ("batch", ["--rows", "5000000", "--single", "local-parquet", "--default-hint", "", "--profile-files", "2"],
     ["--smoke"]),
    # one timed run of each variant after their warm-up runs, to stay within the default --timeout (about 12 min)
    ("stream_jobs", ["--events", "1000000", "--join-events", "500000", "--latency-seconds", "60", "--runs", "1"],
     ["--smoke"]),
]


class ForeignCpu:
    """CPU seconds used by processes that are not ours while the benchmarks run."""

    def __init__(self, interval: float = 2.0) -> None:
        self.interval = interval
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        #: every process ever seen below this one: one whose parent exits (a daemonised broker, a peon's Spark
        #: worker) is reparented to init but stays ours
        self.ours: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        self.ours |= {me.pid, *(p.pid for p in me.children(recursive=True))}
        for process in psutil.process_iter(["pid", "cpu_times"]):
            if process.pid in self.ours or process.info["cpu_times"] is None:
                continue
            used = process.info["cpu_times"].user + process.info["cpu_times"].system
            self.first.setdefault(process.pid, 0.0)  # a process started during the run counts from zero
            self.last[process.pid] = used

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def start(self) -> None:
        self._sample()  # processes running at the start count only from now
        self.first = dict(self.last)
        self._thread.start()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self._sample()
        return sum(max(0.0, used - self.first.get(pid, 0.0)) for pid, used in self.last.items())


def wait_until_quiet(max_wait: float, threshold: float = 15.0, window: float = 15.0) -> dict[str, Any]:
    """Wait (up to ``max_wait`` s) until the machine's CPU use stays under ``threshold`` % for ``window`` s."""
    began = time.monotonic()
    quiet_since: float | None = None
    while True:
        busy = psutil.cpu_percent(interval=5.0)
        now = time.monotonic()
        quiet_since = (quiet_since or now - 5.0) if busy < threshold else None
        if (quiet_since is not None and now - quiet_since >= window) or now - began >= max_wait:
            return {"cpu_percent_before_start": busy, "waited_s": round(now - began, 1),
                    "quiet": quiet_since is not None}
        log(f"machine {'busy' if quiet_since is None else 'quiet'} ({busy:.0f}% CPU used); "
            "waiting for a quiet machine before starting")


def run_benchmark(name: str, args: list[str], timeout: float) -> dict[str, Any]:
    command = [sys.executable, str(HERE / f"{name}.py"), *args, "--json"]
    log(f"=== {name}: {' '.join(command[1:])}")
    began = time.monotonic()
    completed = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=timeout, cwd=HERE.parent)
    elapsed = time.monotonic() - began
    lines = [line for line in completed.stdout.splitlines() if line.strip()]
    if completed.returncode != 0 or not lines:
        return {"benchmark": name, "error": f"exit code {completed.returncode}", "wall_s": round(elapsed, 1)}
    try:
        result = json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"benchmark": name, "error": "no JSON on the last stdout line", "wall_s": round(elapsed, 1)}
    result["wall_s"] = round(elapsed, 1)
    log(f"=== {name} done in {elapsed:.0f}s")
    return result


# ---------------------------------------------------------------------------------------------- summary

def _n(value: Any, digits: int = 0) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and digits:
        return f"{value:,.{digits}f}"
    return f"{value:,.0f}" if isinstance(value, int | float) else str(value)


def _runs(spread: dict[str, Any]) -> str:
    return " / ".join(_n(v) for v in spread["runs"])


def _pair(ratios: dict[str, float | None]) -> str:
    return f"{_n(ratios['median'], 2)} / {_n(ratios['best'], 2)}"


def _target(ok: bool | None) -> str:
    return "–" if ok is None else ("[green]met[/]" if ok else "[red]not met[/]")


def summarize(results: dict[str, Any], console: Console) -> dict[str, Any]:
    """Print one table per benchmark and return the issue's targets, each met or not."""
    targets: dict[str, Any] = {}
    ingest = results.get("ingest", {})
    for name, data in ingest.get("datasets", {}).items():
        y, c = data["yardstick_events_per_s"], data["sluice"]
        python = (data["runs"].get("python") or [{}])[0]
        table = Table(title=f"Ingestion, {name}: {data['events']:,} events, 4 partitions ({data['mean_event_bytes']} "
                            f"B/event), {ingest['rounds']} round(s)", title_justify="left")
        for column in ("variant", "median events/s", "every run", "how it is timed"):
            table.add_column(column, justify="left" if column in ("variant", "how it is timed") else "right")
        table.add_row("(a) Python, 1 thread", _n(python.get("events_per_s")), "", "consume + json.loads")
        table.add_row("(b) the yardstick", _n(y["median"]), _runs(y), "its best of three runs in one session")
        for key, how in (("cold_steady_events_per_s", "10→90 % of offsets read, the node's first supervisor"),
                         ("warm_steady_events_per_s", "10→90 % of offsets read, a second one, same offsets"),
                         ("warm_events_per_s", "supervisor submit → every row queryable, warm")):
            table.add_row(f"(c) Sluice, {key.replace('_events_per_s', '').replace('_', ' ')}", _n(c[key]["median"]),
                          _runs(c[key]), how)
        console.print(table)
        r = data["ratios"]
        console.print(
            f"  ratios (median / best): (c) warm steady / (b) = {_pair(r['warm_steady_vs_yardstick'])}; "
            f"(c) cold steady / (b) = {_pair(r['cold_steady_vs_yardstick'])}; "
            f"(c) warm end to end / (b) = {_pair(r['warm_end_to_end_vs_yardstick'])}; "
            f"(c) warm steady / (a) = {_n(r['warm_steady_vs_python'], 2)}")
        for run in data["runs"].get("sluice", []):
            for phase in ("cold", "warm"):
                figures = run.get(phase, {})
                console.print(
                    f"  Sluice {phase}: phases (s) " + ", ".join(f"{k} {_n(v, 1)}" for k, v in
                                                                 figures.get("phases_s", {}).items())
                    + f"; read jobs: {_n(figures.get('mean_rows_per_job'))} rows in "
                      f"{_n(figures.get('mean_job_s'), 2)} s each; peak RSS {_n(run.get('peak_rss_mb'))} MB")
        targets[f"ingest {name}: (c) warm steady >= 1.2 x (b)  [medians]"] = _ge(
            r["warm_steady_vs_yardstick"]["median"], 1.2)
        targets[f"ingest {name}: (c) cold steady >= 1.0 x (b)  [medians]"] = _ge(
            r["cold_steady_vs_yardstick"]["median"], 1.0)

    fresh = results.get("freshness", {})
    if "latency" in fresh:
        table = Table(title=f"Freshness: {fresh['rate_achieved']:,} events/s for {fresh['seconds']:.0f} s, "
                            f"taskDuration {fresh['task_duration']}, period {fresh['period']}", title_justify="left")
        for column in ("events", "p50 s", "p95 s", "p99 s", "max s", "visible", "peak RSS MB"):
            table.add_column(column, justify="right")
        for label, key in (("after warm-up", "latency"), ("all", "latency_including_warmup")):
            lat = fresh[key]
            table.add_row(f"{lat['events']:,} ({label})", _n(lat["p50_s"], 2), _n(lat["p95_s"], 2),
                          _n(lat["p99_s"], 2), _n(lat["max_s"], 2),
                          f"{fresh['events_visible']:,}/{fresh['events_produced']:,}", _n(fresh.get("peak_rss_mb")))
        console.print(table)
        if fresh.get("events_not_visible_within_drain_timeout"):
            console.print(f"  [red]{fresh['events_not_visible_within_drain_timeout']:,} events were not visible "
                          f"{fresh['drain_timeout_s']:.0f} s after producing stopped: Sluice fell behind the rate; "
                          "they count with the time waited so far, so these percentiles are lower bounds[/]")
        targets["freshness p50 <= 1 s"] = _le(fresh["latency"]["p50_s"], 1)
        targets["freshness p95 <= 3 s"] = _le(fresh["latency"]["p95_s"], 3)

    queries = results.get("queries", {})
    if "shapes" in queries:
        table = Table(title=f"Query latency p50 / p95 ms: {queries['rows']:,} rows, {queries['segment_files']} "
                            f"hourly segment files, {queries['data_mb']} MB", title_justify="left")
        engines = ["sluice_http", "sluice_engine", "spark_sql", "duckdb"]
        table.add_column("shape")
        for engine in engines:
            table.add_column(engine, justify="right")
        table.add_column("Spark / Sluice", justify="right")
        table.add_column("Sluice / DuckDB", justify="right")
        for shape, data in queries["shapes"].items():
            cells = []
            for engine in engines:
                e = data["engines"][engine]
                mark = "" if e["same_result_as_duckdb"] else " [red]≠[/]"
                cells.append(f"{_n(e['p50_ms'], 1)} / {_n(e['p95_ms'], 1)}{mark}")
            table.add_row(shape, *cells, _n(data["spark_vs_sluice_http"], 1), _n(data["sluice_http_vs_duckdb"], 1))
        console.print(table)
        console.print("  Sluice = POST /druid/v2/sql (sluice_http) and SqlEngine.execute (sluice_engine); "
                      "ratios use sluice_http p50")
        for shape in ("timeseries", "topN"):
            data = queries["shapes"][shape]
            targets[f"SQL {shape} p50 < 100 ms"] = _le(data["engines"]["sluice_http"]["p50_ms"], 100, strict=True)
            targets[f"SQL {shape} >= 10x faster than Spark"] = _ge(data["spark_vs_sluice_http"], 10)
            targets[f"SQL {shape} within 2x of DuckDB"] = _le(data["sluice_http_vs_duckdb"], 2)

    concurrency = results.get("concurrency", {})
    if "result_cache_on" in concurrency:
        table = Table(title=f"Queries at once: a small topN and a point filter on {concurrency['rows']:,} rows, "
                            "queries/s (p50 / p95 ms)", title_justify="left")
        table.add_column("clients")
        for cache in ("off", "on"):
            table.add_column(f"result cache {cache}", justify="right")
        levels = [level for level in concurrency["result_cache_off"] if level.isdigit()]
        for level in levels:
            table.add_row(level, *(f"{_n(c[level]['queries_per_s'], 1)} ({_n(c[level]['p50_ms'], 1)} / "
                                   f"{_n(c[level]['p95_ms'], 1)})" + (" [red]errors[/]" if c[level]["errors"] else "")
                                   for c in (concurrency["result_cache_off"], concurrency["result_cache_on"])))
        console.print(table)
        most = max(levels, key=int)
        off, on = concurrency["result_cache_off"][most], concurrency["result_cache_on"][most]
        targets[f"queries at {most} clients >= 100/s with p95 <= 1 s"] = _ge(off["queries_per_s"], 100) and _le(
            off["p95_ms"], 1000)
        targets[f"repeated queries at {most} clients, result cache on, >= 1000/s"] = _ge(on["queries_per_s"], 1000)

    scaling = results.get("scaling", {})
    if "sizes" in scaling:
        table = Table(title="Druid SQL over HTTP vs rows stored, p50 / p95 ms", title_justify="left")
        table.add_column("rows")
        shapes = list(next(iter(scaling["sizes"].values()))["shapes"])
        for shape in shapes:
            table.add_column(shape, justify="right")
        for rows, size in scaling["sizes"].items():
            figures = size["shapes"]
            table.add_row(_n(int(rows)), *(f"{_n(figures[s]['p50_ms'], 1)} / {_n(figures[s]['p95_ms'], 1)}"
                                           + ("" if figures[s]["same_result_as_duckdb"] else " [red]wrong[/]")
                                           for s in shapes))
        console.print(table)
        largest = scaling["sizes"][str(scaling["rows"][-1])]["shapes"]
        for shape in ("timeseries", "topN"):
            targets[f"SQL {shape} p50 <= 500 ms at {scaling['rows'][-1]:,} rows"] = _le(largest[shape]["p50_ms"], 500)
        targets["SQL cost grows no faster than the rows"] = all(
            growth <= scaling["rows_growth"] for growth in scaling["p50_growth"].values())

    task_count = results.get("task_count", {})
    if "modes" in task_count:
        table = Table(title=f"Ingestion vs taskCount: {task_count['events']:,} events, 4 partitions, events/s "
                            "(steady reading / submit → queryable)", title_justify="left")
        table.add_column("Spark")
        for count in task_count["task_counts"]:
            table.add_column(f"taskCount {count}", justify="right")
        for mode, runs in task_count["modes"].items():
            table.add_row(mode, *(f"{_n(runs[str(c)]['steady_events_per_s'])} / {_n(runs[str(c)]['events_per_s'])}"
                                  + ("" if runs[str(c)]["totals_as_produced"] else " [red]wrong totals[/]")
                                  for c in task_count["task_counts"]))
        console.print(table)

    memory = results.get("memory", {})
    if "runs" in memory:
        table = Table(title=f"Task memory: {memory['events']:,} events, taskDuration {memory['task_duration']}, "
                            "node process tree RSS (MB)", title_justify="left")
        for column in ("maxRowsInMemory", "idle node", "peak reading", "peak publishing", "peak",
                       "driver / JVM / py workers", "rows per job", "s per job", "submit → queryable s"):
            table.add_column(column, justify="right")
        for run in memory["runs"]:
            roles = run["peak_rss_by_role_mb"]
            table.add_row(_n(run["max_rows_in_memory"]), _n(run["idle_node_rss_mb"]), _n(run["peak_rss_reading_mb"]),
                          _n(run["peak_rss_publishing_mb"]), _n(run["peak_rss_mb"]),
                          f"{_n(roles.get('driver'))} / {_n(roles.get('jvm'))} / {_n(roles.get('python_workers'))}",
                          _n(run.get("mean_rows_per_job")), _n(run.get("mean_job_s"), 2),
                          _n(run["submit_to_queryable_s"], 1))
        console.print(table)

    stages = results.get("stages", {})
    if "stages" in stages:
        table = Table(title=f"CPU per event, stage by stage: {stages['events']:,} events, one job over every offset "
                            f"(budget for (c) >= 1.2 x (a) on {stages['machine']['cpus']} cores: "
                            f"{_n(stages['core_us_per_event_budget_for_1.2x_python'], 1)} core-µs)", title_justify="left")
        roles = ("driver", "broker", "python_workers", "jvm")
        for column in ("stage", "events/s", *(f"{role} µs" for role in roles), "total core-µs"):
            table.add_column(column, justify="left" if column == "stage" else "right")
        for name, figures in stages["stages"].items():
            per_role = figures["core_us_per_event"]
            table.add_row(name, _n(figures["events_per_s"]), *(_n(per_role.get(role), 2) for role in roles),
                          _n(figures["core_us_per_event_total"], 2))
        console.print(table)

    batch = results.get("batch", {})
    if "cases" in batch:
        print_batch_tables(batch, console)
        for location, label in (("local", "local files"), ("s3", "S3")):
            ratios = [f["sluice_vs_pyspark_warm"] for case, f in batch["cases"].items() if case.startswith(location)]
            if ratios:
                targets[f"batch {label}: Sluice >= 0.9 x PySpark  [warm, every format]"] = (
                    None if None in ratios else min(ratios) >= 0.9)

    for what, error in failures(results):
        console.print(f"[red]{escape(what)} failed: {escape(error[:500])}[/]")
    if targets:
        table = Table(title="Targets (issues 6, 14, 18 and 19)", title_justify="left")
        table.add_column("target")
        table.add_column("result")
        for target, ok in targets.items():
            table.add_row(escape(target), _target(ok))  # its [brackets] are not rich markup
        console.print(table)
    return {target: ok for target, ok in targets.items()}


def failures(results: dict[str, Any]) -> list[tuple[str, str]]:
    """(what, error) of every benchmark, variant or run that failed: one failure must not hide the others."""
    found = [(name, r["error"]) for name, r in results.items() if "error" in r]
    for name, result in results.items():
        found += [(f"{name} variant {v}", f["error"]) for v, f in result.get("variants", {}).items() if "error" in f]
        found += [(f"{name} {dataset} {v} run {i + 1}", run["error"])
                  for dataset, data in result.get("datasets", {}).items()
                  for v, runs in data["runs"].items() for i, run in enumerate(runs) if "error" in run]
    return found


def _ge(value: float | None, bound: float) -> bool | None:
    return None if value is None else value >= bound


def _le(value: float | None, bound: float, strict: bool = False) -> bool | None:
    if value is None:
        return None
    return value < bound if strict else value <= bound


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: proves the scripts work")
    parser.add_argument("--only", default="", help="comma-separated subset of: "
                        + ", ".join(name for name, _, _ in BENCHMARKS))
    parser.add_argument("--out", type=Path, default=None,
                        help="results file (default: benchmarks/results.json, smoke: benchmarks/results-smoke.json)")
    parser.add_argument("--quiet-wait", type=float, default=None,
                        help="seconds to wait for other work on the machine to stop (default 120, smoke 0)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="per benchmark, seconds")
    parser.add_argument("--extra", action="append", default=[], metavar="NAME:ARGS",
                        help="more arguments for one benchmark, e.g. 'ingest:--datasets synthetic' (repeatable)")
    args = parser.parse_args()
    extra: dict[str, list[str]] = {}
    for item in args.extra:
        name, _, more = item.partition(":")
        extra.setdefault(name.strip(), []).extend(more.split())
    out = args.out or HERE / ("results-smoke.json" if args.smoke else "results.json")
    only = {name.strip() for name in args.only.split(",") if name.strip()}
    quiet_wait = args.quiet_wait if args.quiet_wait is not None else (0.0 if args.smoke else 120.0)
    if args.smoke:  # figures at this size mean nothing: the nodes skip the start-up warm-up (20 s each) that speed needs
        os.environ.setdefault("sluice_spark_warmUp", "false")

    console = Console(width=max(140, Console().width))
    began = time.monotonic()
    quiet = wait_until_quiet(quiet_wait) if quiet_wait > 0 else {}
    foreign = ForeignCpu()
    foreign.start()
    results: dict[str, Any] = {}
    for name, full, smoke in BENCHMARKS:
        if only and name not in only:
            continue
        results[name] = run_benchmark(name, [*(smoke if args.smoke else full), *extra.get(name, [])], args.timeout)
    foreign_cpu_s = foreign.stop()
    wall_s = time.monotonic() - began
    console.print()
    targets = summarize(results, console)
    report = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "smoke": args.smoke,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(time.time() - wall_s)),
        "wall_s": round(wall_s, 1),
        "machine": machine(),
        "other_processes_cpu_s": round(foreign_cpu_s, 1),
        "other_processes_cpu_share": round(foreign_cpu_s / (wall_s * (os.cpu_count() or 1)), 3),
        **({"quiet_check": quiet} if quiet else {}),
        "targets": targets,
        "results": results,
    }
    out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    console.print(f"\nwall time {wall_s:.0f} s; other processes used {foreign_cpu_s:.0f} CPU s "
                  f"({100 * report['other_processes_cpu_share']:.0f} % of the machine) meanwhile; wrote {out}")
    if failures(results):
        sys.exit(1)


if __name__ == "__main__":
    main()
