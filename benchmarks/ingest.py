"""Ingestion throughput: Sluice against what a user would otherwise run, same data, same machine, one run.

Why three variants: a user picks Sluice over a hand-written PySpark job only if it is about as fast
while adding exactly-once, Druid's API and queryable segments; and a plain Python consumer is the
ceiling of "just read and parse" on one core. So the same ≥1M Wikipedia-edit events (the bundled
sample generator: 15 fields, skewed dimensions, 0.3 % bad records) on a 4-partition topic are read by

  (a) ``python``:  one thread, confluent-kafka + ``json.loads`` (events/s);
  (b) ``pyspark``: ``spark.read.format("sluice_kafka")`` over the same offsets, ``from_json``, the
      example spec's rollup (queryGranularity MINUTE, its 11 dimensions and 5 metrics), Parquet write —
      timed once cold (the first job of the session) and once warm; session start-up is reported apart;
  (c) ``sluice``:  ``sluice start`` (started and healthy before the clock starts), then the example
      supervisor spec is submitted and the clock runs until ``SUM("count")`` over ``POST /druid/v2/sql``
      equals the valid events. Like (b) it runs twice on one node: cold (the node's first supervisor) and
      warm (the same spec as a second data source over the same offsets, once the first has published and
      stopped). Reported for each: end-to-end events/s, the steady reading rate (10 % → 90 % of the
      offsets, from the supervisor status), where the time went (first job, reading), and the time to
      committed segments: once every row is queryable the supervisor is terminated, which makes its
      tasks publish at once, and the publish is timed until the tasks have exited.

Each variant runs in its own process, so the peak RSS of its process tree (Python + JVM + Spark's
Python workers) is its own. The orchestrating process owns the dev Kafka broker and the data.

    python benchmarks/ingest.py --events 1000000 --json
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import (
    IngestTimeline, RssSampler, SluiceNode, emit, example_spec, ingest_until_queryable, log, machine, ratio,
    run_child_json, run_measured, terminate_supervisor,
)

TOPIC = "wikipedia"
PARTITIONS = 4
DATA_SOURCE = "wikipedia"

#: what a user writes for the wikiticker events (booleans are JSON booleans, metrics are numbers)
EVENT_SCHEMA = (
    "time STRING, channel STRING, cityName STRING, countryIsoCode STRING, countryName STRING, "
    "isAnonymous BOOLEAN, isMinor BOOLEAN, isNew BOOLEAN, isRobot BOOLEAN, namespace STRING, page STRING, "
    "user STRING, added BIGINT, deleted BIGINT, delta BIGINT"
)


# ---------------------------------------------------------------------------------------------- (a) Python

def consume_python(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[str, Any]:
    """One thread: consume every partition to its end offset and ``json.loads`` each value.

    The consumer settings are the ones Sluice's Spark source uses (``fetch.queue.backoff.ms`` 10: the
    1 s default stalls bulk reads), so (a) and (b)/(c) read Kafka the same way.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench-python", "enable.auto.commit": False,
        "enable.partition.eof": True, "fetch.queue.backoff.ms": 10, "isolation.level": "read_committed",
    })
    remaining = {p: end for p, end in ends.items() if end > 0}
    parsed = bad = 0
    started = time.monotonic()
    consumer.assign([TopicPartition(topic, p, 0) for p in remaining])
    while remaining:
        for message in consumer.consume(num_messages=10_000, timeout=1.0):
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(error.str())
                if message.offset() >= ends[message.partition()]:
                    remaining.pop(message.partition(), None)
                continue
            try:
                json.loads(message.value())
                parsed += 1
            except ValueError:
                bad += 1
            if message.offset() + 1 >= ends[message.partition()]:
                remaining.pop(message.partition(), None)
    elapsed = time.monotonic() - started
    consumer.close()
    return {"variant": "python", "events": parsed + bad, "parsed": parsed, "not_json": bad,
            "seconds": round(elapsed, 3), "events_per_s": round((parsed + bad) / elapsed)}


# ---------------------------------------------------------------------------------------------- (b) PySpark

