"""Ingestion throughput: Sluice against the job a PySpark user writes by hand, same data, same machine, one run.

The yardstick is ``../shared/benchmarks/diy_kafka_rollup.py``: a minimal Python data source reading only each
message's ``value``, ``from_json``, a ``groupBy`` rollup to the minute, Parquet; best of three runs in one session.
It runs unchanged on the events it expects, and Sluice is compared with it there. Two data sets, each on its own
4-partition topic:

  ``synthetic``: the yardstick's events (``ts``, 8 string dimensions ``d0``..``d7``, metrics ``m0`` long, ``m1``
      and ``m2`` double; ``sample_data.generate_flat``), rolled up as the yardstick does (count, sums of m0 and
      m1, max of m2);
  ``wikipedia``: the bundled sample (15 fields, skewed dimensions, 0.3 % bad records) with the shipped example
      spec. The yardstick's code cannot read it unchanged, so (b) here is the same job with the wikipedia schema
      and the example's rollup (``run_diy``: the yardstick's reader, builder and loop, nothing of Sluice's).

Variants, each in its own process so that the peak RSS of its process tree (Python + JVM + Spark's Python
workers) is its own:

  (a) ``python``: one thread, confluent-kafka + ``json.loads`` (events/s);
  (b) ``yardstick``: as above; it prints its best of three runs, and each run is recorded here for (b) on the
      wikipedia events;
  (c) ``sluice``: ``sluice start`` (healthy before any clock starts), then the data set's supervisor spec is
      submitted and the clock runs until ``SUM("count")`` over ``POST /druid/v2/sql`` equals the valid events.
      On each node twice: cold (the node's first supervisor) and warm (the same spec as a second data source
      over the same offsets, once the first has published and stopped and the broker has loaded its segments:
      that load (6 s after 1M wikipedia events were published) otherwise shares the two cores with the warm run's
      reading, and the yardstick never makes its output queryable). Reported for each: the steady reading
      rate (10 % → 90 % of the offsets, from the supervisor status), end-to-end events/s, where the time went,
      the time to committed segments (the supervisor is terminated once every row is queryable, which makes its
      tasks publish at once), and the data source's count and metric totals in Druid SQL, to be compared with
      the totals of the events produced (``expected``).

(b) and (c) run ``--rounds`` times, interleaved (yardstick, then a fresh Sluice node), so both see the same
machine; the ratios are of medians and of bests, with every run's figure beside them.

    python benchmarks/ingest.py --events 1000000 --json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from common import (
    EXAMPLE_SPEC, ROOT, IngestTimeline, RssSampler, SluiceNode, broker_loaded, emit, example_spec,
    ingest_until_queryable, log, machine, ratio, run_child_json, run_measured, sql_rows, terminate_supervisor,
)

PARTITIONS = 4
YARDSTICK = ROOT.parent / "shared" / "benchmarks" / "diy_kafka_rollup.py"


@dataclass(frozen=True)
class Dataset:
    """One topic's events and the dataSchema Sluice ingests them with (the yardstick's rollup, in Druid's words)."""

    name: str
    time_column: str
    dimensions: tuple[str, ...]
    metrics: tuple[dict[str, str], ...]
    #: (n, seed) -> records
    generate: Callable[[int, int], list[Any]]
    #: Spark DDL of the event, for (b) on events the yardstick cannot read
    event_ddl: str | None = None

    def spec(self, bootstrap: str, data_source: str, io_config: dict[str, Any],
             tuning_config: dict[str, Any]) -> dict[str, Any]:
        spec = example_spec(bootstrap, self.name, data_source, io_config=io_config, tuning_config=tuning_config)
        schema = spec["spec"]["dataSchema"]
        schema["timestampSpec"] = {"column": self.time_column, "format": "iso"}
        schema["dimensionsSpec"] = {"dimensions": list(self.dimensions)}
        schema["metricsSpec"] = [dict(m) for m in self.metrics]
        return spec

    def expected(self, records: Sequence[Any]) -> dict[str, float]:
        """Every metric's total over the valid events, as `totals_sql` reads it back: what a correct ingestion
        must give, computed from the events produced rather than from any count Sluice keeps."""
        events = [r.event for r in records if r.kind == "valid"]
        totals: dict[str, float] = {}
        for metric in self.metrics:
            kind, name = metric["type"], metric["name"]
            values = [e[metric["fieldName"]] for e in events] if kind != "count" else [1] * len(events)
            totals[name] = max(values) if kind.endswith("Max") else sum(values)
        return totals

    def totals_sql(self, data_source: str) -> str:
        return "SELECT " + ", ".join(
            f'{"MAX" if m["type"].endswith("Max") else "SUM"}("{m["name"]}") AS "{m["name"]}"' for m in self.metrics
        ) + f' FROM "{data_source}"'


