"""The connector framework's decisions, without Spark: split assignment, the coordinator host's bookkeeping of
reader attempts, and the in-process reader loop."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pytest

from sluice.connectors import (BoundedSource, FairSplitAssigner, PlannedSplitCoordinator, Serializer,
                               SizeBalancedSplitAssigner, read_all)
from sluice.connectors.api import java_string_hash, plan
from sluice.connectors.coordination import CoordinatorHost
from sluice.connectors.reading import read_assigned
from sluice.connectors.records import column_records_schema


@dataclass(frozen=True)
class Part:
    name: str
    size: int = 1

    @property
    def split_id(self) -> str:
        return self.name

    @property
    def size_bytes(self) -> int:
        return self.size


class Parts(BoundedSource[Part]):
    def __init__(self, parts: list[Part]) -> None:
        self.parts = parts

    def output_schema(self) -> pa.Schema:
        return column_records_schema(["name"])

    def enumerate_splits(self) -> list[Part]:
        return list(self.parts)

    def read_split(self, split: Part) -> Iterator[pa.RecordBatch]:
        names = [split.name] * split.size
        yield pa.RecordBatch.from_arrays([pa.array(names), pa.nulls(split.size, pa.string()), pa.array(names)],
                                         schema=self.output_schema())


@pytest.mark.parametrize(("text", "java"), [("", 0), ("hello", 99162322), ("split-12", -1926658636),
                                            ("polygenelubricants", -2147483648), ("ä€", 228 * 31 + 0x20AC)])
def test_split_ids_hash_as_javas_string_hash_code(text: str, java: int) -> None:
    assert java_string_hash(text) == java


def test_the_fair_assigner_is_bitsails_hash_modulo_and_never_negative() -> None:
    assigner = FairSplitAssigner()
    assert assigner.assign_to_reader(Part("hello"), 4) == 99162322 % 4
    assert assigner.assign_to_reader(Part("polygenelubricants"), 3) == 0  # Integer.MIN_VALUE & 0x7fffffff


def test_the_size_balanced_assigner_evens_out_bytes_largest_first() -> None:
    planned = plan([Part("a", 10), Part("b", 7), Part("c", 5), Part("d", 3), Part("e", 3)],
                   SizeBalancedSplitAssigner(), 2)
    loads = {reader: sum(p.size for p in parts) for reader, parts in planned.items()}
    assert loads == {0: 13, 1: 15} and [p.name for p in planned[0]] == ["a", "d"]


def test_a_reader_gets_its_planned_splits_and_then_no_more_when_it_registers() -> None:
    host = CoordinatorHost(Parts([Part(f"s{i}") for i in range(6)]), parallelism=2)
    host.start()
    host.register(0)

    first = host.poll(0)
    assert first.no_more_splits and [s.name for s in first.splits] == ["s0", "s2", "s4"]  # sizes balanced
    assert host.poll(0).splits == [] and host.poll(1).no_more_splits  # reader 1 has not registered: nothing yet
    assert host.registered_readers() == {0}


def test_a_new_attempt_of_a_reader_gets_the_failed_attempts_splits_back() -> None:
    parts = [Part(f"s{i}") for i in range(8)]
    host = CoordinatorHost(Parts(parts), parallelism=2)
    host.start()
    host.register(1, attempt=0)
    lost = host.poll(1, attempt=0).splits
    assert lost

    host.register(1, attempt=1)  # attempt 0 failed: Spark runs the task again

    again = host.poll(1, attempt=1)
    assert sorted(s.name for s in again.splits) == sorted(s.name for s in lost) and again.no_more_splits
    assert host.poll(1, attempt=0).splits == []  # the dead attempt gets nothing more
    assert host.assigned()[1] == [s.name for s in again.splits]


def test_nothing_is_given_back_after_a_completed_checkpoint() -> None:
    host = CoordinatorHost(Parts([Part("a"), Part("b")]), parallelism=1)
    host.start()
    host.register(0)
    host.poll(0)
    host.checkpoint_complete(1)

    host.register(0, attempt=1)

    assert host.poll(0, attempt=1).splits == []
    assert host.checkpoint(2).pending == {}


def test_a_restored_coordinator_assigns_what_its_snapshot_had_pending() -> None:
    host = CoordinatorHost(Parts([Part(f"s{i}") for i in range(5)]), parallelism=2)
    host.start()
    host.register(0)
    state = host.checkpoint(1)
    serializer: Serializer[object] = Serializer()
    restored_state = serializer.deserialize(1, serializer.serialize(state))

    restored = CoordinatorHost(Parts([]), parallelism=2, restored=restored_state)
    restored.start()
    restored.register(1)

    assert sorted(s.name for s in restored.poll(1).splits) == sorted(s.name for s in state.pending[1])
    with pytest.raises(ValueError, match="version 2"):
        serializer.deserialize(2, b"")


def test_assigning_after_no_more_splits_is_refused() -> None:
    host = CoordinatorHost(Parts([Part("a")]), parallelism=1)
    host.start()
    host.register(0)
    assert isinstance(host.coordinator, PlannedSplitCoordinator)

    with pytest.raises(RuntimeError, match="no more splits"):
        host.assign_split(0, Part("late"))


def test_reading_in_process_reads_every_split_once_and_counts_progress() -> None:
    parts = [Part(f"s{i}", size=i + 1) for i in range(12)]
    source = Parts(parts)

    table = read_all(source, parallelism=3)

    assert sorted(table["name"].to_pylist()) == sorted(p.name for p in parts for _ in range(p.size))
    host = CoordinatorHost(source, parallelism=2)
    host.start()
    rows = sum(batch.num_rows for reader in range(2) for batch in read_assigned(source, reader, 0, host))
    assert rows == host.progress().rows == sum(p.size for p in parts)
    assert host.progress().splits_done == host.progress().splits_assigned == 12
    host.checkpoint_complete(1)  # the read's output committed: its report still says every split was read
    assert (host.progress().splits_done, host.progress().splits_assigned) == (12, 12)
