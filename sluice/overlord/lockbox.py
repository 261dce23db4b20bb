"""Druid's TaskLockbox: which task holds which time chunk or segment, and at which version.

Locks and versions are one mechanism. A task writes a time chunk only under a lock, and a time-chunk lock's
version is the version its segments get, so the segments of a newer lock overshadow those of an older one in
the timeline. Tasks of one groupId (all replicas and generations of one supervisor) share their locks, which
is why every append of a stream lands in one version of a chunk.

The rules are plain functions over frozen dataclasses: `TaskLock.conflicts`, `reusable_for`, `compatible`,
`decide` (reuse, create, revoke or deny) and `next_version`. `TaskLockbox` keeps the state under one lock and
reaches the outside only through what it is given: `LockStorage` (the druid_tasklocks table), a lookup of
the highest segment version in a chunk, a segment allocator and a clock.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from enum import Enum
from typing import Any, Callable, ClassVar, Iterable, Protocol, Sequence, TypeVar

from sluice.segment.segment import Interval, SegmentId
from sluice.timestamps import format_timestamp, parse_timestamp

log = logging.getLogger(__name__)

#: The version of every APPEND lock (Druid's ``DateTimes.EPOCH``): an appending task does not choose the
#: version of its segments, it joins the version the chunk already has (see `allocation_version`).
EPOCH_VERSION = "1970-01-01T00:00:00.000Z"

T = TypeVar("T")


class TaskLockType(str, Enum):
    #: At most one per interval; coexists with no other overlapping lock.
    EXCLUSIVE = "EXCLUSIVE"
    #: Any number per interval; coexists only with other SHARED locks.
    SHARED = "SHARED"
    #: At most one per interval; coexists only with APPEND locks whose intervals it contains.
    REPLACE = "REPLACE"
    #: Any number; coexists with other APPEND locks and with one REPLACE lock that contains its interval.
    APPEND = "APPEND"


class LockGranularity(str, Enum):
    """The value is the JSON type name Druid writes in a lock's ``granularity`` field."""

    TIME_CHUNK = "timeChunk"
    SEGMENT = "segment"


@dataclass(frozen=True)
class LockTask:
    """What the lockbox needs to know of a task."""

    id: str
    group_id: str
    data_source: str
    priority: int


@dataclass(frozen=True)
class TimeChunkLockRequest:
    """A lock on whole time chunks: every segment of the data source in the interval."""

    type: TaskLockType
    group_id: str
    data_source: str
    interval: Interval
    priority: int
    #: Lock at this version instead of a fresh one (a stored lock being re-acquired).
    preferred_version: str | None = None
    revoked: bool = False
    granularity: ClassVar[LockGranularity] = LockGranularity.TIME_CHUNK

    def __post_init__(self) -> None:
        _check_interval(self.interval)

    @classmethod
    def of(cls, task: LockTask, lock_type: TaskLockType, interval: Interval,
           preferred_version: str | None = None) -> TimeChunkLockRequest:
        return cls(lock_type, task.group_id, task.data_source, interval, task.priority, preferred_version)


@dataclass(frozen=True)
class SpecificSegmentLockRequest:
    """A lock on one existing (or just allocated) segment: its interval, version and partition."""

    type: TaskLockType
    group_id: str
    data_source: str
    interval: Interval
    version: str
    partition_id: int
    priority: int
    revoked: bool = False
    granularity: ClassVar[LockGranularity] = LockGranularity.SEGMENT

    def __post_init__(self) -> None:
        _check_interval(self.interval)
        _check_segment_lock_type(self.type)

    @classmethod
    def of(cls, task: LockTask, lock_type: TaskLockType, segment: SegmentId) -> SpecificSegmentLockRequest:
        return cls(lock_type, task.group_id, task.data_source, segment.interval, segment.version,
                   segment.partition_num, task.priority)


