"""Druid's lookups API on the coordinator's paths (/druid/coordinator/v1/lookups/…, CONFIG READ/WRITE as Druid's
ConfigResourceFilter): the lookup specs of every tier, and their status.

Writes answer 202 as Druid's do. A spec Sluice cannot serve, or an update whose version does not exceed the stored
one's, is a 400 `{"error": …}` naming the field (Druid answers the version conflict with a 500 and the same
message; it is the request's fault, so Sluice says 400). Brokers read the specs from the metadata store themselves
(no push to nodes), so a stored lookup is loaded everywhere as far as the status endpoints are concerned.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from sluice.lookups.coordinator import (
    LookupConflict,
    LookupNotFound,
    Lookups,
    change_lookups,
    read_lookups,
    with_update,
    without_lookup,
    without_tier,
)
from sluice.lookups.specs import DEFAULT_TIER, parse_tiers, parse_versioned
from sluice.metadata.store import MetadataStore
from sluice.security.resources import CONFIG
from sluice.server.auth import audit_info, config_guard
from sluice.server.json_body import read_json
from sluice.spec.errors import SpecError

def _error(message: str, status: int) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def lookups_router(metadata: MetadataStore) -> APIRouter:
    router = APIRouter(prefix="/druid/coordinator/v1/lookups", dependencies=[config_guard(CONFIG)])

    def update(request: Request, tiers: Lookups) -> Response | None:
        """Adds or replaces the given lookups; None when done, else the error to answer."""
        try:
            change_lookups(metadata, lambda current: with_update(current, tiers), audit_info(request))
        except LookupConflict as conflict:
            return _error(str(conflict), 400)
        return None

    def delete(request: Request, change: Any) -> Response:
        try:
            change_lookups(metadata, change, audit_info(request))
        except LookupNotFound as missing:
            return _error(str(missing), 404)
        return Response(status_code=202)

    @router.get("/config")
    def tiers(discover: bool = False) -> Any:
        """The configured tiers; with `discover`, also the tier Sluice's brokers load (Druid lists the tiers its
        lookup-loading nodes announce)."""
        known = read_lookups(metadata)
        if discover:
            return sorted(set(known or ()) | {DEFAULT_TIER})
        return Response(status_code=404) if known is None else list(known)

    @router.post("/config")
    async def update_all(request: Request) -> Response:
        """Adds or replaces every lookup of the posted `{tier: {name: spec}}` (none is deleted); `{}` initializes
        the lookups, as the Druid console does before the first one."""
        body = await read_json(request)
        try:
            parse_tiers(body)
        except SpecError as error:
            return _error(str(error), 400)
        return update(request, body) or JSONResponse(body, status_code=202)

    @router.get("/config/all")
    def everything() -> Any:
        known = read_lookups(metadata)
        return Response(status_code=404) if known is None else known

    def tier_of(tier: str, missing: str) -> dict[str, Any] | Response:
        """The tier's lookups, or Druid's 404: no lookups configured at all, or none in this tier (`missing`)."""
        known = read_lookups(metadata)
        if known is None:
            return _error("No lookups found", 404)
        return known[tier] if tier in known else _error(missing, 404)

    @router.get("/config/{tier}")
    def tier_lookups(tier: str, detailed: bool = False) -> Any:
        found = tier_of(tier, f"Tier [{tier}] not found")
        return found if isinstance(found, Response) or detailed else list(found)

    @router.delete("/config/{tier}")
    def delete_tier(tier: str, request: Request) -> Response:
        return delete(request, lambda current: without_tier(current, tier))

    @router.get("/config/{tier}/{name}")
    def lookup_spec(tier: str, name: str) -> Any:
        spec = (read_lookups(metadata) or {}).get(tier, {}).get(name)
        return _error(f"lookup [{name}] not found", 404) if spec is None else spec

    @router.post("/config/{tier}/{name}")
    async def create_or_update(tier: str, name: str, request: Request) -> Response:
        body = await read_json(request)
        try:
            parse_versioned(body, tier, name)
        except SpecError as error:
            return _error(str(error), 400)
        return update(request, {tier: {name: body}}) or Response(status_code=202)

    @router.delete("/config/{tier}/{name}")
    def delete_lookup(tier: str, name: str, request: Request) -> Response:
        return delete(request, lambda current: without_lookup(current, tier, name))

    def status(names: Iterable[str], detailed: bool) -> dict[str, Any]:
        """Druid's LookupStatus of each lookup: loaded on every broker (each reads the store itself)."""
        return {name: {"loaded": True, "pendingNodes": []} if detailed else {"loaded": True} for name in names}

    @router.get("/status")
    def all_status(detailed: bool = False) -> Any:
        known = read_lookups(metadata)
        if known is None:
            return _error("No lookups found", 404)
        return {tier: status(lookups, detailed) for tier, lookups in known.items()}

    @router.get("/status/{tier}")
    def tier_status(tier: str, detailed: bool = False) -> Any:
        found = tier_of(tier, f"No lookups found for tier [{tier}].")
        return found if isinstance(found, Response) else status(found, detailed)

    @router.get("/status/{tier}/{name}")
    def lookup_status(tier: str, name: str, detailed: bool = False) -> Any:
        known = read_lookups(metadata)
        if known is None:
            return _error("No lookups found", 404)
        if tier not in known:
            return _error(f"No lookups found for tier [{tier}].", 404)
        if name not in known[tier]:
            return _error(f"Lookup [{name}] not found for tier [{tier}].", 404)
        return status([name], detailed)[name]

    return router
