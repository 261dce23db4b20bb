"""The streaming task's Kafka source on the connector framework, on Spark and a real broker: each epoch reads
exactly its planned ranges, a reader that fails is given its range again, and an epoch not committed is read again.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark import TaskContext, cloudpickle
from pyspark.sql import SparkSession

from sluice.connectors.sources.kafka import KafkaSplit
from sluice.connectors.sources.kafka_stream import KafkaStreamSource
from sluice.connectors.spark import EPOCH, ConnectorRead
from sluice.dev.sample_data import generate, produce
from sluice.spec.supervisor import parse_supervisor_spec
from sluice.stream.kafka import KafkaStream
from sluice.task.ingest_plan import compile_plan
from sluice.task.pipeline import IngestPipeline
from tests.integration.harness import supervisor_spec

TOPIC = "stream-source"


class FailingOnce(KafkaStreamSource):
    """The first attempt of the reader of partition 1 dies after it has handed its first batch to Spark."""

    def read_split(self, split: KafkaSplit) -> Iterator[pa.RecordBatch]:
        for batch in super().read_split(split):
            yield batch
            context = TaskContext.get()
            if split.partition == 1 and context is not None and context.attemptNumber() == 0:
                raise RuntimeError("reader failed on purpose")


@pytest.mark.spark
def test_epochs_read_their_ranges_exactly_once_through_a_failed_reader(spark: SparkSession, kafka_broker) -> None:
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # executors cannot import the tests package
    kafka_broker.create_topic(TOPIC, 2)
    ends = produce(kafka_broker.bootstrap_servers, TOPIC, generate(60_000, seed=5), 2)
    consumer = {"bootstrap.servers": kafka_broker.bootstrap_servers}
    source = FailingOnce(TOPIC, consumer, {0: 0, 1: 0}, lambda: KafkaStream(consumer, TOPIC))

    with ConnectorRead(spark, source, source.parallelism) as read:
        records = read.dataframe()

        def epoch(max_records: int) -> tuple[int, dict[int, tuple[int, int]], Counter]:
            ranges = read.host.run_in_coordinator(lambda c: c.plan_epoch({}, max_records))
            number = read.next_epoch()
            return number, ranges, Counter((r.partition, r.offset) for r in records.select("partition", "offset")
                                           .collect())

        first, ranges, read_once = epoch(50_000)  # > one 20k-record batch per partition: partition 1's reader fails
        assert ranges == {0: (0, 25_000), 1: (0, 25_000)}
        assert read_once == Counter({(p, o): 1 for p, (lo, hi) in ranges.items() for o in range(lo, hi)})
        assert read.host.incarnations() == {0: (first, 0), 1: (first, 1)}  # partition 1's reader ran twice
        read.checkpoint_complete(first)

        _, ranges, _ = epoch(100)  # read, but its rows are not kept: no checkpoint
        assert ranges == {0: (25_000, 25_050), 1: (25_000, 25_050)}

        last, ranges, read_again = epoch(100_000)
        assert ranges == {p: (25_000, end) for p, end in ends.items()}  # from the last committed offsets
        assert read_again == Counter({(p, o): 1 for p, (lo, hi) in ranges.items() for o in range(lo, hi)})
        read.checkpoint_complete(last)
        assert read.host.checkpoint(last) == ends
    assert spark.sparkContext.getLocalProperty(EPOCH) is None  # a later read in this thread is not an epoch of it


@pytest.mark.spark
@pytest.mark.parametrize("spark_tasks", [1, 2])
def test_a_persist_runs_as_many_spark_tasks_as_it_is_given_and_reads_every_partition_once(
        spark: SparkSession, kafka_broker, tmp_path, spark_tasks: int) -> None:
    topic = f"{TOPIC}-{spark_tasks}-tasks"
    kafka_broker.create_topic(topic, 4)
    sample = generate(3_000, seed=11)
    ends = produce(kafka_broker.bootstrap_servers, topic, sample, 4)
    consumer = {"bootstrap.servers": kafka_broker.bootstrap_servers}
    ingestion = parse_supervisor_spec(supervisor_spec("wiki", topic, kafka_broker.bootstrap_servers)).spec
    source = KafkaStreamSource(topic, consumer, dict.fromkeys(ends, 0), lambda: KafkaStream(consumer, topic))

    with ConnectorRead(spark, source, source.parallelism) as read:
        pipeline = IngestPipeline(spark, compile_plan(ingestion.data_schema), read, spark_tasks=spark_tasks)
        assert pipeline.plan_read(ends, 10_000) == {p: (0, end) for p, end in ends.items()}
        _, result = pipeline.read_and_persist(tmp_path / "persist", rollup=False)

    files = sorted((tmp_path / "persist").glob("*.parquet"))
    assert len(files) == spark_tasks  # one file per Spark task that wrote
    rows = pa.concat_tables(pq.read_table(f) for f in files)
    valid = [r.event for r in sample if r.kind == "valid"]
    assert rows.num_rows == result.stats.processed == len(valid)
    assert result.stats.unparseable == len(sample) - len(valid)
    assert pa.compute.sum(rows["added"]).as_py() == sum(e["added"] for e in valid)