def _generate_flat(n: int, seed: int) -> list[Any]:
    from sluice.dev.sample_data import generate_flat

    return generate_flat(n, 8, seed)


def _generate_wikipedia(n: int, seed: int) -> list[Any]:
    from sluice.dev.sample_data import generate

    return generate(n, seed)


_EXAMPLE = json.loads(EXAMPLE_SPEC.read_text())["spec"]["dataSchema"]

DATASETS = {
    "synthetic": Dataset(
        "synthetic", "ts", tuple(f"d{i}" for i in range(8)),
        ({"type": "count", "name": "count"}, {"type": "longSum", "name": "m0", "fieldName": "m0"},
         {"type": "doubleSum", "name": "m1", "fieldName": "m1"}, {"type": "doubleMax", "name": "m2", "fieldName": "m2"}),
        _generate_flat),
    "wikipedia": Dataset(
        "wikipedia", "time", tuple(_EXAMPLE["dimensionsSpec"]["dimensions"]), tuple(_EXAMPLE["metricsSpec"]),
        _generate_wikipedia,
        event_ddl="time STRING, channel STRING, cityName STRING, countryIsoCode STRING, countryName STRING, "
                  "isAnonymous BOOLEAN, isMinor BOOLEAN, isNew BOOLEAN, isRobot BOOLEAN, namespace STRING, "
                  "page STRING, user STRING, added BIGINT, deleted BIGINT, delta BIGINT"),
}


# ---------------------------------------------------------------------------------------------- (a) Python

def consume_python(bootstrap: str, topic: str, ends: dict[int, int]) -> dict[str, Any]:
    """One thread: consume every partition to its end offset and ``json.loads`` each value.

    The consumer settings are the ones Sluice's Spark source uses (``fetch.queue.backoff.ms`` 10: the
    1 s default stalls bulk reads), so (a) and (c) read Kafka the same way.
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


# ---------------------------------------------------------------------------------------------- (b) the yardstick

def run_yardstick(bootstrap: str, dataset: Dataset, out_dir: Path, timeout: float) -> dict[str, Any]:
    """The shared yardstick, unchanged, on the events it expects; on others, `run_diy` in a child process."""
    if dataset.event_ddl is None:
        command = [os.environ["PYSPARK_PYTHON"], str(YARDSTICK), bootstrap, dataset.name, str(PARTITIONS),
                   str(len(dataset.dimensions))]
    else:
        command = run_child_json(["--child", "diy", "--dataset", dataset.name, "--bootstrap", bootstrap,
                                  "--out", str(out_dir)])
    return {"variant": "yardstick", **run_measured(command, timeout)}


def run_diy(bootstrap: str, dataset: Dataset, out_dir: Path) -> dict[str, Any]:
    """The yardstick's job on `dataset`: its session, its reader (only `value`), its loop (three runs, the best
    one counts), with the data set's schema, dimensions and metrics, and `try_to_timestamp` for `to_timestamp` (the
    sample's bad times would fail the job). Nothing of Sluice's is used."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class Split(InputPartition):
        def __init__(self, p: int, start: int, end: int) -> None:
            self.p, self.start, self.end = p, start, end

    class Reader(DataSourceReader):
        def __init__(self, options: dict[str, str]) -> None:
            self.bs, self.topic, self.ranges = options["bs"], options["topic"], json.loads(options["ranges"])

        def partitions(self) -> list[Split]:
            return [Split(int(p), s, e) for p, (s, e) in self.ranges.items()]

        def read(self, split: Split):  # type: ignore[no-untyped-def]
            from confluent_kafka import Consumer, TopicPartition
            import pyarrow as pa
            c = Consumer({"bootstrap.servers": self.bs, "group.id": "diy", "enable.auto.commit": False})
            c.assign([TopicPartition(self.topic, split.p, split.start)])
            pos = split.start
            while pos < split.end:
                msgs = c.consume(num_messages=min(50000, split.end - pos), timeout=2.0)
                vals = [m.value() for m in msgs if m.error() is None and m.offset() < split.end]
                if not vals:
                    break
                pos += len(vals)
                yield pa.RecordBatch.from_arrays([pa.array(vals, pa.binary())], names=["value"])
            c.close()

    class Source(DataSource):
        @classmethod
        def name(cls) -> str:
            return "diykafka"

        def schema(self) -> str:
            return "value binary"

        def reader(self, schema: Any) -> Reader:
            return Reader(self.options)

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(Source)
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "diy-probe"})
    ranges = {str(p): [0, c.get_watermark_offsets(TopicPartition(dataset.name, p), timeout=10)[1]]
              for p in range(PARTITIONS)}
    total = sum(e for _, e in ranges.values())
    aggregations = {"count": lambda m: F.count("*"), "Sum": lambda m: F.sum(m["fieldName"]),
                    "Max": lambda m: F.max(m["fieldName"])}
    runs = []
    for run in range(3):
        t = time.time()
        raw = (spark.read.format("diykafka").option("bs", bootstrap).option("topic", dataset.name)
               .option("ranges", json.dumps(ranges)).load())
        j = raw.select(F.from_json(F.col("value").cast("string"), dataset.event_ddl).alias("j")).select("j.*")
        # try_: the wikipedia sample has bad times, on which ANSI mode's to_timestamp fails the job
        agg = (j.groupBy(F.date_trunc("minute", F.try_to_timestamp(F.col(dataset.time_column))).alias("__time"),
                         *dataset.dimensions)
               .agg(*(aggregations[m["type"] if m["type"] == "count" else m["type"][-3:]](m).alias(m["name"])
                      for m in dataset.metrics)))
        agg.write.mode("overwrite").parquet(str(out_dir / "out"))
        runs.append(total / (time.time() - t))
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    written = pq.read_table(out_dir / "out", columns=["__time", "count"])
    valid = written.filter(pc.is_valid(written["__time"]))
    return {"diy_events_per_s": round(max(runs)), "runs_events_per_s": [round(r) for r in runs],
            "rows_ingested": int(pc.sum(valid["count"]).as_py() or 0)}


