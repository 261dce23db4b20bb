"""Druid's native query API (`POST /druid/v2`, `DELETE /druid/v2/{queryId}`) and the data source metadata
endpoints of the broker (`/druid/v2/datasources…`) and the coordinator (`/druid/coordinator/v1/datasources…`,
`/druid/coordinator/v1/metadata/datasources…`).

The broker and coordinator views are the broker's visible segments (what the timeline serves: overshadowed
segments are not there); the metadata views are the used segments in the metadata store. Every native query
emits Druid's query/time and query/bytes.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from sluice.broker.broker import Broker
from sluice.broker.native.queries import NativeQueryRunner
from sluice.broker.scheduler import QueryScheduler
from sluice.broker.native.metadata import (
    DEFAULT_HISTORY, dimensions_and_metrics, full_data_source, segment_json, served_intervals, simple_properties,
)
from sluice.timestamps import EpochInterval, add_period, parse_interval
from sluice.broker.errors import SqlError
from sluice.emitter import NoopEmitter, ServiceEmitter, metrics
from sluice.metadata.store import MetadataStore
from sluice.logs import query_ids
from sluice.security.access import Forbidden, require_query_context
from sluice.server.request_log import RequestLogger, native_query_stats, request_identity, table_names
from sluice.segment.segment import DataSegment
from sluice.server.auth import AccessDep, datasource_guard, state_guard

log = logging.getLogger(__name__)
_TABLES_SQL = "SELECT TABLE_NAME FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = 'druid'"


def _json(content: Any, status: int = 200, pretty: bool = False, headers: dict[str, str] | None = None) -> Response:
    text = json.dumps(content, ensure_ascii=False, allow_nan=False, indent=2 if pretty else None,
                      separators=None if pretty else (",", ":"))
    return Response(text, status_code=status, media_type="application/json", headers=headers)


def _error(status: int, error: str, message: str, error_class: str, headers: dict[str, str] | None = None) -> Response:
    body = {"error": error, "errorMessage": message, "errorClass": error_class, "host": None}
    return _json(body, status, headers=headers)


def _no_content() -> Response:
    """The coordinator answers an unknown data source with 204 and no body."""
    return Response(status_code=204)


def _interval(text: str | None) -> EpochInterval:
    """A `start/end` (or `start_end`) query parameter; by default the week before now (defaultHistory)."""
    if text:
        return parse_interval(text.replace("_", "/"))
    now = int(time.time() * 1000)
    return EpochInterval(add_period(now, DEFAULT_HISTORY, None, -1), now)


def _sorted(segments: list[DataSegment]) -> list[DataSegment]:
    return sorted(segments, key=lambda s: s.id)


def query_dimensions(payload: Any) -> dict[str, Any]:
    """Druid's dataSource and type dimensions of a native query, from its JSON as written: a table's name, or for
    any other data source the tables it reads printed as Java prints a list (Druid's DataSourceUtil.getMetricName)."""
    if not isinstance(payload, dict):
        return {metrics.DATASOURCE: None, metrics.TYPE: None}
    source = payload.get("dataSource")
    if isinstance(source, dict) and source.get("type") == "table":
        source = source.get("name")
    elif isinstance(source, dict):
        source = f"[{', '.join(dict.fromkeys(table_names(source)))}]"
    return {metrics.DATASOURCE: source if isinstance(source, str) else None,
            metrics.TYPE: payload.get("queryType") if isinstance(payload.get("queryType"), str) else None}


def native_router(broker: Broker, metadata: MetadataStore,
                  emitter: ServiceEmitter = ServiceEmitter("druid/broker", "", NoopEmitter()),
                  scheduler: QueryScheduler | None = None, request_logger: RequestLogger = RequestLogger()
                  ) -> APIRouter:
    """`emitter` takes each native query's query/time and query/bytes, `request_logger` a line of Druid's request
    log; `scheduler` (shared with the SQL API) sets the timeout a query runs under and how many run at once."""
    scheduler = scheduler or QueryScheduler()
    router = APIRouter()
    runner = NativeQueryRunner(broker)

    @router.post("/druid/v2")
    @router.post("/druid/v2/")
    async def native_query(request: Request, access: AccessDep) -> Response:
        started, started_at = time.monotonic(), time.time()
        failure: str | None = None
        interrupted = False
        try:
            payload = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            return _error(400, "Json parse failed", str(error), "com.fasterxml.jackson.core.JsonParseException")
        context = payload.get("context") if isinstance(payload, dict) else None
        query_id = context.get("queryId") if isinstance(context, dict) else None
        headers = {"X-Druid-Query-Id": str(query_id or uuid.uuid4())}
        if isinstance(context, dict):
            require_query_context(access, context)
        try:
            if isinstance(payload, dict):
                payload = {**payload, "context": scheduler.limits.context(context or {})}
            with scheduler.running(context), query_ids(queryId=headers["X-Druid-Query-Id"]):
                result = await run_in_threadpool(runner.run, payload, headers["X-Druid-Query-Id"], access)
            response = _json(result, pretty="pretty" in request.query_params, headers=headers)
        except SqlError as error:
            response = _json(error.to_json(), error.status, headers=headers)
            failure, interrupted = error.java_exception(), error.interrupted
        except (Forbidden, RecursionError):  # answered by the app's handlers: 403, and 400 for too deep a query
            raise
        except Exception as error:  # a failure of Sluice, not of the query
            log.exception("native query %s failed", headers["X-Druid-Query-Id"])
            response = _error(500, "Unknown exception", str(error), type(error).__name__, headers)
            failure, interrupted = f"{type(error).__name__}: {error}", False
        dimensions = {**query_dimensions(payload), metrics.ID: headers["X-Druid-Query-Id"],
                      metrics.REMOTE_ADDRESS: request.client.host if request.client else None,
                      metrics.SUCCESS: str(response.status_code == 200).lower()}
        millis = (time.monotonic() - started) * 1000
        emitter.metric(metrics.QUERY_TIME, millis, **dimensions)
        emitter.metric(metrics.QUERY_BYTES, len(response.body), **dimensions)
        if isinstance(payload, dict):
            request_logger.log_native(
                dimensions[metrics.REMOTE_ADDRESS],
                {**payload, "context": {**(context if isinstance(context, dict) else {}),
                                        "queryId": headers["X-Druid-Query-Id"]}},
                native_query_stats(millis, len(response.body), response.status_code == 200, request_identity(request),
                                   exception=failure, interrupted=interrupted),
                started_at)
        return response

    @router.delete("/druid/v2/{query_id}")
    def cancel(query_id: str, access: AccessDep) -> Response:
        """Druid: 202 once the query is told to stop, 404 when no such query runs."""
        return Response(status_code=202 if broker.cancel(query_id, access) else 404)

    # ---------------------------------------------------------------------------------------- broker

    @router.get("/druid/v2/datasources")
    def broker_data_sources(access: AccessDep) -> Response:
        """Queryable data sources: those with segments and those only running tasks hold rows of."""
        return _json(sorted(name for (name,) in broker.sql(_TABLES_SQL, permissions=access).rows))

    @router.get("/druid/v2/datasources/{data_source}", dependencies=[datasource_guard()])
    def broker_data_source(data_source: str, request: Request) -> Response:
        segments = broker.visible_segments().get(data_source, [])
        try:
            interval = _interval(request.query_params.get("interval"))
        except ValueError as error:
            return _error(400, "druidException", str(error), "org.apache.druid.error.DruidException")
        if "full" in request.query_params:
            return _json(served_intervals(segments, interval))
        return _json(dimensions_and_metrics(segments, interval))

    # ----------------------------------------------------------------------------------- coordinator

    @router.get("/druid/coordinator/v1/datasources")
    def coordinator_data_sources(request: Request, access: AccessDep) -> Response:
        visible = broker.visible_segments()
        visible = {name: visible[name] for name in access.readable(visible)}
        if "full" in request.query_params:
            return _json([full_data_source(name, visible[name]) for name in sorted(visible)])
        if "simple" in request.query_params:
            return _json([{"name": name, "properties": simple_properties(visible[name])} for name in sorted(visible)])
        return _json(sorted(visible))

    @router.get("/druid/coordinator/v1/datasources/{data_source}", dependencies=[datasource_guard()])
    def coordinator_data_source(data_source: str, request: Request) -> Response:
        segments = broker.visible_segments().get(data_source)
        if not segments:
            return _no_content()
        if "full" in request.query_params:
            return _json(full_data_source(data_source, segments))
        return _json(simple_properties(segments))

    @router.get("/druid/coordinator/v1/loadstatus", dependencies=[state_guard()])
    def load_status() -> Response:
        """Druid's percentage of each data source's segments loaded (here: into the broker's DuckDB storage)."""
        return _json(broker.load_status())

    @router.get("/druid/coordinator/v1/datasources/{data_source}/intervals", dependencies=[datasource_guard()])
    def coordinator_intervals(data_source: str) -> Response:
        segments = broker.visible_segments().get(data_source)
        if not segments:
            return _no_content()
        intervals = sorted({s.interval for s in segments}, key=lambda i: (i.start, i.end), reverse=True)
        return _json([str(i) for i in intervals])

    @router.get("/druid/coordinator/v1/datasources/{data_source}/segments", dependencies=[datasource_guard()])
    def coordinator_segments(data_source: str, request: Request) -> Response:
        segments = broker.visible_segments().get(data_source)
        if not segments:
            return _no_content()
        if "full" in request.query_params:
            return _json([segment_json(s) for s in _sorted(segments)])
        return _json([str(s.id) for s in _sorted(segments)])

    @router.get("/druid/coordinator/v1/datasources/{data_source}/segments/{segment_id}",
                dependencies=[datasource_guard()])
    def coordinator_segment(data_source: str, segment_id: str, request: Request) -> Response:
        for segment in broker.visible_segments().get(data_source, []):
            if str(segment.id) == segment_id:
                return _json({"metadata": segment_json(segment), "servers": [request.url.netloc]})
        return _no_content()

    # -------------------------------------------------------------------------------------- metadata

    @router.get("/druid/coordinator/v1/metadata/datasources")
    def metadata_data_sources(request: Request, access: AccessDep) -> Response:
        if "full" in request.query_params:
            by_source: dict[str, list[DataSegment]] = {}
            for segment in metadata.used_segments():
                by_source.setdefault(segment.data_source, []).append(segment)
            return _json([full_data_source(name, by_source[name]) for name in access.readable(sorted(by_source))])
        return _json(access.readable(metadata.data_sources()))

    @router.get("/druid/coordinator/v1/metadata/datasources/{data_source}", dependencies=[datasource_guard()])
    def metadata_data_source(data_source: str) -> Response:
        segments = metadata.used_segments(data_source)
        return _json(full_data_source(data_source, segments)) if segments else Response(status_code=404)

    @router.get("/druid/coordinator/v1/metadata/datasources/{data_source}/segments",
                dependencies=[datasource_guard()])
    def metadata_segments(data_source: str, request: Request) -> Response:
        segments = metadata.used_segments(data_source)
        if not segments:
            return Response(status_code=404)
        if "full" in request.query_params:
            return _json([segment_json(s) for s in segments])
        return _json([str(s.id) for s in segments])

    @router.get("/druid/coordinator/v1/metadata/datasources/{data_source}/segments/{segment_id}",
                dependencies=[datasource_guard()])
    def metadata_segment(data_source: str, segment_id: str) -> Response:
        for segment in metadata.used_segments(data_source):
            if str(segment.id) == segment_id:
                return _json(segment_json(segment))
        return Response(status_code=404)

    return router
