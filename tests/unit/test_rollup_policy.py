"""Where rows are rolled up: at every persist while that combines rows, else only at the merge."""

from __future__ import annotations

from sluice.task.rollup_policy import RECHECK, PersistRollup


def run(policy: PersistRollup, ratio: float, persists: int, rows: int = 10_000) -> list[bool]:
    decisions = []
    for _ in range(persists):
        rolls_up = policy.next_persist_rolls_up()
        decisions.append(rolls_up)
        policy.measured(rolls_up, rows, int(rows / ratio) if rolls_up else rows)
    return decisions


def test_rows_that_combine_are_rolled_up_at_every_persist() -> None:
    assert run(PersistRollup(), ratio=20.0, persists=10) == [True] * 10


def test_rows_that_do_not_combine_are_left_to_the_merge_and_measured_again_every_recheck() -> None:
    decisions = run(PersistRollup(), ratio=1.01, persists=1 + 2 * RECHECK)
    assert decisions[0] is True  # the first persist measures
    assert decisions[1:] == ([False] * (RECHECK - 1) + [True]) * 2


def test_data_that_starts_combining_is_rolled_up_again_after_a_recheck() -> None:
    policy = PersistRollup()
    run(policy, ratio=1.0, persists=1)
    assert run(policy, ratio=10.0, persists=RECHECK + 2) == [False] * (RECHECK - 1) + [True, True, True]


def test_a_small_persist_does_not_decide() -> None:
    policy = PersistRollup()
    policy.measured(True, rows_in=50, rows_out=50)
    assert policy.next_persist_rolls_up()
