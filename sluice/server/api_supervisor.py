"""Druid's supervisor API: /druid/indexer/v1/supervisor."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from sluice.metadata.offsets import StreamOffsets
from sluice.overlord.supervisor.stream_job_supervisor import StreamJobSupervisor
from sluice.overlord.supervisor.stream_supervisor import StreamSupervisor
from sluice.overlord.supervisor_manager import SupervisorConflict, SupervisorManager
from sluice.security.resources import Action, Resource
from sluice.server.auth import Access, AccessDep, supervisor_guard
from sluice.server.json_body import read_json
from sluice.spec.errors import SpecError
from sluice.spec.supervisor import parse_supervisor_spec


def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _missing(spec_id: str) -> JSONResponse:
    return _error(f"[{spec_id}] does not exist", 404)


def _summary(supervisor: StreamSupervisor | StreamJobSupervisor, **extra: Any) -> dict[str, Any]:
    state, detailed = supervisor.health()
    return {"id": supervisor.spec.id, "state": state, "detailedState": detailed, "healthy": supervisor.healthy,
            **extra, "suspended": supervisor.spec.suspended}


def _reset_partitions(body: Any, topic: str) -> dict[int, int]:
    """Druid's resetOffsets body: {"type":"kafka","partitions":{"type":"end","stream":..,"partitionOffsetMap":{..}}}."""
    try:
        offsets = StreamOffsets.from_payload(body)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise SpecError("partitions", "expected Druid's {\"type\":\"end\",\"stream\":..,\"partitionOffsetMap\":{..}}"
                        ) from None
    if not offsets.offsets:
        raise SpecError("partitions.partitionOffsetMap", "expected a non-empty map of partition to offset")
    if offsets.stream not in (None, topic):
        raise SpecError("partitions.stream", f"the supervisor reads stream [{topic}], not [{offsets.stream}]")
    return offsets.offsets


