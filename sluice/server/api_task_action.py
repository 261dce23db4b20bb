"""Druid's task-action API (POST /druid/indexer/v1/action): how a task asks the overlord for locks.

Body: `{"task": <task id>, "action": {"type": ..., ...}}`; answer: `{"result": ...}`. The task must be active
in the overlord's queue. Supported: timeChunkLockTryAcquire (answers at once), timeChunkLockAcquire (waits up
to `timeoutMs`), lockRelease and lockList, with Druid's field names.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse

from sluice.overlord.lockbox import TaskLockType, TimeChunkLockRequest
from sluice.overlord.task_queue import TaskQueue, lock_task
from sluice.segment.segment import Interval


def task_action_router(queue: TaskQueue) -> APIRouter:
    router = APIRouter(prefix="/druid/indexer/v1")

    @router.post("/action")
    def perform(body: dict[str, Any] = Body(...)) -> Any:
        spec = queue.get(str(body.get("task")))
        action = body.get("action")
        if spec is None:
            return JSONResponse({"error": f"task [{body.get('task')}] is not active in the task queue"}, 400)
        if not isinstance(action, dict):
            return JSONResponse({"error": "action: a task action object is required"}, 400)
        task, kind = lock_task(spec), action.get("type")
        try:
            if kind in ("timeChunkLockTryAcquire", "timeChunkLockAcquire"):
                request = TimeChunkLockRequest.of(task, TaskLockType(action.get("lockType", "EXCLUSIVE")),
                                                  Interval.parse(action["interval"]))
                result = (queue.lockbox.try_lock(task, request) if kind == "timeChunkLockTryAcquire" else
                          queue.lockbox.lock(task, request, int(action.get("timeoutMs", 0)) / 1000 or None))
                return {"result": result.lock.to_json() if result.ok and result.lock is not None else None,
                        **({"reason": result.reason} if not result.ok else {})}
            if kind == "lockRelease":
                queue.lockbox.unlock(task, Interval.parse(action["interval"]))
                return {"result": None}
            if kind == "lockList":
                return {"result": [lock.to_json() for lock in queue.lockbox.find_locks_for_task(spec.id)]}
        except KeyError as missing:
            return JSONResponse({"error": f"action.{missing.args[0]}: required for {kind}"}, 400)
        except ValueError as invalid:
            return JSONResponse({"error": f"action: {invalid}"}, 400)
        return JSONResponse({"error": f"action.type: {kind!r} is not supported; use timeChunkLockTryAcquire, "
                                      "timeChunkLockAcquire, lockRelease or lockList"}, 400)

    return router
