"""Druid's coordinator data-management API (/druid/coordinator/v1/datasources/…): marking segments unused or used,
and the kill shortcut. Served by the overlord role, which holds the task queue.

Marking is a metadata change only: the broker reads used segments, so a segment marked unused leaves every
query at the broker's next snapshot, and one marked used comes back (unless a newer version overshadows it).
Nothing is deleted until a kill task deletes unused segments, rows and files.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from sluice.metadata.store import EntryExistsError, MetadataStore
from sluice.overlord.task_queue import QueueFull, TaskQueue
from sluice.segment.segment import ETERNITY, Interval
from sluice.server.auth import datasource_guard
from sluice.server.json_body import read_json
from sluice.spec.intervals import parse_interval
from sluice.task.kill_task import KillTaskPayload, KillTaskSpec, new_kill_task_id


class BadRequest(ValueError):
    """A request body Druid refuses with 400; the message names the field."""


def segments_filter(body: Any) -> tuple[Interval | None, list[str] | None, list[str] | None]:
    """Druid's SegmentsToUpdateFilter: `interval` (with optional `versions`) or `segmentIds`, exactly one."""
    if not isinstance(body, dict):
        raise BadRequest("request body: expected a JSON object with 'interval' or 'segmentIds'")
    unknown = sorted(set(body) - {"interval", "segmentIds", "versions"})
    if unknown:
        raise BadRequest(f"{unknown[0]}: unknown field; expected 'interval' or 'segmentIds' (and 'versions')")
    interval, ids, versions = body.get("interval"), body.get("segmentIds"), body.get("versions")
    if (interval is None) == (ids is None):
        raise BadRequest("Invalid request payload. Specify either 'interval' or 'segmentIds', but not both. "
                         "Optionally, include 'versions' only when 'interval' is provided.")
    if versions is not None:
        if interval is None:
            raise BadRequest("versions: can only be given with 'interval'")
        if not isinstance(versions, list) or not all(isinstance(v, str) for v in versions):
            raise BadRequest(f"versions: expected an array of version strings, got {versions!r}")
    if ids is not None:
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
            raise BadRequest(f"segmentIds: expected a non-empty array of segment id strings, got {ids!r}")
        return None, ids, None
    try:
        return Interval(*parse_interval(interval)), None, versions
    except ValueError as error:
        raise BadRequest(f"interval: {error}") from None


def coordinator_router(metadata: MetadataStore, queue: TaskQueue) -> APIRouter:
    router = APIRouter(prefix="/druid/coordinator/v1", dependencies=[datasource_guard()])  # all per data source

    def bad(message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=400)

    async def mark(data_source: str, request: Request, used: bool) -> Any:
        try:
            interval, ids, versions = segments_filter(await read_json(request))
        except BadRequest as error:
            return bad(str(error))
        if not metadata.has_segments(data_source):
            return Response(status_code=204)  # Druid: no such data source
        if used and ids is not None:
            unknown = sorted(set(ids) - set(metadata.segments_by_id(data_source, ids)))
            if unknown:
                return bad(f"segmentIds: Could not find segment IDs{unknown} for datasource[{data_source}]")
        change = metadata.mark_segments_used if used else metadata.mark_segments_unused
        return {"numChangedSegments": change(data_source, interval, ids, versions)}

    @router.post("/datasources/{data_source}/markUnused")
    async def mark_unused(data_source: str, request: Request) -> Any:
        return await mark(data_source, request, used=False)

    @router.post("/datasources/{data_source}/markUsed")
    async def mark_used(data_source: str, request: Request) -> Any:
        return await mark(data_source, request, used=True)

    @router.delete("/datasources/{data_source}")
    def mark_all_unused(data_source: str) -> dict[str, int]:
        return {"numChangedSegments": metadata.mark_segments_unused(data_source, ETERNITY)}

    @router.post("/datasources/{data_source}")
    def mark_all_used(data_source: str) -> dict[str, int]:
        """Every unused segment that no other would overshadow (Druid's markAsUsedAllNonOvershadowedSegments)."""
        return {"numChangedSegments": metadata.mark_segments_used(data_source, ETERNITY)}

    def one_segment(data_source: str, segment_id: str, used: bool) -> Any:
        if not segment_id.startswith(f"{data_source}_"):
            return bad(f"segmentId: Could not parse Segment ID[{segment_id}] for DataSource[{data_source}]")
        return {"segmentStateChanged": metadata.set_segment_used(data_source, segment_id, used)}

    @router.delete("/datasources/{data_source}/segments/{segment_id}")
    def mark_segment_unused(data_source: str, segment_id: str) -> Any:
        return one_segment(data_source, segment_id, used=False)

    @router.post("/datasources/{data_source}/segments/{segment_id}")
    def mark_segment_used(data_source: str, segment_id: str) -> Any:
        return one_segment(data_source, segment_id, used=True)

    @router.delete("/datasources/{data_source}/intervals/{interval}")
    def kill_unused(data_source: str, interval: str) -> Any:
        """Submit a kill task of the interval (`_` stands for `/`); Druid answers 200 with an empty body."""
        try:
            parsed = Interval(*parse_interval(interval.replace("_", "/")))
        except ValueError as error:
            return bad(f"interval: {error}")
        task_id = new_kill_task_id(data_source, parsed, prefix="api-issued")
        payload = KillTaskPayload(type="kill", id=task_id, data_source=data_source, interval=str(parsed))
        try:
            queue.add(KillTaskSpec(task_id, payload))
        except (EntryExistsError, QueueFull) as error:
            return JSONResponse({"error": str(error)}, status_code=429 if isinstance(error, QueueFull) else 400)
        return Response(status_code=200)

    return router
