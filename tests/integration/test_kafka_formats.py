"""Every inputFormat a Kafka supervisor reads, through the real HTTP API: csv, tsv, regex, Druid's `kafka` format
(key, headers, timestamp, topic around a json or csv value) and the legacy `dataSchema.parser` form.

A real dev broker, the shared SparkSession and node; every expected answer is worked out here from the messages
produced, and the unparseable ones are located by their partition and offset in the task reports.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer

from sluice.server.node import Node
from sluice.stream.kafka import KafkaStream
from tests.integration.harness import committed_offsets, read_to, sql, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

PARTITIONS = 2
CHANNELS = ["en", "de", "fr", "ja"]
#: 2015-09-12T00:00:00Z, the sample data's day
DAY_MILLIS = 1_442_016_000_000


@dataclass(frozen=True)
class Message:
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    timestamp_millis: int = 0


@dataclass(frozen=True)
class Event:
    """What a good message means: the row it should become."""

    time: str
    channel: str
    page: str
    added: int


def events(n: int, seed: int) -> list[Event]:
    rng = random.Random(seed)
    pages = ["Main Page", 'Quoted, "x" page', "Ünïcode", "Tab-free page"]
    return [Event(f"2015-09-12T{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z",
                  rng.choice(CHANNELS), rng.choice(pages), rng.randrange(1000)) for _ in range(n)]


def send(bootstrap: str, topic: str, messages: Sequence[Message]) -> dict[int, int]:
    """Message i to partition i % PARTITIONS (so at offset i // PARTITIONS of an empty topic); each partition's
    last message flushed alone, which makes the dev broker's latest offsets exact (ARCHITECTURE.md §8)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    tails_from = max(len(messages) - PARTITIONS, 0)
    for first, last in ((0, tails_from), (tails_from, len(messages))):
        for i in range(first, last):
            m = messages[i]
            producer.produce(topic, m.value, key=m.key, partition=i % PARTITIONS, headers=m.headers or None,
                             timestamp=m.timestamp_millis)
        assert producer.flush(60) == 0
    with KafkaStream({"bootstrap.servers": bootstrap}, topic) as stream:
        return stream.latest_offsets(range(PARTITIONS))


def locator(i: int) -> str:
    return f"partition={i % PARTITIONS} offset={i // PARTITIONS}"


def supervisor(data_source: str, topic: str, bootstrap: str, input_format: dict[str, Any], *,
               dimensions: list[Any], timestamp: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": data_source, "timestampSpec": timestamp or {"column": "time", "format": "iso"},
                       "dimensionsSpec": {"dimensions": dimensions},
                       "metricsSpec": [{"type": "count", "name": "count"},
                                       {"type": "longSum", "name": "added", "fieldName": "added"}],
                       "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "NONE"}},
        "ioConfig": {"topic": topic, "inputFormat": input_format, "consumerProperties": {"bootstrap.servers": bootstrap},
                     "taskCount": 1, "taskDuration": "PT1H", "startDelay": "PT0S", "period": "PT1S",
                     "useEarliestOffset": True},
        "tuningConfig": {"type": "kafka", "maxSavedParseExceptions": 1000}}}


def legacy(spec: dict[str, Any], parse_spec: dict[str, Any]) -> dict[str, Any]:
    """The same supervisor in the legacy form: no `spec` wrapper, the format in `dataSchema.parser.parseSpec`."""
    data_schema = dict(spec["spec"]["dataSchema"])
    parse_spec = {**parse_spec, "timestampSpec": data_schema.pop("timestampSpec"),
                  "dimensionsSpec": data_schema.pop("dimensionsSpec")}
    io_config = {k: v for k, v in spec["spec"]["ioConfig"].items() if k != "inputFormat"}
    return {"type": "kafka", "dataSchema": {**data_schema, "parser": {"type": "string", "parseSpec": parse_spec}},
            "ioConfig": io_config, "tuningConfig": spec["spec"]["tuningConfig"]}


@dataclass(frozen=True)
class Ingested:
    stats: Counter[str]
    #: the parse exceptions the tasks kept: input -> details
    parse_exceptions: dict[str, list[str]]
    #: the supervisor's spec as the API serves it back
    served: dict[str, Any]


