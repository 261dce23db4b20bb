"""The streaming task's Kafka source: its partitions, read from the task's offsets on, one epoch per persist.

BitSail's Kafka coordinator discovers partitions and offsets and assigns each partition's split to a reader; here
the readers are a Spark job's tasks, and a job reads a bounded slice of the stream. So the coordinator works in
epochs: the task asks it for the next epoch's offset ranges (`plan_epoch`, up to what discovery last saw and the
task's end offsets), each reader registers for that epoch and is assigned its partition's range, and once the
task has persisted the job's rows it completes the checkpoint, which moves the coordinator's offsets on. A job
that fails or is cancelled (a pause) completes nothing: the next epoch starts from the same offsets, and a reader
attempt that failed within an epoch is assigned the same range again. The offsets are all the coordinator's state.

Discovery runs in the coordinator (`run_async`, every `discovery_interval` seconds): the topic's partitions and the
latest offsets of the task's. Partitions the task does not read are the supervisor's to hand out; they are logged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.pandas.types import to_arrow_schema

from sluice.connectors.api import Boundedness, CoordinatorContext, ReaderContext, Source, SourceReader, SplitCoordinator
from sluice.connectors.base import SplitReader
from sluice.connectors.sources.kafka import KafkaSplit
from sluice.stream.kafka_ranges import SCHEMA, MessageDecoder, OffsetRange, read_offset_range
from sluice.stream.offsets import next_ranges

if TYPE_CHECKING:
    import pyarrow as pa

    from sluice.stream.kafka import KafkaStream

__all__ = ["Discovery", "KafkaStreamCoordinator", "KafkaStreamSource"]

log = logging.getLogger(__name__)

#: how long planning goes on from what an earlier discovery saw while discovery fails, before the task fails
STALE_DISCOVERY_S = 30.0


@dataclass(frozen=True)
class Discovery:
    """What one discovery saw: the topic's partitions and the latest offsets of the task's."""

    partitions: list[int]
    latest: dict[int, int]


class KafkaStreamSource(Source[KafkaSplit, dict[int, int]]):
    """`partitions` of `topic` from `start_offsets` on. The records are what the `sluice_kafka` data source reads
    (kafka_ranges' shapes: JSON values as bytes, any other `input_format` parsed into `fields` by the reader).

    `stream_factory` opens the driver's view of the stream for discovery; it stays on the driver (the executors
    get the source without it)."""

    def __init__(self, topic: str, consumer_properties: dict[str, Any], start_offsets: dict[int, int],
                 stream_factory: Callable[[], KafkaStream], input_format: Any = None, fields: Sequence[str] = (),
                 discovery_interval: float = 0.5) -> None:
        self.topic = topic
        self.consumer_properties = dict(consumer_properties)
        self.partitions = sorted(start_offsets)
        self.start_offsets = dict(start_offsets)
        self.stream_factory: Callable[[], KafkaStream] | None = stream_factory
        self.discovery_interval = discovery_interval
        self.decoder = None if input_format is None or input_format.type == "json" else \
            MessageDecoder(input_format, fields)
        self._schema = to_arrow_schema(SCHEMA if self.decoder is None else self.decoder.schema, timezone="UTC")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "stream_factory": None}

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.UNBOUNDED

    @property
    def parallelism(self) -> int:
        """One reader per partition: reader i reads the i-th of the sorted partitions."""
        return len(self.partitions)

    def output_schema(self) -> pa.Schema:
        return self._schema

    def create_reader(self, context: ReaderContext) -> SourceReader[KafkaSplit]:
        return SplitReader(self, context)

    def read_split(self, split: KafkaSplit) -> Iterator[pa.RecordBatch]:
        return read_offset_range(split.topic, self.consumer_properties,
                                 OffsetRange(split.partition, split.start, split.end), decode=self.decoder)

    def create_split_coordinator(self, context: CoordinatorContext[KafkaSplit, dict[int, int]]
                                 ) -> KafkaStreamCoordinator:
        return KafkaStreamCoordinator(context, self)


class KafkaStreamCoordinator(SplitCoordinator[KafkaSplit, dict[int, int]]):
    """Plans each epoch's offset ranges and assigns them; its state is the offsets read and committed so far."""

    def __init__(self, context: CoordinatorContext[KafkaSplit, dict[int, int]], source: KafkaStreamSource) -> None:
        self._context = context
        self._source = source
        restored = context.restore_state() if context.is_restored() else None
        self._offsets = dict(restored if restored is not None else source.start_offsets)
        self._discovered: Discovery | None = None
        self._discovered_at = 0.0
        self._discovery_error: BaseException | None = None
        self._others: set[int] = set()
        #: reader -> its split in the epoch being read
        self._epoch: dict[int, KafkaSplit] = {}
        self._stream: KafkaStream | None = None

    def start(self) -> None:
        """The first discovery runs here, so the first plan has the latest offsets (and a broker that cannot be
        reached fails the task at once); the next ones run in the background."""
        self._on_discovered(self._discover(), None)
        interval = self._source.discovery_interval
        self._context.run_async(self._discover, self._on_discovered, interval, interval)

    def plan_epoch(self, end_offsets: dict[int, int], max_records: int) -> dict[int, tuple[int, int]]:
        """The next epoch's ranges, partition -> [start, end): from the offsets read so far up to the latest
        discovered and `end_offsets`, at most `max_records` in all. Empty when there is nothing new to read."""
        if self._discovery_error is not None and time.monotonic() - self._discovered_at > STALE_DISCOVERY_S:
            raise self._discovery_error
        assert self._discovered is not None
        ranges = next_ranges(self._offsets, self._discovered.latest, end_offsets, max_records)
        readers = {p: i for i, p in enumerate(self._source.partitions)}
        self._epoch = {readers[p]: KafkaSplit(self._source.topic, p, start, end) for p, (start, end) in ranges.items()}
        return ranges

    def add_reader(self, reader: int) -> None:
        if (split := self._epoch.get(reader)) is not None:
            self._context.assign_split(reader, split)
        self._context.signal_no_more_splits(reader)

    def add_splits_back(self, splits: list[KafkaSplit], reader: int) -> None:
        """Nothing to keep: a retried attempt of this epoch is assigned the epoch's range again (`add_reader`), and a
        later epoch is planned from the offsets, which only a completed checkpoint moves."""

    def handle_split_request(self, reader: int, requester_hostname: str | None) -> None:
        """Push-based: a reader gets its epoch's range when it registers."""

    def snapshot_state(self, checkpoint_id: int) -> dict[int, int]:
        return dict(self._offsets)

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """The epoch's rows are persisted: its ranges are read."""
        self._offsets.update({s.partition: s.end for s in self._epoch.values()})
        self._epoch = {}

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()

    def _discover(self) -> Discovery:
        """In `start`, then only in the discovery thread: one thread at a time talks to the broker."""
        if self._stream is None:
            assert self._source.stream_factory is not None, "discovery runs on the driver"
            self._stream = self._source.stream_factory()
        partitions = self._stream.partitions()
        return Discovery(partitions, self._stream.latest_offsets(self._source.partitions))

    def _on_discovered(self, discovery: Discovery | None, error: BaseException | None) -> None:
        if discovery is None:
            if self._discovery_error is None:  # once per outage, not every discovery interval
                log.warning("topic %r: discovery failed: %s", self._source.topic, error)
            self._discovery_error = error
            return
        self._discovered, self._discovered_at, self._discovery_error = discovery, time.monotonic(), None
        if others := set(discovery.partitions) - set(self._source.partitions) - self._others:
            self._others |= others
            log.info("topic %r has partitions %s that this task does not read; its supervisor assigns them",
                     self._source.topic, sorted(others))
