"""The reader's side of a read: BitSail's reader loop, talking to the coordinator through a channel.

In a Spark executor the channel is HTTP to the driver (`sluice.connectors.spark`); in tests and tools it is the
`CoordinatorHost` itself (`read_all`).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from sluice.connectors.api import Source
from sluice.connectors.coordination import CoordinatorHost, Mailbox

if TYPE_CHECKING:
    from sluice.connectors.api import SourceReader

#: how often a reader with nothing in hand asks the coordinator again
_IDLE_WAIT_S = (0.01, 0.5)
#: how often a busy reader fetches its mailbox (events, more splits)
_POLL_EVERY_S = 1.0


class CoordinatorChannel(Protocol):
    def register(self, reader: int, attempt: int, epoch: int) -> None: ...
    def poll(self, reader: int, attempt: int, epoch: int) -> Mailbox[Any]: ...
    def request_split(self, reader: int, hostname: str | None) -> None: ...
    def source_event(self, reader: int, event: dict[str, Any]) -> None: ...
    def report_progress(self, reader: int, attempt: int, rows: int, size: int, splits_done: int,
                        epoch: int) -> None: ...


class _ReaderContext:
    def __init__(self, index: int, channel: CoordinatorChannel) -> None:
        self._index = index
        self._channel = channel

    @property
    def index_of_subtask(self) -> int:
        return self._index

    def send_split_request(self) -> None:
        self._channel.request_split(self._index, socket.gethostname())


def read_assigned(source: Source[Any, Any], index: int, attempt: int, channel: CoordinatorChannel, epoch: int = 0
                  ) -> Iterator[pa.RecordBatch]:
    """Run reader `index` (this attempt of it, in this epoch) to its end, yielding its batches."""
    context = _ReaderContext(index, channel)
    reader: SourceReader[Any] = source.create_reader(context)
    channel.register(index, attempt, epoch)
    reader.start()
    progress = _Progress(reader)
    try:
        progress.deliver(channel.poll(index, attempt, epoch))
        polled = time.monotonic()
        wait = _IDLE_WAIT_S[0]
        asked = False
        while reader.has_more_elements():
            batch = reader.poll_next()
            if batch is not None:
                wait, asked = _IDLE_WAIT_S[0], False
                if batch.num_rows:
                    progress.count(batch)
                    yield batch
                if time.monotonic() - polled > _POLL_EVERY_S:
                    channel.report_progress(index, attempt, *progress.totals(), epoch)
                    progress.deliver(channel.poll(index, attempt, epoch))
                    polled = time.monotonic()
                continue
            if not asked:
                context.send_split_request()
                asked = True
            time.sleep(wait)
            wait = min(wait * 2, _IDLE_WAIT_S[1])
            progress.deliver(channel.poll(index, attempt, epoch))
            polled = time.monotonic()
        channel.report_progress(index, attempt, *progress.totals(), epoch)
    finally:
        reader.close()


class _Progress:
    """A reader attempt's running totals, and the hand-over of its mailbox (which tells which splits it got)."""

    def __init__(self, reader: SourceReader[Any]) -> None:
        self._reader = reader
        self._received: set[str] = set()
        self.rows = 0
        self.size = 0

    def deliver(self, box: Mailbox[Any]) -> None:
        if box.splits:
            self._received.update(s.split_id for s in box.splits)
            self._reader.add_splits(box.splits)
        for event in box.events:
            self._reader.handle_source_event(event)
        if box.no_more_splits:
            self._reader.notify_no_more_splits()

    def count(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        self.size += batch.nbytes

    def totals(self) -> tuple[int, int, int]:
        unfinished = {s.split_id for s in self._reader.snapshot_state(0)}
        return self.rows, self.size, len(self._received - unfinished)


def read_all(source: Source[Any, Any], parallelism: int = 2) -> pa.Table:
    """Every record of a bounded source, read in this process by `parallelism` readers one after another: what
    a Spark job would read, without Spark (for tests, and for a connector author trying a source)."""
    host = CoordinatorHost(source, parallelism)
    host.start()
    try:
        batches = [batch for index in range(parallelism) for batch in read_assigned(source, index, 0, host)]
        host.checkpoint_complete(1)
    finally:
        host.close()
    return pa.Table.from_batches(batches, schema=source.output_schema())
