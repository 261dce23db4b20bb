"""Druid's task actions: how a task asks the overlord for what only the overlord may decide.

A task never takes a lock, allocates a segment id, publishes segments or checkpoints its sequences on its
own: it submits an action (Druid's JSON, `POST /druid/indexer/v1/action` from a peon, a direct call from a
task running in the overlord's process) and the overlord performs it against the lockbox, the metadata
store and the supervisors. So the invariants hold in one place: segment ids are allocated, and segments
committed, only under an unrevoked lock of the task's group, and a commit moves the stream offsets in the
same transaction (exactly once).

Supported, with Druid's type names and fields: timeChunkLockTryAcquire / lockTryAcquire,
timeChunkLockAcquire / lockAcquire, lockRelease, lockList, segmentAllocate, segmentTransactionalInsert,
segmentListUsed, retrieveUnusedSegments, segmentNuke, checkPointDataSourceMetadata; and Sluice's
pendingSegmentsDelete (a kill task's last step, which Druid leaves to a coordinator duty).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC
from typing import Any, Callable, Mapping

from sluice.metadata.offsets import StreamOffsets
from sluice.metadata.store import MetadataStore, SegmentAllocationError
from sluice.overlord.lockbox import (LockGranularity, LockRequestForNewSegment, LockTask, TaskLockbox, TaskLockType,
                                     TimeChunkLockRequest)
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.spec.granularity import parse_granularity
from sluice.task.task import TaskFailure
from sluice.timestamps import parse_timestamp

#: (supervisor id, task group id, start offsets of the sequence to checkpoint) -> accepted
Checkpointer = Callable[[str, int, StreamOffsets], bool]


class TaskActionError(ValueError):
    """An action the overlord cannot perform as asked; the message names the field and the problem."""


@dataclass(frozen=True)
class Denied:
    """A valid action whose answer is no: Druid's null result, with the reason (Sluice's addition)."""

    reason: str


@dataclass
class TaskActionToolbox:
    """What actions are performed against (Druid's TaskActionToolbox)."""

    lockbox: TaskLockbox
    metadata: MetadataStore
    #: the active task of an id, as a lock holder; None when the queue does not have it (any more)
    active_task: Callable[[str], LockTask | None]
    #: forwards a checkpoint to the task's supervisor; None where no supervisor runs
    checkpoint: Checkpointer | None = None
    #: raises ValueError for a loadSpec outside deep storage (DeepStorage.check_load_spec); None: any is taken
    check_load_spec: Callable[[Mapping[str, Any]], None] | None = None

    def perform(self, task_id: str, action: Mapping[str, Any]) -> Any:
        """The action's result, as Druid's JSON. Raises TaskActionError for an inactive task or a bad action."""
        task = self.active_task(task_id)
        if task is None:
            raise TaskActionError(f"task [{task_id}] is not active in the task queue")
        kind = action.get("type")
        handler = _HANDLERS.get(kind)  # type: ignore[arg-type]
        if handler is None:
            raise TaskActionError(f"action.type: {kind!r} is not supported; use one of {', '.join(sorted(_HANDLERS))}")
        try:
            return handler(self, task, action)
        except KeyError as missing:
            raise TaskActionError(f"action.{missing.args[0]}: required for {kind}") from missing
        except (TypeError, ValueError) as invalid:
            raise TaskActionError(f"action: {invalid}") from invalid


def _time_chunk_lock(toolbox: TaskActionToolbox, task: LockTask, action: Mapping[str, Any]) -> Any:
    request = TimeChunkLockRequest.of(task, TaskLockType(action.get("lockType") or "EXCLUSIVE"),
                                      Interval.parse(action["interval"]))
    if action["type"] in ("timeChunkLockTryAcquire", "lockTryAcquire"):
        result = toolbox.lockbox.try_lock(task, request)
    else:
        result = toolbox.lockbox.lock(task, request, int(action.get("timeoutMs", 0)) / 1000 or None)
    if not result.ok or result.lock is None:
        return Denied(result.reason or "the lock was not granted")
    return result.lock.to_json()


def _lock_release(toolbox: TaskActionToolbox, task: LockTask, action: Mapping[str, Any]) -> None:
    toolbox.lockbox.unlock(task, Interval.parse(action["interval"]))


def _lock_list(toolbox: TaskActionToolbox, task: LockTask, action: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [lock.to_json() for lock in toolbox.lockbox.find_locks_for_task(task.id)]


def _segment_allocate(toolbox: TaskActionToolbox, task: LockTask, action: Mapping[str, Any]) -> dict[str, Any] | Denied:
    """Lock the time chunk of `timestamp` at `preferredSegmentGranularity` and allocate the next segment id of the
    sequence there (idempotent per sequenceName and previousSegmentId, so replicas get the same ids).

    Denied (Druid: null) when the lock or the id cannot be had; the task then fails rather than write unlocked.
    """
    _check_data_source(task, action)
    at = parse_timestamp(action["timestamp"]).astimezone(UTC)
    granularity = parse_granularity(action["preferredSegmentGranularity"])
    start = granularity.bucket_start(at)
    request = LockRequestForNewSegment.of(
        task, _lock_granularity(action.get("lockGranularity") or "TIME_CHUNK"),
        TaskLockType(action.get("taskLockType") or "EXCLUSIVE"), Interval(start, granularity.bucket_end(start)),
        action["sequenceName"], action.get("previousSegmentId"), bool(action.get("skipSegmentLineageCheck", True)))
    try:
        result = toolbox.lockbox.try_lock(task, request)
    except SegmentAllocationError as error:
        return Denied(str(error))
    if not result.ok or result.new_segment_id is None:
        return Denied(result.reason or f"no segment of {task.data_source} could be allocated in {request.interval}")
    return segment_id_json(result.new_segment_id)


def _segment_transactional_insert(toolbox: TaskActionToolbox, task: LockTask,
                                  action: Mapping[str, Any]) -> dict[str, Any] | Denied:
    """Commit the segments, and move the stream offsets from startMetadata to endMetadata, in one transaction;
    only while the task's locks covering every segment are held and not revoked. Without them the action is
    denied, not answered "unsuccessful": the task fails at once (as Druid's does) instead of trying again."""
    segments = [DataSegment.from_payload(payload) for payload in action["segments"]]
    start, end = action.get("startMetadata"), action.get("endMetadata")
    data_source = action.get("dataSource") or task.data_source
    if data_source != task.data_source or any(s.data_source != data_source for s in segments):
        raise TaskActionError(f"dataSource: a task of [{task.data_source}] can only publish segments of it")
    if toolbox.check_load_spec is not None:
        for segment in segments:
            toolbox.check_load_spec(segment.load_spec)

    def commit(locks_valid: bool) -> dict[str, Any] | Denied:
        if not locks_valid:
            return Denied(f"Segments {sorted(str(s.id) for s in segments)} are not covered by locks of task "
                          f"[{task.id}]: they were revoked, or never taken")
        published = toolbox.metadata.commit_segments_and_metadata(
            segments, data_source, StreamOffsets.from_payload(start) if start else None,
            StreamOffsets.from_payload(end) if end else None)
        return _publish_result(published.success, published.message, segments if published.success else [])

    return toolbox.lockbox.do_in_critical_section(task, sorted({s.interval for s in segments}, key=str), commit)


def _segment_list_used(toolbox: TaskActionToolbox, task: LockTask, action: Mapping[str, Any]) -> list[dict[str, Any]]:
    _check_data_source(task, action)
    intervals = [Interval.parse(text) for text in action.get("intervals") or []]
    return [s.to_payload() for s in toolbox.metadata.used_segments(action["dataSource"])
            if not intervals or any(s.interval.overlaps(i) for i in intervals)]


def _retrieve_unused(toolbox: TaskActionToolbox, task: LockTask, action: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Unused segments wholly inside `interval` (of `versions`), at most `limit`: what a kill task may delete."""
    _check_data_source(task, action)
    limit, marked_by = action.get("limit"), action.get("maxUsedStatusLastUpdatedTime")
    return [s.to_payload() for s in toolbox.metadata.unused_segments(
        action["dataSource"], Interval.parse(action["interval"]), action.get("versions"),
        int(limit) if limit is not None else None, parse_timestamp(marked_by) if marked_by else None)]


def _segment_nuke(toolbox: TaskActionToolbox, task: LockTask, action: Mapping[str, Any]) -> list[str] | Denied:
    """Delete the rows of unused segments, only under the task's unrevoked locks covering them; the ids deleted
    (a segment marked used again meanwhile stays, and so must its file)."""
    segments = [DataSegment.from_payload(payload) for payload in action["segments"]]
    if any(s.data_source != task.data_source for s in segments):
        raise TaskActionError(f"segments: a task of [{task.data_source}] can only nuke segments of it")
    ids = [str(s.id) for s in segments]

    def nuke(locks_valid: bool) -> list[str] | Denied:
        if not locks_valid:
            return Denied("The task's locks do not cover the segments or were revoked")
        toolbox.metadata.delete_unused_segments(task.data_source, ids)
        kept = toolbox.metadata.segments_by_id(task.data_source, ids)
        return [i for i in ids if i not in kept]

    return toolbox.lockbox.do_in_critical_section(task, sorted({s.interval for s in segments}, key=str), nuke)


def _pending_delete(toolbox: TaskActionToolbox, task: LockTask, action: Mapping[str, Any]) -> int | Denied:
    """Delete the pending segments wholly inside `interval`, only under the task's lock of it: then no task that
    allocated them can still publish them."""
    interval = Interval.parse(action["interval"])

    def delete(locks_valid: bool) -> int | Denied:
        if not locks_valid:
            return Denied(f"The task holds no valid lock of {interval}")
        return toolbox.metadata.delete_pending_segments(task.data_source, interval)

    return toolbox.lockbox.do_in_critical_section(task, [interval], delete)


def _checkpoint(toolbox: TaskActionToolbox, task: LockTask, action: Mapping[str, Any]) -> bool:
    """Forward a streaming task's checkpoint request to its supervisor (Druid's CheckPointDataSourceMetadataAction):
    `checkpointMetadata` holds the start offsets of the sequence the task wants to end."""
    if toolbox.checkpoint is None:
        raise TaskActionError("checkPointDataSourceMetadata: no supervisor runs in this overlord")
    metadata = action.get("checkpointMetadata") or action["previousCheckPoint"]
    return toolbox.checkpoint(str(action["supervisorId"]), int(action["taskGroupId"]),
                              StreamOffsets.from_payload(metadata))


def segment_id_json(segment_id: SegmentId) -> dict[str, Any]:
    """Druid's SegmentIdWithShardSpec."""
    return {"dataSource": segment_id.data_source, "interval": str(segment_id.interval), "version": segment_id.version,
            "shardSpec": numbered_shard_spec(segment_id.partition_num)}


def _publish_result(success: bool, error: str | None, segments: list[DataSegment]) -> dict[str, Any]:
    """Druid's SegmentPublishResult."""
    return {"segments": [s.to_payload() for s in segments], "success": success, "errorMsg": error}


def _lock_granularity(name: str) -> LockGranularity:
    """SegmentAllocateAction names the granularity as the enum constant (TIME_CHUNK), not as a lock's JSON does."""
    try:
        return LockGranularity[name]
    except KeyError:
        raise TaskActionError(f"lockGranularity: {name!r} is not TIME_CHUNK or SEGMENT") from None


def _check_data_source(task: LockTask, action: Mapping[str, Any]) -> None:
    if action["dataSource"] != task.data_source:
        raise TaskActionError(f"dataSource: task [{task.id}] works on [{task.data_source}], "
                              f"not [{action['dataSource']}]")


_HANDLERS: dict[str, Callable[[TaskActionToolbox, LockTask, Mapping[str, Any]], Any]] = {
    "timeChunkLockTryAcquire": _time_chunk_lock,
    "lockTryAcquire": _time_chunk_lock,
    "timeChunkLockAcquire": _time_chunk_lock,
    "lockAcquire": _time_chunk_lock,
    "lockRelease": _lock_release,
    "lockList": _lock_list,
    "segmentAllocate": _segment_allocate,
    "segmentTransactionalInsert": _segment_transactional_insert,
    "segmentListUsed": _segment_list_used,
    "retrieveUnusedSegments": _retrieve_unused,
    "segmentNuke": _segment_nuke,
    "pendingSegmentsDelete": _pending_delete,
    "checkPointDataSourceMetadata": _checkpoint,
}


class LocalTaskActionClient:
    """The task action client of a task that runs in the overlord's own process (the task sees only its
    `submit`, sluice.task.actions.TaskActionClient)."""

    def __init__(self, task_id: str, toolbox: TaskActionToolbox) -> None:
        self._task_id = task_id
        self._toolbox = toolbox

    def submit(self, action: dict[str, Any]) -> Any:
        try:
            result = self._toolbox.perform(self._task_id, action)
        except TaskActionError as error:
            raise TaskFailure(f"task action {action.get('type')} refused: {error}") from error
        if isinstance(result, Denied):
            raise TaskFailure(f"task action {action.get('type')} denied: {result.reason}")
        return result
