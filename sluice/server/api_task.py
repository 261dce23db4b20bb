"""The read side of Druid's task API (/druid/indexer/v1/task…): status, reports and lists."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from sluice.metadata.store import MetadataStore
from sluice.worker.thread_runner import ThreadTaskRunner


def task_router(metadata: MetadataStore, runner: ThreadTaskRunner) -> APIRouter:
    router = APIRouter(prefix="/druid/indexer/v1")

    def missing(task_id: str) -> JSONResponse:
        return JSONResponse({"error": f"Can't find task for id [{task_id}]"}, status_code=404)

    def task_status(record: Any) -> dict[str, Any]:
        status = record.status
        return {
            "id": record.id, "groupId": record.group_id, "type": record.task_type,
            "createdTime": record.created_date, "queueInsertionTime": record.created_date,
            "statusCode": status["statusCode"], "status": status["statusCode"],
            "runnerStatusCode": "RUNNING" if record.active else "NONE",
            "duration": status.get("duration", -1), "location": {"host": None, "port": -1, "tlsPort": -1},
            "dataSource": record.data_source, "errorMsg": status.get("errorMsg"),
        }

    @router.get("/tasks")
    def tasks(state: str | None = None, datasource: str | None = None) -> Any:
        if state not in (None, "running", "complete"):
            return JSONResponse({"error": f"Invalid state : {state}, valid values are: [running, complete]"},
                                status_code=400)
        active = None if state is None else state == "running"
        return [task_status(r) for r in metadata.list_tasks(active=active, data_source=datasource)]

    @router.get("/task/{task_id}")
    def task(task_id: str) -> Any:
        record = metadata.get_task(task_id)
        return {"task": task_id, "payload": record.payload} if record else missing(task_id)

    @router.get("/task/{task_id}/status")
    def status(task_id: str) -> Any:
        record = metadata.get_task(task_id)
        return {"task": task_id, "status": task_status(record)} if record else missing(task_id)

    @router.get("/task/{task_id}/reports")
    def reports(task_id: str) -> Any:
        running = runner.client(task_id)
        if running is not None:
            return running.report()
        report = runner.task_dir(task_id) / "report.json"
        return json.loads(report.read_text()) if report.exists() else missing(task_id)

    return router
