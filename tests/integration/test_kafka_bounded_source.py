"""The bounded kafka input source against the dev broker: offsets [start, end) per partition in -> exactly those
messages out, as JSON records or as parsed CSV columns."""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from typing import Any

import pytest

from sluice.connectors import read_all
from sluice.connectors.records import column_records_schema, json_records_schema
from sluice.connectors.sources import kafka as kafka_source
from sluice.connectors.sources.kafka import KafkaSource, KafkaSplit
from sluice.dev.sample_data import SampleRecord, produce
from sluice.dev.tansu import DevKafkaBroker
from sluice.spec.input_format import CsvInputFormat, JsonInputFormat, ParquetInputFormat
from sluice.spec.input_source import KafkaInputSource

pytestmark = [pytest.mark.kafka]

JSON_TOPIC = "bounded-json"
CSV_TOPIC = "bounded-csv"
PARTITIONS = 2
RECORDS = 501
JSON = JsonInputFormat(type="json")
CSV = CsvInputFormat(type="csv", columns=["time", "page", "added"])


def json_value(i: int) -> bytes:
    return json.dumps({"time": f"2024-03-01T12:{i // 60 % 60:02d}:{i % 60:02d}Z", "page": f"page-{i}",
                       "added": i}).encode()


def csv_value(i: int) -> bytes:
    return f"2024-03-01T12:00:{i % 60:02d}Z,page {i},{i * 3}".encode()


def produced(broker: DevKafkaBroker, topic: str, values: Sequence[bytes]) -> dict[int, int]:
    """Value i goes to partition i % PARTITIONS; `produce` flushes each partition's last record alone, so the
    broker's latest offsets are exact (ARCHITECTURE.md §8)."""
    broker.create_topic(topic, PARTITIONS)
    return produce(broker.bootstrap_servers, topic, [SampleRecord(v, None, "valid") for v in values], PARTITIONS)


