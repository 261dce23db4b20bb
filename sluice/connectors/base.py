"""What most bounded sources share: splits enumerated once and planned onto readers (the coordinator), and a
reader that reads its splits one after another. A source then only says how to list its splits and how to read
one (`BoundedSource.enumerate_splits`, `BoundedSource.read_split`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, Protocol

from sluice.connectors.api import (Boundedness, CoordinatorContext, ReaderContext, SizeBalancedSplitAssigner, Source,
                                   SourceReader, SplitAssigner, SplitCoordinator, SplitT, plan)

if TYPE_CHECKING:
    import pyarrow as pa


@dataclass
class PlannedSplitsState(Generic[SplitT]):
    """A push-based coordinator's checkpoint: splits planned for readers that have not registered yet (splits
    already assigned live in the readers' state, as in BitSail's and Flink's coordinators)."""

    pending: dict[int, list[SplitT]] = field(default_factory=dict)


class PlannedSplitCoordinator(SplitCoordinator[SplitT, PlannedSplitsState[SplitT]]):
    """Push-based, as every BitSail coordinator is: splits are listed at start and planned onto reader indexes
    by the assigner; a reader gets its share when it registers, then (bounded) the signal that nothing more
    comes. Splits added back after a failure go to the same reader index, whose retried attempt registers next
    and reads them: every other reader may already have been told that nothing more comes."""

    def __init__(self, context: CoordinatorContext[SplitT, PlannedSplitsState[SplitT]], source: BoundedSource[SplitT],
                 assigner: SplitAssigner | None = None) -> None:
        self._context = context
        self._source = source
        self._assigner = assigner or source.split_assigner()
        restored = context.restore_state() if context.is_restored() else None
        self._pending: dict[int, list[SplitT]] = {r: list(s) for r, s in (restored.pending if restored else {}).items()}
        self._listed = restored is not None

    def start(self) -> None:
        if not self._listed:
            for reader, splits in plan(self._source.enumerate_splits(), self._assigner,
                                       self._context.total_parallelism()).items():
                self._pending.setdefault(reader, []).extend(splits)
            self._listed = True
        for reader in sorted(self._context.registered_readers()):
            self._assign_pending(reader)

    def add_reader(self, reader: int) -> None:
        self._assign_pending(reader)

    def add_splits_back(self, splits: list[SplitT], reader: int) -> None:
        self._pending.setdefault(reader, []).extend(splits)

    def handle_split_request(self, reader: int, requester_hostname: str | None) -> None:
        """Push-based: everything a reader gets is assigned when it registers."""

    def snapshot_state(self, checkpoint_id: int) -> PlannedSplitsState[SplitT]:
        return PlannedSplitsState({r: list(s) for r, s in self._pending.items() if s})

    def _assign_pending(self, reader: int) -> None:
        if not self._listed:
            return
        splits = self._pending.pop(reader, [])
        if splits:
            self._context.assign_splits(reader, splits)
        if self._source.boundedness is Boundedness.BOUNDED:
            self._context.signal_no_more_splits(reader)


class ReadsSplits(Protocol[SplitT]):
    def read_split(self, split: SplitT) -> Iterator[pa.RecordBatch]:
        """The split's records, as batches matching the source's `output_schema()`; runs in an executor."""
        ...


class SplitReader(SourceReader[SplitT]):
    """Reads its splits in the order they came, each to its end, one Arrow batch per `poll_next`."""

    def __init__(self, source: ReadsSplits[SplitT], context: ReaderContext) -> None:
        self._source = source
        self.context = context
        self._splits: list[SplitT] = []
        self._batches: Iterator[pa.RecordBatch] | None = None
        self._no_more_splits = False

    def add_splits(self, splits: list[SplitT]) -> None:
        self._splits.extend(splits)

    def poll_next(self) -> pa.RecordBatch | None:
        while True:
            if self._batches is None:
                if not self._splits:
                    return None
                self._batches = iter(self._source.read_split(self._splits[0]))
            batch = next(self._batches, None)
            if batch is not None:
                return batch
            self._batches = None
            self._splits.pop(0)

    def has_more_elements(self) -> bool:
        return bool(self._splits) or not self._no_more_splits

    def notify_no_more_splits(self) -> None:
        self._no_more_splits = True

    def snapshot_state(self, checkpoint_id: int) -> list[SplitT]:
        """A split is read whole or not at all (its rows go out with the Spark task's output), so the splits
        not finished are the state."""
        return list(self._splits)


class BoundedSource(Source[SplitT, PlannedSplitsState[SplitT]]):
    """A bounded source whose splits are listed once: subclasses list them and read one."""

    @property
    def boundedness(self) -> Boundedness:
        return Boundedness.BOUNDED

    @abstractmethod
    def enumerate_splits(self) -> list[SplitT]:
        """Every split of the input; runs on the driver (so listing a bucket or a directory happens once)."""

    @abstractmethod
    def read_split(self, split: SplitT) -> Iterator[pa.RecordBatch]:
        """The split's records, as batches matching `output_schema()`; runs in an executor."""

    def split_assigner(self) -> SplitAssigner:
        """Size-balanced: a batch read takes as long as its busiest reader (BitSail's fair hash assigner, also
        here, can put every file on one reader)."""
        return SizeBalancedSplitAssigner()

    def create_reader(self, context: ReaderContext) -> SourceReader[SplitT]:
        return SplitReader(self, context)

    def create_split_coordinator(self, context: CoordinatorContext[SplitT, PlannedSplitsState[SplitT]]
                                 ) -> SplitCoordinator[SplitT, PlannedSplitsState[SplitT]]:
        return PlannedSplitCoordinator(context, self)
