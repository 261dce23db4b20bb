"""Stream jobs on Spark Structured Streaming and a real broker: RocketMQ Streams' example programs and Kafka
Streams' documented tables, records in and rows out, exactly.

Spark advances event time (the watermark) between micro-batches, not between records, so each test feeds the
job in steps and lets it process each step before the next (``process_all_available``), as the documented
examples feed records one at a time.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from pyspark.sql import SparkSession
from rich.console import Console

from sluice import stream_cli
from sluice.dev.tansu import DevKafkaBroker
from sluice.stream.builder import RStream, StreamBuilder, hopping, session, tumbling
from sluice.stream.runner import RunningJob, start_job
from sluice.stream.topology import StreamJob, StreamJobError

pytestmark = pytest.mark.spark

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def at(seconds: float) -> str:
    return (EPOCH + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


class Feed:
    """Sends records one by one, each flushed alone (the dev broker reports exact offsets only then)."""

    def __init__(self, broker: DevKafkaBroker, topic: str, partitions: int = 1) -> None:
        broker.create_topic(topic, partitions)
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0,
                                  "logger": logging.getLogger("feed")})  # not stderr, once the broker is gone

    def send(self, *values: dict[str, Any] | str | None, key: str | None = None, at_s: float | None = None) -> None:
        """Each value as JSON; a string as it is (a record that does not parse); None as a tombstone. ``at_s``: the
        messages' Kafka timestamp, seconds after EPOCH."""
        stamp = {} if at_s is None else {"timestamp": int((EPOCH + timedelta(seconds=at_s)).timestamp() * 1000)}
        for value in values:
            raw = value.encode() if isinstance(value, str) else None if value is None else json.dumps(value).encode()
            self.producer.produce(self.topic, value=raw,
                                  key=None if key is None else key.encode(), **stamp)
            self.producer.flush(10)


class Collected:
    """A job's output, batch by batch."""

    def __init__(self) -> None:
        self.batches: dict[int, list[dict[str, Any]]] = {}

    def __call__(self, rows: list[dict[str, Any]], batch_id: int) -> None:
        self.batches[batch_id] = rows  # a replayed batch replaces its first run

    def rows(self) -> list[dict[str, Any]]:
        return [row for batch_id in sorted(self.batches) for row in self.batches[batch_id]]

    def take(self) -> list[dict[str, Any]]:
        rows = self.rows()
        self.batches.clear()
        return rows


@pytest.fixture
def run(spark: SparkSession, tmp_path: Path) -> Iterator[Any]:
    started: list[RunningJob] = []

    def start(job: StreamJob, **kwargs: Any) -> RunningJob:
        running = start_job(spark, job, tmp_path / job.job_id, **kwargs)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


def source(builder: StreamBuilder, broker: DevKafkaBroker, topic: str, **columns: str) -> RStream:
    return builder.source(topic, bootstrap_servers=broker.bootstrap_servers, columns={"ts": "string", **columns},
                          timestamp=("ts", "iso"))


def windows(rows: list[dict[str, Any]], *fields: str) -> set[tuple[Any, ...]]:
    """(window start and end in seconds, then ``fields``) of each row."""
    return {((r["window_start"].replace(tzinfo=UTC) - EPOCH).total_seconds(),
             (r["window_end"].replace(tzinfo=UTC) - EPOCH).total_seconds(), *(r[f] for f in fields)) for r in rows}


def test_word_count_emits_kafka_quickstarts_updates(spark: SparkSession, kafka_broker: DevKafkaBroker, run) -> None:
    """RocketMQ Streams' WordCount and Kafka's quickstart: a running count per word, updated per input."""
    feed = Feed(kafka_broker, "wc-lines")
    out = Collected()
    builder = StreamBuilder("word-count")
    (builder.source("wc-lines", bootstrap_servers=kafka_broker.bootstrap_servers, columns={"line": "string"})
     .flat_map(lambda row: ({"word": w} for w in row["line"].split()), schema={"word": "string"})
     .key_by("word").count("count").foreach(out))
    job = run(builder.build())
    updates = []
    for line in ("all streams lead to kafka", "hello kafka streams", "join kafka summit"):
        feed.send({"line": line})
        job.process_all_available()
        updates.append({r["word"]: r["count"] for r in out.take()})
    assert updates == [
        {"all": 1, "streams": 1, "lead": 1, "to": 1, "kafka": 1},
        {"hello": 1, "kafka": 2, "streams": 2},
        {"join": 1, "kafka": 3, "summit": 1},
    ]
    assert job.status().processed == 3


