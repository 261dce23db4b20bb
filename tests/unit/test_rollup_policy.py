"""Where rows are rolled up: at every persist while that combines rows, else only at the merge."""

from __future__ import annotations

from sluice.task.rollup_policy import RECHECK, PersistMode, PersistRollup


def run(policy: PersistRollup, ratio: float, persists: int, rows: int = 10_000) -> list[PersistMode]:
    """Persists of `rows` rows that combine `ratio` to one; a persist that neither rolls up nor counts its
    keys learns nothing."""
    modes = []
    for _ in range(persists):
        mode = policy.next_persist()
        modes.append(mode)
        policy.measured(rows, int(rows / ratio) if mode.rollup or mode.count_keys else None)
    return modes


ROLLUP = PersistMode(rollup=True, count_keys=False)
AS_READ = PersistMode(rollup=False, count_keys=False)
COUNT_KEYS = PersistMode(rollup=False, count_keys=True)


def test_the_first_persist_counts_its_keys_instead_of_rolling_up() -> None:
    assert PersistRollup().next_persist() == COUNT_KEYS


def test_rows_that_combine_are_rolled_up_at_every_persist_after_the_first() -> None:
    assert run(PersistRollup(), ratio=20.0, persists=10) == [COUNT_KEYS] + [ROLLUP] * 9


def test_rows_that_do_not_combine_are_left_to_the_merge_and_measured_again_every_recheck() -> None:
    modes = run(PersistRollup(), ratio=1.01, persists=1 + 2 * RECHECK)
    assert modes == [COUNT_KEYS] + ([AS_READ] * (RECHECK - 1) + [COUNT_KEYS]) * 2


def test_data_that_starts_combining_is_rolled_up_again_after_a_recheck() -> None:
    policy = PersistRollup()
    run(policy, ratio=1.0, persists=1)
    assert run(policy, ratio=10.0, persists=RECHECK + 2) == [AS_READ] * (RECHECK - 1) + [COUNT_KEYS, ROLLUP, ROLLUP]


def test_data_that_stops_combining_is_left_to_the_merge_from_the_next_persist() -> None:
    policy = PersistRollup()
    run(policy, ratio=10.0, persists=2)
    assert run(policy, ratio=1.0, persists=3) == [ROLLUP, AS_READ, AS_READ]


def test_a_small_persist_does_not_decide() -> None:
    policy = PersistRollup()
    policy.measured(rows_in=50, rows_out=50)
    assert policy.next_persist() == COUNT_KEYS
