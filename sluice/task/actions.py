"""How a task reaches the overlord: Druid's task actions, submitted through a TaskActionClient.

A task running in the overlord's process submits them directly (the overlord's `LocalTaskActionClient`); a
peon POSTs them to the overlord it finds through discovery (`RemoteTaskActionClient`). Either way the task
sees only the `TaskActionClient` protocol. The functions below build Druid's
action JSON and read its results, so the task code speaks in segment ids and offsets.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any, Callable, Protocol, Sequence

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from sluice.metadata.offsets import StreamOffsets
from sluice.metadata.store import PublishResult
from sluice.segment.segment import DataSegment, Interval, SegmentId
from sluice.spec.granularity import Granularity
from sluice.task.task import TaskFailure
from sluice.timestamps import format_timestamp

log = logging.getLogger(__name__)

ACTION_PATH = "/druid/indexer/v1/action"


class TaskActionClient(Protocol):
    def submit(self, action: dict[str, Any]) -> Any:
        """The action's result; raises TaskFailure when the overlord refuses it, answers no (with its reason), or
        cannot be reached."""
        ...


class RemoteTaskActionClient:
    """For a peon: POSTs each action to a live overlord, trying the next one (or again, after a pause) while
    none answers, for up to `retry_for` seconds. A refusal (4xx) is final."""

    def __init__(self, task_id: str, overlords: Callable[[], list[str]], retry_for: float = 60.0,
                 timeout: float = 60.0, auth: tuple[str, str] | None = None) -> None:
        """`auth`: the escalator's credentials (Druid guards task actions as STATE)."""
        self._task_id = task_id
        self._overlords = overlords
        self._retry_for = retry_for
        self._http = httpx.Client(timeout=timeout, auth=auth, follow_redirects=True)  # a standby sends to the leader

    def submit(self, action: dict[str, Any]) -> Any:
        def not_yet(state: RetryCallState) -> None:
            log.warning("task %s: task action %s not performed yet (%s); retrying", self._task_id, action.get("type"),
                        state.outcome.exception() if state.outcome else "")

        try:
            return Retrying(retry=retry_if_exception_type(_Unanswered), stop=stop_after_delay(self._retry_for),
                            wait=wait_fixed(1.0), before_sleep=not_yet, reraise=True)(self._ask_each_overlord, action)
        except _Unanswered as problem:
            raise TaskFailure(f"task action {action.get('type')} failed: {problem}") from None

    def _ask_each_overlord(self, action: dict[str, Any]) -> Any:
        """The first answer of a live overlord; _Unanswered when none gave one (down, or failing)."""
        problem = "no overlord announced itself"
        for base in self._overlords():
            try:
                response = self._http.post(base + ACTION_PATH, json={"task": self._task_id, "action": action})
            except httpx.HTTPError as error:
                problem = f"{base}: {error}"
                continue
            if response.status_code == 200:
                answer = response.json()
                if answer.get("result") is None and answer.get("reason"):
                    raise TaskFailure(f"task action {action.get('type')} denied: {answer['reason']}")
                return answer["result"]
            if 400 <= response.status_code < 500:
                raise TaskFailure(f"task action {action.get('type')} refused: {_error_text(response)}")
            problem = f"{base}: HTTP {response.status_code} {_error_text(response)}"
        raise _Unanswered(problem)

    def close(self) -> None:
        self._http.close()


class _Unanswered(Exception):
    """No overlord answered a task action this time round."""


def _error_text(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", response.text))
    except ValueError:
        return response.text


def allocate_segment(client: TaskActionClient, data_source: str, timestamp: datetime, granularity: Granularity,
                     sequence_name: str, previous_segment_id: str | None, lock_type: str = "EXCLUSIVE") -> SegmentId:
    """The id of the next segment of a sequence in the time chunk of `timestamp` (Druid's SegmentAllocateAction);
    the overlord locks the chunk (`lock_type`) for the task's group first. Raises TaskFailure with the reason when
    it cannot."""
    result = client.submit({
        "type": "segmentAllocate", "dataSource": data_source, "timestamp": format_timestamp(timestamp),
        "queryGranularity": "NONE", "preferredSegmentGranularity": granularity.to_json(), "sequenceName": sequence_name,
        "previousSegmentId": previous_segment_id, "skipSegmentLineageCheck": True,
        "lockGranularity": "TIME_CHUNK", "taskLockType": lock_type,
    })
    return SegmentId(result["dataSource"], Interval.parse(result["interval"]), result["version"],
                     int(result["shardSpec"].get("partitionNum", 0)))


def publish_segments(client: TaskActionClient, data_source: str, segments: Sequence[DataSegment],
                     start: StreamOffsets | None = None, end: StreamOffsets | None = None) -> PublishResult:
    """Commit `segments` and move the stored offsets from `start` to `end` in one transaction
    (Druid's SegmentTransactionalInsertAction); nothing is written when it does not succeed. A batch task
    commits segments without offsets."""
    result = client.submit({
        "type": "segmentTransactionalInsert", "dataSource": data_source,
        "segments": [s.to_payload() for s in segments],
        "startMetadata": start.to_payload("start") if start else None, "endMetadata": end.to_payload() if end else None,
    })
    return PublishResult(bool(result["success"]), result.get("errorMsg"))


def lock_time_chunk(client: TaskActionClient, interval: Interval, lock_type: str, timeout_ms: int) -> dict[str, Any]:
    """Acquire a time-chunk lock on `interval`, waiting up to `timeout_ms` for conflicting locks to go (Druid's
    TimeChunkLockAcquireAction); the lock's JSON, with the version a task writing the chunk uses."""
    return client.submit({"type": "timeChunkLockAcquire", "interval": str(interval), "lockType": lock_type,
                          "timeoutMs": timeout_ms})


def checkpoint(client: TaskActionClient, supervisor_id: str, task_group_id: int, start: StreamOffsets) -> bool:
    """Ask the supervisor to end the sequence that started at `start` (Druid's CheckPointDataSourceMetadataAction)."""
    return bool(client.submit({
        "type": "checkPointDataSourceMetadata", "supervisorId": supervisor_id, "taskGroupId": task_group_id,
        "checkpointMetadata": start.to_payload("start"),
    }))