def test_without_a_timestamp_column_the_kafka_timestamp_is_the_event_time(spark: SparkSession,
                                                                           kafka_broker: DevKafkaBroker, run) -> None:
    feed = Feed(kafka_broker, "kt-clicks")
    out = Collected()
    builder = StreamBuilder("kafka-time")
    (builder.source("kt-clicks", bootstrap_servers=kafka_broker.bootstrap_servers, columns={"page": "string"})
     .key_by("page").window(tumbling("PT10S")).count("cnt").foreach(out))
    job = run(builder.build())
    for second, page in ((1, "a"), (4, "a"), (12, "a"), (13, "b"), (31, "a")):
        feed.send({"page": page}, at_s=second)
    job.process_all_available()
    assert windows(out.rows(), "page", "cnt") == {(0, 10, "a", 2), (10, 20, "a", 1), (10, 20, "b", 1)}


def test_tumbling_window_count_fires_once_per_window_and_drops_records_beyond_grace(
        spark: SparkSession, kafka_broker: DevKafkaBroker, run) -> None:
    feed = Feed(kafka_broker, "tw-clicks")
    out = Collected()
    builder = StreamBuilder("tumbling-count")
    (source(builder, kafka_broker, "tw-clicks", page="string")
     .key_by("page").window(tumbling("PT10S", lateness="PT5S")).count("cnt").foreach(out))
    job = run(builder.build())

    feed.send({"ts": at(1), "page": "a"}, {"ts": at(2), "page": "a"}, {"ts": at(3), "page": "b"},
              {"ts": at(11), "page": "a"})
    job.process_all_available()
    assert out.take() == []  # stream time 11: [0, 10) stays open until 10 + 5

    feed.send({"ts": at(4), "page": "a"}, {"ts": at(16), "page": "b"})  # 4 is out of order but within grace
    job.process_all_available()
    assert windows(out.take(), "page", "cnt") == {(0, 10, "a", 3), (0, 10, "b", 1)}

    feed.send({"ts": at(5), "page": "a"}, {"ts": at(26), "page": "a"})  # [0, 10) closed at 15: 5 is dropped
    job.process_all_available()
    assert windows(out.take(), "page", "cnt") == {(10, 20, "a", 1), (10, 20, "b", 1)}
    status = job.status()
    assert (status.processed, status.late_dropped) == (8, 1)


def test_hopping_window_puts_each_record_in_every_window_it_falls_in(
        spark: SparkSession, kafka_broker: DevKafkaBroker, run) -> None:
    """RocketMQ Streams' sliding window (5 s, every 2 s): t=7 falls in [6, 11) and [4, 9), t=6.5 also in [2, 7)."""
    feed = Feed(kafka_broker, "hop-clicks")
    out = Collected()
    builder = StreamBuilder("hopping-count")
    (source(builder, kafka_broker, "hop-clicks", page="string")
     .key_by("page").window(hopping("PT5S", "PT2S")).count("cnt").foreach(out))
    job = run(builder.build())
    feed.send({"ts": at(6.5), "page": "a"}, {"ts": at(7), "page": "a"})
    job.process_all_available()
    feed.send({"ts": at(30), "page": "a"})
    job.process_all_available()
    assert windows(out.rows(), "cnt") == {(2, 7, 1), (4, 9, 2), (6, 11, 2)}


def test_session_windows_merge_when_a_late_record_bridges_two(
        spark: SparkSession, kafka_broker: DevKafkaBroker, run) -> None:
    """Kafka Streams' session example (gap 5 min): green 0, 6 and blue 2 make three sessions; green 4 merges
    green into [0, 6], blue 5 extends blue to [2, 5], blue 11 starts a new session."""
    feed = Feed(kafka_broker, "session-clicks")
    out = Collected()
    builder = StreamBuilder("session-count")
    (source(builder, kafka_broker, "session-clicks", user="string")
     .key_by("user").window(session("PT5M", lateness="PT10M")).count("cnt").foreach(out))
    job = run(builder.build())
    minute = 60
    feed.send({"ts": at(0), "user": "green"}, {"ts": at(6 * minute), "user": "green"},
              {"ts": at(2 * minute), "user": "blue"})
    job.process_all_available()
    feed.send({"ts": at(4 * minute), "user": "green"}, {"ts": at(5 * minute), "user": "blue"},
              {"ts": at(11 * minute), "user": "blue"})
    job.process_all_available()
    assert out.rows() == []  # nothing is final while a record may still merge sessions
    feed.send({"ts": at(60 * minute), "user": "red"})
    job.process_all_available()
    assert windows(out.rows(), "user", "cnt") == {
        (0, 6 * minute, "green", 3), (2 * minute, 5 * minute, "blue", 2), (11 * minute, 11 * minute, "blue", 1)}