def supervisor_router(supervisors: SupervisorManager) -> APIRouter:
    router = APIRouter(prefix="/druid/indexer/v1/supervisor")

    def data_sources_of(spec_id: str) -> list[str]:
        """A supervisor's data sources; a terminated (or unknown) one's id names its data source."""
        supervisor = supervisors.get(spec_id)
        return (supervisor.spec.data_sources if supervisor else None) or [spec_id]

    def may(access: Access, action: Action, spec_id: str) -> bool:
        return all(access.allows(Resource.datasource(d), action) for d in data_sources_of(spec_id))

    def allowed(access: Access, action: Action) -> list[str]:
        """The supervisors the caller may act on, as Druid filters its lists and bulk actions."""
        return [spec_id for spec_id in supervisors.ids() if may(access, action, spec_id)]

    @router.post("")
    async def submit(request: Request, access: AccessDep,
                     skipRestartIfUnmodified: bool = False) -> Any:  # noqa: N803 - Druid's name
        try:
            spec = parse_supervisor_spec(await read_json(request))
        except SpecError as error:
            return _error(str(error), 400)
        access.require_datasources(spec.data_sources or [spec.id], Action.WRITE)
        await run_in_threadpool(supervisors.create_or_update, spec, skipRestartIfUnmodified)
        return {"id": spec.id}

    @router.get("")
    def list_supervisors(request: Request, access: AccessDep) -> Any:
        listed = [s for i in allowed(access, Action.READ) if (s := supervisors.get(i)) is not None]
        if "full" in request.query_params:
            return [_summary(s, spec=s.spec.to_json()) for s in listed]
        if request.query_params.get("state") == "true":
            return [_summary(s) for s in listed]
        if "system" in request.query_params:
            return [_summary(s, specString=json.dumps(s.spec.to_json()), type=s.spec.type,
                             source=s.spec.spec.io_config.topic)
                    for s in listed]
        return [s.spec.id for s in listed]

    @router.get("/history")
    def all_history(access: AccessDep) -> Any:
        return {spec_id: versions for spec_id, versions in supervisors.history().items()
                if may(access, Action.READ, spec_id)}

    @router.post("/suspendAll")
    def suspend_all(access: AccessDep) -> Any:
        supervisors.set_all_suspended(True, allowed(access, Action.WRITE))
        return {"status": "success"}

    @router.post("/resumeAll")
    def resume_all(access: AccessDep) -> Any:
        supervisors.set_all_suspended(False, allowed(access, Action.WRITE))
        return {"status": "success"}

    @router.post("/terminateAll")
    def terminate_all(access: AccessDep) -> Any:
        for spec_id in allowed(access, Action.WRITE):
            supervisors.terminate(spec_id)
        return {"status": "success"}

    per_supervisor = APIRouter(dependencies=[supervisor_guard(data_sources_of)])

    @per_supervisor.get("/{spec_id}")
    def get_spec(spec_id: str) -> Any:
        supervisor = supervisors.get(spec_id)
        return supervisor.spec.to_json() if supervisor else _missing(spec_id)

    @per_supervisor.get("/{spec_id}/status")
    def status(spec_id: str) -> Any:
        supervisor = supervisors.get(spec_id)
        return supervisor.status_report() if supervisor else _missing(spec_id)

    @per_supervisor.get("/{spec_id}/stats")
    def stats(spec_id: str) -> Any:
        supervisor = supervisors.get(spec_id)
        return supervisor.stats() if supervisor else _missing(spec_id)

    @per_supervisor.get("/{spec_id}/parseErrors")
    def parse_errors(spec_id: str) -> Any:
        supervisor = supervisors.get(spec_id)
        return supervisor.parse_errors() if supervisor else _missing(spec_id)

    @per_supervisor.get("/{spec_id}/health")
    def health(spec_id: str) -> Any:
        supervisor = supervisors.get(spec_id)
        if supervisor is None:
            return _error(f"[{spec_id}] does not exist or health check not implemented", 404)
        return JSONResponse({"healthy": supervisor.healthy}, status_code=200 if supervisor.healthy else 503)

    @per_supervisor.get("/{spec_id}/history")
    def history(spec_id: str) -> Any:
        entries = supervisors.history(spec_id).get(spec_id)
        return entries if entries else _error(f"No history for [{spec_id}].", 404)

    @per_supervisor.post("/{spec_id}/suspend")
    @per_supervisor.post("/{spec_id}/resume")
    def suspend_or_resume(spec_id: str, request: Request) -> Any:
        try:
            spec = supervisors.set_suspended(spec_id, request.url.path.endswith("/suspend"))
        except SupervisorConflict as error:
            return _error(str(error), 400)
        return spec if spec is not None else _missing(spec_id)

    @per_supervisor.post("/{spec_id}/reset")
    def reset(spec_id: str) -> Any:
        supervisor = supervisors.get(spec_id)
        if supervisor is None:
            return _missing(spec_id)
        supervisor.reset()
        return {"id": spec_id}

    @per_supervisor.post("/{spec_id}/resetOffsets")
    async def reset_offsets(spec_id: str, request: Request) -> Any:
        supervisor = supervisors.get(spec_id)
        if supervisor is None:
            return _missing(spec_id)
        try:
            offsets = _reset_partitions(await read_json(request), supervisor.spec.spec.io_config.topic)
            await run_in_threadpool(supervisor.reset_offsets, offsets)
        except (SpecError, SupervisorConflict) as error:
            return _error(str(error), 400)
        return {"id": spec_id}

    @per_supervisor.post("/{spec_id}/taskGroups/handoff")
    async def handoff(spec_id: str, request: Request) -> Any:
        supervisor = supervisors.get(spec_id)
        if supervisor is None:
            return _missing(spec_id)
        body = await read_json(request)
        group_ids = body.get("taskGroupIds") if isinstance(body, dict) else None
        if not isinstance(group_ids, list) or not all(isinstance(g, int) for g in group_ids):
            return _error("taskGroupIds: expected a list of task group ids", 400)
        await run_in_threadpool(supervisor.handoff, group_ids)
        return Response(status_code=200)

    @per_supervisor.post("/{spec_id}/terminate")
    @per_supervisor.post("/{spec_id}/shutdown")
    def terminate(spec_id: str) -> Any:
        return {"id": spec_id} if supervisors.terminate(spec_id) else _missing(spec_id)

    router.include_router(per_supervisor)
    return router