def ingest(node: Node, http: httpx.Client, spec: dict[str, Any], ends: dict[int, int], messages: int) -> Ingested:
    """Run the supervisor until every message is committed and counted by a finished task; then stop it."""
    data_source = (spec.get("spec") or spec)["dataSchema"]["dataSource"]
    response = http.post("/druid/indexer/v1/supervisor", json=spec)
    assert response.status_code == 200, response.text
    try:
        # one task reads everything; then it is handed off, so that one report counts every message
        wait_for(lambda: read_to(http, data_source, ends), 300, f"{data_source}: every message read")
        http.post(f"/druid/indexer/v1/supervisor/{data_source}/taskGroups/handoff", json={"taskGroupIds": [0]})
        wait_for(lambda: committed_offsets(node, data_source) == ends, 300, f"{data_source}: offsets committed")

        def finished() -> Ingested | None:
            tasks = http.get("/druid/indexer/v1/tasks", params={"state": "complete", "datasource": data_source}).json()
            assert [t for t in tasks if t["status"] == "FAILED"] == []
            reports = [http.get(f"/druid/indexer/v1/task/{t['id']}/reports").json()["ingestionStatsAndErrors"]
                       ["payload"] for t in tasks if t["status"] == "SUCCESS"]
            stats: Counter[str] = Counter()
            for report in reports:
                stats.update(report["rowStats"]["buildSegments"])
            if stats["processed"] + stats["processedWithError"] + stats["unparseable"] + stats["thrownAway"] \
                    != messages:
                return None
            exceptions = {e["input"]: e["details"] for r in reports
                          for e in r["unparseableEvents"].get("buildSegments", [])}
            return Ingested(stats, exceptions, http.get(f"/druid/indexer/v1/supervisor/{data_source}").json())

        return wait_for(finished, 180, f"{data_source}: every message counted by a finished task")
    finally:
        http.post(f"/druid/indexer/v1/supervisor/{data_source}/terminate")