# ---------------------------------------------------------------------------------------------- (c) Sluice

def run_sluice(bootstrap: str, dataset: Dataset, ends: dict[int, int], valid: int, work_dir: Path,
               task_duration: str | None, max_rows_in_memory: int | None, timeout: float) -> dict[str, Any]:
    """``sluice start`` in a subprocess, healthy first; then the data set's spec from submit to queryable, twice:
    cold, as the node's first supervisor, then warm, as a second data source over the same offsets once the first
    has published and stopped and the broker has loaded its segments. A node runs for days, so warm is how it
    usually runs."""
    total = sum(ends.values())
    io_config = {"taskDuration": task_duration} if task_duration else {}
    tuning_config = {"maxRowsInMemory": max_rows_in_memory} if max_rows_in_memory else {}
    runs: dict[str, dict[str, Any]] = {}
    with SluiceNode(work_dir) as node, RssSampler(node.pid) as rss:
        log(f"sluice node healthy after {node.start_s:.1f}s")
        for run, data_source in (("cold", dataset.name), ("warm", f"{dataset.name}_warm")):
            log(f"submitting the supervisor of {data_source} ({run})")
            spec = dataset.spec(bootstrap, data_source, io_config, tuning_config)
            runs[run] = _figures(ingest_until_queryable(node, spec, total, valid, timeout),
                                 terminate_supervisor(node, data_source))
            with httpx.Client(base_url=node.base_url, timeout=30.0) as http:
                row = (sql_rows(http, dataset.totals_sql(data_source)) or [[]])[0]
                # the published segments, loaded before the warm run starts rather than during it
                runs[run]["broker_load_s"] = broker_loaded(http, data_source, timeout)
            runs[run]["totals"] = dict(zip((m["name"] for m in dataset.metrics), row))
        node.stop()
    io = spec["spec"]["ioConfig"]
    return {
        "variant": "sluice", "node_startup_s": round(node.start_s or 0, 2),
        "task_count": io["taskCount"], "task_duration": io["taskDuration"], "period": io["period"],
        "max_rows_in_memory": spec["spec"]["tuningConfig"]["maxRowsInMemory"],
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


# ---------------------------------------------------------------------------------------------- orchestration

def spread(values: Sequence[float | None]) -> dict[str, Any]:
    """Every run's figure, and their median and best (None where a run gave none)."""
    known = [v for v in values if v is not None]
    return {"runs": list(values), "median": round(statistics.median(known)) if known else None,
            "best": max(known) if known else None, "worst": min(known) if known else None}


def measure_dataset(args: argparse.Namespace, broker: Any, dataset: Dataset, work_dir: Path) -> dict[str, Any]:
    """Produce the data set, then (a) once and (b), (c) `--rounds` times, interleaved."""
    from sluice.dev.sample_data import produce

    broker.create_topic(dataset.name, PARTITIONS)
    log(f"{dataset.name}: generating {args.events:,} events")
    records = dataset.generate(args.events, args.seed)
    valid = sum(r.kind == "valid" for r in records)
    expected = dataset.expected(records)
    mean_bytes = sum(len(r.value) for r in records) / len(records)
    started = time.monotonic()
    ends = produce(broker.bootstrap_servers, dataset.name, records, PARTITIONS)
    produce_s = time.monotonic() - started
    del records
    gc.collect()
    log(f"{dataset.name}: produced in {produce_s:.1f}s; end offsets {ends}")
    bootstrap = broker.bootstrap_servers
    variants: dict[str, Callable[[int], dict[str, Any]]] = {
        "python": lambda _: run_measured(run_child_json(
            ["--child", "python", "--dataset", dataset.name, "--bootstrap", bootstrap, "--ends", json.dumps(ends)]),
            args.timeout),
        "yardstick": lambda r: run_yardstick(bootstrap, dataset, work_dir / f"yardstick-{r}", args.timeout),
        "sluice": lambda r: run_sluice(bootstrap, dataset, ends, valid, work_dir / f"sluice-{r}",
                                       args.task_duration, args.max_rows_in_memory, args.timeout),
    }
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in args.variants}
    for round_ in range(args.rounds):
        for name in args.variants:
            if name == "python" and round_ > 0:
                continue
            try:
                results[name].append(variants[name](round_))
            except Exception as error:  # one failed run must not lose the others' figures
                log(f"{dataset.name}: variant {name} failed: {error}")
                results[name].append({"variant": name, "error": f"{type(error).__name__}: {error}"[:2000]})

    yardstick = spread([r.get("diy_events_per_s") for r in results.get("yardstick", [])])
    sluice = {f"{run}_{figure}": spread([r.get(run, {}).get(figure) for r in results.get("sluice", [])])
              for run in ("cold", "warm") for figure in ("steady_events_per_s", "events_per_s")}
    python = (results.get("python") or [{}])[0].get("events_per_s")
    return {
        "events": args.events, "valid_events": valid, "expected_totals": expected, "partitions": PARTITIONS,
        "mean_event_bytes": round(mean_bytes), "produce_events_per_s": round(args.events / produce_s),
        "runs": results,
        "yardstick_events_per_s": yardstick,
        "sluice": sluice,
        "ratios": {
            # like for like: Sluice's steady reading rate against the yardstick's rate (its best of three runs)
            "warm_steady_vs_yardstick": _ratios(sluice["warm_steady_events_per_s"], yardstick),
            "cold_steady_vs_yardstick": _ratios(sluice["cold_steady_events_per_s"], yardstick),
            # end to end: submit → every row queryable (supervisor, task start, persists, realtime views)
            "warm_end_to_end_vs_yardstick": _ratios(sluice["warm_events_per_s"], yardstick),
            "warm_steady_vs_python": ratio(sluice["warm_steady_events_per_s"]["median"], python),
        },
    }