#: Kafka Streams' KStream-KStream join table (window 15 s, grace 5 s, one key): (ts, side, value); None is a
#: record with a null value, which a join ignores
JOIN_INPUT = [(1, "L", None), (2, "R", None), (3, "L", "A"), (4, "R", "a"), (5, "L", "B"), (6, "R", "b"),
              (7, "L", None), (8, "R", None), (9, "L", "C"), (10, "R", "c"), (11, "R", None), (12, "L", None),
              (13, "R", None), (14, "R", "d"), (15, "L", "D"), (40, "L", "E"), (60, "L", "F"), (80, "R", "f"),
              (100, "L", "G")]
INNER = {(left, right) for left in "ABCD" for right in "abcd"}


@pytest.mark.parametrize(("how", "expected"), [
    ("inner", INNER),
    ("left", INNER | {("E", None), ("F", None)}),
    ("outer", INNER | {("E", None), ("F", None), (None, "f")}),
])
def test_stream_stream_join_matches_kafka_streams_table(spark: SparkSession, kafka_broker: DevKafkaBroker, run,
                                                        how: str, expected: set[tuple[Any, Any]]) -> None:
    left_feed, right_feed = Feed(kafka_broker, f"join-{how}-left"), Feed(kafka_broker, f"join-{how}-right")
    out = Collected()
    builder = StreamBuilder(f"join-{how}")
    left = source(builder, kafka_broker, f"join-{how}-left", k="string", v="string")
    right = source(builder, kafka_broker, f"join-{how}-right", k="string", v="string")
    left.join(right, on="k", within="PT15S", grace="PT5S", how=how).foreach(out)
    job = run(builder.build())
    steps = [JOIN_INPUT[:15], *([record] for record in JOIN_INPUT[15:])]
    for step in steps:
        for ts, side, value in step:
            feed = left_feed if side == "L" else right_feed
            feed.send(None if value is None else {"ts": at(ts), "k": "K", "v": value}, key="K")
        job.process_all_available()
    rows = out.rows()
    assert sorted(((r["v"], r["right_v"]) for r in rows), key=str) == sorted(expected, key=str)
    assert len(rows) == len(expected)
    assert job.status().thrown_away == 7  # the null values


def test_distinct_drops_repeats_within_the_bound(spark: SparkSession, kafka_broker: DevKafkaBroker, run) -> None:
    feed = Feed(kafka_broker, "dedup-orders")
    out = Collected()
    builder = StreamBuilder("dedup")
    source(builder, kafka_broker, "dedup-orders", order="string").distinct("order", within="PT1M").foreach(out)
    job = run(builder.build())
    feed.send({"ts": at(0), "order": "o1"}, {"ts": at(10), "order": "o1"}, {"ts": at(20), "order": "o2"})
    job.process_all_available()
    feed.send({"ts": at(30), "order": "o2"}, {"ts": at(40), "order": "o3"})
    job.process_all_available()
    assert sorted(r["order"] for r in out.rows()) == ["o1", "o2", "o3"]


def test_bad_records_are_counted_and_sampled_and_the_job_goes_on(
        spark: SparkSession, kafka_broker: DevKafkaBroker, run) -> None:
    feed = Feed(kafka_broker, "bad-sales")
    out = Collected()
    builder = StreamBuilder("bad-input")
    (source(builder, kafka_broker, "bad-sales", shop="string", price="double")
     .filter("price > 0").key_by("shop").window(tumbling("PT10S")).sum("price", "revenue").foreach(out))
    job = run(builder.build())
    feed.send("{not json", {"ts": "yesterday", "shop": "s1", "price": 1.0}, {"ts": at(1), "shop": "s1", "price": 2.5},
              {"ts": at(2), "shop": "s1", "price": -1.0}, {"ts": at(3), "shop": "s1", "price": 4.0},
              {"ts": at(30), "shop": "s2", "price": 1.0})
    job.process_all_available()
    feed.send({"ts": at(31), "shop": "s2", "price": 1.0})
    job.process_all_available()
    assert windows(out.rows(), "shop", "revenue") == {(0, 10, "s1", 6.5)}
    status = job.status()
    assert (status.processed, status.unparseable) == (7, 2)
    assert status.parse_exceptions == [
        "Unable to parse row [{not json]",
        'Timestamp[yesterday] is unparseable! Event: {"ts": "yesterday", "shop": "s1", "price": 1.0}',
    ]


