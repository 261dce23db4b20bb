"""Druid's SQL API: POST /druid/v2/sql, and DELETE /druid/v2/sql/{sqlQueryId} to cancel a running query.

Every query emits Druid's sqlQuery/time and sqlQuery/bytes. Druid's broker also emits query/time for the native
queries it plans a SQL query into; Sluice runs SQL directly, so there are none (nativeQueryIds is "[]").
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from typing import Any
from urllib.parse import unquote_plus

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from sqlglot import exp
from sqlglot.errors import SqlglotError

from sluice.broker.broker import Broker
from sluice.broker.functions.rewrite import DruidDialect
from sluice.broker.results import RESULT_FORMATS, render
from sluice.broker.scheduler import QueryScheduler
from sluice.broker.sql.translate import QueryContext, SqlError
from sluice.broker.system_tables import DRUID_SCHEMA
from sluice.emitter import NoopEmitter, ServiceEmitter, metrics
from sluice.logs import query_ids
from sluice.security.access import require_query_context
from sluice.server.request_log import RequestLogger, request_identity, sql_query_stats
from sluice.server.auth import AccessDep

_QUERY_ID_HEADER = "X-Druid-SQL-Query-Id"


def _bad_request(message: str) -> JSONResponse:
    return JSONResponse({"error": "druidException", "errorMessage": message,
                         "errorClass": "org.apache.druid.error.DruidException", "host": None}, status_code=400)


@functools.lru_cache(maxsize=1024)  # dashboards repeat their queries; parsing one again costs a millisecond
def data_sources_dimension(query: str) -> str:
    """Druid's dataSource dimension of a SQL query: the data sources it reads, printed as Java prints a set
    (`[wikipedia]`, `[a, b]`); `[]` for a query that does not parse."""
    try:
        statement = DruidDialect().parse(query)[0]
    except (SqlglotError, IndexError, RecursionError):
        return "[]"
    if statement is None:
        return "[]"
    ctes = {cte.alias for cte in statement.find_all(exp.CTE)}
    names = {table.name for table in statement.find_all(exp.Table)
             if table.db in ("", DRUID_SCHEMA) and table.name not in ctes}
    return f"[{', '.join(sorted(names))}]"


def sql_router(broker: Broker, emitter: ServiceEmitter = ServiceEmitter("druid/broker", "", NoopEmitter()),
               scheduler: QueryScheduler | None = None, request_logger: RequestLogger = RequestLogger()) -> APIRouter:
    """`emitter` takes each query's sqlQuery/time and sqlQuery/bytes, `request_logger` a line of Druid's request log;
    `scheduler` (shared with the native API) sets the timeout a query runs under and how many run at once."""
    scheduler = scheduler or QueryScheduler()
    router = APIRouter()

    def emit(payload: dict[str, Any], context: dict[str, Any], query_id: str, request: Request, started: float,
             started_at: float, response: Response, error: SqlError | None = None) -> Response:
        remote = request.client.host if request.client else None
        millis = (time.monotonic() - started) * 1000
        dimensions = {metrics.ID: query_id, metrics.NATIVE_QUERY_IDS: "[]",
                      metrics.DATASOURCE: data_sources_dimension(payload["query"]), metrics.REMOTE_ADDRESS: remote,
                      metrics.SUCCESS: str(response.status_code == 200).lower()}
        emitter.metric(metrics.SQL_QUERY_TIME, millis, **dimensions)
        emitter.metric(metrics.SQL_QUERY_BYTES, len(response.body), **dimensions)
        logged = {**context, "sqlQueryId": query_id, "nativeQueryIds": "[]"}
        request_logger.log_sql(remote, {"query": payload["query"], "context": logged,
                                        **({"parameters": payload["parameters"]} if payload.get("parameters") else {})},
                               sql_query_stats(millis, len(response.body), response.status_code == 200,
                                               request_identity(request), logged,
                                               exception=None if error is None else error.java_exception(),
                                               interrupted=error is not None and error.interrupted),
                               started_at)
        return response

    @router.post("/druid/v2/sql")
    @router.post("/druid/v2/sql/")
    async def sql(request: Request, access: AccessDep) -> Response:
        started, started_at = time.monotonic(), time.time()
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
        require_query_context(access, context)
        # The query id is known before the query runs, so that DELETE can cancel it while it does.
        query_id = str(context.get("sqlQueryId") or uuid.uuid4())
        headers = {_QUERY_ID_HEADER: query_id}
        try:
            with scheduler.running(context), query_ids(sqlQueryId=query_id):
                arguments = (payload["query"], payload.get("parameters") or [],
                             {**scheduler.limits.context(context), "sqlQueryId": query_id}, access)
                result = broker.cached(*arguments)  # a hit needs no thread
                if result is None:
                    result = await run_in_threadpool(broker.sql, *arguments)
            header = bool(payload.get("header"))
            content, media_type = render(result, result_format, header, bool(payload.get("typesHeader")),
                                         bool(payload.get("sqlTypesHeader")),
                                         stringify_arrays=QueryContext.parse(context).stringify_arrays)
        except SqlError as error:
            failed = JSONResponse(error.to_json(), status_code=error.status, headers=headers)
            return emit(payload, context, query_id, request, started, started_at, failed, error)
        if header:
            headers["X-Druid-SQL-Header-Included"] = "yes"
        return emit(payload, context, query_id, request, started, started_at,
                    Response(content, media_type=media_type, headers=headers))

    @router.delete("/druid/v2/sql/{query_id}")
    def cancel(query_id: str, access: AccessDep) -> Response:
        """Druid: 202 with an empty body once the query is told to stop, 404 when no such query runs."""
        return Response(status_code=202 if broker.cancel(query_id, access) else 404)

    return router