def _ratios(sluice: dict[str, Any], yardstick: dict[str, Any]) -> dict[str, float | None]:
    return {"median": ratio(sluice["median"], yardstick["median"]), "best": ratio(sluice["best"], yardstick["best"])}


def orchestrate(args: argparse.Namespace) -> dict[str, Any]:
    from sluice.dev.tansu import DevKafkaBroker

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work_dir = Path(tempfile.mkdtemp(prefix="sluice-bench-ingest-"))
    try:
        with DevKafkaBroker(log_dir=work_dir) as broker:
            datasets = {name: measure_dataset(args, broker, DATASETS[name], work_dir / name) for name in args.datasets}
    finally:
        if args.keep:
            log(f"kept {work_dir} (node logs: <data set>/sluice-<round>/sluice-node.log)")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    return {"benchmark": "ingest", "events": args.events, "rounds": args.rounds, "datasets": datasets,
            "machine": machine()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--datasets", default="synthetic,wikipedia", help="comma-separated subset")
    parser.add_argument("--variants", default="python,yardstick,sluice", help="comma-separated subset")
    parser.add_argument("--rounds", type=int, default=3, help="runs of (b) and (c), interleaved")
    parser.add_argument("--task-duration", default=None,
                        help="override the example spec's taskDuration for (c) (default: keep its PT30S)")
    parser.add_argument("--max-rows-in-memory", type=int, default=None,
                        help="override the example spec's maxRowsInMemory for (c), the events of one persist (default: "
                             "keep its 150000); the smoke run's events need several persists for a steady rate")
    parser.add_argument("--timeout", type=float, default=600.0, help="per variant, seconds")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (node logs, task dirs) for a look")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    # internal: one variant in a child process
    parser.add_argument("--child", choices=["python", "diy"], help=argparse.SUPPRESS)
    parser.add_argument("--dataset", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--ends", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "python":
        ends = {int(p): int(o) for p, o in json.loads(args.ends).items()}
        emit(consume_python(args.bootstrap, args.dataset, ends), True)
        return
    if args.child == "diy":
        emit(run_diy(args.bootstrap, DATASETS[args.dataset], Path(args.out)), True)
        return
    args.datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    emit(orchestrate(args), args.json)


if __name__ == "__main__":
    main()
