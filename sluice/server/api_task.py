"""Druid's task API (/druid/indexer/v1/task…, /tasks, /workers): served by the overlord's leader."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable

from fastapi import APIRouter, Body, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from sluice.metadata.store import EntryExistsError, MetadataStore, TaskRecord
from sluice.overlord.supervisor_manager import SupervisorManager
from sluice.overlord.task_queue import QueueFull, TaskQueue
from sluice.security.resources import Action, Resource
from sluice.server.auth import Access, AccessDep, datasource_guard, state_guard, task_guard
from sluice.server.json_body import read_json
from sluice.spec.errors import SpecError
from sluice.spec.supervisor import parse_supervisor_spec
from sluice.task.task import TaskFailure, task_from_json
from sluice.timestamps import parse_timestamp

_STATES = ("running", "complete", "waiting", "pending")
_NO_LOCATION = {"host": None, "port": -1, "tlsPort": -1}


def task_router(metadata: MetadataStore, queue: TaskQueue, supervisors: SupervisorManager,
                workers: Callable[[], list[dict[str, Any]]]) -> APIRouter:
    router = APIRouter(prefix="/druid/indexer/v1")
    runner = queue.runner

    def data_source_of(task_id: str) -> str | None:
        record = metadata.get_task(task_id)
        return None if record is None else record.data_source

    guarded = [task_guard(data_source_of)]

    def missing(task_id: str) -> JSONResponse:
        return JSONResponse({"error": f"Can't find task for id [{task_id}]"}, status_code=404)

    def task_status(record: TaskRecord) -> dict[str, Any]:
        status = record.status
        location = runner.location(record.id) if record.active else None
        return {
            "id": record.id, "groupId": record.group_id, "type": record.task_type,
            "createdTime": record.created_date, "queueInsertionTime": record.created_date,
            "statusCode": status["statusCode"], "status": status["statusCode"],
            "runnerStatusCode": queue.runner_status(record.id) if record.active else "NONE",
            "duration": status.get("duration", -1),
            "location": {"host": location[0], "port": location[1], "tlsPort": -1} if location else _NO_LOCATION,
            "dataSource": record.data_source, "errorMsg": status.get("errorMsg"),
        }

    @router.post("/task")
    async def submit(request: Request, access: AccessDep) -> Any:
        return await run_in_threadpool(add_task, await read_json(request), access)

    def add_task(payload: Any, access: Access) -> Any:
        if isinstance(payload, dict) and payload.get("type") == "kafka":  # a supervisor spec, as Druid accepts
            try:
                spec = parse_supervisor_spec(payload)
            except SpecError as error:
                return JSONResponse({"error": str(error)}, status_code=400)
            access.require_datasources(spec.data_sources, Action.WRITE)
            supervisors.create_or_update(spec)
            return {"task": spec.id}
        try:
            spec = task_from_json(payload)
            access.require(Resource.datasource(spec.data_source), Action.WRITE)
            queue.add(spec)
        except (TaskFailure, SpecError) as error:
            return JSONResponse({"error": str(error)}, status_code=400)
        except EntryExistsError as error:
            return JSONResponse({"error": str(error)}, status_code=400)
        except QueueFull as error:  # Druid's DruidException (ADMIN, CAPACITY_EXCEEDED) as its ErrorResponse
            return JSONResponse({"error": "druidException", "errorCode": "general", "persona": "ADMIN",
                                 "category": "CAPACITY_EXCEEDED", "errorMessage": str(error), "context": {}},
                                status_code=429)
        return {"task": spec.id}

    @router.get("/tasks")
    def tasks(access: AccessDep, state: str | None = None, datasource: str | None = None,
              max: int | None = None, type: str | None = None,  # noqa: A002
              createdTimeInterval: str | None = None) -> Any:  # noqa: N803
        if state not in (None, *_STATES):
            return JSONResponse({"error": f"Invalid state : {state}, valid values are: [pending, waiting, running, "
                                          "complete]"}, status_code=400)
        created = _interval(createdTimeInterval) if createdTimeInterval else None
        if createdTimeInterval and created is None:
            return JSONResponse({"error": f"Invalid createdTimeInterval [{createdTimeInterval}]"}, status_code=400)
        active = None if state is None else state != "complete"
        found = [task_status(r) for r in metadata.list_tasks(active=active, data_source=datasource)
                 if (type is None or r.task_type == type) and access.readable([r.data_source])
                 and (created is None or created[0] <= parse_timestamp(r.created_date) < created[1])]
        if state in ("running", "waiting", "pending"):
            found = [t for t in found if t["runnerStatusCode"] == state.upper()]
        complete = [t for t in found if t["statusCode"] != "RUNNING"][::-1]  # newest first, as Druid lists them
        return [t for t in found if t["statusCode"] == "RUNNING"] + (complete[:max] if max is not None else complete)

    for shortcut, state_name in (("completeTasks", "complete"), ("runningTasks", "running"),
                                 ("waitingTasks", "waiting"), ("pendingTasks", "pending")):
        router.get(f"/{shortcut}")(_listing(tasks, state_name))

    @router.get("/task/{task_id}", dependencies=guarded)
    def task(task_id: str) -> Any:
        record = metadata.get_task(task_id)
        return {"task": task_id, "payload": record.payload} if record else missing(task_id)

    @router.get("/task/{task_id}/status", dependencies=guarded)
    def status(task_id: str) -> Any:
        record = metadata.get_task(task_id)
        return {"task": task_id, "status": task_status(record)} if record else missing(task_id)

    @router.post("/taskStatus")
    def statuses(access: AccessDep, task_ids: list[str] = Body(...)) -> dict[str, Any]:
        found = {i: task_status(r) for i in task_ids
                 if (r := metadata.get_task(i)) is not None and access.readable([r.data_source])}
        return {i: {k: s[k] for k in ("id", "status", "duration", "errorMsg", "location")} for i, s in found.items()}

    @router.get("/task/{task_id}/reports", dependencies=guarded)
    def reports(task_id: str) -> Any:
        report = runner.report(task_id)
        return report if report else missing(task_id)

    @router.get("/task/{task_id}/log", dependencies=guarded)
    def log(task_id: str, offset: int = 0) -> Any:
        text = runner.log(task_id, offset)
        if text is None:
            return JSONResponse({"error": "No log was found for this task. The task may not exist, or it may not "
                                          "have begun running yet."}, status_code=404)
        return Response(text, media_type="text/plain")

    @router.post("/task/{task_id}/shutdown", dependencies=guarded)
    def shutdown(task_id: str) -> Any:
        if queue.shutdown(task_id, "shutdown request via HTTP endpoint"):
            return {"task": task_id}
        return JSONResponse({"error": f"Cannot find any active task with id: [{task_id}]"}, status_code=404)

    @router.post("/datasources/{data_source}/shutdownAllTasks", dependencies=[datasource_guard()])
    def shutdown_all(data_source: str) -> Any:
        for spec in queue.active(data_source):
            queue.shutdown(spec.id, "shutdownAllTasks request via HTTP endpoint")
        return {"dataSource": data_source}

    @router.get("/workers", dependencies=[state_guard()])
    def list_workers() -> list[dict[str, Any]]:
        return workers()

    return router


def _listing(tasks: Callable[..., Any], state: str) -> Callable[..., Any]:
    """GET /completeTasks and the like: /tasks in one state."""

    def listing(access: AccessDep) -> Any:
        return tasks(access, state=state)

    return listing


def _interval(text: str) -> tuple[datetime, datetime] | None:
    """Druid's createdTimeInterval: two ISO instants joined by `_` (or `/`)."""
    for separator in ("_", "/"):
        start, found, end = text.partition(separator)
        if found:
            try:
                return parse_timestamp(start), parse_timestamp(end)
            except ValueError:
                return None
    return None
