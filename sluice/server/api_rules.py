"""Druid's retention rules API (/druid/coordinator/v1/rules…): each data source's rules, the cluster's `_default`
ones, and the audited history of changes. A rules array that is not Druid's is a 400 naming the rule and field."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from sluice.coordinator.rules import DEFAULT, DEFAULT_RULES, InvalidRule, parse_rules
from sluice.metadata.store import MetadataStore
from sluice.server.auth import datasource_guard, state_guard
from sluice.server.json_body import read_json


def rules_router(metadata: MetadataStore) -> APIRouter:
    router = APIRouter(prefix="/druid/coordinator/v1/rules")

    def in_force() -> dict[str, list[dict[str, Any]]]:
        return {DEFAULT: DEFAULT_RULES, **metadata.rules()}

    @router.get("", dependencies=[state_guard()])
    def all_rules() -> dict[str, list[dict[str, Any]]]:
        return in_force()

    @router.get("/history", dependencies=[state_guard()])
    def all_history(count: int | None = None) -> list[dict[str, Any]]:
        return metadata.rules_history(count=count)

    @router.get("/{data_source}", dependencies=[datasource_guard()])
    def rules_of(data_source: str, request: Request) -> list[dict[str, Any]]:
        """Its own rules; with `?full`, the default rules after them, as they are applied."""
        rules = in_force()
        own = rules.get(data_source, [])
        return own + rules[DEFAULT] if "full" in request.query_params and data_source != DEFAULT else own

    @router.post("/{data_source}", dependencies=[datasource_guard()])
    async def set_rules(data_source: str, request: Request) -> Response:
        body = await read_json(request)
        try:
            parse_rules(body)
        except InvalidRule as error:
            return JSONResponse({"error": str(error)}, status_code=400)
        metadata.set_rules(data_source, body, request.headers.get("X-Druid-Author", ""),
                           request.headers.get("X-Druid-Comment", ""),
                           request.client.host if request.client else None)
        return Response(status_code=200)

    @router.get("/{data_source}/history", dependencies=[datasource_guard()])
    def history_of(data_source: str, count: int | None = None) -> list[dict[str, Any]]:
        return metadata.rules_history(data_source, count)

    return router
