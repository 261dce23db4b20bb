"""A task's memory at two maxRowsInMemory settings, ingesting the same data.

Why: Druid's promise is that maxRowsInMemory / maxBytesInMemory bound an ingestion task's heap, so a
node can be sized. In Sluice a read is one Spark job over at most maxRowsInMemory records, so the
setting should show up in the memory of the process that runs the tasks. Tasks are threads of the
node today (peons come with issue 4), so "a task's memory" is measured as the node's process tree —
the Python driver, the Spark JVM and Spark's Python workers — with the idle node's RSS (after start-up,
before the supervisor) reported as the baseline. Each setting runs on a fresh ``sluice start`` so
neither inherits the other's heap; RSS is split into the reading phase and the publishing phase,
because at publish all persists are merged in one Spark job whatever maxRowsInMemory says.

    python benchmarks/memory.py --events 500000 --settings 20000,150000 --json
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from common import MB, RssSampler, SluiceNode, emit, example_spec, ingest_until_queryable, log, machine

TOPIC = "wikipedia"
DATA_SOURCE = "wikipedia"
PARTITIONS = 4


def measure(bootstrap: str, total: int, valid: int, max_rows: int, task_duration: str, work_dir: Path,
            timeout: float) -> dict[str, Any]:
    """One fresh node, one supervisor at ``maxRowsInMemory = max_rows``, until every row is queryable."""
    spec = example_spec(bootstrap, TOPIC, DATA_SOURCE, io_config={"taskDuration": task_duration},
                        tuning_config={"maxRowsInMemory": max_rows})
    with SluiceNode(work_dir) as node, RssSampler(node.pid, interval=0.1) as rss:
        time.sleep(1.0)  # a few idle samples for the baseline
        timeline = ingest_until_queryable(node, spec, total, valid, timeout)
        node.stop()
    submitted = timeline.submitted_at
    read_end = submitted + (timeline.all_read_s or 0)
    publish_start = submitted + (timeline.first_publishing_s or timeline.all_read_s or 0)
    end = submitted + (timeline.queryable_s or 0)
    return {
        "max_rows_in_memory": max_rows,
        "idle_node_rss_mb": round(rss.last_before(submitted) / MB),
        "peak_rss_reading_mb": round(rss.peak_between(submitted, read_end) / MB),
        "peak_rss_publishing_mb": round(rss.peak_between(min(publish_start, read_end), end) / MB),
        **rss.summary(),
        "submit_to_queryable_s": round(timeline.queryable_s or 0, 1),
        **timeline.job_stats(),
        "row_stats": timeline.task_rows,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from sluice.dev.sample_data import generate, produce
    from sluice.dev.tansu import DevKafkaBroker

    work_dir = Path(tempfile.mkdtemp(prefix="sluice-bench-memory-"))
    try:
        with DevKafkaBroker(log_dir=work_dir) as broker:
            broker.create_topic(TOPIC, PARTITIONS)
            records = generate(args.events, seed=args.seed)
            valid = sum(r.kind == "valid" for r in records)
            ends = produce(broker.bootstrap_servers, TOPIC, records, PARTITIONS)
            del records
            runs = []
            for max_rows in args.settings:
                log(f"maxRowsInMemory={max_rows:,}: fresh node, {args.events:,} events")
                runs.append(measure(broker.bootstrap_servers, sum(ends.values()), valid, max_rows,
                                    args.task_duration, work_dir / f"node-{max_rows}", args.timeout))
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return {
        "benchmark": "memory", "events": args.events, "task_duration": args.task_duration,
        "task_count": example_spec("", TOPIC, DATA_SOURCE)["spec"]["ioConfig"]["taskCount"], "runs": runs, "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--settings", default="20000,150000", help="comma-separated maxRowsInMemory values")
    parser.add_argument("--task-duration", default="PT30S", help="the example's; long enough to read all in one task")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    args = parser.parse_args()
    args.settings = [int(s) for s in args.settings.split(",")]
    emit(run(args), args.json)


if __name__ == "__main__":
    main()
