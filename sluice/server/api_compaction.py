"""Druid's automatic compaction API on the coordinator's paths: the configs (/druid/coordinator/v1/config/compaction…,
CONFIG READ/WRITE as Druid's ConfigResourceFilter) and the duty's status (/druid/coordinator/v1/compaction/…, STATE
as Druid's StateResourceFilter). A config Druid would not take, or Sluice cannot run, is a 400 naming the field."""

from __future__ import annotations

from typing import Any, Protocol

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError

from sluice.coordinator.compaction import (AutoCompactionSnapshot, ClusterCompactionConfig,
                                           DruidCompactionConfig, compaction_config_history, parse_data_source_config,
                                           read_compaction_config, update_compaction_config)
from sluice.metadata.store import MetadataStore
from sluice.security.resources import CONFIG
from sluice.segment.segment import Interval
from sluice.server.auth import audit_info, config_guard, state_guard
from sluice.server.json_body import read_json
from sluice.spec.errors import SpecError, from_validation_error
from sluice.spec.intervals import parse_interval

NOT_FOUND = "Datasource compaction config does not exist"


class CompactionDuty(Protocol):
    def run_once(self) -> list[str]: ...
    def snapshots(self) -> dict[str, AutoCompactionSnapshot]: ...


class _NoConfig(LookupError):
    pass


def compaction_router(metadata: MetadataStore, duty: CompactionDuty) -> APIRouter:
    router = APIRouter(prefix="/druid/coordinator/v1")
    guard = [config_guard(CONFIG)]

    def bad(message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=400)

    @router.get("/config/compaction", dependencies=guard)
    def cluster_config() -> dict[str, Any]:
        return read_compaction_config(metadata).to_json()

    @router.post("/config/compaction", dependencies=guard)
    async def add_or_update(request: Request) -> Response:
        """Adds the data source's config or replaces it; 200 whether the data source exists or not, as Druid."""
        try:
            config = parse_data_source_config(await read_json(request))
        except SpecError as error:
            return bad(str(error))
        update_compaction_config(metadata, lambda current: current.with_config(config), audit_info(request))
        return Response(status_code=200)

    @router.post("/config/compaction/cluster", dependencies=guard)
    async def set_cluster(request: Request) -> Response:
        body = await read_json(request)
        try:
            update = ClusterCompactionConfig.model_validate(body)
        except ValidationError as err:
            return bad(str(from_validation_error(err, body)))
        update_compaction_config(metadata, lambda current: current.with_cluster(update), audit_info(request))
        return Response(status_code=200)

    @router.post("/config/compaction/taskslots", dependencies=guard)
    def set_task_slots(request: Request) -> Response:
        """Druid's older form of the cluster call: `?ratio=` (compactionTaskSlotRatio) and `?max=`
        (maxCompactionTaskSlots), each kept when left out."""
        given = {"compactionTaskSlotRatio": request.query_params.get("ratio"),
                 "maxCompactionTaskSlots": request.query_params.get("max")}
        try:
            update = ClusterCompactionConfig.model_validate({k: v for k, v in given.items() if v is not None})
        except ValidationError as err:
            name = {"compactionTaskSlotRatio": "ratio", "maxCompactionTaskSlots": "max"}
            error = from_validation_error(err, given)
            return bad(f"{name.get(error.path, error.path)}: {error.message}")
        update_compaction_config(metadata, lambda current: current.with_cluster(update), audit_info(request))
        return Response(status_code=200)

    @router.get("/config/compaction/{data_source}", dependencies=guard)
    def config_of(data_source: str) -> Any:
        config = read_compaction_config(metadata).find(data_source)
        return JSONResponse({"error": NOT_FOUND}, 404) if config is None else config.to_json()

    @router.delete("/config/compaction/{data_source}", dependencies=guard)
    def delete_config(data_source: str, request: Request) -> Response:
        def without(current: DruidCompactionConfig) -> DruidCompactionConfig:
            if current.find(data_source) is None:
                raise _NoConfig()  # leaves the stored document as it is, and writes no audit entry
            return current.without(data_source)

        try:
            update_compaction_config(metadata, without, audit_info(request))
        except _NoConfig:
            return JSONResponse({"error": NOT_FOUND}, 404)
        return Response(status_code=200)

    @router.get("/config/compaction/{data_source}/history", dependencies=guard)
    def history_of(data_source: str, count: int | None = None, interval: str | None = None) -> Any:
        """Every audited change of the data source's config, oldest first; `count` keeps the newest ones, `interval`
        those made within it."""
        try:
            within = None if interval is None else Interval(*parse_interval(interval.replace("_", "/")))
        except ValueError as error:
            return bad(f"interval: {error}")
        return compaction_config_history(metadata, data_source, count, within)

    def snapshots(data_source: str | None = None) -> list[AutoCompactionSnapshot]:
        """The last run's snapshots of the data sources with a config (of one, when named); before the duty's first
        run, empty ones."""
        last = duty.snapshots()
        return [last.get(c.data_source) or AutoCompactionSnapshot(c.data_source)
                for c in read_compaction_config(metadata).compaction_configs
                if data_source is None or c.data_source == data_source]

    def unknown() -> JSONResponse:  # Druid's NotFound DruidException
        return JSONResponse({"error": "druidException", "errorCode": "notFound", "persona": "USER",
                             "category": "NOT_FOUND", "errorMessage": "Unknown DataSource", "context": {}}, 404)

    @router.get("/compaction/status", dependencies=[state_guard()])
    def status(dataSource: str | None = None) -> Any:  # noqa: N803 - Druid's parameter name
        found = snapshots(dataSource or None)
        return unknown() if dataSource and not found else {"latestStatus": [s.to_json() for s in found]}

    @router.get("/compaction/progress", dependencies=[state_guard()])
    def progress(dataSource: str | None = None) -> Any:  # noqa: N803
        if not dataSource:
            return JSONResponse({"error": "druidException", "errorCode": "invalidInput", "persona": "USER",
                                 "category": "INVALID_INPUT", "errorMessage": "No DataSource specified",
                                 "context": {}}, 400)
        found = snapshots(dataSource)
        return {"remainingSegmentSize": found[0].awaiting.bytes} if found else unknown()

    @router.post("/compaction/compact", dependencies=guard)
    def run_now() -> Response:
        """Druid's trigger of one run now, outside the coordinator period (meant for tests, as in Druid)."""
        duty.run_once()
        return Response(status_code=200)

    return router
