"""Properties of the TaskLockbox over random sequences of lock requests and task removals."""

from __future__ import annotations

import dataclasses
from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.overlord.lockbox import LockTask, TaskLock, TaskLockType, TimeChunkLockRequest
from sluice.segment.segment import Interval
from tests.unit.test_lockbox import InMemoryLockStorage, make_lockbox

EXCLUSIVE, SHARED, REPLACE, APPEND = TaskLockType
TASKS = [LockTask(f"t{i}", f"g{i // 2}", "wiki", priority) for i, priority in enumerate((25, 25, 50, 50, 75, 75))]
INTERVALS = [Interval.parse(text) for text in (
    "2024-01-01/2024-01-02", "2024-01-02/2024-01-03", "2024-01-01T00:00/2024-01-01T06:00",
    "2024-01-01/2024-02-01", "2024-01-01/2024-01-03")]

lock_op = st.tuples(st.just("lock"), st.integers(0, len(TASKS) - 1), st.sampled_from(list(TaskLockType)),
                    st.integers(0, len(INTERVALS) - 1))
remove_op = st.tuples(st.just("remove"), st.integers(0, len(TASKS) - 1))


def may_coexist(a: TaskLock, b: TaskLock) -> bool:
    """Two live locks of different groups on overlapping intervals, as the conflict rules allow them."""
    kinds = {a.type, b.type}
    if kinds in ({SHARED}, {APPEND}):
        return True
    if kinds == {APPEND, REPLACE}:
        append, replace = (a, b) if a.type is APPEND else (b, a)
        return replace.interval.contains(append.interval)
    return False


def held(lockbox) -> set[tuple[str, TaskLock]]:
    return {(t.id, lock) for t in TASKS for lock in lockbox.find_locks_for_task(t.id)}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(lock_op, remove_op), max_size=30))
def test_random_histories_keep_the_lock_rules(ops) -> None:
    storage = InMemoryLockStorage()
    lockbox = make_lockbox(storage)
    versions_seen: set[str] = set()
    for op in ops:
        task = TASKS[op[1]]
        if op[0] == "remove":
            lockbox.remove(task)
        else:
            lockbox.add(task)
            result = lockbox.try_lock(task, TimeChunkLockRequest.of(task, op[2], INTERVALS[op[3]]))
            # A fresh version is above every version handed out before it.
            if result.ok and op[2] is not APPEND and result.lock.version not in versions_seen:
                assert all(result.lock.version > v for v in versions_seen)
            if result.lock is not None:
                versions_seen.add(result.lock.version)

        live = {lock for _, lock in held(lockbox) if not lock.revoked}
        for a, b in combinations(live, 2):
            if a.group_id != b.group_id and a.interval.overlaps(b.interval):
                assert may_coexist(a, b), (a, b)
        assert sorted((t, str(p)) for t, p in storage.rows.values()) == \
            sorted((t, str(lock.to_json())) for t, lock in held(lockbox))

    # An overlord restart fails nobody and gives every task a lock of the same kind covering what it held
    # (a task may come back sharing its group's wider lock, as a task reusing it would have).
    restarted = make_lockbox(storage)
    assert restarted.sync(TASKS) == []
    for task_id, before in held(lockbox):
        assert any(covers(after, before) for after in restarted.find_locks_for_task(task_id)), (task_id, before)


def covers(after: TaskLock, before: TaskLock) -> bool:
    return (after.interval.contains(before.interval)
            and dataclasses.replace(after, interval=before.interval) == before)