def run_pyspark(bootstrap: str, topic: str, ends: dict[int, int], out_dir: Path) -> dict[str, Any]:
    """The job a PySpark user writes without Sluice, on Sluice's session settings (so only Sluice's own
    work differs): read the offsets, parse, drop records without a usable time, roll up to the minute
    with the example's dimensions and metrics, write Parquet. Run twice: cold, then warm."""
    began = time.monotonic()
    from pyspark.sql import functions as F

    from sluice.stream import kafka_ranges
    from sluice.task import spark_session

    spark = spark_session.get_or_create(app_name="bench-pyspark")
    kafka_ranges.register(spark)
    startup_s = time.monotonic() - began
    dimensions = ["channel", "cityName", "countryIsoCode", "countryName", "namespace", "page", "user",
                  "isAnonymous", "isMinor", "isNew", "isRobot"]
    ranges = json.dumps({str(p): [0, end] for p, end in ends.items()})

    def job(target: Path) -> float:
        started = time.monotonic()
        events = (
            spark.read.format("sluice_kafka")
            .option("topic", topic)
            .option("consumerProperties", json.dumps({"bootstrap.servers": bootstrap}))
            .option("ranges", ranges)
            .load()
            .select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"))
            .select("e.*")
            .withColumn("__time", F.date_trunc("minute", F.col("time").cast("timestamp")))
            .where(F.col("__time").isNotNull())
        )
        (
            events.groupBy("__time", *dimensions)
            .agg(F.count(F.lit(1)).alias("count"), F.sum("added").alias("added"), F.sum("deleted").alias("deleted"),
                 F.sum("delta").alias("delta"), F.max("delta").alias("maxDelta"))
            .write.mode("overwrite").parquet(str(target))
        )
        return time.monotonic() - started

    cold_s = job(out_dir / "cold")
    warm_s = job(out_dir / "warm")
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    written = pq.read_table(out_dir / "warm", columns=["count"])
    events = sum(ends.values())
    return {
        "variant": "pyspark", "events": events, "spark_startup_s": round(startup_s, 2),
        "cold_s": round(cold_s, 3), "warm_s": round(warm_s, 3),
        "cold_events_per_s": round(events / cold_s), "warm_events_per_s": round(events / warm_s),
        "events_per_s": round(events / cold_s),
        "rolled_up_rows": written.num_rows, "rows_ingested": int(pc.sum(written.column("count")).as_py() or 0),
    }


# ---------------------------------------------------------------------------------------------- (c) Sluice

def run_sluice(bootstrap: str, ends: dict[int, int], valid: int, work_dir: Path,
               task_duration: str | None, timeout: float) -> dict[str, Any]:
    """``sluice start`` in a subprocess, healthy first; then the example spec from submit to queryable, twice
    like (b): cold, as the node's first supervisor, then warm, as a second data source over the same offsets
    once the first has published and stopped. A node runs for days, so warm is how it usually runs."""
    total = sum(ends.values())
    io_config = {"taskDuration": task_duration} if task_duration else {}
    runs: dict[str, dict[str, Any]] = {}
    with SluiceNode(work_dir / "sluice") as node, RssSampler(node.pid) as rss:
        log(f"sluice node healthy after {node.start_s:.1f}s")
        for run, data_source in (("cold", DATA_SOURCE), ("warm", f"{DATA_SOURCE}_warm")):
            log(f"submitting the supervisor of {data_source} ({run})")
            spec = example_spec(bootstrap, TOPIC, data_source, io_config=io_config)
            runs[run] = _figures(ingest_until_queryable(node, spec, total, valid, timeout),
                                 terminate_supervisor(node, data_source))
        node.stop()
    io = spec["spec"]["ioConfig"]
    return {
        "variant": "sluice", "events": total, "valid_events": valid,
        "node_startup_s": round(node.start_s or 0, 2),
        "task_count": io["taskCount"], "task_duration": io["taskDuration"], "period": io["period"],
        "start_delay": io["startDelay"], "max_rows_in_memory": spec["spec"]["tuningConfig"]["maxRowsInMemory"],
        **runs,
        **rss.summary(),
    }