def test_kafka_sink_writes_each_window_keyed_to_deduplicate_on(spark: SparkSession, kafka_broker: DevKafkaBroker,
                                                              run) -> None:
    feed = Feed(kafka_broker, "ks-sales")
    kafka_broker.create_topic("ks-revenue", 1)
    builder = StreamBuilder("kafka-sink")
    (source(builder, kafka_broker, "ks-sales", shop="string", price="long")
     .key_by("shop").window(tumbling("PT10S")).aggregate(n=("count", None), revenue=("sum", "price"))
     .sink("ks-revenue", bootstrap_servers=kafka_broker.bootstrap_servers, key=["shop"]))
    job = run(builder.build())
    feed.send({"ts": at(1), "shop": "s1", "price": 3}, {"ts": at(2), "shop": "s1", "price": 4},
              {"ts": at(3), "shop": "s2", "price": 5}, {"ts": at(12), "shop": "s2", "price": 1})
    job.process_all_available()
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "ks-check",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["ks-revenue"])
    messages = []
    try:
        deadline = time.monotonic() + 30
        while len(messages) < 2 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                messages.append((json.loads(message.key()), json.loads(message.value())))
    finally:
        consumer.close()
    start, end = at(0).replace("Z", ".000Z"), at(10).replace("Z", ".000Z")
    assert sorted(messages, key=lambda m: m[0]["shop"]) == [
        ({"shop": "s1", "window_start": start}, {"window_start": start, "window_end": end, "shop": "s1", "n": 2,
                                                  "revenue": 7}),
        ({"shop": "s2", "window_start": start}, {"window_start": start, "window_end": end, "shop": "s2", "n": 1,
                                                  "revenue": 5}),
    ]


def test_a_restarted_job_keeps_its_state_and_a_changed_one_is_refused(spark: SparkSession,
                                                                      kafka_broker: DevKafkaBroker,
                                                                      tmp_path: Path) -> None:
    feed = Feed(kafka_broker, "restart-clicks")
    out = Collected()

    def job(*extra: str) -> StreamJob:
        builder = StreamBuilder("restart")
        stream = source(builder, kafka_broker, "restart-clicks", page="string")
        for condition in extra:
            stream = stream.filter(condition)
        stream.key_by("page").window(tumbling("PT10S")).count("cnt").foreach(out)
        return builder.build()

    first = start_job(spark, job(), tmp_path / "restart")
    feed.send({"ts": at(1), "page": "a"}, {"ts": at(2), "page": "a"})
    first.process_all_available()
    first.stop()
    with pytest.raises(StreamJobError, match="'restart' changed since its checkpoint"):
        start_job(spark, job("page != 'b'"), tmp_path / "restart")

    second = start_job(spark, job(), tmp_path / "restart")  # the open window [0, 10) is in the checkpoint's state
    try:
        feed.send({"ts": at(3), "page": "a"}, {"ts": at(20), "page": "a"})
        second.process_all_available()
        assert windows(out.rows(), "page", "cnt") == {(0, 10, "a", 3)}
        assert second.status().processed == 2  # nothing read twice
    finally:
        second.stop()

    out.batches.clear()
    reset = start_job(spark, job("page != 'b'"), tmp_path / "restart", reset=True)  # starts over, from the earliest
    try:
        reset.process_all_available()
        assert windows(out.rows(), "page", "cnt") == {(0, 10, "a", 3)}
        assert reset.status().processed == 4
    finally:
        reset.stop()


