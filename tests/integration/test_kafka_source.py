"""The sluice_kafka Spark data source reads exactly the requested offsets from a real dev broker."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from pyspark.errors import PythonException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice.dev.sample_data import SampleRecord, generate, produce
from sluice.dev.tansu import DevKafkaBroker
from sluice.stream.kafka_ranges import SCHEMA, register

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

TOPIC = "source-sample"
PARTITIONS = 2
RECORDS = 20_001


@pytest.fixture(scope="module")
def produced(kafka_broker: DevKafkaBroker, spark: SparkSession) -> tuple[list[SampleRecord], dict[int, int], datetime]:
    register(spark)
    records = generate(RECORDS)
    kafka_broker.create_topic(TOPIC, PARTITIONS)
    before = datetime.now(timezone.utc)
    ends = produce(kafka_broker.bootstrap_servers, TOPIC, records, PARTITIONS)
    return records, ends, before


def _read(spark: SparkSession, broker: DevKafkaBroker, ranges: dict[int, list[int]], **options: str) -> DataFrame:
    reader = (
        spark.read.format("sluice_kafka")
        .option("topic", TOPIC)
        .option("consumerProperties", json.dumps({"bootstrap.servers": broker.bootstrap_servers}))
        .option("ranges", json.dumps({str(p): r for p, r in ranges.items()}))
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _values_of(records: list[SampleRecord], partition: int) -> list[bytes]:
    """What produce() wrote to ``partition``, in offset order (record i went to i % PARTITIONS)."""
    return [r.value for r in records[partition::PARTITIONS]]


def test_full_read_returns_every_record_once(
    spark: SparkSession, kafka_broker: DevKafkaBroker, produced: tuple[list[SampleRecord], dict[int, int], datetime]
) -> None:
    records, ends, before = produced
    df = _read(spark, kafka_broker, {p: [0, end] for p, end in ends.items()})
    assert df.schema == SCHEMA
    rows = df.orderBy("partition", "offset").collect()
    for partition in range(PARTITIONS):
        own = [row for row in rows if row.partition == partition]
        assert len(own) == ends[partition] == len(records[partition::PARTITIONS])
        assert [row.offset for row in own] == list(range(ends[partition]))
        assert [bytes(row.value) for row in own] == _values_of(records, partition)
    after = datetime.now(timezone.utc) + timedelta(seconds=1)
    assert all(before - timedelta(seconds=1) <= row.timestamp.astimezone(timezone.utc) <= after for row in rows)


def test_sub_range_returns_exactly_those_offsets(
    spark: SparkSession, kafka_broker: DevKafkaBroker, produced: tuple[list[SampleRecord], dict[int, int], datetime]
) -> None:
    records, ends, _ = produced
    df = _read(spark, kafka_broker, {0: [100, 250], 1: [ends[1] - 7, ends[1]]})
    rows = df.orderBy("partition", "offset").collect()
    assert [(row.partition, row.offset) for row in rows] == (
        [(0, offset) for offset in range(100, 250)] + [(1, offset) for offset in range(ends[1] - 7, ends[1])]
    )
    assert [bytes(row.value) for row in rows[:150]] == _values_of(records, 0)[100:250]
    assert [bytes(row.value) for row in rows[150:]] == _values_of(records, 1)[-7:]


def test_max_records_per_split_parallelises_without_changing_the_result(
    spark: SparkSession, kafka_broker: DevKafkaBroker, produced: tuple[list[SampleRecord], dict[int, int], datetime]
) -> None:
    _, ends, _ = produced
    df = _read(spark, kafka_broker, {p: [0, end] for p, end in ends.items()}, maxRecordsPerSplit="3000")
    assert df.rdd.getNumPartitions() == sum(-(-end // 3000) for end in ends.values())
    stats = df.groupBy("partition").agg(
        F.count("*").alias("rows"), F.countDistinct("offset").alias("distinct"), F.min("offset"), F.max("offset")
    )
    assert {tuple(row) for row in stats.collect()} == {(p, end, end, 0, end - 1) for p, end in ends.items()}


def test_empty_ranges_read_no_rows(
    spark: SparkSession, kafka_broker: DevKafkaBroker, produced: tuple[list[SampleRecord], dict[int, int], datetime]
) -> None:
    assert _read(spark, kafka_broker, {0: [5, 5]}).count() == 0
    assert _read(spark, kafka_broker, {}).count() == 0


def test_range_beyond_the_stored_end_fails_clearly_instead_of_hanging(
    spark: SparkSession, kafka_broker: DevKafkaBroker, produced: tuple[list[SampleRecord], dict[int, int], datetime]
) -> None:
    _, ends, _ = produced
    df = _read(spark, kafka_broker, {0: [ends[0] - 3, ends[0] + 2]}, readTimeoutMs="1500")
    with pytest.raises(PythonException, match=rf"no record after offset {ends[0] - 1} for 1.5s"):
        df.count()