def per_channel(rows: Sequence[Event]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for e in rows:
        count_sum = out.setdefault(e.channel, [0, 0])
        count_sum[0] += 1
        count_sum[1] += e.added
    return out


def channel_answers(http: httpx.Client, data_source: str) -> dict[str, list[int]]:
    rows = sql(http, f'SELECT channel, SUM("count") AS n, SUM(added) AS added FROM {data_source} GROUP BY channel')
    return {r["channel"]: [r["n"], r["added"]] for r in rows}


def assert_samples_located(ingested: Ingested, bad: dict[int, bytes]) -> None:
    """Each kept parse exception is one of the bad messages, named by its partition and offset and its text."""
    assert ingested.parse_exceptions, "no parse exception was kept"
    by_locator = {locator(i): value.decode() for i, value in bad.items()}
    for text in ingested.parse_exceptions:
        where, _, value = text.partition(": ")
        assert by_locator.get(where) == value, text


# ---------------------------------------------------------------------------------------------------------------
# csv, tsv, regex: one record per message, parsed in the executors


def csv_line(e: Event) -> bytes:
    page = '"' + e.page.replace('"', '""') + '"' if any(c in e.page for c in ',"') else e.page
    return f"{e.time},{e.channel},{page},{e.added}".encode()


@pytest.fixture(scope="module")
def csv_topic(kafka_broker) -> tuple[str, list[Event], dict[int, bytes], dict[int, int], int]:
    """csv messages, and the bad ones by index: an open quote, and a time that does not parse."""
    topic, rows = "formats-csv", events(3_000, seed=1)
    messages, good, bad = [], [], {}
    for i, e in enumerate(rows):
        if i % 97 == 5:
            bad[i] = f'{e.time},{e.channel},"open quote,{e.added}'.encode()
        elif i % 101 == 7:
            bad[i] = f"yesterday,{e.channel},{e.page},{e.added}".encode()
        else:
            good.append(e)
        messages.append(Message(bad.get(i) or csv_line(e)))
    kafka_broker.create_topic(topic, PARTITIONS)
    return topic, good, bad, send(kafka_broker.bootstrap_servers, topic, messages), len(messages)


CSV = {"type": "csv", "columns": ["time", "channel", "page", "added"]}


def test_csv_messages_are_ingested_and_bad_ones_counted_unparseable_where_they_are(node, http, kafka_broker, csv_topic):
    topic, good, bad, ends, n = csv_topic
    spec = supervisor("formats_csv", topic, kafka_broker.bootstrap_servers, CSV, dimensions=["channel", "page"])
    ingested = ingest(node, http, spec, ends, n)

    assert channel_answers(http, "formats_csv") == per_channel(good)
    assert sql(http, "SELECT COUNT(*) AS n FROM formats_csv WHERE page = 'Quoted, \"x\" page'") == [
        {"n": len({(e.time, e.channel, e.added) for e in good if e.page == 'Quoted, "x" page'})}]
    assert (ingested.stats["unparseable"], ingested.stats["processed"]) == (len(bad), len(good))
    assert_samples_located(ingested, bad)


def test_the_legacy_csv_parser_reads_the_same_messages(node, http, kafka_broker, csv_topic):
    topic, good, bad, ends, n = csv_topic
    current = supervisor("formats_legacy_csv", topic, kafka_broker.bootstrap_servers, CSV, dimensions=["channel"])
    spec = legacy(current, {"format": "csv", "columns": CSV["columns"], "hasHeaderRow": False, "skipHeaderRows": 0})
    ingested = ingest(node, http, spec, ends, n)

    assert channel_answers(http, "formats_legacy_csv") == per_channel(good)
    assert sql(http, 'SELECT SUM("count") AS n, SUM(added) AS added FROM formats_legacy_csv') == [
        {"n": len(good), "added": sum(e.added for e in good)}]
    assert ingested.stats["unparseable"] == len(bad)


def test_tsv_with_its_own_delimiter_and_a_bad_number_processed_with_error(node, http, kafka_broker):
    topic, rows = "formats-tsv", events(2_000, seed=2)
    messages, bad, bad_numbers = [], {}, set()
    for i, e in enumerate(rows):
        added = str(e.added)
        if i % 89 == 3:
            bad[i] = f"{e.channel}|{e.page}|{added}".encode()  # a line of the wrong shape: no time
        elif i % 83 == 1:
            added, _ = "many", bad_numbers.add(i)
        messages.append(Message(bad.get(i) or f"{e.time}|{e.channel}|{e.page}|{added}".encode()))
    kafka_broker.create_topic(topic, PARTITIONS)
    ends = send(kafka_broker.bootstrap_servers, topic, messages)
    tsv = {"type": "tsv", "delimiter": "|", "columns": ["time", "channel", "page", "added"]}
    ingested = ingest(node, http, supervisor("formats_tsv", topic, kafka_broker.bootstrap_servers, tsv,
                                             dimensions=["channel"]), ends, len(messages))

    kept = [(i, e) for i, e in enumerate(rows) if i not in bad]
    expected = per_channel([Event(e.time, e.channel, e.page, 0 if i in bad_numbers else e.added) for i, e in kept])
    assert channel_answers(http, "formats_tsv") == expected
    assert ingested.stats["unparseable"] == len(bad)
    assert ingested.stats["processedWithError"] == len(bad_numbers)
    assert ingested.stats["processed"] == len(kept) - len(bad_numbers)
    assert_samples_located(ingested, bad)


def test_the_legacy_parser_without_a_format_is_tsv(node, http, kafka_broker):
    """Druid's parseSpec `format` defaults to tsv (ParseSpec's defaultImpl), with a tab delimiter."""
    topic, rows = "formats-legacy-tsv", events(1_500, seed=3)
    kafka_broker.create_topic(topic, PARTITIONS)
    ends = send(kafka_broker.bootstrap_servers, topic,
                [Message(f"{e.time}\t{e.channel}\t{e.page}\t{e.added}".encode()) for e in rows])
    current = supervisor("formats_legacy_tsv", topic, kafka_broker.bootstrap_servers, CSV, dimensions=["channel", "page"])
    spec = legacy(current, {"columns": ["time", "channel", "page", "added"], "listDelimiter": "\u0001"})
    ingested = ingest(node, http, spec, ends, len(rows))

    assert channel_answers(http, "formats_legacy_tsv") == per_channel(rows)
    assert ingested.stats["unparseable"] == 0 and ingested.stats["processed"] == len(rows)
    served = ingested.served["spec"]["ioConfig"]["inputFormat"]
    assert (served["type"], served["delimiter"], served["columns"]) == ("tsv", "\t", ["time", "channel", "page", "added"])


def test_regex_messages_are_matched_whole_and_the_rest_is_unparseable(node, http, kafka_broker):
    topic, rows = "formats-regex", events(2_000, seed=4)
    messages, bad = [], {}
    for i, e in enumerate(rows):
        if i % 71 == 2:
            bad[i] = f"{e.time} {e.channel} lots".encode()
        messages.append(Message(bad.get(i) or f"{e.time} [{e.channel}] +{e.added}".encode()))
    kafka_broker.create_topic(topic, PARTITIONS)
    ends = send(kafka_broker.bootstrap_servers, topic, messages)
    regex = {"type": "regex", "pattern": r"(\S+) \[(\w+)\] \+(\d+)", "columns": ["time", "channel", "added"]}
    ingested = ingest(node, http, supervisor("formats_regex", topic, kafka_broker.bootstrap_servers, regex,
                                             dimensions=["channel"]), ends, len(messages))

    assert channel_answers(http, "formats_regex") == per_channel([e for i, e in enumerate(rows) if i not in bad])
    assert (ingested.stats["unparseable"], ingested.stats["processed"]) == (len(bad), len(rows) - len(bad))
    assert_samples_located(ingested, bad)
    assert all(details == [f"Unable to parse row [{text}]"] for text, details in ingested.parse_exceptions.items())


# ---------------------------------------------------------------------------------------------------------------
# Druid's kafka inputFormat: the value blended with the message's key, headers, timestamp and topic


#: a message's row: its key, `env` header, channel and added (None for a tombstone's)
KafkaRow = tuple[str | None, str | None, str | None, int | None]


def kafka_messages(seed: int, value: Callable[[Event, bool], bytes]) -> tuple[list[Message], list[KafkaRow],
                                                                               dict[int, bytes]]:
    """Messages with keys (some absent, some that do not parse as csv), an `env` header (on most), their own
    timestamps; one in 50 has a payload field named `kafka.key`, which wins over the key. Returns the messages,
    the rows they should make, and the bad ones by index."""
    rng = random.Random(seed)
    messages, rows, bad = [], [], {}
    for i, e in enumerate(events(1_500, seed)):
        key = rng.choice(["alice", "bob", "carol", None])
        env = rng.choice(["prod", "dev", None])
        override = i % 50 == 9
        raw_key = b'"alice' if i % 61 == 4 else None if key is None else key.encode()  # '"alice': does not parse
        headers = [("env", env.encode())] if env else []
        messages.append(Message(value(e, override), raw_key, headers, DAY_MILLIS + rng.randrange(86_400_000)))
        if raw_key == b'"alice':
            bad[i] = messages[-1].value
        else:
            rows.append(("payload-key" if override else key, env, e.channel, e.added))
    return messages, rows, bad


def grouped(rows: Sequence[KafkaRow]) -> dict[tuple[str | None, ...], list[int | None]]:
    """(key, env, channel) -> [rows, SUM(added)]; the sum of no value is null, as in SQL."""
    out: dict[tuple[str | None, ...], list[int | None]] = {}
    for key, env, channel, added in rows:
        count_sum = out.setdefault((key, env, channel), [0, None])
        count_sum[0] += 1
        if added is not None:
            count_sum[1] = (count_sum[1] or 0) + added
    return out


def kafka_answers(http: httpx.Client, data_source: str, topic: str) -> dict[tuple[str | None, ...], list[int | None]]:
    rows = sql(http, f'SELECT "kafka.key" AS k, "kafka.header.env" AS env, channel, SUM("count") AS n, '
                     f'SUM(added) AS added, MIN("kafka.topic") AS lo, MAX("kafka.topic") AS hi FROM {data_source} '
                     'GROUP BY 1, 2, 3')
    assert {(r["lo"], r["hi"]) for r in rows} == {(topic, topic)}
    return {(r["k"], r["env"], r["channel"]): [r["n"], r["added"]] for r in rows}


KAFKA_DIMENSIONS = ["kafka.key", "kafka.header.env", "kafka.topic", "channel"]
KAFKA_TIMESTAMP = {"column": "kafka.timestamp", "format": "millis"}


def test_the_kafka_format_reads_key_header_timestamp_and_topic_around_a_json_value(node, http, kafka_broker):
    topic = "formats-kafka-json"

    def value(e: Event, override: bool) -> bytes:
        extra = ', "kafka.key": "payload-key"' if override else ""
        return f'{{"meta": {{"channel": "{e.channel}"}}, "added": {e.added}{extra}}}'.encode()

    messages, rows, bad = kafka_messages(5, value)
    messages.append(Message(None, b"ghost", [("env", b"prod")], DAY_MILLIS))  # a tombstone: a row of metadata
    rows.append(("ghost", "prod", None, None))
    kafka_broker.create_topic(topic, PARTITIONS)
    ends = send(kafka_broker.bootstrap_servers, topic, messages)
    kafka = {"type": "kafka", "keyFormat": {"type": "csv", "columns": ["user"]},
             "headerFormat": {"type": "string", "encoding": "UTF-8"},
             "valueFormat": {"type": "json", "flattenSpec": {"fields": [
                 {"type": "path", "name": "channel", "expr": "$.meta.channel"}]}}}
    spec = supervisor("formats_kafka_json", topic, kafka_broker.bootstrap_servers, kafka,
                      dimensions=KAFKA_DIMENSIONS, timestamp=KAFKA_TIMESTAMP)
    ingested = ingest(node, http, spec, ends, len(messages))

    assert kafka_answers(http, "formats_kafka_json", topic) == grouped(rows)
    assert ingested.stats["unparseable"] == len(bad) and ingested.stats["processed"] == len(rows)
    # each row's time is its message's own timestamp
    stamps = sorted(m.timestamp_millis for i, m in enumerate(messages) if i not in bad)
    iso = [datetime.fromtimestamp(t / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z" for t in stamps]
    assert sql(http, "SELECT MIN(__time) AS lo, MAX(__time) AS hi FROM formats_kafka_json") == [
        {"lo": iso[0], "hi": iso[-1]}]
    # a record whose key does not parse is unparseable, named by where it is and why
    assert ingested.parse_exceptions
    for text in ingested.parse_exceptions:
        where, _, why = text.partition(": ")
        assert where in {locator(i) for i in bad} and why.startswith('key: Unable to parse row ["alice'), text


def test_the_kafka_format_around_a_csv_value_without_a_header_format_reads_no_header(node, http, kafka_broker):
    """Druid parses headers only with a headerFormat; the key here is a regex group."""
    topic = "formats-kafka-csv"
    messages, _, _ = kafka_messages(6, lambda e, override: f"{e.channel},{e.added}".encode())
    broken = {3: b'"en,1', 30: b'"de,2', 300: b'"fr,3'}  # values that do not parse
    messages = [Message(broken.get(i, m.value), None if m.key is None else b"user-" + m.key, m.headers,
                        m.timestamp_millis) for i, m in enumerate(messages)]
    kafka_broker.create_topic(topic, PARTITIONS)
    ends = send(kafka_broker.bootstrap_servers, topic, messages)
    kafka = {"type": "kafka", "keyFormat": {"type": "regex", "pattern": r"user-(\S+)"},
             "valueFormat": {"type": "csv", "columns": ["channel", "added"]}}
    spec = supervisor("formats_kafka_csv", topic, kafka_broker.bootstrap_servers, kafka,
                      dimensions=KAFKA_DIMENSIONS, timestamp=KAFKA_TIMESTAMP)
    ingested = ingest(node, http, spec, ends, len(messages))

    rows: list[KafkaRow] = []
    for i, m in enumerate(messages):
        if i not in broken:
            channel, added = m.value.decode().split(",")
            rows.append((None if m.key is None else m.key.decode().removeprefix("user-"), None, channel, int(added)))
    assert kafka_answers(http, "formats_kafka_csv", topic) == grouped(rows)
    assert ingested.stats["unparseable"] == len(broken) and ingested.stats["processed"] == len(rows)
    assert_samples_located(ingested, broken)


# ---------------------------------------------------------------------------------------------------------------
# the executor's side of the kafka format, on messages built here (no broker)


@dataclass(frozen=True)
class FakeMessage:
    """What confluent-kafka's Message offers the decoder."""

    value_: bytes | None
    key_: bytes | None = None
    headers_: list[tuple[str, bytes | None]] | None = None
    offset_: int = 0
    timestamp_: int | None = 1_000

    def value(self) -> bytes | None:
        return self.value_

    def key(self) -> bytes | None:
        return self.key_

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self.headers_

    def offset(self) -> int:
        return self.offset_

    def timestamp(self) -> tuple[int, int]:
        return (0, -1) if self.timestamp_ is None else (1, self.timestamp_)

    def topic(self) -> str:
        return "t"


def decode(input_format: dict[str, Any], fields: list[str], messages: list[FakeMessage]) -> list[dict[str, Any]]:
    from pydantic import TypeAdapter

    from sluice.spec.supervisor import StreamFormat
    from sluice.stream.kafka_ranges import MessageDecoder

    decoder = MessageDecoder(TypeAdapter(StreamFormat).validate_python(input_format), fields)
    return decoder(3, messages).to_pylist()


def test_headers_take_a_name_before_the_timestamp_and_the_payload_wins_over_both():
    kafka = {"type": "kafka", "valueFormat": {"type": "csv", "columns": ["kafka.timestamp", "page"]},
             "headerFormat": {"type": "string", "encoding": "ISO-8859-1"}, "headerColumnPrefix": "kafka.",
             "keyFormat": {"type": "json"}}
    fields = ["kafka.timestamp", "kafka.topic", "kafka.key", "kafka.env", "page"]
    rows = decode(kafka, fields, [
        FakeMessage(b",a", b'{"id": 7, "x": 1}', [("timestamp", b"from-header"), ("env", b"caf\xe9")], 10),
        FakeMessage(b"99,b", b'{"id": "k"}', [("env", b"one"), ("env", b"two")], 11),
        FakeMessage(None, None, None, 12, None),
        FakeMessage(b"1,c", b"[1]", None, 13),
    ])
    assert [{f: r[f] for f in fields} for r in rows] == [
        {"kafka.timestamp": "from-header", "kafka.topic": "t", "kafka.key": "7", "kafka.env": "café", "page": "a"},
        {"kafka.timestamp": "99", "kafka.topic": "t", "kafka.key": "k", "kafka.env": "two", "page": "b"},
        {"kafka.timestamp": None, "kafka.topic": "t", "kafka.key": None, "kafka.env": None, "page": None},
        {"kafka.timestamp": "1", "kafka.topic": "t", "kafka.key": None, "kafka.env": None, "page": "c"},
    ]
    assert [r["__error"] for r in rows] == [None, None, None, "key: Unable to parse row [[1]]"]  # a tombstone is no error
    assert [r["__locator"] for r in rows] == [f"partition=3 offset={o}" for o in (10, 11, 12, 13)]


def test_a_json_value_goes_on_as_bytes_with_the_metadata_beside_it():
    kafka = {"type": "kafka", "valueFormat": {"type": "json"}, "keyFormat": {"type": "regex", "pattern": "(\\d+)-x"}}
    rows = decode(kafka, ["kafka.key", "kafka.timestamp", "page"], [
        FakeMessage(b'{"page": "a"}', b"12-x", offset_=4), FakeMessage(b"{}", b"nope", offset_=5)])
    assert [(r["value"], r["offset"], r["kafka:kafka.key"], r["kafka:kafka.timestamp"], r["__key_error"])
            for r in rows] == [(b'{"page": "a"}', 4, "12", "1000", None),
                               (b"{}", 5, None, "1000", "key: Unable to parse row [nope]")]
    assert "kafka:page" not in rows[0]


def test_a_plain_line_format_keeps_the_message_and_reads_no_metadata():
    rows = decode({"type": "regex", "pattern": "(\\w+) (\\d+)", "columns": ["page", "added"]},
                  ["added", "kafka.key", "page"], [FakeMessage(b"home 3\n", b"k"), FakeMessage(b"???")])
    assert rows == [
        {"__locator": "partition=3 offset=0", "__error": None, "__message": b"home 3\n", "added": "3",
         "kafka.key": None, "page": "home"},
        {"__locator": "partition=3 offset=0", "__error": "Unable to parse row [???]", "__message": b"???",
         "added": None, "kafka.key": None, "page": None}]
