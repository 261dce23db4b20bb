"""Kafka stream metadata for supervisors and tasks: partitions and offset bounds.

The supervisor polls these every few seconds to plan task groups and offset ranges, so one consumer
is kept per instance and offsets of all partitions are fetched in one ListOffsets round trip.
Configuration comes from the Druid spec's ``ioConfig.consumerProperties`` and is handed to
confluent-kafka (librdkafka) as it is; :func:`consumer_config` is also what the Spark source uses
so both sides see the stream through the same settings.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, TopicPartition

if TYPE_CHECKING:
    from sluice.spec.supervisor import KafkaIOConfig

__all__ = ["DEFAULT_GROUP_ID", "KafkaStream", "StreamError", "consumer_config", "new_consumer"]

#: librdkafka insists on a group id even for ``assign``-only consumers; Sluice never commits to it.
DEFAULT_GROUP_ID = "sluice"

_LOGGER = logging.getLogger(__name__)


class StreamError(Exception):
    """The stream cannot be read: bad configuration, broker unreachable, missing topic or offsets."""


#: values of Kafka's Java client, which Druid hands consumerProperties to, in librdkafka's words: `none` (Druid's own
#: default) makes an offset out of range an error rather than a silent jump
_JAVA_CLIENT_VALUES = {("auto.offset.reset", "none"): "error"}


def consumer_config(
    consumer_properties: Mapping[str, Any],
    *,
    defaults: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Build a confluent-kafka consumer config from Druid ``consumerProperties``.

    Precedence: ``overrides`` > ``consumer_properties`` > ``defaults`` > Sluice's base settings
    (a group id, and librdkafka logs routed to Python logging instead of stderr).
    """
    if not consumer_properties.get("bootstrap.servers"):
        raise StreamError("consumerProperties must contain 'bootstrap.servers'")
    for key, value in consumer_properties.items():
        if not isinstance(value, (str, int, float, bool)):
            raise StreamError(f"consumerProperties[{key!r}] must be a string, number or boolean, got {value!r}")
    translated = {key: _JAVA_CLIENT_VALUES.get((key, value), value) if isinstance(value, str) else value
                  for key, value in consumer_properties.items()}
    return {
        "group.id": DEFAULT_GROUP_ID,
        "logger": _LOGGER,
        **(defaults or {}),
        **translated,
        **(overrides or {}),
    }


def new_consumer(config: Mapping[str, Any]) -> Consumer:
    """Create a consumer, turning librdkafka's rejection of a property into a :class:`StreamError`."""
    try:
        return Consumer(dict(config))
    except (KafkaException, ValueError) as exc:
        raise StreamError(f"invalid Kafka consumer configuration: {exc}") from exc


class KafkaStream:
    """Partitions and offset bounds of one topic.

    Every call waits at most ``timeout`` seconds and raises :class:`StreamError` when the broker
    cannot be reached, the topic does not exist or an offset cannot be read.
    """

    def __init__(self, consumer_properties: Mapping[str, Any], topic: str, timeout: float = 5.0) -> None:
        self.topic = topic
        self.timeout = timeout
        self._bootstrap = consumer_properties.get("bootstrap.servers")
        self._consumer = new_consumer(consumer_config(consumer_properties))

    @classmethod
    def for_io_config(cls, io: KafkaIOConfig) -> KafkaStream:
        """The stream a supervisor spec's ioConfig names (the default stream factory everywhere)."""
        return cls({k: str(v) for k, v in io.consumer_properties.items()}, io.topic)

    def partitions(self) -> list[int]:
        """The topic's partition ids, sorted."""
        try:
            metadata = self._consumer.list_topics(self.topic, timeout=self.timeout)
        except KafkaException as exc:
            raise StreamError(f"Kafka brokers {self._bootstrap} unreachable: {exc.args[0].str()}") from exc
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None:
            reason = topic.error.str() if topic is not None and topic.error is not None else "not in metadata"
            raise StreamError(f"topic {self.topic!r} does not exist on {self._bootstrap}: {reason}")
        return sorted(topic.partitions)

    def latest_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        """The next offset to be written per partition (high watermark; last stable offset when
        ``isolation.level`` is ``read_committed``, which is librdkafka's default)."""
        return self._offsets(partitions, OFFSET_END, "latest")

    def earliest_offsets(self, partitions: Iterable[int]) -> dict[int, int]:
        """The first offset still stored per partition (log start offset)."""
        return self._offsets(partitions, OFFSET_BEGINNING, "earliest")

    def _offsets(self, partitions: Iterable[int], logical_offset: int, which: str) -> dict[int, int]:
        # offsets_for_times with a logical offset as the "timestamp" sends one ListOffsets request
        # per leader for all partitions, where get_watermark_offsets costs a round trip each.
        query = [TopicPartition(self.topic, partition, logical_offset) for partition in partitions]
        if not query:
            return {}
        try:
            answers = self._consumer.offsets_for_times(query, timeout=self.timeout)
        except KafkaException as exc:
            raise StreamError(
                f"cannot read {which} offsets of topic {self.topic!r} partitions "
                f"{sorted(tp.partition for tp in query)} from {self._bootstrap}: {exc.args[0].str()}"
            ) from exc
        failed = {tp.partition: tp.error.str() for tp in answers if tp.error is not None}
        if failed:
            raise StreamError(f"cannot read {which} offsets of topic {self.topic!r}: {failed}")
        return {tp.partition: tp.offset for tp in answers}

    def close(self) -> None:
        """Release the consumer. Idempotent."""
        self._consumer.close()

    def __enter__(self) -> KafkaStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