@dataclass(frozen=True)
class LockRequestForNewSegment:
    """Lock what a new segment needs and allocate it in one step (Druid's segment allocation path).

    With TIME_CHUNK granularity the chunk is locked first and the segment allocated at the lock's version;
    with SEGMENT granularity the segment is allocated first and then only its partition is locked.
    """

    granularity: LockGranularity
    type: TaskLockType
    group_id: str
    data_source: str
    interval: Interval
    priority: int
    sequence_name: str
    previous_segment_id: str | None = None
    skip_segment_lineage_check: bool = True

    def __post_init__(self) -> None:
        _check_interval(self.interval)
        if self.granularity is LockGranularity.SEGMENT:
            _check_segment_lock_type(self.type)

    @classmethod
    def of(cls, task: LockTask, granularity: LockGranularity, lock_type: TaskLockType, interval: Interval,
           sequence_name: str, previous_segment_id: str | None = None,
           skip_segment_lineage_check: bool = True) -> LockRequestForNewSegment:
        return cls(granularity, lock_type, task.group_id, task.data_source, interval, task.priority,
                   sequence_name, previous_segment_id, skip_segment_lineage_check)


#: The requests the conflict rules decide on; a LockRequestForNewSegment becomes one of these first.
LockRequest = TimeChunkLockRequest | SpecificSegmentLockRequest
AnyLockRequest = LockRequest | LockRequestForNewSegment


def _check_interval(interval: Interval) -> None:
    if interval.start == interval.end:
        raise ValueError(f"lock interval {interval} is empty")


def _check_segment_lock_type(lock_type: TaskLockType) -> None:
    if lock_type in (TaskLockType.APPEND, TaskLockType.REPLACE):
        raise ValueError(f"{lock_type.value} locks are time chunk locks only; a segment lock must be "
                         "EXCLUSIVE or SHARED")


@dataclass(frozen=True)
class TaskLock:
    """Druid's TimeChunkLock and SegmentLock in one type; ``partition_id`` is set exactly for SEGMENT locks."""

    type: TaskLockType
    granularity: LockGranularity
    group_id: str
    data_source: str
    interval: Interval
    version: str
    priority: int
    #: A revoked lock stays in the lockbox (and in storage) until its tasks release it, so that they learn
    #: of the revocation when they ask for it again or try to publish under it.
    revoked: bool = False
    partition_id: int | None = None

    def __post_init__(self) -> None:
        if (self.granularity is LockGranularity.SEGMENT) != (self.partition_id is not None):
            raise ValueError(f"a {self.granularity.value} lock {'needs' if self.partition_id is None else 'has no'}"
                             " partitionId")

    def conflicts(self, request: LockRequest) -> bool:
        """Whether the two lock the same data: overlapping intervals, or for two segment locks on one
        interval, the same partition."""
        if self.data_source != request.data_source:
            return False
        if (self.granularity is LockGranularity.SEGMENT and isinstance(request, SpecificSegmentLockRequest)
                and self.interval == request.interval):
            return self.partition_id == request.partition_id
        return self.interval.overlaps(request.interval)

    def to_json(self) -> dict[str, Any]:
        """Druid's TaskLock JSON, as stored in druid_tasklocks.lock_payload."""
        payload: dict[str, Any] = {
            "granularity": self.granularity.value,
            "type": self.type.value,
            "groupId": self.group_id,
            "dataSource": self.data_source,
            "interval": str(self.interval),
            "version": self.version,
            "priority": self.priority,
            "revoked": self.revoked,
        }
        if self.partition_id is not None:
            payload["partitionId"] = self.partition_id
        return payload

    @classmethod
    def from_json(cls, payload: dict[str, Any], default_priority: int | None = None) -> TaskLock:
        """Read Druid's TaskLock JSON. As in Druid, a lock without ``granularity`` is a time-chunk lock and
        one without ``type`` is EXCLUSIVE (locks written before those fields existed); a lock without
        ``priority`` takes its task's priority, passed as ``default_priority``."""
        priority = payload.get("priority", default_priority)
        if priority is None:
            raise ValueError(f"lock payload {payload} has no priority")
        return cls(
            type=TaskLockType(payload.get("type", TaskLockType.EXCLUSIVE.value)),
            granularity=LockGranularity(payload.get("granularity", LockGranularity.TIME_CHUNK.value)),
            group_id=payload["groupId"],
            data_source=payload["dataSource"],
            interval=Interval.parse(payload["interval"]),
            version=payload["version"],
            priority=int(priority),
            revoked=bool(payload.get("revoked", False)),
            partition_id=payload.get("partitionId"),
        )

    def describe(self) -> str:
        text = f"{self.type.value} lock of group[{self.group_id}] on {self.interval}"
        if self.partition_id is not None:
            text += f" partition {self.partition_id}"
        return f"{text} at priority {self.priority}" + (" (revoked)" if self.revoked else "")


