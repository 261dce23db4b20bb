"""The TaskLockbox: lock requests in, granted / shared / revoked / denied out, stored as Druid stores them."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Any

import pytest

from sluice.overlord.lockbox import (
    EPOCH_VERSION,
    LockGranularity,
    LockRequestForNewSegment,
    LockResult,
    LockTask,
    ReplaceTaskLock,
    SpecificSegmentLockRequest,
    TaskLock,
    TaskLockbox,
    TaskLockType,
    TimeChunkLockRequest,
    next_version,
)
from sluice.segment.segment import Interval, SegmentId

EXCLUSIVE, SHARED, REPLACE, APPEND = TaskLockType
TIME_CHUNK, SEGMENT = LockGranularity
DAY = Interval.parse("2024-01-01/2024-01-02")
NEXT_DAY = Interval.parse("2024-01-02/2024-01-03")
MORNING = Interval.parse("2024-01-01T00:00/2024-01-01T06:00")
MONTH = Interval.parse("2024-01-01/2024-02-01")
NEXT_MONTH = Interval.parse("2024-02-01/2024-03-01")
NOW = datetime(2024, 3, 1, tzinfo=timezone.utc)
NOW_VERSION = "2024-03-01T00:00:00.000Z"
SEGMENT_VERSION = "2023-12-01T00:00:00.000Z"


class InMemoryLockStorage:
    """druid_tasklocks in a dict: row id -> (task id, lock payload)."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[str, dict[str, Any]]] = {}
        self.next_id = 1
        self.failure: Exception | None = None

    def add_lock(self, task_id: str, payload: dict[str, Any]) -> int:
        if self.failure is not None:
            raise self.failure
        lock_id, self.next_id = self.next_id, self.next_id + 1
        self.rows[lock_id] = (task_id, payload)
        return lock_id

    def remove_lock(self, lock_id: int) -> None:
        del self.rows[lock_id]

    def locks_of_active_tasks(self) -> dict[str, list[tuple[int, dict[str, Any]]]]:
        by_task: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for lock_id, (task_id, payload) in sorted(self.rows.items()):
            by_task.setdefault(task_id, []).append((lock_id, payload))
        return by_task

    def payloads(self, task_id: str) -> list[dict[str, Any]]:
        return [payload for owner, payload in self.rows.values() if owner == task_id]


