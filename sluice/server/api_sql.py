"""Druid's SQL API: POST /druid/v2/sql, and DELETE /druid/v2/sql/{sqlQueryId} to cancel a running query."""

from __future__ import annotations

import json
import uuid
from typing import Any
from urllib.parse import unquote_plus

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from sluice.broker.broker import Broker
from sluice.broker.results import RESULT_FORMATS, render
from sluice.broker.sql import QueryContext, SqlError

_QUERY_ID_HEADER = "X-Druid-SQL-Query-Id"


def _bad_request(message: str) -> JSONResponse:
    return JSONResponse({"error": "druidException", "errorMessage": message,
                         "errorClass": "org.apache.druid.error.DruidException", "host": None}, status_code=400)


def sql_router(broker: Broker) -> APIRouter:
    router = APIRouter()

    @router.post("/druid/v2/sql")
    @router.post("/druid/v2/sql/")
    async def sql(request: Request) -> Response:
        body = await request.body()
        content_type = request.headers.get("content-type", "application/json").split(";")[0].strip()
        if content_type == "text/plain":
            payload: dict[str, Any] = {"query": body.decode()}
        elif content_type == "application/x-www-form-urlencoded":
            payload = {"query": unquote_plus(body.decode())}
        else:
            try:
                payload = json.loads(body)
            except json.JSONDecodeError as error:
                return _bad_request(f"request body is not valid JSON: {error}")
        if not isinstance(payload, dict) or not isinstance(payload.get("query"), str):
            return _bad_request("the request needs a \"query\" string")
        result_format = payload.get("resultFormat", "object")
        if result_format not in RESULT_FORMATS:
            return _bad_request(f"resultFormat [{result_format}] is not one of {', '.join(RESULT_FORMATS)}")
        context = payload.get("context") or {}
        if not isinstance(context, dict):
            return _bad_request("the query \"context\" must be a JSON object")
        # The query id is known before the query runs, so that DELETE can cancel it while it does.
        query_id = str(context.get("sqlQueryId") or uuid.uuid4())
        headers = {_QUERY_ID_HEADER: query_id}
        try:
            result = await run_in_threadpool(
                broker.sql, payload["query"], payload.get("parameters") or [], {**context, "sqlQueryId": query_id})
            header = bool(payload.get("header"))
            content, media_type = render(result, result_format, header, bool(payload.get("typesHeader")),
                                         bool(payload.get("sqlTypesHeader")),
                                         stringify_arrays=QueryContext.parse(context).stringify_arrays)
        except SqlError as error:
            return JSONResponse(error.to_json(), status_code=error.status, headers=headers)
        if header:
            headers["X-Druid-SQL-Header-Included"] = "yes"
        return Response(content, media_type=media_type, headers=headers)

    @router.delete("/druid/v2/sql/{query_id}")
    def cancel(query_id: str) -> Response:
        """Druid: 202 with an empty body once the query is told to stop, 404 when no such query runs."""
        return Response(status_code=202 if broker.cancel(query_id) else 404)

    return router