def test_stream_run_prints_a_local_jobs_rows_and_its_status_line(spark: SparkSession, kafka_broker: DevKafkaBroker,
                                                                 tmp_path: Path) -> None:
    feed = Feed(kafka_broker, "cli-clicks")
    feed.send({"ts": at(1), "page": "a"}, {"ts": at(2), "page": "a"}, "not json", {"ts": at(30), "page": "b"})
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps({"type": "stream", "id": "cli-counts", "spec": {
        "ioConfig": {"topic": "cli-clicks", "consumerProperties": {"bootstrap.servers": kafka_broker.bootstrap_servers},
                     "useEarliestOffset": True},
        "timestampSpec": {"column": "ts", "format": "iso"}, "columns": [{"name": "ts"}, {"name": "page"}],
        "operators": [{"type": "keyBy", "fields": ["page"]},
                      {"type": "window", "windowType": "tumbling", "size": "PT10S"}, {"type": "count", "name": "n"}],
        "sink": {"type": "console"}}}))
    console = Console(file=io.StringIO(), width=300)
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = stream_cli.run(job_file, url="http://unused", checkpoint_dir=tmp_path, duration_s=20, console=console)
    assert code == 0
    start, end = at(0).replace("Z", ".000Z"), at(10).replace("Z", ".000Z")
    assert json.loads(printed.getvalue().splitlines()[0]) == {"window_start": start, "window_end": end, "page": "a",
                                                              "n": 2}
    assert "4 read" in console.file.getvalue() and "1 unparseable" in console.file.getvalue()

    job_file.write_text(job_file.read_text().replace('"keyBy"', '"keyby"'))
    assert stream_cli.run(job_file, url="http://unused", checkpoint_dir=tmp_path, console=console) == 2
    assert "spec.operators[0].type: Input tag 'keyby'" in console.file.getvalue()


def test_window_sum_min_max_avg_of_grades(spark: SparkSession, kafka_broker: DevKafkaBroker, run) -> None:
    """RocketMQ Streams' WindowSum / WindowMin / WindowAvg (keyBy grade, 5 s tumbling windows, lateness 2 s) as
    one job with four aggregators."""
    feed = Feed(kafka_broker, "grades")
    out = Collected()
    builder = StreamBuilder("grades")
    (source(builder, kafka_broker, "grades", grade="string", score="long")
     .key_by("grade").window(tumbling("PT5S", lateness="PT2S"))
     .aggregate(total=("sum", "score"), lowest=("min", "score"), highest=("max", "score"), mean=("avg", "score"))
     .foreach(out))
    job = run(builder.build())
    feed.send({"ts": at(0.5), "grade": "g1", "score": 90}, {"ts": at(1), "grade": "g1", "score": 70},
              {"ts": at(4.9), "grade": "g2", "score": 60}, {"ts": at(5), "grade": "g1", "score": 100},
              {"ts": at(6), "grade": "g1", "score": 80})
    job.process_all_available()
    feed.send({"ts": at(13), "grade": "g2", "score": 1})
    job.process_all_available()
    assert windows(out.rows(), "grade", "total", "lowest", "highest", "mean") == {
        (0, 5, "g1", 160, 70, 90, 80.0), (0, 5, "g2", 60, 60, 60, 60.0), (5, 10, "g1", 180, 80, 100, 90.0)}


def test_final_results_only_as_kafka_streams_suppression_example(spark: SparkSession, kafka_broker: DevKafkaBroker,
                                                                run) -> None:
    """Kafka Streams' suppress(untilWindowCloses) example: 1-hour windows, 10 minutes of grace; user U's 10 events
    between 09:00 and 10:10 give nothing until stream time reaches 10:10, and then exactly one result, 10."""
    feed = Feed(kafka_broker, "suppress-events")
    out = Collected()
    builder = StreamBuilder("suppress")
    (source(builder, kafka_broker, "suppress-events", user="string")
     .key_by("user").window(tumbling("PT1H", lateness="PT10M")).count("events").foreach(out))
    job = run(builder.build())
    nine = 9 * 3600
    feed.send(*({"ts": at(nine + minute * 60), "user": "U"} for minute in range(0, 56, 7)))  # 8 events in 09:xx
    job.process_all_available()
    feed.send({"ts": at(nine + 65 * 60), "user": "V"},  # stream time 10:05
              {"ts": at(nine + 58 * 60), "user": "U"}, {"ts": at(nine + 59 * 60), "user": "U"})  # late, in grace
    job.process_all_available()
    assert out.rows() == []
    feed.send({"ts": at(nine + 70 * 60), "user": "V"})  # stream time 10:10: U's 09:00 window closes
    job.process_all_available()
    assert [(r["user"], r["events"]) for r in out.rows()] == [("U", 10)]


