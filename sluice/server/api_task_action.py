"""Druid's task-action API (POST /druid/indexer/v1/action): how a task in a peon reaches the overlord.

Body: `{"task": <task id>, "action": {"type": ..., ...}}`; answer: `{"result": ...}`. The task must be active in
the overlord's queue. What each action does is `sluice.overlord.task_actions`; a malformed action is a 400 that
says why, and an action answered no (a lock not granted) is Druid's null result with the `reason` beside it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse

from sluice.overlord.task_actions import Denied, TaskActionError, TaskActionToolbox
from sluice.server.auth import state_guard


def task_action_router(toolbox: TaskActionToolbox) -> APIRouter:
    # Druid guards task actions as STATE: only the escalated internal identity (and admins) may act for a task
    router = APIRouter(prefix="/druid/indexer/v1", dependencies=[state_guard()])

    @router.post("/action")
    def perform(body: dict[str, Any] = Body(...)) -> Any:
        action = body.get("action")
        if not isinstance(action, dict):
            return JSONResponse({"error": "action: a task action object is required"}, 400)
        try:
            result = toolbox.perform(str(body.get("task")), action)
        except TaskActionError as error:
            return JSONResponse({"error": str(error)}, 400)
        return {"result": None, "reason": result.reason} if isinstance(result, Denied) else {"result": result}

    return router
