"""Freshness: how long after an event is produced it can be seen in Druid SQL, at a steady rate.

Why this shape: a real-time service is judged by event → queryable latency under a steady load, not by
bulk throughput. Events (the bundled Wikipedia edits) are produced at ``--rate`` per second for
``--seconds`` with their timestamp set to the moment they are sent, and the data source rolls up at
queryGranularity SECOND, so ``__time`` itself is the per-second marker: a poller asks
``SELECT __time, SUM("count") … GROUP BY 1`` over ``POST /druid/v2/sql`` every ``--poll`` seconds,
and every event that appears between two polls is given the latency "poll answered − middle of its
second". Percentiles are over events (each appearance weighted by how many events appeared).

Rows are queryable as soon as a reading task has persisted them (Druid's realtime queries), so
taskDuration (PT10M by default, as a service would run) does not bound freshness: what a task reads is
visible after its next persist, a Spark job that reads whatever arrived since the last. A service runs for days, so the node is warmed first: a throw-away supervisor ingests a small topic
until its rows are queryable and is terminated (a node's first Spark jobs are far slower than the
rest: Python workers start, the JVM compiles; ``ingest.py`` reports that cost). The first
``--warmup`` seconds of the measured supervisor are still reported apart.

    python benchmarks/freshness.py --rate 20000 --seconds 60 --json
    python benchmarks/freshness.py --rate 20000 --seconds 60 --spark-cluster --json   # the tasks on a Spark cluster
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import tempfile
import threading
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from common import (
    CLUSTER, IMAGES, RssSampler, SluiceNode, emit, example_spec, ingest_until_queryable, log, machine, new_figure,
    percentile, save_figure, spark_cluster, sql_rows, terminate_supervisor, weighted_percentile,
)

TOPIC = "edits"
DATA_SOURCE = "freshness"
PARTITIONS = 4
_PREFIX = b'{"time":"'
_STAMP_LENGTH = len("2015-09-12T00:00:00.000Z")


def templates(count: int, seed: int) -> list[bytes]:
    """The tails of valid sample events after their timestamp, so a send only glues ``now`` in front.

    Formatting a whole JSON event per send would cost the producer more CPU than the broker on a
    2-core machine; gluing bytes keeps the producer's share small and the rate exact.
    """
    from sluice.dev.sample_data import generate

    tails = []
    for record in generate(count, seed=seed):
        if record.kind == "valid":
            assert record.value.startswith(_PREFIX), record.value[:20]
            tails.append(record.value[len(_PREFIX) + _STAMP_LENGTH:])
    return tails


def iso_millis(epoch_ms: int) -> bytes:
    return (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_ms // 1000)) + f".{epoch_ms % 1000:03d}Z").encode()


class Visibility:
    """Polls SQL and records, per event second, when how many of its events became visible."""

    def __init__(self, base_url: str, poll: float) -> None:
        self.base_url = base_url
        self.poll = poll
        self.seen: dict[int, int] = defaultdict(int)
        self.sightings: list[tuple[int, float, int]] = []  # (event second, seen at (epoch s), new events)
        self.queries: list[float] = []
        self.errors: list[str] = []  # a failed poll is counted and the next one goes on, as a dashboard would
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sql-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def total(self) -> int:
        return sum(self.seen.values())

    def _run(self) -> None:
        query = f'SELECT __time, SUM("count") FROM "{DATA_SOURCE}" GROUP BY 1'
        with httpx.Client(base_url=self.base_url, timeout=30.0) as http:
            while not self._stop.is_set():
                asked = time.time()
                try:
                    rows = sql_rows(http, query) or []
                except (RuntimeError, httpx.HTTPError) as error:
                    self.errors.append(str(error))
                    rows = []
                answered = time.time()
                self.queries.append(answered - asked)
                for stamp, count in rows:
                    second = int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp())
                    new = int(count) - self.seen[second]
                    if new > 0:
                        self.sightings.append((second, answered, new))
                        self.seen[second] += new
                self._stop.wait(max(0.0, self.poll - (time.time() - asked)))


def produce_steadily(bootstrap: str, tails: list[bytes], rate: int, seconds: float) -> tuple[dict[int, int], float]:
    """Send ``rate`` events per second for ``seconds``, each stamped with its send time (ms).

    Ends with one record per partition sent and flushed on its own: the dev broker reports a
    partition's latest offset as its last batch's base offset + 1 (ARCHITECTURE.md §8).
    Returns events per event-second and the achieved rate.
    """
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 10_000,
                         "queue.buffering.max.messages": 1_000_000})
    per_second: dict[int, int] = defaultdict(int)

    def send(value: bytes, partition: int) -> None:
        while True:
            try:
                producer.produce(TOPIC, value, partition=partition)
                return
            except BufferError:
                producer.poll(0.05)

    started = time.time()
    sent = 0
    while (now := time.time()) < started + seconds:
        due = min(int((now - started) * rate) - sent, 2_000)
        if due <= 0:
            producer.poll(0)
            time.sleep(0.001)
            continue
        millis = int(now * 1000)
        stamp = _PREFIX + iso_millis(millis)
        for _ in range(due):
            send(stamp + tails[sent % len(tails)], sent % PARTITIONS)
            sent += 1
        per_second[millis // 1000] += due
        producer.poll(0)
    achieved = sent / (time.time() - started)
    producer.flush(60)
    for partition in range(PARTITIONS):  # the offset quirk: a one-record last batch per partition
        millis = int(time.time() * 1000)
        send(_PREFIX + iso_millis(millis) + tails[partition], partition)
        per_second[millis // 1000] += 1
    producer.flush(60)
    return dict(per_second), achieved


def warm_up(node: SluiceNode, bootstrap: str, create_topic: Any, events: int, seed: int) -> float:
    """Ingest ``events`` sample events through a throw-away supervisor until queryable, then terminate it and
    wait for its tasks to publish and exit."""
    from sluice.dev.sample_data import generate, produce

    began = time.monotonic()
    create_topic("warmup", PARTITIONS)
    records = generate(events, seed=seed)
    ends = produce(bootstrap, "warmup", records, PARTITIONS)
    spec = example_spec(bootstrap, "warmup", "warmup", io_config={"taskDuration": "PT5S"})
    ingest_until_queryable(node, spec, sum(ends.values()), sum(r.kind == "valid" for r in records), timeout=300)
    terminate_supervisor(node, "warmup")
    return time.monotonic() - began


def run(args: argparse.Namespace) -> dict[str, Any]:
    from sluice.dev.tansu import DevKafkaBroker

    work_dir = Path(tempfile.mkdtemp(prefix="sluice-bench-fresh-"))
    try:
        tails = templates(20_000, args.seed)
        with contextlib.ExitStack() as stack:
            broker = stack.enter_context(DevKafkaBroker(log_dir=work_dir))
            flags = stack.enter_context(spark_cluster(work_dir)) if args.spark_cluster else []
            node = stack.enter_context(SluiceNode(work_dir / "sluice", args=flags))
            rss = stack.enter_context(RssSampler(node.pid))
            broker.create_topic(TOPIC, PARTITIONS)
            log(f"sluice node healthy after {node.start_s:.1f}s")
            warm_up_s = 0.0
            if args.warmup_events:
                warm_up_s = warm_up(node, broker.bootstrap_servers, broker.create_topic, args.warmup_events, args.seed)
                log(f"warm-up supervisor done in {warm_up_s:.1f}s")
            spec = example_spec(broker.bootstrap_servers, TOPIC, DATA_SOURCE,
                                io_config={"taskDuration": args.task_duration, "period": args.period,
                                           "taskCount": args.task_count},
                                granularity_spec={"queryGranularity": "SECOND"})
            with httpx.Client(base_url=node.base_url, timeout=30.0) as http:
                http.post("/druid/indexer/v1/supervisor", json=spec).raise_for_status()
            visibility = Visibility(node.base_url, args.poll)
            visibility.start()
            log(f"producing {args.rate:,} events/s for {args.seconds}s")
            started = time.time()
            per_second, achieved = produce_steadily(broker.bootstrap_servers, tails, args.rate, args.seconds)
            produced = sum(per_second.values())
            deadline = time.monotonic() + args.drain_timeout
            while visibility.total < produced and time.monotonic() < deadline:
                time.sleep(0.2)
            visibility.stop()
            gave_up = time.time()
            log(f"visible: {visibility.total:,} of {produced:,}")
            node.stop()
    finally:
        if args.keep:
            log(f"kept {work_dir} (node log: sluice/sluice-node.log)")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)

    def latencies(after: float) -> list[tuple[float, int]]:
        # an event of second s was sent in [s, s+1): its middle stands for all of them (±0.5 s)
        pairs = [(seen - (second + 0.5), n) for second, seen, n in visibility.sightings if second >= after]
        # events never seen before the drain timeout count with the time they had waited by then, so
        # the percentiles stay honest (as lower bounds) when Sluice falls behind the rate
        pairs += [(gave_up - (second + 0.5), n - visibility.seen.get(second, 0))
                  for second, n in per_second.items() if second >= after and n > visibility.seen.get(second, 0)]
        return pairs

    def summary(pairs: list[tuple[float, int]]) -> dict[str, Any]:
        return {"events": sum(n for _, n in pairs),
                **{f"p{q}_s": _round(weighted_percentile(pairs, q)) for q in (50, 95, 99)},
                "max_s": _round(max((v for v, _ in pairs), default=None))}

    io = spec["spec"]["ioConfig"]
    measured = latencies(int(started) + args.warmup)
    figures = {
        "benchmark": "freshness",
        "rate_target": args.rate, "rate_achieved": round(achieved), "seconds": args.seconds,
        "events_produced": produced, "events_visible": visibility.total,
        # > 0: Sluice fell behind the rate; those events enter the percentiles with the time they had
        # waited when the benchmark gave up, so the percentiles are lower bounds
        "events_not_visible_within_drain_timeout": produced - visibility.total,
        "drain_timeout_s": args.drain_timeout,
        "sql_errors": len(visibility.errors), "sql_error_sample": visibility.errors[0] if visibility.errors else None,
        "task_duration": io["taskDuration"], "period": io["period"], "task_count": io["taskCount"],
        "spark": CLUSTER if args.spark_cluster else "local",
        "query_granularity": "SECOND", "poll_s": args.poll, "warmup_s": args.warmup,
        "latency": summary(measured),
        "latency_including_warmup": summary(latencies(0)),
        "sql_poll_p50_ms": _round(1000 * (percentile(visibility.queries, 50) or 0)),
        "node_startup_s": round(node.start_s or 0, 2),
        "node_warm_up_s": round(warm_up_s, 1),
        **rss.summary(),
        "machine": machine(),
    }
    if not args.no_plot:
        path = args.plot or IMAGES / f"freshness{'_cluster' if args.spark_cluster else ''}.png"
        plot(measured, figures, path)
        figures["plot"] = str(path)
    return figures


def plot(pairs: list[tuple[float, int]], figures: dict[str, Any], path: Path) -> None:
    """The share of events visible within each latency (a CDF over events), with p50 and p95 marked."""
    ordered = sorted(pairs)
    total = sum(n for _, n in ordered) or 1
    shares, seen = [], 0
    for _, n in ordered:
        seen += n
        shares.append(seen / total)
    fig, axis = new_figure()
    axis.step([v for v, _ in ordered], shares, where="post")
    for q in (50, 95):
        value = figures["latency"][f"p{q}_s"]
        if value is not None:
            axis.axvline(value, color="grey", linestyle="--", linewidth=0.8)
            axis.annotate(f"p{q} {value:.2f} s", (value, q / 100), xytext=(4, -12), textcoords="offset points")
    axis.set(xlabel="event → visible in Druid SQL (s)", ylabel="share of events", ylim=(0, 1.02),
             title=f"{figures['rate_achieved']:,} events/s for {figures['seconds']:.0f} s, taskCount "
                   f"{figures['task_count']}\nSpark: {figures['spark']}")
    save_figure(fig, path, figures["machine"])


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=20_000, help="events per second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--task-duration", default="PT10M", help="the supervisor's taskDuration")
    parser.add_argument("--period", default="PT2S", help="the supervisor's period (the example's)")
    parser.add_argument("--task-count", type=int, default=2, help="the supervisor's taskCount (the example's)")
    parser.add_argument("--warmup", type=float, default=5.0,
                        help="seconds at the start of the measured supervisor reported apart")
    parser.add_argument("--warmup-events", type=int, default=20_000,
                        help="events the throw-away warm-up supervisor ingests first (0: none, the node stays cold)")
    parser.add_argument("--poll", type=float, default=0.25, help="seconds between SQL polls")
    parser.add_argument("--drain-timeout", type=float, default=120.0,
                        help="seconds to wait after producing for every event to become visible")
    parser.add_argument("--spark-cluster", action="store_true",
                        help=f"run the tasks on a Spark {CLUSTER} on loopback (--spark-master)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--plot", type=Path,
                        help=f"where the latency CDF goes (default: {IMAGES}/freshness.png, freshness_cluster.png)")
    parser.add_argument("--no-plot", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (node log, task dirs) for a look")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    args = parser.parse_args()
    emit(run(args), args.json)


if __name__ == "__main__":
    main()
