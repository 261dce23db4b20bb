"""Which worker a pending task goes to (Druid's equalDistribution and fillCapacity)."""

from __future__ import annotations

import pytest

from sluice.overlord.worker_select import WorkerInfo, equal_distribution, fill_capacity, strategy

A = WorkerInfo("10.0.0.1", 8091, capacity=3, used=1)
B = WorkerInfo("10.0.0.2", 8091, capacity=3, used=2)
FULL = WorkerInfo("10.0.0.3", 8091, capacity=2, used=2)


def test_equal_distribution_picks_the_worker_with_most_free_slots() -> None:
    assert equal_distribution([B, A, FULL]) == A


def test_fill_capacity_fills_the_busiest_worker_that_has_a_slot() -> None:
    assert fill_capacity([A, B, FULL]) == B


@pytest.mark.parametrize("select", [equal_distribution, fill_capacity])
def test_no_worker_with_a_free_slot_means_the_task_stays_pending(select) -> None:
    assert select([FULL]) is None
    assert select([]) is None


def test_ties_go_to_the_same_worker_every_time() -> None:
    twin = WorkerInfo("10.0.0.0", 8091, capacity=3, used=1)
    assert equal_distribution([A, twin]) == twin == equal_distribution([twin, A])


def test_strategies_are_named_as_in_druid() -> None:
    assert strategy("fillCapacity") is fill_capacity
    with pytest.raises(ValueError, match="unknown worker select strategy 'random'"):
        strategy("random")
