"""Druid's SQL API: POST /druid/v2/sql."""

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
from sluice.broker.sql import SqlError


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
        query_id = str(context.get("sqlQueryId") or uuid.uuid4())
        try:
            result = await run_in_threadpool(broker.sql, payload["query"], payload.get("parameters") or [], context)
        except SqlError as error:
            return JSONResponse(error.to_json(), status_code=error.status, headers={"X-Druid-SQL-Query-Id": query_id})
        header = bool(payload.get("header"))
        content, media_type = render(result, result_format, header, bool(payload.get("typesHeader")),
                                     bool(payload.get("sqlTypesHeader")))
        headers = {"X-Druid-SQL-Query-Id": query_id}
        if header:
            headers["X-Druid-SQL-Header-Included"] = "yes"
        return Response(content, media_type=media_type, headers=headers)

    return router