def _figures(timeline: IngestTimeline, publish_s: float) -> dict[str, Any]:
    """One supervisor's run, from submit until every row is queryable; then terminated at once, so its tasks
    publish what they read (`publish_s`) as they would at taskDuration."""
    steady = timeline.steady_events_per_s()
    queryable_s = timeline.queryable_s or 0.0
    all_read_s = timeline.all_read_s or 0.0
    return {
        "submit_to_queryable_s": round(queryable_s, 2),
        "events_per_s": round(timeline.total_offsets / queryable_s) if queryable_s else None,
        "steady_events_per_s": round(steady) if steady else None,
        "read_events_per_s": round(timeline.total_offsets / all_read_s) if all_read_s else None,
        # seconds after submit: the first read job ends, the first task starts publishing (at taskDuration),
        # every offset is read, every row is queryable
        "timeline_s": {
            "first_read_job_done": _round(timeline.first_read_s),
            "first_publish_started": _round(timeline.first_publishing_s),
            "all_offsets_read": _round(timeline.all_read_s),
            "all_rows_queryable": _round(timeline.queryable_s),
        },
        "phases_s": {
            "submit_to_first_read": round(timeline.first_read_s or 0, 2),
            "reading": round(all_read_s - (timeline.first_read_s or 0), 2),
            "all_read_to_queryable": round(queryable_s - all_read_s, 2),
            "terminate_to_committed": round(publish_s, 2),
        },
        # submit → every row in segments committed to the metadata store, had the tasks ended once all was read
        "time_to_committed_segments_s": round(queryable_s + publish_s, 2),
        **timeline.job_stats(),
        "row_stats": timeline.task_rows,
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


# ---------------------------------------------------------------------------------------------- orchestration

def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    from sluice.dev.sample_data import generate, produce
    from sluice.dev.tansu import DevKafkaBroker

    work_dir = Path(tempfile.mkdtemp(prefix="sluice-bench-ingest-"))
    try:
        with DevKafkaBroker(log_dir=work_dir) as broker:
            broker.create_topic(TOPIC, PARTITIONS)
            log(f"generating {args.events:,} events")
            records = generate(args.events, seed=args.seed)
            valid = sum(r.kind == "valid" for r in records)
            mean_bytes = sum(len(r.value) for r in records) / len(records)
            started = time.monotonic()
            ends = produce(broker.bootstrap_servers, TOPIC, records, PARTITIONS)
            produce_s = time.monotonic() - started
            del records
            gc.collect()
            log(f"produced in {produce_s:.1f}s; end offsets {ends}")
            child = ["--bootstrap", broker.bootstrap_servers, "--ends", json.dumps(ends), "--json"]
            variants: dict[str, Callable[[], dict[str, Any]]] = {
                "python": lambda: run_measured(run_child_json(["--child", "python", *child]), args.timeout),
                "pyspark": lambda: run_measured(run_child_json(
                    ["--child", "pyspark", "--out", str(work_dir / "pyspark-out"), *child]), args.timeout),
                "sluice": lambda: run_sluice(broker.bootstrap_servers, ends, valid, work_dir, args.task_duration,
                                             args.timeout),
            }
            results: dict[str, Any] = {}
            for name in args.variants:
                try:
                    results[name] = variants[name]()
                except Exception as error:  # one failed variant must not lose the others' figures
                    log(f"variant {name} failed: {error}")
                    results[name] = {"variant": name, "error": f"{type(error).__name__}: {error}"[:2000]}
    finally:
        if args.keep:
            log(f"kept {work_dir} (node log: sluice/sluice-node.log)")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)

    a, b, c = results.get("python", {}), results.get("pyspark", {}), results.get("sluice", {})
    cold, warm = c.get("cold", {}), c.get("warm", {})
    return {
        "benchmark": "ingest",
        "events": args.events, "valid_events": valid, "partitions": PARTITIONS,
        "mean_event_bytes": round(mean_bytes), "produce_events_per_s": round(args.events / produce_s),
        "variants": results,
        "ratios": {
            # like for like: Sluice's reading rate against the same job, both warm (and both cold)
            "sluice_steady_vs_pyspark_warm": ratio(warm.get("steady_events_per_s"), b.get("warm_events_per_s")),
            "sluice_steady_vs_python": ratio(warm.get("steady_events_per_s"), a.get("events_per_s")),
            "sluice_cold_steady_vs_pyspark_cold": ratio(cold.get("steady_events_per_s"), b.get("cold_events_per_s")),
            # end to end: submit → every row queryable (supervisor, task start, persists, realtime views) against
            # the bare job
            "sluice_end_to_end_vs_pyspark_warm": ratio(warm.get("events_per_s"), b.get("warm_events_per_s")),
            "sluice_cold_end_to_end_vs_pyspark_cold": ratio(cold.get("events_per_s"), b.get("cold_events_per_s")),
        },
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--variants", default="python,pyspark,sluice", help="comma-separated subset")
    parser.add_argument("--task-duration", default=None,
                        help="override the example spec's taskDuration for (c) (default: keep its PT30S)")
    parser.add_argument("--timeout", type=float, default=600.0, help="per variant, seconds")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (node log, task dirs) for a look")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    # internal: one variant in a child process
    parser.add_argument("--child", choices=["python", "pyspark"], help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--ends", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        ends = {int(p): int(o) for p, o in json.loads(args.ends).items()}
        if args.child == "python":
            result = consume_python(args.bootstrap, TOPIC, ends)
        else:
            result = run_pyspark(args.bootstrap, TOPIC, ends, Path(args.out))
        emit(result, True)
        return
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    emit(orchestrate(args), args.json)


if __name__ == "__main__":
    main()
