"""Ingestion events/s vs taskCount (issue 18 §3): the example supervisor spec at taskCount 1, 2 and 4 over the same
4-partition topic of sample events, on local Spark and on a 2-worker Spark standalone cluster.

One `sluice start` per mode, its tasks' Spark jobs in its one Spark application: local[*,4] by default, or on the
cluster (--spark-master) of two workers of one core each, its executors. Each mode first runs a throw-away
supervisor (the node's first is cold), then each taskCount as a data source of its own over the same offsets, from
submit until `SUM("count")` in Druid SQL equals the valid events; its count and metric totals are checked against
those of the events produced. Figures: the steady reading rate (10 % → 90 % of the offsets, from the supervisor
status) and end-to-end events/s. On two cores, the node, the dev broker and the executors share them.

    python benchmarks/task_count.py --events 1000000 --json       # also writes docs/img/task_count.png
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx
from common import (
    CLUSTER, IMAGES, SluiceNode, add_plot_arguments, emit, example_spec, ingest_until_queryable, log, machine,
    new_figure, save_figure, spark_cluster, sql_rows, terminate_supervisor,
)

PARTITIONS = 4
TOPIC = "wikipedia"
TOTALS = 'SELECT SUM("count"), SUM(added), SUM(deleted) FROM {}'


def expected_totals(records: list[Any]) -> list[int]:
    valid = [r.event for r in records if r.kind == "valid"]
    return [len(valid), sum(e["added"] for e in valid), sum(e["deleted"] for e in valid)]


def measure_mode(mode: str, bootstrap: str, ends: dict[int, int], expected: list[int], args: argparse.Namespace,
                 work_dir: Path) -> dict[str, Any]:
    """Every taskCount on one node of this mode; a throw-away supervisor first."""
    runs: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        flags = stack.enter_context(spark_cluster(work_dir)) if mode == "cluster" else []
        node = stack.enter_context(SluiceNode(work_dir / "node", args=flags))
        log(f"{mode}: node healthy after {node.start_s:.1f}s")
        for task_count in ["warm-up", *args.task_counts]:
            data_source = f"wiki_{task_count}".replace("-", "_")
            spec = example_spec(bootstrap, TOPIC, data_source, io_config={"taskCount": 1 if task_count == "warm-up"
                                                                          else task_count})
            log(f"{mode}: taskCount {task_count}")
            timeline = ingest_until_queryable(node, spec, sum(ends.values()), expected[0], args.timeout)
            terminate_supervisor(node, data_source)
            if task_count == "warm-up":
                continue
            with httpx.Client(base_url=node.base_url, timeout=30.0) as http:
                totals = (sql_rows(http, TOTALS.format(data_source)) or [[]])[0]
            steady = timeline.steady_events_per_s()
            runs[str(task_count)] = {
                "steady_events_per_s": round(steady) if steady else None,
                "events_per_s": round(timeline.total_offsets / timeline.queryable_s),
                "submit_to_queryable_s": round(timeline.queryable_s or 0, 2),
                "totals": totals, "totals_as_produced": totals == expected,
            }
            log(f"{mode}: taskCount {task_count}: {runs[str(task_count)]}")
    return runs


def run(args: argparse.Namespace) -> dict[str, Any]:
    from sluice.dev.sample_data import generate, produce
    from sluice.dev.tansu import DevKafkaBroker

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work_dir = Path(tempfile.mkdtemp(prefix="sluice-bench-task-count-"))
    try:
        with DevKafkaBroker(log_dir=work_dir) as broker:
            broker.create_topic(TOPIC, PARTITIONS)
            records = generate(args.events, seed=args.seed)
            expected = expected_totals(records)
            ends = produce(broker.bootstrap_servers, TOPIC, records, PARTITIONS)
            del records
            modes = {mode: measure_mode(mode, broker.bootstrap_servers, ends, expected, args, work_dir / mode)
                     for mode in args.modes}
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    figures = {"benchmark": "task_count", "events": args.events, "partitions": PARTITIONS,
               "task_counts": args.task_counts, "expected_totals": expected, "modes": modes, "machine": machine()}
    if args.plot:
        plot(figures, args.plot)
        figures["plot"] = str(args.plot)
    return figures


def plot(figures: dict[str, Any], path: Path) -> None:
    counts = figures["task_counts"]
    fig, axis = new_figure()
    for mode, runs in figures["modes"].items():
        for figure, style in (("steady_events_per_s", "-"), ("events_per_s", "--")):
            axis.plot(counts, [runs[str(c)][figure] for c in counts], marker="o", linestyle=style,
                      label=f"{mode} Spark, {'steady reading' if style == '-' else 'submit to queryable'}")
    axis.set(xlabel="taskCount", ylabel="events/s", title=f"{figures['events']:,} sample events, 4 partitions")
    axis.set_xticks(counts, [str(c) for c in counts])
    axis.set_ylim(bottom=0)
    axis.legend(fontsize=8)
    save_figure(fig, path, figures["machine"], f"cluster: {CLUSTER}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--task-counts", type=lambda text: [int(n) for n in text.split(",")], default=[1, 2, 4])
    parser.add_argument("--modes", type=lambda text: text.split(","), default=["local", "cluster"])
    parser.add_argument("--timeout", type=float, default=600.0, help="per supervisor, submit to queryable")
    parser.add_argument("--seed", type=int, default=7)
    add_plot_arguments(parser, IMAGES / "task_count.png")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    args = parser.parse_args()
    emit(run(args), args.json)


if __name__ == "__main__":
    main()
