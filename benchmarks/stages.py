"""Where an ingested event's CPU goes: the persist job of a Sluice task taken apart, stage by stage.

Why: issue 6 asks Sluice's steady reading rate to be 1.2 × one plain Python thread (confluent-kafka +
``json.loads``). On 2 cores that leaves Sluice 2 / 1.2 of the thread's time per event for everything it
does: fetch, hand the records to the JVM, parse, type, count, write. This script measures what each step
costs in CPU-microseconds per event, for every process involved (the JVM, Spark's Python workers that
read Kafka, the dev broker that serves it, the driver), by running the task's own ``IngestPipeline`` on
1M sample events, one step more each time:

  read     the Kafka source alone (``sluice_kafka`` → noop)
  parse    + ``from_json`` of the fields the example spec reads
  typed    + timestamp, transforms, filter, casts and the row flags (``IngestPipeline.typed_rows``)
  persist  + row counters and the Parquet write of a persist that does not roll up (``read_and_persist``)
  rollup   a persist that rolls up (a shuffle of every row)

Each job reads every offset of the 4 partitions at once (the cheapest case: no per-job overhead) and is
run twice; the second run is reported.

    python benchmarks/stages.py --events 1000000 --json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from common import emit, example_spec, log, machine, process_role
from ingest import consume_python

TOPIC = "wikipedia"
PARTITIONS = 4


def cpu_seconds_by_role() -> dict[str, float]:
    """CPU seconds used so far by this process and its descendants, by role; the dev broker is "broker"."""
    me = psutil.Process()
    totals: dict[str, float] = {}
    for process in [me, *me.children(recursive=True)]:
        try:
            cpu = process.cpu_times()
            role = process_role(process, me.pid)
            if role == "other" and "tansu" in process.name():
                role = "broker"
        except psutil.Error:
            continue
        totals[role] = totals.get(role, 0.0) + cpu.user + cpu.system
    return totals


def measure(events: int, job: Callable[[], object]) -> dict[str, Any]:
    job()  # the first run compiles and warms up
    before, started = cpu_seconds_by_role(), time.monotonic()
    job()
    wall, after = time.monotonic() - started, cpu_seconds_by_role()
    per_event = {role: (after[role] - before.get(role, 0.0)) / events * 1e6 for role in sorted(after)}
    return {"wall_s": round(wall, 2), "events_per_s": round(events / wall),
            "core_us_per_event": {role: round(us, 2) for role, us in per_event.items() if us >= 0.005},
            "core_us_per_event_total": round(sum(per_event.values()), 2)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from sluice.dev.sample_data import generate, produce
    from sluice.dev.tansu import DevKafkaBroker
    from sluice.spec.data_schema import DataSchema
    from sluice.task import kafka_source, spark_session
    from sluice.task.ingest_plan import compile_plan
    from sluice.task.pipeline import IngestPipeline, warm_up

    work = Path(tempfile.mkdtemp(prefix="sluice-bench-stages-"))
    try:
        with DevKafkaBroker(log_dir=work) as broker:
            broker.create_topic(TOPIC, PARTITIONS)
            log(f"producing {args.events:,} events")
            ends = produce(broker.bootstrap_servers, TOPIC, generate(args.events, seed=args.seed), PARTITIONS)
            events = sum(ends.values())
            ranges = {p: (0, end) for p, end in ends.items()}
            stages: dict[str, Any] = {
                "python": measure(events, lambda: consume_python(broker.bootstrap_servers, TOPIC, ends))}

            spark = spark_session.get_or_create(app_name="bench-stages")
            kafka_source.register(spark)
            warm_up(spark, work / "warm-up")
            spec = example_spec(broker.bootstrap_servers, TOPIC, TOPIC)
            plan = compile_plan(DataSchema.model_validate(spec["spec"]["dataSchema"]))
            pipeline = IngestPipeline(spark, plan, TOPIC, {"bootstrap.servers": broker.bootstrap_servers}, list(ends))

            def noop(df: Any) -> None:
                df.write.format("noop").mode("overwrite").save()

            jobs: dict[str, Callable[[], object]] = {
                "read": lambda: noop(pipeline.read(ranges)),
                "parse": lambda: noop(pipeline.read(ranges).select(
                    F.from_json(F.col("value").cast("string"), plan.json_schema_ddl).alias("r")).select("r.*")),
                "typed": lambda: noop(pipeline.typed_rows(pipeline.read(ranges))),
                "persist": lambda: pipeline.read_and_persist(ranges, work / "persist", rollup=False),
                "rollup": lambda: pipeline.read_and_persist(ranges, work / "rollup", rollup=True),
            }
            for name, job in jobs.items():
                log(f"stage {name}")
                stages[name] = measure(events, job)
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the broker's log and a persist of every offset, twice
    python_us = stages["python"]["wall_s"] / events * 1e6
    return {
        "benchmark": "stages", "events": events, "partitions": PARTITIONS, "stages": stages,
        # what Sluice may spend on both cores for its reading rate to be 1.2 x the Python thread's
        "core_us_per_event_budget_for_1.2x_python": round(os.cpu_count() * python_us / 1.2, 2),
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    args = parser.parse_args()
    result = run(args)
    if not args.json:
        for name, figures in result["stages"].items():
            log(f"{name:8s} {figures['events_per_s']:>9,}/s  {figures['core_us_per_event_total']:6.2f} core-µs/event  "
                f"{json.dumps(figures['core_us_per_event'])}")
        log(f"budget for 1.2 x python: {result['core_us_per_event_budget_for_1.2x_python']} core-µs/event")
    emit(result, args.json)


if __name__ == "__main__":
    main()