def test_keyed_count_with_state_ttl_forgets_a_quiet_key(spark: SparkSession, kafka_broker: DevKafkaBroker,
                                                         run) -> None:
    feed = Feed(kafka_broker, "ttl-words")
    out = Collected()
    builder = StreamBuilder("ttl-count")
    (builder.source("ttl-words", bootstrap_servers=kafka_broker.bootstrap_servers, columns={"word": "string"})
     .key_by("word").count("n", ttl="PT20S").foreach(out))
    job = run(builder.build())
    feed.send({"word": "warm-up"})  # the first batch starts Spark's Python workers and the state store: slow
    job.process_all_available()
    out.take()
    counts = []
    for step in ([{"word": "a"}, {"word": "b"}], [{"word": "a"}], [{"word": "a"}]):
        if len(counts) == 2:
            time.sleep(22)  # a quiet key: its state expires after 20 s
        feed.send(*step)
        job.process_all_available()
        counts.append({r["word"]: r["n"] for r in out.take()})
    assert counts == [{"a": 1, "b": 1}, {"a": 2}, {"a": 1}]


def test_stream_table_join_meets_the_tables_row_at_arrival(spark: SparkSession, kafka_broker: DevKafkaBroker,
                                                           run) -> None:
    """RocketMQ Streams' JoinWithoutWindow (User{name, age} with Num{name, num}) as Kafka Streams' KStream-KTable
    left join: a record meets its key's latest table row, or none; records read in one micro-batch in event-time
    order, later ones as they arrive."""
    users, nums = Feed(kafka_broker, "tj-users"), Feed(kafka_broker, "tj-nums")
    users.send({"ts": at(0), "name": "alice", "age": 30}, {"ts": at(4), "name": "alice", "age": 31},
               {"ts": at(5), "name": "bob", "age": 40})
    nums.send({"ts": at(1), "name": "alice", "num": 1}, {"ts": at(2), "name": "bob", "num": 2},
              {"ts": at(3), "name": "alice", "num": 3}, {"ts": at(6), "name": "bob", "num": 4},
              {"ts": at(7), "name": "alice", "num": 5})
    out = Collected()
    builder = StreamBuilder("table-join")
    table = source(builder, kafka_broker, "tj-users", name="string", age="long")
    (source(builder, kafka_broker, "tj-nums", name="string", num="long")
     .join_table(table, on="name", how="left").foreach(out))
    job = run(builder.build())
    job.process_all_available()  # the first batch reads both topics: in event-time order
    assert sorted((r["name"], r["num"], r["age"]) for r in out.take()) == [
        ("alice", 1, 30), ("alice", 3, 30), ("alice", 5, 31), ("bob", 2, None), ("bob", 4, 40)]
    nums.send({"ts": at(2), "name": "alice", "num": 6})  # older than alice's last row, but it arrives after it
    job.process_all_available()
    assert [(r["name"], r["num"], r["age"], r["right_ts"]) for r in out.take()] == [("alice", 6, 31, at(4))]


def test_a_python_fold_sees_records_in_event_time_order(spark: SparkSession, kafka_broker: DevKafkaBroker,
                                                         run) -> None:
    """RocketMQ Streams' aggregate(Accumulator) / Kafka Streams' aggregate(initializer, aggregator), windowed and
    not: the items of each customer's window in event-time order, whatever order they arrived in."""
    feed = Feed(kafka_broker, "fold-orders")
    windowed, running = Collected(), Collected()
    builder = StreamBuilder("fold-window")
    (source(builder, kafka_broker, "fold-orders", customer="string", item="string")
     .key_by("customer").window(tumbling("PT10S"))
     .aggregate(lambda: "", lambda basket, row: basket + row["item"], name="basket", type="string").foreach(windowed))
    other = StreamBuilder("fold-running")
    (source(other, kafka_broker, "fold-orders", customer="string", item="string")
     .key_by("customer").aggregate(lambda: 0, lambda n, row: n + len(row["item"]), name="letters", type="long")
     .foreach(running))
    window_job, running_job = run(builder.build()), run(other.build())
    feed.send({"ts": at(3), "customer": "c", "item": "c"}, {"ts": at(1), "customer": "c", "item": "a"},
              {"ts": at(2), "customer": "c", "item": "b"}, {"ts": at(4), "customer": "d", "item": "xy"})
    window_job.process_all_available()
    running_job.process_all_available()

    def letters() -> dict[str, int]:
        """Each customer's latest running total (a batch may have caught only some of the records sent)."""
        return {r["customer"]: r["letters"] for _, batch in sorted(running.batches.items()) for r in batch}

    assert letters() == {"c": 3, "d": 2}
    feed.send({"ts": at(5), "customer": "c", "item": "d"}, {"ts": at(25), "customer": "d", "item": "z"})
    window_job.process_all_available()
    running_job.process_all_available()
    assert windows(windowed.rows(), "customer", "basket") == {(0, 10, "c", "abcd"), (0, 10, "d", "xy")}
    assert letters() == {"c": 4, "d": 3}
