"""The driver's side of a read: one coordinator, its context, and the readers as the coordinator sees them.

`CoordinatorHost` keeps what BitSail's runtime keeps around a coordinator: which readers are registered, what
was assigned to each since the last completed checkpoint, and each reader's mailbox (splits, the no-more-splits
signal, events) until the reader fetches it. Every coordinator call happens under one lock, which makes it the
"coordinator thread" the contract promises.

Readers are Spark tasks, and a Spark task that fails is run again as a new attempt of the same index. A reader
that registers with a newer attempt than before therefore failed: everything assigned to the older attempt
since the last checkpoint went down with that attempt's output, so it is given back to the coordinator
(`add_splits_back`) before the new attempt is added (`add_reader`). That is how a failed reader's splits are
read again, exactly once in the committed output.

An unbounded source is read in epochs, one Spark job each (a streaming task's persists): every epoch starts its
readers afresh, so a reader is known by its epoch and attempt. `begin_epoch` moves the host on; a reader of an
older epoch (a straggler of a cancelled job) gets nothing, and an epoch whose job did not complete
(`checkpoint_complete`) gives its splits back when the next epoch's readers register.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sluice.connectors.api import CoordinatorContext, Source, SplitCoordinator, SplitT, StateT

T = TypeVar("T")


@dataclass
class Mailbox(Generic[SplitT]):
    """What waits for one reader: fetched (and emptied) by the reader's `poll`."""

    splits: list[SplitT] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    no_more_splits: bool = False


@dataclass(frozen=True)
class ReadProgress:
    """What the readers' current attempts have read: a failed attempt's rows were thrown away with it, so they
    are not counted."""

    rows: int = 0
    bytes: int = 0
    splits_done: int = 0
    splits_assigned: int = 0

    def to_json(self) -> dict[str, int]:
        return {"rowsRead": self.rows, "bytesRead": self.bytes, "splitsDone": self.splits_done,
                "splitsAssigned": self.splits_assigned}


@dataclass
class _Reader(Generic[SplitT]):
    #: (epoch, attempt): a later one means the earlier one ended, and what it held is given back
    incarnation: tuple[int, int]
    #: everything assigned to this reader since the last completed checkpoint
    assigned: list[SplitT] = field(default_factory=list)
    #: the ids of every split this attempt was assigned, checkpoints or not: what its progress counts against
    received: set[str] = field(default_factory=set)
    mailbox: Mailbox[SplitT] = field(default_factory=Mailbox)
    progress: ReadProgress = ReadProgress()