def reusable_for(lock: TaskLock, request: LockRequest) -> bool:
    """Whether a task of the request's group can share this lock instead of taking a new one: same type
    and granularity, same group, and the lock covers the request (for segment locks, the same partition)."""
    if lock.type is not request.type or lock.granularity is not request.granularity:
        return False
    if lock.group_id != request.group_id or not lock.interval.contains(request.interval):
        return False
    if isinstance(request, SpecificSegmentLockRequest):
        return lock.type is TaskLockType.EXCLUSIVE and lock.partition_id == request.partition_id
    return True


def compatible(held: TaskLock, request: LockRequest) -> bool:
    """Whether a held lock that conflicts with the request may stay as it is when the request is granted."""
    if request.type is TaskLockType.SHARED:
        return held.type is TaskLockType.SHARED
    if request.type is TaskLockType.REPLACE:
        return held.type is TaskLockType.APPEND and request.interval.contains(held.interval)
    if request.type is TaskLockType.APPEND:
        return held.type is TaskLockType.APPEND or (
            held.type is TaskLockType.REPLACE and held.interval.contains(request.interval))
    return False


@dataclass(frozen=True)
class LockDecision:
    """What to do with a request: share ``reuse``, or (unless ``denied``) create a new lock after revoking
    ``revoke``."""

    reuse: TaskLock | None = None
    revoke: tuple[TaskLock, ...] = ()
    denied: str | None = None


def decide(overlapping: Sequence[TaskLock], request: LockRequest) -> LockDecision:
    """Druid's createOrFindLockPosse as a pure decision over the locks that overlap the request.

    Revocation is all or nothing: the request revokes the incompatible locks only when every one of them has
    a lower priority. Revoked locks neither block nor get revoked again. Tasks of one group may hold a time
    chunk and a segment lock on the same interval (Druid's allowance for rolling updates).

    Unlike Druid, a revoked lock re-acquired on sync comes back as it was, neither blocked nor shared: it
    grants nothing, and APPEND locks (epoch version) re-acquired before it must not fail its group.
    """
    if request.revoked:
        return LockDecision()
    conflicting = [lock for lock in overlapping if lock.conflicts(request)]
    if not conflicting:
        return LockDecision()
    reusable = [lock for lock in overlapping if reusable_for(lock, request)]
    if len(reusable) == 1:
        return LockDecision(reuse=reusable[0])
    if reusable:
        return LockDecision(denied=f"Task group[{request.group_id}] has multiple locks for the same "
                                   f"interval[{request.interval}]")
    incompatible = [lock for lock in conflicting if not lock.revoked and not compatible(lock, request)]
    blocking = [lock for lock in incompatible if lock.priority >= request.priority]
    if not blocking:
        return LockDecision(revoke=tuple(incompatible))
    if all(lock.granularity is not request.granularity and lock.group_id == request.group_id
           and lock.interval == request.interval for lock in conflicting):
        return LockDecision()
    return LockDecision(denied=(
        f"{request.type.value} lock of group[{request.group_id}] on {request.data_source} {request.interval} "
        f"at priority {request.priority} conflicts with locks of the same or higher priority: "
        + "; ".join(lock.describe() for lock in blocking)))


def next_version(now: datetime, floor: str | None) -> str:
    """The version of a new lock: the clock, as Druid does, but always above ``floor`` (the highest version
    already in the chunk or already handed out), so a new lock overshadows everything before it even when
    the clock is behind."""
    candidate = format_timestamp(now)
    if floor is None or candidate > floor:
        return candidate
    try:
        bumped = format_timestamp(parse_timestamp(floor) + timedelta(milliseconds=1))
    except ValueError:
        bumped = floor
    return bumped if bumped > floor else floor + "S"


