"""The worker's API, which the overlord's task runner calls (Druid's /druid/worker/v1/…)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body
from fastapi.responses import JSONResponse, Response

from sluice.discovery import WORKER_PREFIX
from sluice.server.auth import state_guard
from sluice.task.task import TaskFailure
from sluice.worker.worker import WorkerFull, WorkerTaskManager


def worker_router(manager: WorkerTaskManager) -> APIRouter:
    router = APIRouter(prefix=WORKER_PREFIX, dependencies=[state_guard()])  # the overlord's calls, as Druid guards them

    @router.post("/task")
    def assign(payload: Any = Body(...)) -> Any:
        try:
            return {"task": manager.assign(payload)}
        except TaskFailure as failure:
            return JSONResponse({"error": str(failure)}, status_code=400)
        except WorkerFull as full:
            return JSONResponse({"error": str(full)}, status_code=409)

    @router.get("/tasks")
    def tasks() -> list[dict[str, Any]]:
        return manager.tasks()

    @router.post("/task/{task_id}/shutdown")
    def shutdown(task_id: str) -> Any:
        if manager.shutdown(task_id):
            return {"task": task_id}
        return JSONResponse({"error": f"task [{task_id}] is not running on this worker"}, status_code=404)

    @router.get("/task/{task_id}/reports")
    def reports(task_id: str) -> Any:
        report = manager.report(task_id)
        return report if report is not None else JSONResponse({"error": f"no report for task [{task_id}]"}, 404)

    @router.get("/task/{task_id}/log")
    def task_log(task_id: str, offset: int = 0) -> Response:
        text = manager.log(task_id, offset)
        if text is None:
            return JSONResponse({"error": f"no log for task [{task_id}]"}, status_code=404)
        return Response(text, media_type="text/plain")

    return router
