"""Druid's supervisor API: /druid/indexer/v1/supervisor."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from sluice.overlord.supervisor_manager import SupervisorManager
from sluice.server.json_body import read_json
from sluice.spec import SpecError, parse_supervisor_spec


def supervisor_router(supervisors: SupervisorManager) -> APIRouter:
    router = APIRouter(prefix="/druid/indexer/v1/supervisor")

    def missing(spec_id: str) -> JSONResponse:
        return JSONResponse({"error": f"[{spec_id}] does not exist"}, status_code=404)

    @router.post("")
    async def submit(request: Request) -> Any:
        try:
            spec = parse_supervisor_spec(await read_json(request))
        except SpecError as error:
            return JSONResponse({"error": str(error)}, status_code=400)
        supervisors.create_or_update(spec)
        return {"id": spec.id}

    @router.get("")
    def list_ids() -> Any:
        return supervisors.ids()

    @router.get("/{spec_id}")
    def get_spec(spec_id: str) -> Any:
        supervisor = supervisors.get(spec_id)
        return supervisor.spec.to_json() if supervisor else missing(spec_id)

    @router.get("/{spec_id}/status")
    def status(spec_id: str) -> Any:
        supervisor = supervisors.get(spec_id)
        return supervisor.status_report() if supervisor else missing(spec_id)

    @router.post("/{spec_id}/terminate")
    @router.post("/{spec_id}/shutdown")
    def terminate(spec_id: str) -> Any:
        return {"id": spec_id} if supervisors.terminate(spec_id) else missing(spec_id)

    return router