def allocation_version(lock: TaskLock, existing_max_version: str | None) -> str:
    """The version of a segment allocated under a time-chunk lock. An APPEND lock's segments join the
    chunk's latest committed version (Druid #15459), and only an empty chunk gets the lock's epoch version;
    a REPLACE lock covering them upgrades them to its own version when it commits (`find_replace_lock_covering`).
    Every other lock allocates at its own version."""
    if lock.type is TaskLockType.APPEND and existing_max_version is not None:
        return existing_max_version
    return lock.version


@dataclass(frozen=True)
class LockResult:
    """Druid's LockResult. A lock that cannot be had is a value with a reason, not an exception.

    For a LockRequestForNewSegment, ``new_segment_id`` is the allocated segment; it is None with ``reason``
    set when the allocator could not allocate one (the time-chunk lock, if granted, is kept, as in Druid).
    """

    lock: TaskLock | None
    new_segment_id: SegmentId | None = None
    revoked: bool = False
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.lock is not None and not self.revoked


@dataclass(frozen=True)
class ReplaceTaskLock:
    """A non-revoked REPLACE lock and the one task holding it: appends it covers are upgraded to its
    version when it commits."""

    supervisor_task_id: str
    interval: Interval
    version: str


class LockStorage(Protocol):
    """The druid_tasklocks table: one row per (task, lock), the lock as Druid's TaskLock JSON."""

    def add_lock(self, task_id: str, payload: dict[str, Any]) -> int: ...
    def remove_lock(self, lock_id: int) -> None: ...
    def locks_of_active_tasks(self) -> dict[str, list[tuple[int, dict[str, Any]]]]: ...


#: The highest version of any used segment of a data source overlapping an interval, or None.
MaxVersionLookup = Callable[[str, Interval], str | None]
#: Allocates a pending segment for the request at the given version; None when it cannot.
SegmentAllocator = Callable[[LockRequestForNewSegment, str], SegmentId | None]


@dataclass(eq=False)
class TaskLockPosse:
    """One lock and the tasks sharing it, each with its druid_tasklocks row id (the tasks are one group)."""

    lock: TaskLock
    lock_ids: dict[str, int] = field(default_factory=dict)

    def supersedes(self, other: TaskLockPosse) -> bool:
        """An APPEND time-chunk lock of a group makes its smaller APPEND locks redundant; this happens when a
        coarser REPLACE committed and the appending task allocates over the wider interval."""
        mine, theirs = self.lock, other.lock
        return (not mine.revoked and mine.type is theirs.type is TaskLockType.APPEND
                and mine.granularity is theirs.granularity is LockGranularity.TIME_CHUNK
                and mine.group_id == theirs.group_id and mine.version >= theirs.version
                and mine.interval != theirs.interval and mine.interval.contains(theirs.interval))


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


def _not_of_task(task: LockTask, claim: AnyLockRequest | TaskLock) -> str | None:
    """Why a request or stored lock is not the task's own (a task locks only for its group, data source and
    priority), or None."""
    for name, mine, theirs in (("groupId", task.group_id, claim.group_id),
                               ("dataSource", task.data_source, claim.data_source),
                               ("priority", task.priority, claim.priority)):
        if mine != theirs:
            return f"{name}[{theirs}] is different from task[{task.id}] {name}[{mine}]"
    return None