@pytest.fixture(scope="module")
def json_topic(kafka_broker: DevKafkaBroker) -> dict[int, int]:
    ends = produced(kafka_broker, JSON_TOPIC, [json_value(i) for i in range(RECORDS)])
    assert ends == {0: (RECORDS + 1) // 2, 1: RECORDS // 2}
    return ends


@pytest.fixture(scope="module")
def csv_topic(kafka_broker: DevKafkaBroker) -> dict[int, int]:
    return produced(kafka_broker, CSV_TOPIC, [csv_value(i) for i in range(RECORDS)])


def kafka_spec(broker: DevKafkaBroker, topic: str, **offsets: Any) -> KafkaInputSource:
    return KafkaInputSource(type="kafka", topic=topic,
                            consumer_properties={"bootstrap.servers": broker.bootstrap_servers}, **offsets)


def value_of(partition: int, offset: int) -> int:
    """Which produced value sits at (partition, offset): round-robin over the partitions."""
    return offset * PARTITIONS + partition


def read(source: KafkaSource, parallelism: int = 2) -> list[dict[str, Any]]:
    """What executors would read: each reads a pickled copy of the source."""
    table = read_all(pickle.loads(pickle.dumps(source)), parallelism)
    assert table.schema == source.output_schema()
    return table.to_pylist()


def test_by_default_every_partition_is_read_from_earliest_to_latest(
        kafka_broker: DevKafkaBroker, json_topic: dict[int, int]) -> None:
    source = KafkaSource(kafka_spec(kafka_broker, JSON_TOPIC), JSON, ["time", "page", "added"])
    assert source.output_schema() == json_records_schema()
    splits = source.enumerate_splits()
    assert splits == [KafkaSplit(JSON_TOPIC, p, 0, json_topic[p]) for p in range(PARTITIONS)]
    assert [s.split_id for s in splits] == [f"{JSON_TOPIC}-0:0-251", f"{JSON_TOPIC}-1:0-250"]
    assert [s.size_bytes for s in splits] == [251, 250]
    rows = read(source)
    expected = {f"partition={p} offset={o}": json_value(value_of(p, o))
                for p, end in json_topic.items() for o in range(end)}
    assert len(rows) == RECORDS
    assert {r["__locator"]: r["value"] for r in rows} == expected


def test_explicit_offsets_override_per_partition(kafka_broker: DevKafkaBroker, json_topic: dict[int, int]) -> None:
    source = KafkaSource(kafka_spec(kafka_broker, JSON_TOPIC, start_offsets={0: 100}, end_offsets={1: 7}), JSON, [])
    assert source.enumerate_splits() == [KafkaSplit(JSON_TOPIC, 0, 100, json_topic[0]),
                                         KafkaSplit(JSON_TOPIC, 1, 0, 7)]
    located = sorted((r["__locator"], r["value"]) for r in read(source))
    assert located == sorted([(f"partition=0 offset={o}", json_value(value_of(0, o)))
                              for o in range(100, json_topic[0])]
                             + [(f"partition=1 offset={o}", json_value(value_of(1, o))) for o in range(7)])


def test_an_empty_range_reads_nothing(kafka_broker: DevKafkaBroker, json_topic: dict[int, int]) -> None:
    source = KafkaSource(kafka_spec(kafka_broker, JSON_TOPIC, start_offsets={0: 5, 1: json_topic[1]},
                                    end_offsets={0: 5}), JSON, [])
    assert source.enumerate_splits() == []
    assert read(source) == []


def test_large_partitions_are_cut_into_bounded_splits(kafka_broker: DevKafkaBroker, json_topic: dict[int, int],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka_source, "MAX_RECORDS_PER_SPLIT", 100)
    source = KafkaSource(kafka_spec(kafka_broker, JSON_TOPIC), JSON, [])
    splits = source.enumerate_splits()
    assert [(s.partition, s.start, s.end) for s in splits] == [
        (0, 0, 100), (0, 100, 200), (0, 200, 251), (1, 0, 100), (1, 100, 200), (1, 200, 250)]
    locators = [r["__locator"] for r in read(source, parallelism=4)]
    assert sorted(locators) == sorted(f"partition={p} offset={o}" for p, end in json_topic.items() for o in range(end))


@pytest.mark.parametrize(("offsets", "message"), [
    ({"start_offsets": {0: 0, 2: 0}}, (rf"startOffsets names partitions \[2\], which topic '{JSON_TOPIC}' does "
                                       r"not have \(its partitions: 0, 1\)")),
    ({"end_offsets": {7: 1}}, r"endOffsets names partitions \[7\]"),
    ({"end_offsets": {1: 10_000}}, r"endOffsets\[1\] is 10000, beyond the latest offset 250 of partition 1"),
    ({"start_offsets": {0: 20}, "end_offsets": {0: 10}}, r"partition 0 .* start offset 20 is after end offset 10"),
])
def test_offsets_the_topic_does_not_hold_are_refused_on_the_driver(
        kafka_broker: DevKafkaBroker, json_topic: dict[int, int], offsets: dict[str, Any], message: str) -> None:
    source = KafkaSource(kafka_spec(kafka_broker, JSON_TOPIC, **offsets), JSON, [])
    with pytest.raises(ValueError, match=message):
        source.enumerate_splits()


def test_csv_values_are_parsed_into_fields(kafka_broker: DevKafkaBroker, csv_topic: dict[int, int]) -> None:
    fields = ["time", "page", "added", "absent"]
    source = KafkaSource(kafka_spec(kafka_broker, CSV_TOPIC, start_offsets={1: 240}), CSV, fields)
    assert source.output_schema() == column_records_schema(fields)
    rows = read(source)
    assert len(rows) == csv_topic[0] + csv_topic[1] - 240
    by_locator = {r["__locator"]: r for r in rows}
    for p, o in [(0, 0), (0, csv_topic[0] - 1), (1, 240), (1, csv_topic[1] - 1)]:
        i = value_of(p, o)
        assert by_locator[f"partition={p} offset={o}"] == {
            "__locator": f"partition={p} offset={o}", "__error": None, "time": f"2024-03-01T12:00:{i % 60:02d}Z",
            "page": f"page {i}", "added": str(i * 3), "absent": None}


def test_an_input_format_that_reads_messages_is_required() -> None:
    spec = KafkaInputSource(type="kafka", topic="t", consumer_properties={"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(ValueError, match="inputFormat is required with a kafka input source"):
        KafkaSource(spec, None, ["a"])
    with pytest.raises(ValueError, match="inputFormat type 'parquet' cannot read Kafka message values"):
        KafkaSource(spec, ParquetInputFormat(type="parquet"), ["a"])
