"""The connector contracts: ByteDance BitSail's v1 reader API (seed 002) in Python names.

A `Source` makes two kinds of objects. Its `SplitCoordinator` runs once, on the Spark driver: it enumerates
the splits (files, key ranges, offset ranges) and assigns them to readers through its `CoordinatorContext`.
Its `SourceReader`s run in Spark executors, one per reader index (a Spark input partition): each turns the
splits assigned to it into Arrow record batches. The coordinator decides; Spark executes.

Where BitSail's reader emits one record at a time into a pipeline, `poll_next` here returns an Arrow batch:
rows cross into Spark's JVM as Arrow, and a Python object per row would cost more than the read.

A reader's whole state is its unfinished splits (`snapshot_state`), so a failed reader's splits can be given
to another reader: the coordinator gets them back with `add_splits_back` and assigns them again.
"""

from __future__ import annotations

import pickle
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    import pyarrow as pa


class Boundedness(str, Enum):
    """BitSail's names: a bounded source ends once its splits are read (batch), an unbounded one never does."""

    BOUNDED = "BOUNDEDNESS"
    UNBOUNDED = "UNBOUNDEDNESS"


@runtime_checkable
class SourceSplit(Protocol):
    """A unit of work one reader reads whole (BitSail's `uniqSplitId`). Splits are picklable values."""

    @property
    def split_id(self) -> str: ...


class SizedSplit(SourceSplit, Protocol):
    """A split that knows roughly how many bytes it reads, for `SizeBalancedSplitAssigner`."""

    @property
    def size_bytes(self) -> int: ...


SplitT = TypeVar("SplitT", bound=SourceSplit)
StateT = TypeVar("StateT")
T = TypeVar("T")


class Serializer(Generic[T]):
    """BitSail's versioned binary serializer: pickle behind a version number, so a stored coordinator state or
    split can be refused clearly when its format changes. Spark's cloudpickle writes it, so that a split class
    defined in a notebook or a script reaches the executors by value."""

    version = 1

    def serialize(self, value: T) -> bytes:
        from pyspark import cloudpickle

        return cloudpickle.dumps(value)

    def deserialize(self, version: int, data: bytes) -> T:
        if version != self.version:
            raise ValueError(f"cannot read serialized version {version}; this serializer reads version {self.version}")
        return pickle.loads(data)  # noqa: S301 - only what the coordinator itself wrote


class ReaderContext(Protocol):
    """What a reader knows of its place in the job."""

    @property
    def index_of_subtask(self) -> int: ...

    def send_split_request(self) -> None:
        """Ask the coordinator for more splits (its `handle_split_request`); they arrive through `add_splits`."""
        ...


