"""Leadership over HTTP, as Druid's overlord answers it: `isLeader` (200 `{"leader": true}` or 404
`{"leader": false}`) and `leader` (the leader's URL) answer on every overlord; a standby sends every other overlord
API call to the leader with a 307 (the same path and query), or answers 503 while no leader is known."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from sluice.metadata.store import NotLeader
from sluice.server.auth import state_guard

#: the overlord's APIs, which only its leader serves
_LEADER_PATHS = ("/druid/indexer/v1/", "/druid/coordinator/v1/")
#: answered by every overlord, leader or not
_LOCAL_PATHS = frozenset({"/druid/indexer/v1/leader", "/druid/indexer/v1/isLeader",
                          "/druid/coordinator/v1/leader", "/druid/coordinator/v1/isLeader"})


def leadership_router(is_leader: Callable[[], bool], leader: Callable[[], str | None]) -> APIRouter:
    router = APIRouter()

    @router.get("/druid/indexer/v1/isLeader")
    @router.get("/druid/coordinator/v1/isLeader")
    def is_leader_now() -> JSONResponse:
        leading = is_leader()
        return JSONResponse({"leader": leading}, status_code=200 if leading else 404)

    @router.get("/druid/indexer/v1/leader", dependencies=[state_guard()])
    @router.get("/druid/coordinator/v1/leader", dependencies=[state_guard()])
    def current_leader() -> Response:
        url = leader()
        if url is None:
            return JSONResponse({"error": "no overlord leader is known yet"}, status_code=503)
        return Response(url, media_type="text/plain")

    return router


def refuse_when_deposed(app: FastAPI) -> None:
    """A write refused by the fence (this overlord lost its lease meanwhile) is a 503: the caller tries the leader."""

    @app.exception_handler(NotLeader)
    async def not_leader(_request: Request, error: NotLeader) -> JSONResponse:
        return JSONResponse({"error": str(error)}, status_code=503)


class LeaderRedirect:
    def __init__(self, app: ASGIApp, is_leader: Callable[[], bool], leader: Callable[[], str | None]) -> None:
        self._app = app
        self._is_leader = is_leader
        self._leader = leader

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if (scope["type"] != "http" or not path.startswith(_LEADER_PATHS) or path in _LOCAL_PATHS
                or self._is_leader()):
            await self._app(scope, receive, send)
            return
        leader = await run_in_threadpool(self._leader)
        if leader is None:
            response: Response = JSONResponse({"error": "this overlord is a standby and no leader is known yet; "
                                                        "try again"}, status_code=503)
        else:
            query = scope.get("query_string", b"").decode()
            response = Response(status_code=307, headers={"Location": leader + path + (f"?{query}" if query else "")})
        await response(scope, receive, send)
