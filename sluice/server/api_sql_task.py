"""Druid's SQL-based ingestion API: POST /druid/v2/sql/task runs an INSERT or REPLACE statement as a task.

The statement is translated here (where the data sources' columns are known) into the `index_parallel` spec that a
`query_controller` task runs; the answer is Druid's `202 {"taskId": "query-…", "state": "RUNNING"}`, and the task is
watched with the task API (`/druid/indexer/v1/task/{id}/status`, `/reports`).
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from sluice.broker.errors import SqlError
from sluice.metadata.store import EntryExistsError, MetadataStore
from sluice.overlord.task_queue import QueueFull, TaskQueue
from sluice.security.access import require_query_context
from sluice.security.resources import EXTERNAL, Action, Resource
from sluice.server.auth import Access, AccessDep
from sluice.spec.errors import SpecError
from sluice.sql_ingest.catalog import data_source_columns
from sluice.sql_ingest.parse import bind_parameters
from sluice.sql_ingest.task import TASK_TYPE, new_query_id, spec_from_json
from sluice.sql_ingest.translate import translate
from sluice.task.task import TaskFailure


def sql_task_router(queue: TaskQueue, metadata: MetadataStore) -> APIRouter:
    """`metadata` gives the columns of the Druid tables a statement reads."""
    router = APIRouter()

    def submit(payload: dict[str, Any], access: Access) -> JSONResponse:
        context = payload.get("context") or {}
        if not isinstance(context, dict):
            raise SqlError("the query \"context\" must be a JSON object")
        require_query_context(access, context)
        parameters = payload.get("parameters") or []
        if not isinstance(parameters, list) or not all(isinstance(p, dict) for p in parameters):
            raise SqlError("\"parameters\" must be a JSON array of {\"type\", \"value\"} objects")
        query = bind_parameters(payload["query"], parameters) if parameters else payload["query"]

        def catalog(data_source: str) -> dict[str, str] | None:  # every table the statement reads passes here
            access.require(Resource.datasource(data_source), Action.READ)
            return data_source_columns(metadata, data_source)

        generated = translate(query, context, catalog)
        # Druid: WRITE on the target; EXTERN and other input sources from outside need EXTERNAL READ
        access.require(Resource.datasource(generated["spec"]["dataSchema"]["dataSource"]), Action.WRITE)
        if generated["spec"]["ioConfig"]["inputSource"].get("type") != "druid":
            access.require(EXTERNAL, Action.READ)
        task_id = str(context.get("sqlQueryId") or new_query_id())
        try:
            spec = spec_from_json({"type": TASK_TYPE, "id": task_id, "sqlQuery": payload["query"],
                                   "sqlQueryContext": context, "spec": generated})
        except (SpecError, TaskFailure) as error:
            raise SqlError(f"The statement makes an ingestion spec Sluice cannot run: {error}") from None
        try:
            queue.add(spec)
        except EntryExistsError as error:
            raise SqlError(str(error)) from None
        return JSONResponse({"taskId": spec.id, "state": "RUNNING"}, status_code=202)

    @router.post("/druid/v2/sql/task")
    @router.post("/druid/v2/sql/task/")
    async def sql_task(request: Request, access: AccessDep) -> JSONResponse:
        try:
            payload = json.loads(await request.body())
        except json.JSONDecodeError as error:
            return _error(SqlError(f"request body is not valid JSON: {error}"))
        if not isinstance(payload, dict) or not isinstance(payload.get("query"), str):
            return _error(SqlError("the request needs a \"query\" string"))
        try:
            return await run_in_threadpool(submit, payload, access)
        except SqlError as error:
            return _error(error)
        except QueueFull as error:
            return JSONResponse({"error": "druidException", "errorCode": "general", "persona": "ADMIN",
                                 "category": "CAPACITY_EXCEEDED", "errorMessage": str(error), "context": {}},
                                status_code=429)

    return router


def _error(error: SqlError) -> JSONResponse:
    return JSONResponse(error.to_json(), status_code=error.status)