class SourceReader(ABC, Generic[SplitT]):
    """Reads the splits assigned to it, in an executor. The loop that drives it (the runtime) is BitSail's:
    `start`, then `poll_next` while `has_more_elements`."""

    def start(self) -> None:
        """Open what the reader needs (connections, clients) once, before the first split."""

    @abstractmethod
    def add_splits(self, splits: list[SplitT]) -> None:
        """Splits the coordinator assigned to this reader."""

    @abstractmethod
    def poll_next(self) -> pa.RecordBatch | None:
        """The next batch of the splits in hand, or None when none is ready (no split in hand: the runtime then
        waits for the coordinator's next assignment or its signal that there will be none)."""

    @abstractmethod
    def has_more_elements(self) -> bool:
        """False once the reader is done for good: bounded, told no more splits come, and every split read."""

    def notify_no_more_splits(self) -> None:
        """The coordinator will assign nothing more: a bounded reader ends when its splits are read."""

    def handle_source_event(self, event: dict[str, Any]) -> None:
        """A custom event from the coordinator (`CoordinatorContext.send_event_to_source_reader`)."""

    @abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> list[SplitT]:
        """The splits not yet read through, with their progress: all a reader's state lives in its splits."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """What was read up to the checkpoint is committed downstream."""

    def close(self) -> None:
        """Release what `start` opened; called whether the reader finished or failed."""


class CoordinatorContext(Protocol[SplitT, StateT]):
    """What a coordinator acts through (BitSail's SourceSplitCoordinator.Context)."""

    def is_restored(self) -> bool: ...

    def restore_state(self) -> StateT | None:
        """The state the coordinator snapshotted last, when the job is restored from it."""
        ...

    def total_parallelism(self) -> int: ...

    def registered_readers(self) -> set[int]: ...

    def assign_split(self, reader: int, split: SplitT) -> None: ...

    def assign_splits(self, reader: int, splits: Sequence[SplitT]) -> None: ...

    def signal_no_more_splits(self, reader: int) -> None: ...

    def send_event_to_source_reader(self, reader: int, event: dict[str, Any]) -> None: ...

    def run_async(self, call: Callable[[], T], handler: Callable[[T | None, BaseException | None], None],
                  initial_delay: float, interval: float) -> None:
        """Run `call` every `interval` seconds in a worker thread; `handler` gets its result (or error) in the
        coordinator's thread. Periodic discovery (new Kafka partitions, new files) uses it."""
        ...

    def run_async_once(self, call: Callable[[], T], handler: Callable[[T | None, BaseException | None], None]) -> None: ...


class SplitCoordinator(ABC, Generic[SplitT, StateT]):
    """Makes and assigns splits, on the driver; every method is called from the coordinator's one thread."""

    @abstractmethod
    def start(self) -> None:
        """Enumerate the splits (or start discovering them) and plan their readers."""

    @abstractmethod
    def add_reader(self, reader: int) -> None:
        """A reader registered: assign it what is planned for it."""

    @abstractmethod
    def add_splits_back(self, splits: list[SplitT], reader: int) -> None:
        """A reader failed after these splits were assigned to it (since the last completed checkpoint): what it
        read of them was thrown away with its output, so they must be assigned again."""

    @abstractmethod
    def handle_split_request(self, reader: int, requester_hostname: str | None) -> None:
        """A reader asks for work (pull-based sources); push-based ones assign on `add_reader` and ignore it."""

    def handle_source_event(self, reader: int, event: dict[str, Any]) -> None:
        """A custom event from a reader."""

    @abstractmethod
    def snapshot_state(self, checkpoint_id: int) -> StateT:
        """What a restored coordinator needs, assuming every assignment made so far took effect."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Everything assigned before the checkpoint is read and committed downstream."""

    def close(self) -> None:
        """Stop discovery threads and release clients."""


class Source(ABC, Generic[SplitT, StateT]):
    """A connector: a picklable description (its spec) that the driver and every executor rebuild objects from."""

    @property
    @abstractmethod
    def boundedness(self) -> Boundedness: ...

    @property
    def name(self) -> str:
        """BitSail's reader name: how logs and reports call this source."""
        return type(self).__name__

    @abstractmethod
    def output_schema(self) -> pa.Schema:
        """The schema of every batch a reader returns; Spark requires each batch to match it exactly."""

    @abstractmethod
    def create_reader(self, context: ReaderContext) -> SourceReader[SplitT]: ...

    @abstractmethod
    def create_split_coordinator(self, context: CoordinatorContext[SplitT, StateT]) -> SplitCoordinator[SplitT, StateT]: ...

    def split_serializer(self) -> Serializer[SplitT]:
        return Serializer()

    def state_serializer(self) -> Serializer[StateT]:
        return Serializer()


class SplitAssigner(ABC):
    """Which reader a split is planned for."""

    @abstractmethod
    def assign_to_reader(self, split: SourceSplit, parallelism: int) -> int: ...


class FairSplitAssigner(SplitAssigner):
    """BitSail's fair assigner: the split id's Java hashCode modulo the parallelism. Deterministic, so a split
    added back after a failure goes to the same reader index, whose retried attempt reads it."""

    def assign_to_reader(self, split: SourceSplit, parallelism: int) -> int:
        return (java_string_hash(split.split_id) & 0x7FFFFFFF) % parallelism


class SizeBalancedSplitAssigner(SplitAssigner):
    """Each split to the reader with the fewest bytes so far; offered largest first (`plan` sorts), this is the
    longest-processing-time rule, within 4/3 of the best balance. Files of very different sizes read evenly."""

    def __init__(self) -> None:
        self._loads: dict[int, int] = {}

    def assign_to_reader(self, split: SourceSplit, parallelism: int) -> int:
        reader = min(range(parallelism), key=lambda r: (self._loads.get(r, 0), r))
        self._loads[reader] = self._loads.get(reader, 0) + max(getattr(split, "size_bytes", 1), 1)
        return reader


def plan(splits: Sequence[SplitT], assigner: SplitAssigner, parallelism: int) -> dict[int, list[SplitT]]:
    """Reader -> its splits, largest offered first (what the size-balanced rule needs; harmless for the others)."""
    planned: dict[int, list[SplitT]] = {}
    for split in sorted(splits, key=lambda s: -getattr(s, "size_bytes", 0)):
        planned.setdefault(assigner.assign_to_reader(split, parallelism), []).append(split)
    return planned


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (as a signed 32-bit int), so split ids land on the readers BitSail would choose."""
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h