class CoordinatorHost(CoordinatorContext[SplitT, StateT]):
    def __init__(self, source: Source[SplitT, StateT], parallelism: int, restored: StateT | None = None) -> None:
        if parallelism < 1:
            raise ValueError(f"parallelism must be at least 1, got {parallelism}")
        self.source = source
        self._parallelism = parallelism
        self._restored = restored
        self._lock = threading.RLock()
        self._readers: dict[int, _Reader[SplitT]] = {}
        self._closed = threading.Event()
        self._timers: list[threading.Thread] = []
        self._epoch = 0
        self.coordinator: SplitCoordinator[SplitT, StateT] = source.create_split_coordinator(self)

    # -- what the runtime calls, for the readers -------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            self.coordinator.start()

    def run_in_coordinator(self, call: Callable[[SplitCoordinator[SplitT, StateT]], T]) -> T:
        """`call(coordinator)` in the coordinator's thread: how the runtime owning a read asks its coordinator what
        the contract does not cover (a streaming task plans each epoch's ranges)."""
        with self._lock:
            return call(self.coordinator)

    def begin_epoch(self, epoch: int) -> None:
        """The readers of `epoch` (the next Spark job of an unbounded read) are about to register."""
        with self._lock:
            if epoch <= self._epoch:
                raise ValueError(f"epoch {epoch} does not follow epoch {self._epoch}")
            self._epoch = epoch

    def register(self, reader: int, attempt: int = 0, epoch: int = 0) -> None:
        """A reader (attempt) starts. A newer attempt than the one registered means the older one failed."""
        self._check_index(reader)
        with self._lock:
            known = self._readers.get(reader)
            incarnation = (epoch, attempt)
            if epoch != self._epoch or (known is not None and incarnation <= known.incarnation):
                return  # a straggler of an earlier epoch, or the same attempt registering again (a retried request)
            self._readers[reader] = _Reader(incarnation)
            if known is not None:
                lost = known.assigned + known.mailbox.splits
                lost = list({s.split_id: s for s in lost}.values())
                if lost:
                    self.coordinator.add_splits_back(lost, reader)
            self.coordinator.add_reader(reader)

    def poll(self, reader: int, attempt: int = 0, epoch: int = 0) -> Mailbox[SplitT]:
        """Take what waits for the reader; an attempt that is no longer the current one gets nothing more."""
        with self._lock:
            known = self._readers.get(reader)
            if known is None or known.incarnation != (epoch, attempt):
                return Mailbox(no_more_splits=True)
            box, known.mailbox = known.mailbox, Mailbox()
            known.mailbox.no_more_splits = box.no_more_splits
            return box

    def report_progress(self, reader: int, attempt: int, rows: int, size: int, splits_done: int,
                        epoch: int = 0) -> None:
        """A reader attempt's running totals (rows and bytes handed to Spark, splits read through)."""
        with self._lock:
            known = self._readers.get(reader)
            if known is not None and known.incarnation == (epoch, attempt):
                known.progress = ReadProgress(rows, size, splits_done)

    def progress(self) -> ReadProgress:
        """The current attempts' running totals, against every split they were assigned (a completed checkpoint
        takes nothing off: a finished read reports all its splits done of all assigned)."""
        with self._lock:
            readers = list(self._readers.values())
            assigned = len(set().union(*(r.received for r in readers)))
        return ReadProgress(sum(r.progress.rows for r in readers), sum(r.progress.bytes for r in readers),
                            sum(r.progress.splits_done for r in readers), assigned)

    def request_split(self, reader: int, hostname: str | None = None) -> None:
        with self._lock:
            self.coordinator.handle_split_request(reader, hostname)

    def source_event(self, reader: int, event: dict[str, Any]) -> None:
        with self._lock:
            self.coordinator.handle_source_event(reader, event)

    def checkpoint(self, checkpoint_id: int) -> StateT:
        with self._lock:
            return self.coordinator.snapshot_state(checkpoint_id)

    def checkpoint_complete(self, checkpoint_id: int) -> None:
        """The output of everything assigned so far is committed: nothing assigned before is ever given back."""
        with self._lock:
            for known in self._readers.values():
                known.assigned.clear()
            self.coordinator.notify_checkpoint_complete(checkpoint_id)

    def assigned(self) -> dict[int, list[str]]:
        """Split ids per reader since the last checkpoint (for logs and tests)."""
        with self._lock:
            return {r: [s.split_id for s in known.assigned] for r, known in sorted(self._readers.items())}

    def incarnations(self) -> dict[int, tuple[int, int]]:
        """Each reader's current (epoch, attempt): an attempt above 0 is a reader Spark ran again (for logs and tests)."""
        with self._lock:
            return {r: known.incarnation for r, known in sorted(self._readers.items())}

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            self.coordinator.close()

    # -- the coordinator's context ---------------------------------------------------------------------

    def is_restored(self) -> bool:
        return self._restored is not None

    def restore_state(self) -> StateT | None:
        return self._restored

    def total_parallelism(self) -> int:
        return self._parallelism

    def registered_readers(self) -> set[int]:
        with self._lock:
            return set(self._readers)

    def assign_split(self, reader: int, split: SplitT) -> None:
        self.assign_splits(reader, [split])

    def assign_splits(self, reader: int, splits: Sequence[SplitT]) -> None:
        with self._lock:
            known = self._registered(reader)
            if known.mailbox.no_more_splits:
                raise RuntimeError(f"reader {reader} was told no more splits come; cannot assign it "
                                   f"{[s.split_id for s in splits]}")
            known.assigned.extend(splits)
            known.received.update(s.split_id for s in splits)
            known.mailbox.splits.extend(splits)

    def signal_no_more_splits(self, reader: int) -> None:
        with self._lock:
            self._registered(reader).mailbox.no_more_splits = True

    def send_event_to_source_reader(self, reader: int, event: dict[str, Any]) -> None:
        with self._lock:
            self._registered(reader).mailbox.events.append(event)

    def run_async(self, call: Callable[[], T], handler: Callable[[T | None, BaseException | None], None],
                  initial_delay: float, interval: float) -> None:
        def loop() -> None:
            if self._closed.wait(initial_delay):
                return
            while True:
                self._call_and_handle(call, handler)
                if interval <= 0 or self._closed.wait(interval):
                    return

        thread = threading.Thread(target=loop, name=f"{self.source.name}-coordinator-async", daemon=True)
        self._timers.append(thread)
        thread.start()

    def run_async_once(self, call: Callable[[], T], handler: Callable[[T | None, BaseException | None], None]) -> None:
        self.run_async(call, handler, 0, 0)

    def _call_and_handle(self, call: Callable[[], T], handler: Callable[[T | None, BaseException | None], None]) -> None:
        try:
            result: T | None = call()
            error: BaseException | None = None
        except Exception as failure:  # noqa: BLE001 - the handler decides what an error means
            result, error = None, failure
        with self._lock:
            if not self._closed.is_set():
                handler(result, error)

    def _registered(self, reader: int) -> _Reader[SplitT]:
        known = self._readers.get(reader)
        if known is None:
            raise RuntimeError(f"reader {reader} is not registered; registered: {sorted(self._readers)}")
        return known

    def _check_index(self, reader: int) -> None:
        if not 0 <= reader < self._parallelism:
            raise ValueError(f"reader index {reader} is outside 0..{self._parallelism - 1}")
