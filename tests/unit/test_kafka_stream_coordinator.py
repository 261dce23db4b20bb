"""The streaming task's Kafka coordinator, without Spark or a broker: epochs planned from the offsets read so far,
a failed reader attempt given its range again, a cancelled epoch read again, discovery in the background.

The stream here is a stand-in for the broker's metadata (partitions and latest offsets), which the test moves on;
tests/integration/test_kafka_stream_source.py reads a real broker through Spark."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

import pytest

from sluice.connectors.coordination import CoordinatorHost
from sluice.connectors.sources import kafka_stream
from sluice.connectors.sources.kafka_stream import KafkaStreamSource
from sluice.stream.kafka import StreamError


class Topic:
    """What discovery sees: the topic's partitions and their latest offsets, as the test sets them."""

    def __init__(self, latest: dict[int, int]) -> None:
        self.latest = dict(latest)
        self.error: Exception | None = None

    def partitions(self) -> list[int]:
        if self.error is not None:
            raise self.error
        return sorted(self.latest)

    def latest_offsets(self, partitions: list[int]) -> dict[int, int]:
        return {p: self.latest[p] for p in partitions}

    def close(self) -> None:
        pass


@pytest.fixture
def host_for() -> Iterator[Callable[[Topic, dict[int, int]], CoordinatorHost]]:
    """A started coordinator over `topic` from these offsets, discovering every 20 ms; closed after the test."""
    hosts = []

    def start(topic: Topic, offsets: dict[int, int]) -> CoordinatorHost:
        source = KafkaStreamSource("events", {"bootstrap.servers": "unused:9092"}, offsets, lambda: topic,
                                   discovery_interval=0.02)
        hosts.append(CoordinatorHost(source, source.parallelism))
        hosts[-1].start()
        return hosts[-1]

    yield start
    for host in hosts:
        host.close()


def plan(host: CoordinatorHost, end: dict[int, int] | None = None, max_records: int = 1000) -> dict[int, tuple[int, int]]:
    return host.run_in_coordinator(lambda c: c.plan_epoch(end or {}, max_records))


def eventually(condition, what: str) -> None:
    """Discovery runs in its own thread."""
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def read_epoch(host: CoordinatorHost, epoch: int) -> dict[int, list[str]]:
    """Every reader of `epoch` registers and takes its mailbox: reader -> split ids; each is told no more comes."""
    host.begin_epoch(epoch)
    got = {}
    for reader in range(host.total_parallelism()):
        host.register(reader, 0, epoch)
        box = host.poll(reader, 0, epoch)
        assert box.no_more_splits
        got[reader] = [s.split_id for s in box.splits]
    return got


def test_each_reader_gets_its_partitions_range_of_the_epoch_then_no_more(host_for) -> None:
    host = host_for(Topic({0: 500, 3: 40, 7: 0}), {0: 100, 3: 0, 7: 0})

    assert plan(host, max_records=300) == {0: (100, 250), 3: (0, 40)}  # shared evenly; partition 7 has nothing
    assert read_epoch(host, 1) == {0: ["events-0:100-250"], 1: ["events-3:0-40"], 2: []}


def test_a_completed_checkpoint_moves_the_offsets_and_the_end_offsets_bound_the_next_epoch(host_for) -> None:
    host = host_for(Topic({0: 500, 1: 500}), {0: 0, 1: 0})
    plan(host, max_records=200)
    read_epoch(host, 1)
    host.checkpoint_complete(1)

    assert host.checkpoint(1) == {0: 100, 1: 100}
    assert plan(host, end={0: 150, 1: 1000}) == {0: (100, 150), 1: (100, 500)}


def test_a_failed_reader_attempt_is_given_its_epochs_range_again(host_for) -> None:
    host = host_for(Topic({0: 50, 1: 50}), {0: 0, 1: 0})
    plan(host)
    first = read_epoch(host, 1)

    host.register(1, attempt=1, epoch=1)  # attempt 0 of reader 1 died; Spark runs it again

    assert [s.split_id for s in host.poll(1, 1, 1).splits] == first[1] == ["events-1:0-50"]
    assert host.poll(1, 0, 1).splits == []  # the dead attempt gets nothing more


def test_an_epoch_that_did_not_complete_is_read_again_and_its_stragglers_get_nothing(host_for) -> None:
    topic = Topic({0: 50})
    host = host_for(topic, {0: 0})
    plan(host)
    host.begin_epoch(1)
    host.register(0, 0, 1)  # the job is cancelled (a pause) before its rows are persisted: no checkpoint

    topic.latest[0] = 80
    eventually(lambda: plan(host) == {0: (0, 80)}, "the next epoch: from the same offset, up to what is there now")
    assert read_epoch(host, 2) == {0: ["events-0:0-80"]}
    host.register(0, 1, 1)  # a straggler of the cancelled job
    assert host.poll(0, 1, 1).splits == []


def test_discovery_runs_in_the_background_and_logs_partitions_the_task_does_not_read(host_for, caplog) -> None:
    topic = Topic({0: 10, 1: 10})
    with caplog.at_level(logging.INFO, logger=kafka_stream.__name__):
        host = host_for(topic, {0: 0})
        topic.latest.update({0: 30, 2: 5})
        eventually(lambda: plan(host) == {0: (0, 30)}, "the latest offset discovered")
        eventually(lambda: "has partitions [2] that this task does not read" in caplog.text, "partition 2 logged")
    assert "has partitions [1] that this task does not read" in caplog.text


def test_planning_fails_once_discovery_has_failed_for_too_long(host_for, monkeypatch) -> None:
    topic = Topic({0: 10})
    host = host_for(topic, {0: 0})
    topic.error = StreamError("Kafka brokers unused:9092 unreachable")
    time.sleep(0.2)  # discovery fails a few times
    assert plan(host) == {0: (0, 10)}  # what the last discovery saw still stands

    monkeypatch.setattr(kafka_stream, "STALE_DISCOVERY_S", 0.1)
    with pytest.raises(StreamError, match="unreachable"):
        eventually(lambda: plan(host) is None, "planning to fail")
