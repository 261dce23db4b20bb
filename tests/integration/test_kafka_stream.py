"""KafkaStream and the sample-data producer against a real dev broker (Tansu)."""

from __future__ import annotations

import socket
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from sluice.dev.sample_data import generate, produce
from sluice.dev.tansu import BrokerStartError, DevKafkaBroker
from sluice.stream.kafka import KafkaStream, StreamError, consumer_config

pytestmark = pytest.mark.kafka


def _count_by_consuming(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "t", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, partition, 0)])
    count = 0
    try:
        while True:
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                if message.error() is None:
                    count += 1
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    return count
                else:
                    raise AssertionError(message.error())
    finally:
        consumer.close()


def test_partitions_and_offsets_of_an_empty_topic(kafka_broker: DevKafkaBroker) -> None:
    kafka_broker.create_topic("stream-empty", partitions=3)
    with KafkaStream({"bootstrap.servers": kafka_broker.bootstrap_servers}, "stream-empty") as stream:
        assert stream.partitions() == [0, 1, 2]
        assert stream.latest_offsets([0, 1, 2]) == {0: 0, 1: 0, 2: 0}
        assert stream.earliest_offsets([0, 1, 2]) == {0: 0, 1: 0, 2: 0}
        assert stream.latest_offsets([]) == {}


def test_produce_makes_watermarks_equal_record_counts(kafka_broker: DevKafkaBroker) -> None:
    """The dev broker's latest offset is 'base offset of the last batch + 1'; produce() must end exact."""
    records = generate(30_001)
    kafka_broker.create_topic("stream-sample", partitions=4)
    ends = produce(kafka_broker.bootstrap_servers, "stream-sample", records, partitions=4)
    expected = dict(Counter(i % 4 for i in range(len(records))))
    assert ends == expected
    with KafkaStream({"bootstrap.servers": kafka_broker.bootstrap_servers}, "stream-sample") as stream:
        assert stream.latest_offsets(stream.partitions()) == expected
        assert stream.earliest_offsets([0, 1, 2, 3]) == {0: 0, 1: 0, 2: 0, 3: 0}
    assert {p: _count_by_consuming(kafka_broker.bootstrap_servers, "stream-sample", p) for p in range(4)} == expected


def test_produce_fewer_records_than_partitions(kafka_broker: DevKafkaBroker) -> None:
    kafka_broker.create_topic("stream-few", partitions=3)
    assert produce(kafka_broker.bootstrap_servers, "stream-few", generate(2), partitions=3) == {0: 1, 1: 1, 2: 0}


def test_offset_calls_are_fast(kafka_broker: DevKafkaBroker) -> None:
    """The supervisor polls every few seconds; one call must cost milliseconds, not a reconnect."""
    kafka_broker.create_topic("stream-fast", partitions=8)
    with KafkaStream({"bootstrap.servers": kafka_broker.bootstrap_servers}, "stream-fast") as stream:
        stream.latest_offsets(range(8))
        started = time.monotonic()
        for _ in range(20):
            stream.partitions()
            stream.latest_offsets(range(8))
        assert (time.monotonic() - started) / 20 < 0.1


def test_missing_topic_raises_stream_error(kafka_broker: DevKafkaBroker) -> None:
    with KafkaStream({"bootstrap.servers": kafka_broker.bootstrap_servers}, "no-such-topic", timeout=2) as stream:
        with pytest.raises(StreamError, match="'no-such-topic' does not exist"):
            stream.partitions()
        with pytest.raises(StreamError, match="latest offsets of topic 'no-such-topic'"):
            stream.latest_offsets([0])


def test_unreachable_broker_raises_stream_error_within_timeout() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    with KafkaStream({"bootstrap.servers": address}, "t", timeout=1) as stream:
        started = time.monotonic()
        with pytest.raises(StreamError, match="unreachable"):
            stream.partitions()
        with pytest.raises(StreamError, match="cannot read earliest offsets"):
            stream.earliest_offsets([0])
        assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({}, "bootstrap.servers"),
        ({"bootstrap.servers": "127.0.0.1:9", "ssl.truststore.location": "/x.jks"}, "invalid Kafka consumer configuration"),
        ({"bootstrap.servers": "127.0.0.1:9", "nested": {"a": 1}}, "must be a string, number or boolean"),
    ],
)
def test_bad_consumer_properties_raise_stream_error(properties: dict[str, object], message: str) -> None:
    with pytest.raises(StreamError, match=message):
        KafkaStream(properties, "t")


def test_druid_consumer_properties_in_the_java_clients_words_are_understood(kafka_broker: DevKafkaBroker) -> None:
    """`auto.offset.reset: none`, Druid's own default, is librdkafka's `error` (librdkafka refuses `none`)."""
    kafka_broker.create_topic("stream-none", partitions=2)
    produce(kafka_broker.bootstrap_servers, "stream-none", generate(10), partitions=2)
    properties = {"bootstrap.servers": kafka_broker.bootstrap_servers, "auto.offset.reset": "none"}
    assert consumer_config(properties)["auto.offset.reset"] == "error"
    with KafkaStream(properties, "stream-none") as stream:
        assert stream.latest_offsets(stream.partitions()) == {0: 5, 1: 5}


def test_dev_broker_on_a_taken_port_fails_clearly(kafka_broker: DevKafkaBroker, tmp_path: Path) -> None:
    second = DevKafkaBroker(port=kafka_broker.port, log_dir=tmp_path, startup_timeout=10)
    with pytest.raises(BrokerStartError, match="Address already in use"):
        second.start()
    second.stop()  # idempotent after a failed start