class TaskLockbox:
    """Druid's TaskLockbox: grants, shares, revokes and releases task locks and stores them.

    Only active tasks (`add`, or `sync` on overlord start) get locks. Every method is atomic under one
    lock; `lock` waits on it for conflicting locks to go away.
    """

    def __init__(self, storage: LockStorage, existing_max_version: MaxVersionLookup, *,
                 allocate_segment: SegmentAllocator | None = None,
                 clock: Callable[[], datetime] = _utc_now) -> None:
        self._storage = storage
        self._existing_max_version = existing_max_version
        self._allocate_segment = allocate_segment
        self._clock = clock
        self._giant = threading.Condition(threading.RLock())
        #: data source -> its lock posses, revoked ones included until their tasks release them.
        self._running: dict[str, list[TaskLockPosse]] = {}
        self._active: dict[str, LockTask] = {}
        #: The highest version handed out or re-acquired; new versions go above it (see `next_version`).
        self._last_version: str | None = None

    # --- tasks -----------------------------------------------------------------------------------------

    def add(self, task: LockTask) -> None:
        with self._giant:
            self._active[task.id] = task

    def remove(self, task: LockTask) -> None:
        """Release every lock of the task and make it inactive; nothing happens for an unknown task."""
        with self._giant:
            for posse in self._posses_of(task.id):
                self._release(task.id, posse)
            self._active.pop(task.id, None)

    def release_all_of_group(self, group_id: str) -> list[LockTask]:
        """Remove every active task of the group (as `remove`) and return them."""
        with self._giant:
            tasks = [task for task in self._active.values() if task.group_id == group_id]
            for task in tasks:
                self.remove(task)
            return tasks

    # --- locks -----------------------------------------------------------------------------------------

    def try_lock(self, task: LockTask, request: AnyLockRequest) -> LockResult:
        """Take (or share) the lock now, or say why not. Raises ValueError for an inactive task or a
        request that is not the task's own (group, data source, priority)."""
        with self._giant:
            return self._try_lock(task, request)

    def lock(self, task: LockTask, request: AnyLockRequest, timeout: float | None = None) -> LockResult:
        """As `try_lock`, waiting up to ``timeout`` seconds (None: forever) for conflicting locks to be
        released. A revoked lock is returned at once: waiting cannot bring it back."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._giant:
            while True:
                result = self._try_lock(task, request)
                if result.ok or result.revoked:
                    return result
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return result
                self._giant.wait(remaining)

    def unlock(self, task: LockTask, interval: Interval, partition_id: int | None = None) -> None:
        """Release the task's time-chunk lock on exactly ``interval`` (or its segment lock on that
        partition); nothing happens when it holds none."""
        with self._giant:
            for posse in self._posses_of(task.id, task.data_source):
                lock = posse.lock
                if lock.interval == interval and lock.partition_id == partition_id:
                    self._release(task.id, posse)

    def find_locks_for_task(self, task_id: str) -> list[TaskLock]:
        """The task's locks, revoked ones included."""
        with self._giant:
            return [posse.lock for posse in self._posses_of(task_id)]

    def find_replace_lock_covering(self, data_source: str, interval: Interval) -> ReplaceTaskLock | None:
        """The non-revoked REPLACE lock whose interval contains ``interval``, if any."""
        with self._giant:
            for posse in self._running.get(data_source, []):
                lock = posse.lock
                if lock.type is TaskLockType.REPLACE and not lock.revoked and lock.interval.contains(interval):
                    if len(posse.lock_ids) != 1:
                        raise RuntimeError(f"Replace {lock.describe()} is held by tasks {sorted(posse.lock_ids)}, "
                                           "expected one supervisor task")
                    return ReplaceTaskLock(next(iter(posse.lock_ids)), lock.interval, lock.version)
            return None

    def do_in_critical_section(self, task: LockTask, intervals: Iterable[Interval],
                               action: Callable[[bool], T]) -> T:
        """Run ``action(valid)`` with no lock changing meanwhile; ``valid`` says whether the task holds an
        unrevoked lock covering each interval. Publishing goes through here, so a task whose lock was
        revoked cannot commit segments that a higher-priority task is about to overshadow."""
        with self._giant:
            return action(all(self._holds_valid_lock(task, interval) for interval in intervals))

    # --- overlord start --------------------------------------------------------------------------------

    def sync(self, active_tasks: Iterable[LockTask]) -> list[LockTask]:
        """Replace the state with the active tasks and their stored locks, re-acquired in version order.

        A group that cannot re-acquire one of its locks (a conflict, a lock not matching its task, an
        unreadable payload) is failed whole: its tasks are returned, made inactive, and their locks are
        released and deleted from storage. The caller fails those tasks.
        """
        tasks = list(active_tasks)
        stored = self._storage.locks_of_active_tasks()
        with self._giant:
            self._running.clear()
            self._active = {task.id: task for task in tasks}
            self._last_version = None
            failed_groups: set[str] = set()
            unattached: list[int] = []  # stored rows of failed groups that no posse holds
            held: list[tuple[TaskLock, LockTask, int]] = []
            for task in tasks:
                for lock_id, payload in stored.get(task.id, []):
                    try:
                        held.append((TaskLock.from_json(payload, task.priority), task, lock_id))
                    except (KeyError, TypeError, ValueError) as e:
                        log.error("Unreadable lock %s of task %s: %s", lock_id, task.id, e)
                        failed_groups.add(task.group_id)
                        unattached.append(lock_id)
            for lock, task, lock_id in sorted(held, key=lambda h: (h[0].version, h[1].id)):
                if lock.interval.start == lock.interval.end:
                    log.warning("Ignoring lock %s with empty interval for task %s", lock_id, task.id)
                    continue
                reason = self._reacquire(task, lock, lock_id)
                if reason is not None:
                    log.error("Could not reacquire %s for task %s: %s", lock.describe(), task.id, reason)
                    failed_groups.add(task.group_id)
                    unattached.append(lock_id)
            to_fail = [task for task in tasks if task.group_id in failed_groups]
            for task in to_fail:
                self.remove(task)
            for lock_id in unattached:
                self._storage.remove_lock(lock_id)
            return to_fail

    # --- internals (the giant lock is held) ------------------------------------------------------------

    def _try_lock(self, task: LockTask, request: AnyLockRequest) -> LockResult:
        if task.id not in self._active:
            raise ValueError(f"Unable to grant lock to inactive Task [{task.id}]")
        mismatch = _not_of_task(task, request)
        if mismatch is not None:
            raise ValueError(f"lock request {mismatch}")
        new_segment: SegmentId | None = None
        converted: LockRequest
        if isinstance(request, LockRequestForNewSegment) and request.granularity is LockGranularity.SEGMENT:
            new_segment = self._allocate(request, self._new_version(request.data_source, request.interval))
            if new_segment is None:
                return LockResult(None, reason=self._allocation_failure(request))
            converted = SpecificSegmentLockRequest(request.type, request.group_id, request.data_source,
                                                   new_segment.interval, new_segment.version,
                                                   new_segment.partition_num, request.priority)
        elif isinstance(request, LockRequestForNewSegment):
            converted = TimeChunkLockRequest(request.type, request.group_id, request.data_source,
                                             request.interval, request.priority)
        else:
            converted = request
        posse, reason = self._create_or_find(task, converted, lock_id=None)
        if posse is None:
            return LockResult(None, reason=reason)
        if posse.lock.revoked:
            return LockResult(posse.lock, revoked=True,
                              reason=f"{posse.lock.describe()} was revoked by a task of higher priority")
        if isinstance(request, LockRequestForNewSegment) and request.granularity is LockGranularity.TIME_CHUNK:
            version = allocation_version(posse.lock, self._existing_max_version(request.data_source,
                                                                                request.interval))
            new_segment = self._allocate(request, version)
            if new_segment is None:
                return LockResult(posse.lock, reason=self._allocation_failure(request))
        return LockResult(posse.lock, new_segment)

    def _create_or_find(self, task: LockTask, request: LockRequest,
                        lock_id: int | None) -> tuple[TaskLockPosse | None, str | None]:
        """Find or create the posse for the request and add the task to it, storing the task's lock unless
        ``lock_id`` says it is stored already."""
        # A revoked lock is seen only by its own tasks: that is how they learn of the revocation. To anyone
        # else it is gone, or a task of the group would join it and be revoked without cause (Druid's
        # reusableFor does not look at revocation, so its sync can revoke a live lock this way).
        overlapping = [posse for posse in self._running.get(request.data_source, [])
                       if posse.lock.interval.overlaps(request.interval)
                       and (not posse.lock.revoked or task.id in posse.lock_ids)]
        decision = decide([posse.lock for posse in overlapping], request)
        if decision.denied is not None:
            return None, decision.denied
        if decision.reuse is not None:
            posse = next(p for p in overlapping if p.lock is decision.reuse)
        else:
            for lock in decision.revoke:
                self._revoke(next(p for p in overlapping if p.lock is lock))
            posse = TaskLockPosse(self._new_lock(request))
            self._running.setdefault(request.data_source, []).append(posse)
        if task.id in posse.lock_ids:
            return posse, None
        if lock_id is None:
            try:
                lock_id = self._storage.add_lock(task.id, posse.lock.to_json())
            except Exception as e:
                log.exception("Failed to persist lock %s of task %s", posse.lock.describe(), task.id)
                if not posse.lock_ids:
                    self._drop(posse)
                return None, f"Failed to persist lock in storage: {e}"
        posse.lock_ids[task.id] = lock_id
        for other in overlapping:
            if other is not posse and task.id in other.lock_ids and posse.supersedes(other):
                self._release(task.id, other)
        return posse, None

    def _new_lock(self, request: LockRequest) -> TaskLock:
        partition_id = None
        if isinstance(request, SpecificSegmentLockRequest):
            version, partition_id = request.version, request.partition_id
        elif request.preferred_version is not None:
            version = request.preferred_version
        elif request.type is TaskLockType.APPEND:
            version = EPOCH_VERSION
        else:
            version = self._new_version(request.data_source, request.interval)
        return TaskLock(request.type, request.granularity, request.group_id, request.data_source,
                        request.interval, version, request.priority, request.revoked, partition_id)

    def _new_version(self, data_source: str, interval: Interval) -> str:
        floors = [v for v in (self._last_version, self._existing_max_version(data_source, interval)) if v]
        version = next_version(self._clock(), max(floors, default=None))
        self._last_version = version
        return version

    def _reacquire(self, task: LockTask, lock: TaskLock, lock_id: int) -> str | None:
        mismatch = _not_of_task(task, lock)
        if mismatch is not None:
            return f"lock {mismatch}"
        request: LockRequest
        try:
            if lock.partition_id is not None:
                request = SpecificSegmentLockRequest(lock.type, lock.group_id, lock.data_source, lock.interval,
                                                     lock.version, lock.partition_id, lock.priority, lock.revoked)
            else:
                request = TimeChunkLockRequest(lock.type, lock.group_id, lock.data_source, lock.interval,
                                               lock.priority, lock.version, lock.revoked)
        except ValueError as e:
            return str(e)
        posse, reason = self._create_or_find(task, request, lock_id)
        if posse is None:
            return reason
        if posse.lock.version != lock.version:
            log.info("Task %s re-acquired %s at version %s instead of %s", task.id, posse.lock.describe(),
                     posse.lock.version, lock.version)
        self._last_version = max(filter(None, (self._last_version, posse.lock.version)))
        return None

    def _revoke(self, posse: TaskLockPosse) -> None:
        revoked = dataclasses.replace(posse.lock, revoked=True)
        for task_id, old_id in list(posse.lock_ids.items()):
            posse.lock_ids[task_id] = self._storage.add_lock(task_id, revoked.to_json())
            self._storage.remove_lock(old_id)
        log.info("Revoked %s held by %s", posse.lock.describe(), sorted(posse.lock_ids))
        posse.lock = revoked

    def _release(self, task_id: str, posse: TaskLockPosse) -> None:
        lock_id = posse.lock_ids.pop(task_id)
        if not posse.lock_ids:
            self._drop(posse)
        self._giant.notify_all()
        try:
            self._storage.remove_lock(lock_id)
        except Exception:
            log.exception("Failed to remove lock %s of task %s from storage", lock_id, task_id)

    def _drop(self, posse: TaskLockPosse) -> None:
        posses = self._running[posse.lock.data_source]
        posses.remove(posse)
        if not posses:
            del self._running[posse.lock.data_source]

    def _posses_of(self, task_id: str, data_source: str | None = None) -> list[TaskLockPosse]:
        sources = self._running.values() if data_source is None else [self._running.get(data_source, [])]
        return [posse for posses in sources for posse in posses if task_id in posse.lock_ids]

    def _holds_valid_lock(self, task: LockTask, interval: Interval) -> bool:
        covering = [posse.lock for posse in self._posses_of(task.id, task.data_source)
                    if posse.lock.interval.contains(interval)]
        return bool(covering) and not any(lock.revoked for lock in covering)

    def _allocate(self, request: LockRequestForNewSegment, version: str) -> SegmentId | None:
        if self._allocate_segment is None:
            raise ValueError("this TaskLockbox has no segment allocator; it cannot lock new segments")
        return self._allocate_segment(request, version)

    @staticmethod
    def _allocation_failure(request: LockRequestForNewSegment) -> str:
        return (f"Could not allocate a segment of {request.data_source} in {request.interval} "
                f"for sequence[{request.sequence_name}]")
