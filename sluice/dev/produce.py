"""`sluice dev produce`: the sample Wikipedia edits (bad records included) into a topic of any Kafka broker, so that
the example supervisor spec has something to read."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient

from sluice.dev.sample_data import generate, produce
from sluice.dev.tansu import create_topic


def run(bootstrap_servers: str, topic: str, events: int, partitions: int, seed: int = 7) -> dict[int, int]:
    """The topic's end offsets afterwards; the topic is created with `partitions` if it does not exist."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    existing = admin.list_topics(timeout=10).topics.get(topic)
    if existing is None:
        create_topic(admin, topic, partitions)
    else:
        partitions = len(existing.partitions)
    return produce(bootstrap_servers, topic, generate(events, seed), partitions)
