"""New partitions join the supervisor's groups and are read from their first offset.

The dev broker cannot add partitions to a topic (no CreatePartitions, ARCHITECTURE.md §8), so the
growth is driven at the stream interface the supervisor reads partitions from: the topic has four
real partitions, and the stream shows the supervisor two of them until the test reveals the rest.
"""

from __future__ import annotations

import httpx

from sluice.dev.sample_data import generate, produce
from sluice.server.node import Node, NodeConfig
from sluice.spec.supervisor import KafkaIOConfig
from sluice.stream.kafka import KafkaStream
from tests.integration.harness import committed_offsets, free_port, read_to, sql, supervisor_spec, wait_for


class GrowingStream(KafkaStream):
    visible = 2  # partitions shown to the supervisor: 0 .. visible-1

    def partitions(self) -> list[int]:
        return [p for p in super().partitions() if p < GrowingStream.visible]


def growing_stream(io: KafkaIOConfig) -> KafkaStream:
    return GrowingStream({k: str(v) for k, v in io.consumer_properties.items()}, io.topic)


def test_partitions_added_later_are_read_from_their_start(spark, kafka_broker, tmp_path):  # noqa: ARG001
    topic, ds = "growth", "growth"
    kafka_broker.create_topic(topic, 4)
    records = generate(20_000, seed=31)
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records, 4)
    GrowingStream.visible = 2
    node = Node(NodeConfig(port=free_port(), work_dir=tmp_path), stream_factory=growing_stream)
    node.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{node.config.port}", timeout=60) as http:
            spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=2, taskDuration="PT1H")
            assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
            wait_for(lambda: read_to(http, ds, {0: end_offsets[0]}) and read_to(http, ds, {1: end_offsets[1]}), 120,
                     "partitions 0 and 1 read to their end")
            assert committed_offsets(node, ds) == {0: 0, 1: 0}  # an hour-long task: nothing published yet

            GrowingStream.visible = 4  # the topic "grew": both groups end early and publish
            wait_for(lambda: committed_offsets(node, ds) == {0: end_offsets[0], 1: end_offsets[1], 2: 0, 3: 0}, 120,
                     "the early rollover to publish, and partitions 2 and 3 recorded at their start")
            wait_for(lambda: read_to(http, ds, {0: end_offsets[0], 2: end_offsets[2]}) and
                     read_to(http, ds, {1: end_offsets[1], 3: end_offsets[3]}), 120, "the new partitions read")
            http.post(f"/druid/indexer/v1/supervisor/{ds}/taskGroups/handoff", json={"taskGroupIds": [0, 1]})
            wait_for(lambda: committed_offsets(node, ds) == end_offsets, 120, "everything committed")
            assert sql(http, f'SELECT SUM("count") AS n FROM {ds}') == [{"n": sum(r.kind == "valid" for r in records)}]
    finally:
        node.supervisors.terminate_all()
        node.stop()