class Allocator:
    """Records what it was asked and allocates partition numbers 0, 1, ... at the version it is given."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail = fail

    def __call__(self, request: LockRequestForNewSegment, version: str) -> SegmentId | None:
        self.calls.append((request.sequence_name, version))
        return None if self.fail else SegmentId(request.data_source, request.interval, version, len(self.calls) - 1)


def make_lockbox(storage: InMemoryLockStorage | None = None, segment_versions: dict[Interval, str] | None = None,
                 allocator: Allocator | None = None, now: datetime = NOW) -> TaskLockbox:
    """A lockbox whose clock stands still at ``now``; ``segment_versions`` are the wiki segments in storage."""
    versions = segment_versions or {}

    def existing_max_version(data_source: str, interval: Interval) -> str | None:
        found = [v for i, v in versions.items() if data_source == "wiki" and i.overlaps(interval)]
        return max(found, default=None)

    return TaskLockbox(storage or InMemoryLockStorage(), existing_max_version, allocate_segment=allocator,
                       clock=lambda: now)


def task(task_id: str, group: str | None = None, priority: int = 50, data_source: str = "wiki") -> LockTask:
    return LockTask(task_id, group or f"group-{task_id}", data_source, priority)


def acquire(lockbox: TaskLockbox, holder: LockTask, lock_type: TaskLockType, interval: Interval) -> LockResult:
    lockbox.add(holder)
    return lockbox.try_lock(holder, TimeChunkLockRequest.of(holder, lock_type, interval))


# --- the conflict matrix --------------------------------------------------------------------------------

MATRIX = """
held \\ requested  EXCLUSIVE  SHARED  REPLACE  APPEND
EXCLUSIVE          no         no      no       no
SHARED             no         yes     no       no
REPLACE            no         no      no       yes
APPEND             no         no      yes      yes
"""


def matrix_cases() -> list[tuple[TaskLockType, TaskLockType, bool]]:
    header, *rows = [line.split() for line in MATRIX.strip().splitlines()]
    requested = [TaskLockType(name) for name in header[3:]]
    return [(TaskLockType(row[0]), req, cell == "yes") for row in rows for req, cell in zip(requested, row[1:])]


@pytest.mark.parametrize("held, requested, granted", matrix_cases())
def test_conflict_matrix_for_other_groups_on_the_same_interval(held, requested, granted) -> None:
    lockbox = make_lockbox()
    assert acquire(lockbox, task("a"), held, DAY).ok
    result = acquire(lockbox, task("b"), requested, DAY)
    assert result.ok is granted
    if granted:
        assert result.lock.type is requested and not lockbox.find_locks_for_task("a")[0].revoked
    else:
        assert result.lock is None
        assert result.reason == (
            f"{requested.value} lock of group[group-b] on wiki {DAY} at priority 50 conflicts with locks of "
            f"the same or higher priority: {held.value} lock of group[group-a] on {DAY} at priority 50")


@pytest.mark.parametrize("held, requested, _", matrix_cases())
def test_abutting_intervals_and_other_data_sources_never_conflict(held, requested, _) -> None:
    lockbox = make_lockbox()
    assert acquire(lockbox, task("a"), held, DAY).ok
    assert acquire(lockbox, task("b"), requested, NEXT_DAY).ok
    assert acquire(lockbox, task("c", data_source="other"), requested, DAY).ok


def test_an_append_lock_coexists_only_with_a_replace_lock_that_contains_it() -> None:
    lockbox = make_lockbox()
    assert acquire(lockbox, task("compact"), REPLACE, DAY).ok
    assert acquire(lockbox, task("stream"), APPEND, MORNING).ok
    assert not acquire(lockbox, task("stream2"), APPEND, MONTH).ok


@pytest.mark.parametrize("replaced, granted", [(MONTH, True), (MORNING, False)])
def test_a_replace_lock_coexists_only_with_append_locks_it_contains(replaced, granted) -> None:
    lockbox = make_lockbox()
    assert acquire(lockbox, task("stream"), APPEND, DAY).ok
    assert acquire(lockbox, task("compact"), REPLACE, replaced).ok is granted


@pytest.mark.parametrize("lock_type", list(TaskLockType))
def test_tasks_of_one_group_share_one_lock(lock_type) -> None:
    storage = InMemoryLockStorage()
    lockbox = make_lockbox(storage)
    first = acquire(lockbox, task("replica-1", "supervisor"), lock_type, DAY)
    second = acquire(lockbox, task("replica-2", "supervisor"), lock_type, MORNING)
    assert second.ok and second.lock == first.lock and second.lock.interval == DAY
    assert lockbox.find_locks_for_task("replica-1") == lockbox.find_locks_for_task("replica-2") == [first.lock]
    assert storage.payloads("replica-1") == storage.payloads("replica-2") == [first.lock.to_json()]


def test_a_group_cannot_take_a_second_incompatible_lock_over_its_own() -> None:
    lockbox = make_lockbox()
    assert acquire(lockbox, task("a1", "g"), EXCLUSIVE, DAY).ok
    assert not acquire(lockbox, task("a2", "g"), SHARED, DAY).ok
    assert not acquire(lockbox, task("a3", "g"), EXCLUSIVE, MONTH).ok


def test_a_request_two_locks_of_its_group_could_serve_is_denied_as_in_druid() -> None:
    lockbox = make_lockbox()
    assert acquire(lockbox, task("a1", "g"), SHARED, DAY).ok
    assert acquire(lockbox, task("a2", "g"), SHARED, Interval.parse("2024-01-01/2024-01-03")).ok
    result = acquire(lockbox, task("a3", "g"), SHARED, MORNING)
    assert result.reason == f"Task group[g] has multiple locks for the same interval[{MORNING}]"


# --- priorities and revocation --------------------------------------------------------------------------

def test_a_higher_priority_request_revokes_lower_priority_locks_and_their_tasks_learn_of_it() -> None:
    storage = InMemoryLockStorage()
    lockbox = make_lockbox(storage)
    low = task("compaction", priority=25)
    held = acquire(lockbox, low, EXCLUSIVE, DAY).lock
    assert acquire(lockbox, task("realtime", priority=75), EXCLUSIVE, MORNING).ok

    again = lockbox.try_lock(low, TimeChunkLockRequest.of(low, EXCLUSIVE, DAY))
    assert (again.ok, again.revoked) == (False, True)
    assert again.lock == TaskLock(EXCLUSIVE, TIME_CHUNK, "group-compaction", "wiki", DAY, held.version, 25, True)
    assert again.reason == f"EXCLUSIVE lock of group[group-compaction] on {DAY} at priority 25 (revoked) " \
                           "was revoked by a task of higher priority"
    assert storage.payloads("compaction") == [again.lock.to_json()]
    assert lockbox.do_in_critical_section(low, [DAY], lambda valid: valid) is False


def test_equal_priority_never_revokes() -> None:
    lockbox = make_lockbox()
    assert acquire(lockbox, task("a", priority=50), EXCLUSIVE, DAY).ok
    assert not acquire(lockbox, task("b", priority=50), EXCLUSIVE, DAY).ok
    assert not lockbox.find_locks_for_task("a")[0].revoked


def test_revocation_is_all_or_nothing() -> None:
    lockbox = make_lockbox()
    assert acquire(lockbox, task("low", priority=25), EXCLUSIVE, MORNING).ok
    assert acquire(lockbox, task("high", priority=75), EXCLUSIVE, NEXT_DAY).ok
    result = acquire(lockbox, task("mid", priority=50), EXCLUSIVE, Interval.parse("2024-01-01/2024-01-03"))
    assert not result.ok
    assert result.reason.endswith(f"EXCLUSIVE lock of group[group-high] on {NEXT_DAY} at priority 75")
    assert not any(lockbox.find_locks_for_task(t)[0].revoked for t in ("low", "high"))


def test_only_incompatible_locks_are_revoked() -> None:
    lockbox = make_lockbox()
    assert acquire(lockbox, task("reader", priority=25), SHARED, DAY).ok
    assert acquire(lockbox, task("writer", priority=25), APPEND, NEXT_DAY).ok
    assert acquire(lockbox, task("reader2", priority=75), SHARED, Interval.parse("2024-01-01/2024-01-03")).ok
    assert not lockbox.find_locks_for_task("reader")[0].revoked
    assert lockbox.find_locks_for_task("writer")[0].revoked


def test_revoked_locks_block_nobody_but_stay_until_released() -> None:
    lockbox = make_lockbox()
    victim = task("victim", priority=25)
    acquire(lockbox, victim, EXCLUSIVE, DAY)
    winner = task("winner", priority=75)
    acquire(lockbox, winner, EXCLUSIVE, DAY)
    lockbox.remove(winner)
    assert acquire(lockbox, task("late", priority=10), EXCLUSIVE, DAY).ok
    assert lockbox.find_locks_for_task("victim")[0].revoked


# --- versions -------------------------------------------------------------------------------------------

def test_a_new_time_chunk_lock_is_versioned_by_the_clock_and_always_above_earlier_locks() -> None:
    lockbox = make_lockbox()
    assert acquire(lockbox, task("a"), EXCLUSIVE, DAY).lock.version == NOW_VERSION
    assert acquire(lockbox, task("b"), EXCLUSIVE, NEXT_DAY).lock.version == "2024-03-01T00:00:00.001Z"
    assert acquire(lockbox, task("c", priority=90), EXCLUSIVE, DAY).lock.version == "2024-03-01T00:00:00.002Z"


def test_a_new_lock_is_versioned_above_the_segments_already_in_its_chunk() -> None:
    lockbox = make_lockbox(segment_versions={MORNING: "2030-01-01T00:00:00.000Z", NEXT_MONTH: "2040-01-01"})
    assert acquire(lockbox, task("a"), EXCLUSIVE, DAY).lock.version == "2030-01-01T00:00:00.001Z"


@pytest.mark.parametrize("floor, expected", [
    (None, NOW_VERSION),
    ("2024-02-29T23:59:59.999Z", NOW_VERSION),
    (NOW_VERSION, "2024-03-01T00:00:00.001Z"),
    ("2099-12-31T23:59:59.999Z", "2100-01-01T00:00:00.000Z"),
    ("v9", "v9S"),
])
def test_next_version(floor, expected) -> None:
    assert next_version(NOW, floor) == expected


def test_append_locks_have_the_epoch_version_and_a_preferred_version_is_kept() -> None:
    lockbox = make_lockbox(segment_versions={DAY: "2030-01-01T00:00:00.000Z"})
    assert acquire(lockbox, task("a"), APPEND, DAY).lock.version == EPOCH_VERSION
    b = task("b")
    lockbox.add(b)
    assert lockbox.try_lock(b, TimeChunkLockRequest.of(b, EXCLUSIVE, NEXT_DAY, "v1")).lock.version == "v1"


# --- new segments ---------------------------------------------------------------------------------------

def new_segment(holder: LockTask, granularity: LockGranularity, lock_type: TaskLockType,
                interval: Interval = DAY) -> LockRequestForNewSegment:
    return LockRequestForNewSegment.of(holder, granularity, lock_type, interval, sequence_name="seq")


def test_a_new_segment_under_a_time_chunk_lock_gets_the_lock_version() -> None:
    allocator = Allocator()
    lockbox = make_lockbox(allocator=allocator)
    a = task("a")
    lockbox.add(a)
    result = lockbox.try_lock(a, new_segment(a, TIME_CHUNK, EXCLUSIVE))
    assert result.lock.version == NOW_VERSION and result.lock.granularity is TIME_CHUNK
    assert result.new_segment_id == SegmentId("wiki", DAY, NOW_VERSION, 0)
    assert allocator.calls == [("seq", NOW_VERSION)]


@pytest.mark.parametrize("segments, expected", [({}, EPOCH_VERSION), ({DAY: "2023-05-05T00:00:00.000Z"},
                                                                      "2023-05-05T00:00:00.000Z")])
def test_appended_segments_join_the_chunks_latest_version(segments, expected) -> None:
    allocator = Allocator()
    lockbox = make_lockbox(segment_versions=segments, allocator=allocator)
    a = task("a")
    lockbox.add(a)
    result = lockbox.try_lock(a, new_segment(a, TIME_CHUNK, APPEND))
    assert result.lock.version == EPOCH_VERSION
    assert result.new_segment_id.version == expected


def test_a_new_segment_under_a_segment_lock_locks_only_its_partition() -> None:
    allocator = Allocator()
    lockbox = make_lockbox(allocator=allocator)
    a, b = task("a"), task("b")
    lockbox.add(a)
    lockbox.add(b)
    first = lockbox.try_lock(a, new_segment(a, SEGMENT, EXCLUSIVE))
    second = lockbox.try_lock(b, new_segment(b, SEGMENT, EXCLUSIVE))
    assert first.lock == TaskLock(EXCLUSIVE, SEGMENT, "group-a", "wiki", DAY, NOW_VERSION, 50, partition_id=0)
    assert second.ok and second.lock.partition_id == 1
    assert second.new_segment_id == SegmentId("wiki", DAY, "2024-03-01T00:00:00.001Z", 1)


def test_a_failed_allocation_is_a_result_with_a_reason() -> None:
    lockbox = make_lockbox(allocator=Allocator(fail=True))
    a = task("a")
    lockbox.add(a)
    by_segment = lockbox.try_lock(a, new_segment(a, SEGMENT, EXCLUSIVE))
    assert by_segment.lock is None
    assert by_segment.reason == f"Could not allocate a segment of wiki in {DAY} for sequence[seq]"
    by_chunk = lockbox.try_lock(a, new_segment(a, TIME_CHUNK, EXCLUSIVE))
    assert by_chunk.ok and by_chunk.new_segment_id is None and by_chunk.reason == by_segment.reason


@pytest.mark.parametrize("lock_type", [APPEND, REPLACE])
def test_append_and_replace_are_time_chunk_locks_only(lock_type) -> None:
    with pytest.raises(ValueError, match=f"{lock_type.value} locks are time chunk locks only"):
        new_segment(task("a"), SEGMENT, lock_type)
    with pytest.raises(ValueError, match=f"{lock_type.value} locks are time chunk locks only"):
        SpecificSegmentLockRequest.of(task("a"), lock_type, SegmentId("wiki", DAY, "v", 0))


# --- segment locks --------------------------------------------------------------------------------------

def segment_lock(lockbox: TaskLockbox, holder: LockTask, interval: Interval, partition: int) -> LockResult:
    lockbox.add(holder)
    segment = SegmentId("wiki", interval, SEGMENT_VERSION, partition)
    return lockbox.try_lock(holder, SpecificSegmentLockRequest.of(holder, EXCLUSIVE, segment))


def test_segment_locks_conflict_on_the_same_partition_or_an_overlapping_other_interval() -> None:
    lockbox = make_lockbox()
    assert segment_lock(lockbox, task("a"), DAY, 0).lock.to_json()["partitionId"] == 0
    assert segment_lock(lockbox, task("b"), DAY, 1).ok
    assert not segment_lock(lockbox, task("c"), DAY, 0).ok
    assert not segment_lock(lockbox, task("d"), MORNING, 5).ok
    assert not acquire(lockbox, task("e"), EXCLUSIVE, DAY).ok
    assert segment_lock(lockbox, task("f"), NEXT_DAY, 0).ok


def test_one_group_may_hold_a_time_chunk_and_a_segment_lock_on_one_interval_only() -> None:
    lockbox = make_lockbox()
    assert acquire(lockbox, task("old", "g"), EXCLUSIVE, DAY).ok
    assert not segment_lock(lockbox, task("new", "g"), MORNING, 0).ok
    assert segment_lock(lockbox, task("new", "g"), DAY, 0).ok


def test_a_group_shares_a_segment_lock_only_for_the_same_partition() -> None:
    lockbox = make_lockbox()
    first = segment_lock(lockbox, task("a1", "g"), DAY, 0).lock
    assert segment_lock(lockbox, task("a2", "g"), DAY, 0).lock is first
    assert segment_lock(lockbox, task("a3", "g"), DAY, 1).lock.partition_id == 1


def test_unlock_releases_the_lock_of_that_interval_and_partition_only() -> None:
    storage = InMemoryLockStorage()
    lockbox = make_lockbox(storage)
    a = task("a")
    segment_lock(lockbox, a, DAY, 0)
    segment_lock(lockbox, a, DAY, 1)
    lockbox.unlock(a, DAY)
    lockbox.unlock(a, MORNING, partition_id=0)
    assert len(lockbox.find_locks_for_task("a")) == 2
    lockbox.unlock(a, DAY, partition_id=0)
    assert [lock.partition_id for lock in lockbox.find_locks_for_task("a")] == [1]
    assert [p["partitionId"] for p in storage.payloads("a")] == [1]


# --- releasing ------------------------------------------------------------------------------------------

def test_a_lock_outlives_one_of_its_tasks_and_goes_with_the_last() -> None:
    storage = InMemoryLockStorage()
    lockbox = make_lockbox(storage)
    one, two = task("one", "g"), task("two", "g")
    acquire(lockbox, one, EXCLUSIVE, DAY)
    acquire(lockbox, two, EXCLUSIVE, DAY)
    lockbox.unlock(one, DAY)
    assert not acquire(lockbox, task("other"), EXCLUSIVE, DAY).ok
    lockbox.remove(two)
    assert storage.locks_of_active_tasks() == {}
    assert acquire(lockbox, task("other"), EXCLUSIVE, DAY).ok


def test_a_removed_task_gets_no_lock() -> None:
    lockbox = make_lockbox()
    a = task("a")
    acquire(lockbox, a, EXCLUSIVE, DAY)
    lockbox.remove(a)
    with pytest.raises(ValueError, match=r"Unable to grant lock to inactive Task \[a\]"):
        lockbox.try_lock(a, TimeChunkLockRequest.of(a, EXCLUSIVE, DAY))


def test_a_request_must_be_the_tasks_own() -> None:
    lockbox = make_lockbox()
    a = task("a", priority=50)
    lockbox.add(a)
    with pytest.raises(ValueError, match=r"lock request priority\[75\] is different from task\[a\] priority\[50\]"):
        lockbox.try_lock(a, TimeChunkLockRequest(EXCLUSIVE, "group-a", "wiki", DAY, 75))


def test_release_all_of_group() -> None:
    storage = InMemoryLockStorage()
    lockbox = make_lockbox(storage)
    acquire(lockbox, task("s1", "sup"), APPEND, DAY)
    acquire(lockbox, task("s2", "sup"), APPEND, NEXT_DAY)
    acquire(lockbox, task("x"), SHARED, NEXT_MONTH)
    assert [t.id for t in lockbox.release_all_of_group("sup")] == ["s1", "s2"]
    assert list(storage.locks_of_active_tasks()) == ["x"]
    assert acquire(lockbox, task("y"), EXCLUSIVE, Interval.parse("2024-01-01/2024-01-03")).ok


def test_a_wider_append_lock_of_a_group_replaces_its_narrower_ones() -> None:
    storage = InMemoryLockStorage()
    lockbox = make_lockbox(storage)
    stream = task("stream")
    acquire(lockbox, stream, APPEND, DAY)
    acquire(lockbox, stream, APPEND, MONTH)
    assert [lock.interval for lock in lockbox.find_locks_for_task("stream")] == [MONTH]
    assert [p["interval"] for p in storage.payloads("stream")] == [str(MONTH)]


def test_a_storage_failure_grants_nothing() -> None:
    storage = InMemoryLockStorage()
    lockbox = make_lockbox(storage)
    storage.failure = OSError("disk full")
    result = acquire(lockbox, task("a"), EXCLUSIVE, DAY)
    assert (result.lock, result.reason) == (None, "Failed to persist lock in storage: disk full")
    storage.failure = None
    assert lockbox.find_locks_for_task("a") == []
    assert acquire(lockbox, task("b"), EXCLUSIVE, DAY).ok


# --- waiting --------------------------------------------------------------------------------------------

def test_lock_waits_until_the_conflicting_lock_is_released() -> None:
    lockbox = make_lockbox()
    holder, waiter = task("holder"), task("waiter")
    acquire(lockbox, holder, EXCLUSIVE, DAY)
    lockbox.add(waiter)
    release = threading.Timer(0.05, lockbox.remove, [holder])
    started = time.monotonic()
    release.start()
    result = lockbox.lock(waiter, TimeChunkLockRequest.of(waiter, EXCLUSIVE, DAY), timeout=5)
    release.join()
    assert result.ok and lockbox.find_locks_for_task("waiter") == [result.lock]
    assert time.monotonic() - started < 2  # woken by the release, not by the timeout


def test_lock_gives_up_after_its_timeout() -> None:
    lockbox = make_lockbox()
    acquire(lockbox, task("holder"), EXCLUSIVE, DAY)
    waiter = task("waiter")
    lockbox.add(waiter)
    started = time.monotonic()
    result = lockbox.lock(waiter, TimeChunkLockRequest.of(waiter, EXCLUSIVE, DAY), timeout=0.05)
    assert not result.ok and "conflicts with locks" in result.reason
    assert 0.05 <= time.monotonic() - started < 2


def test_lock_returns_a_revoked_lock_at_once() -> None:
    lockbox = make_lockbox()
    low = task("low", priority=25)
    acquire(lockbox, low, EXCLUSIVE, DAY)
    acquire(lockbox, task("high", priority=75), EXCLUSIVE, DAY)
    started = time.monotonic()
    assert lockbox.lock(low, TimeChunkLockRequest.of(low, EXCLUSIVE, DAY), timeout=5).revoked
    assert time.monotonic() - started < 1


# --- publishing under a lock ----------------------------------------------------------------------------

def test_the_critical_section_sees_whether_the_task_still_holds_its_locks() -> None:
    lockbox = make_lockbox()
    a = task("a")
    acquire(lockbox, a, EXCLUSIVE, DAY)
    assert lockbox.do_in_critical_section(a, [MORNING, DAY], lambda valid: valid) is True
    assert lockbox.do_in_critical_section(a, [MONTH], lambda valid: valid) is False


def test_appends_find_the_replace_lock_covering_them() -> None:
    lockbox = make_lockbox()
    replace = acquire(lockbox, task("compact"), REPLACE, MONTH).lock
    assert acquire(lockbox, task("stream"), APPEND, DAY).ok
    assert lockbox.find_replace_lock_covering("wiki", DAY) == ReplaceTaskLock("compact", MONTH, replace.version)
    assert lockbox.find_replace_lock_covering("wiki", NEXT_MONTH) is None


# --- persistence ----------------------------------------------------------------------------------------

def test_lock_json_is_druids() -> None:
    chunk = TaskLock(APPEND, TIME_CHUNK, "g", "wiki", DAY, EPOCH_VERSION, 75)
    segment = TaskLock(EXCLUSIVE, SEGMENT, "g", "wiki", DAY, "v1", 50, revoked=True, partition_id=3)
    assert chunk.to_json() == {
        "granularity": "timeChunk", "type": "APPEND", "groupId": "g", "dataSource": "wiki",
        "interval": "2024-01-01T00:00:00.000Z/2024-01-02T00:00:00.000Z", "version": EPOCH_VERSION,
        "priority": 75, "revoked": False}
    assert segment.to_json()["granularity"] == "segment" and segment.to_json()["partitionId"] == 3
    assert [TaskLock.from_json(lock.to_json()) for lock in (chunk, segment)] == [chunk, segment]


def test_locks_written_before_granularity_type_and_priority_existed_still_read() -> None:
    old = {"groupId": "g", "dataSource": "wiki", "interval": str(DAY), "version": "v1", "revoked": False}
    assert TaskLock.from_json(old, default_priority=75) == TaskLock(EXCLUSIVE, TIME_CHUNK, "g", "wiki", DAY, "v1", 75)
    with pytest.raises(ValueError, match="has no priority"):
        TaskLock.from_json(old)


def test_sync_reacquires_the_stored_locks_of_active_tasks() -> None:
    storage = InMemoryLockStorage()
    before = make_lockbox(storage)
    tasks = [task("r1", "sup", 75), task("r2", "sup", 75), task("reader", priority=25), task("seg")]
    victim = task("victim", priority=10)
    acquire(before, victim, EXCLUSIVE, MONTH)
    acquire(before, tasks[0], EXCLUSIVE, DAY)  # revokes the victim's lock
    acquire(before, tasks[1], EXCLUSIVE, MORNING)
    acquire(before, tasks[2], SHARED, NEXT_DAY)
    segment_lock(before, tasks[3], NEXT_MONTH, 2)
    tasks.append(victim)

    after = make_lockbox(storage, now=datetime(2020, 1, 1, tzinfo=timezone.utc))
    assert after.sync(tasks) == []
    for t in tasks:
        assert after.find_locks_for_task(t.id) == before.find_locks_for_task(t.id)
    assert after.find_locks_for_task("victim")[0].revoked
    newest = max(lock.version for t in tasks for lock in after.find_locks_for_task(t.id))
    assert acquire(after, task("new"), EXCLUSIVE, Interval.parse("2025-01-01/2025-01-02")).lock.version > newest
    after.remove(tasks[0])
    after.remove(tasks[1])
    assert "r1" not in storage.locks_of_active_tasks() and "r2" not in storage.locks_of_active_tasks()


def stored_lock(storage: InMemoryLockStorage, task_id: str, group: str, interval: Interval, version: str,
                priority: int = 50) -> None:
    storage.add_lock(task_id, TaskLock(EXCLUSIVE, TIME_CHUNK, group, "wiki", interval, version, priority).to_json())


def test_sync_fails_the_whole_group_of_a_task_whose_lock_cannot_be_reacquired() -> None:
    storage = InMemoryLockStorage()
    stored_lock(storage, "a", "ga", DAY, "v1")
    stored_lock(storage, "b1", "gb", MORNING, "v2")
    stored_lock(storage, "b2", "gb", NEXT_DAY, "v3")
    a, b1, b2, b3 = task("a", "ga"), task("b1", "gb"), task("b2", "gb"), task("b3", "gb")
    lockbox = make_lockbox(storage)

    assert lockbox.sync([a, b1, b2, b3]) == [b1, b2, b3]
    assert list(storage.locks_of_active_tasks()) == ["a"]
    assert lockbox.find_locks_for_task("b2") == []
    with pytest.raises(ValueError, match="inactive"):
        lockbox.try_lock(b3, TimeChunkLockRequest.of(b3, EXCLUSIVE, NEXT_MONTH))
    assert acquire(lockbox, task("c"), EXCLUSIVE, NEXT_DAY).ok


@pytest.mark.parametrize("payload_change", [{"priority": 25}, {"groupId": "someone-else"}, {"interval": "junk"}])
def test_sync_fails_a_task_whose_stored_lock_does_not_match_it(payload_change) -> None:
    storage = InMemoryLockStorage()
    payload = TaskLock(EXCLUSIVE, TIME_CHUNK, "ga", "wiki", DAY, "v1", 50).to_json() | payload_change
    storage.add_lock("a", payload)
    a = task("a", "ga")
    assert make_lockbox(storage).sync([a]) == [a]
    assert storage.rows == {}


def test_sync_keeps_a_revoked_lock_revoked_whatever_was_reacquired_before_it() -> None:
    storage = InMemoryLockStorage()
    lockbox = make_lockbox(storage)
    low, stream = task("low", priority=25), task("stream", priority=50)
    acquire(lockbox, low, EXCLUSIVE, DAY)
    acquire(lockbox, stream, APPEND, DAY)  # revokes low's lock; its epoch version sorts before it on sync
    restarted = make_lockbox(storage)
    assert restarted.sync([low, stream]) == []
    assert [lock.revoked for lock in restarted.find_locks_for_task("low")] == [True]
    assert [lock.revoked for lock in restarted.find_locks_for_task("stream")] == [False]


def test_a_revoked_lock_of_a_group_does_not_take_its_other_tasks_down() -> None:
    storage = InMemoryLockStorage()
    lockbox = make_lockbox(storage)
    one, two = task("one", "stream", 25), task("two", "stream", 25)
    acquire(lockbox, one, APPEND, DAY)
    acquire(lockbox, two, APPEND, MONTH)
    batch = task("batch", priority=50)
    assert acquire(lockbox, batch, EXCLUSIVE, NEXT_DAY).ok  # revokes the MONTH lock
    restarted = make_lockbox(storage)
    assert restarted.sync([one, two, batch]) == []
    for box in (lockbox, restarted):
        assert [lock.revoked for lock in box.find_locks_for_task("one")] == [False]
        assert box.try_lock(one, TimeChunkLockRequest.of(one, APPEND, DAY)).ok
        assert box.try_lock(two, TimeChunkLockRequest.of(two, APPEND, MONTH)).revoked
