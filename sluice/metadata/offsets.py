"""The stream offsets Druid stores per data source, next to its segments."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StreamOffsets:
    """A stream's end offsets per partition: the next offset to read (Kafka offsets are exclusive).

    The value Druid stores per data source (``SeekableStreamEndSequenceNumbers``). Each partition
    is owned by one task group at a time, so a publish only carries the partitions it read, and
    `plus` merges it into what other groups committed.
    """

    stream: str
    offsets: dict[int, int]

    def plus(self, other: StreamOffsets) -> StreamOffsets:
        """Druid's ``plus``: the other's offsets win; another stream replaces the whole value."""
        if other.stream != self.stream:
            return other
        return StreamOffsets(self.stream, {**self.offsets, **other.offsets})

    def matches(self, other: StreamOffsets) -> bool:
        """Druid's ``matches``: same stream and every common partition at the same offset."""
        return self.plus(other) == other.plus(self)

    def to_payload(self, kind: str = "end") -> dict[str, Any]:
        """Druid's Kafka metadata JSON: end offsets (what is stored), or with ``kind="start"`` the start offsets
        of a sequence (``stream``/``topic`` and the two maps are duplicates Druid keeps for compatibility)."""
        offsets = {str(partition): offset for partition, offset in sorted(self.offsets.items())}
        return {
            "type": "kafka",
            "partitions": {
                "type": kind,
                "stream": self.stream,
                "topic": self.stream,
                "partitionSequenceNumberMap": offsets,
                "partitionOffsetMap": offsets,
            },
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> StreamOffsets:
        partitions = payload["partitions"]
        offsets = partitions.get("partitionSequenceNumberMap", partitions.get("partitionOffsetMap", {}))
        return cls(
            stream=partitions.get("stream", partitions.get("topic")),
            offsets={int(partition): int(offset) for partition, offset in offsets.items()},
        )

    def __str__(self) -> str:
        offsets = ", ".join(f"{partition}={offset}" for partition, offset in sorted(self.offsets.items()))
        return f"KafkaDataSourceMetadata{{stream='{self.stream}', partitionOffsetMap={{{offsets}}}}}"
