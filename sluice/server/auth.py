"""Authentication and authorization at the HTTP edge, as Druid's filters do it.

`AuthenticationMiddleware` runs the authenticator chain on every request but the unsecured paths and answers 401
itself. Every route then declares its check as a dependency: a guard named after Druid's resource filter
(`state_guard`, `config_guard`, `datasource_guard`, `task_guard`, `supervisor_guard`), whose action is READ for
GET and WRITE otherwise, or `request_access` for a handler that checks what only its body names (a spec's data
source, the tables of a query). A node without security configured has no middleware and every check passes.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, Iterable

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from sluice.security.config import AuthConfig
from sluice.security.access import AuthenticationResult, Forbidden, Security, Unauthenticated, readable, require
from sluice.metadata.store import AuditInfo
from sluice.security.resources import SECURITY, STATE, Action, Resource, ResourceAction, ResourceType

#: always served without authentication (Druid's UNSECURED_PATHS of the overlord and coordinator)
UNSECURED_PATHS = ("/status/health", "/druid/indexer/v1/isLeader", "/druid/coordinator/v1/isLeader")


class AuthenticationMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        security: Security = scope["app"].state.security
        if _unsecured(scope, security.config):
            await self._app(scope, receive, send)
            return
        try:  # PBKDF2 and a metadata read: not on the event loop
            who = await run_in_threadpool(security.authenticate, Headers(scope=scope).get("authorization"))
        except Unauthenticated as error:
            response = JSONResponse({"error": "Unauthorized request", "errorMessage": str(error), "errorClass": None,
                                     "host": None}, status_code=401, headers={"WWW-Authenticate": 'Basic realm="druid"'})
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["auth"] = who
        await self._app(scope, receive, send)


def _unsecured(scope: Scope, config: AuthConfig) -> bool:
    return (scope["path"] in UNSECURED_PATHS or scope["path"] in config.unsecured_paths
            or (scope["method"] == "OPTIONS" and config.allow_unauthenticated_http_options))


def install(app: FastAPI, config: AuthConfig) -> None:
    """Called before the app serves; `serve_security` gives it the Security to consult before the first request
    (a node builds that once its metadata store is up)."""
    if not config.open:
        app.add_middleware(AuthenticationMiddleware)

    @app.exception_handler(Forbidden)
    async def forbidden(_request: Request, error: Forbidden) -> JSONResponse:
        return JSONResponse({"Access-Check-Result": str(error) or "Unauthorized"}, status_code=403)


class Access:
    """What the identity behind one request may do."""

    def __init__(self, security: Security | None, who: AuthenticationResult | None) -> None:
        self._security = security
        self._who = who

    def allows(self, resource: Resource, action: Action) -> bool:
        """Druid asks the authorizer about system tables and query context keys only where its config says so: the
        others are allowed without asking."""
        if self._security is None or self._security.config.open:
            return True
        config = self._security.config
        if resource.type is ResourceType.SYSTEM_TABLE and not config.authorize_system_tables_directly:
            return True
        if resource.type is ResourceType.QUERY_CONTEXT and not config.context_keys_to_authorize([resource.name]):
            return True
        return self._who is not None and self._security.authorize(self._who, ResourceAction(resource, action))

    def require(self, resource: Resource, action: Action) -> None:
        require(self, resource, action)

    def require_datasources(self, names: Iterable[str], action: Action) -> None:
        for name in names:
            self.require(Resource.datasource(name), action)

    def readable(self, data_sources: Iterable[str]) -> list[str]:
        return readable(self, data_sources)


def serve_security(app: FastAPI, security: Security) -> None:
    """What the checks of `app`'s routes consult."""
    app.state.security = security


def _access(request: Request) -> Access:
    return Access(getattr(request.app.state, "security", None), getattr(request.state, "auth", None))


async def request_access(request: Request) -> Access:
    """What the request's identity may do; as a dependency, for a handler that checks for itself what its request
    body names. A coroutine because FastAPI runs a plain function dependency on its thread pool: a thread hop per
    query, for building one object."""
    return _access(request)


request_access.guards = True  # type: ignore[attr-defined]
AccessDep = Annotated[Access, Depends(request_access)]


def method_action(request: Request) -> Action:
    """Druid's resource filters: reading methods need READ, every other WRITE."""
    return Action.READ if request.method in ("GET", "HEAD", "OPTIONS") else Action.WRITE


def _guard(check: Callable[[Access, Request], None]) -> Any:
    def dependency(request: Request) -> None:
        check(_access(request), request)

    dependency.guards = True  # type: ignore[attr-defined]
    return Depends(dependency)


def state_guard() -> Any:
    """STATE: servers, workers, leadership, metrics, the internal APIs between nodes."""
    return _guard(lambda access, request: access.require(STATE, method_action(request)))


def audit_info(request: Request) -> AuditInfo:
    """Druid's AuditInfo of a config change: the X-Druid-Author and X-Druid-Comment headers, the caller's address."""
    return AuditInfo(request.headers.get("X-Druid-Author", ""), request.headers.get("X-Druid-Comment", ""),
                     request.client.host if request.client else None)


def config_guard(resource: Resource = SECURITY) -> Any:
    return _guard(lambda access, request: access.require(resource, method_action(request)))


def datasource_guard(param: str = "data_source") -> Any:
    """The data source named in the path."""
    return _guard(lambda access, request: access.require(Resource.datasource(request.path_params[param]),
                                                         method_action(request)))


def task_guard(data_source_of: Callable[[str], str | None], param: str = "task_id") -> Any:
    """The data source of the task named in the path; a task that does not exist is left to the handler's 404."""

    def check(access: Access, request: Request) -> None:
        data_source = data_source_of(request.path_params[param])
        if data_source is not None:
            access.require(Resource.datasource(data_source), method_action(request))

    return _guard(check)


def supervisor_guard(data_sources_of: Callable[[str], list[str]]) -> Any:
    """Every data source of the supervisor named in the path (of one that does not exist: those `data_sources_of`
    names for it)."""

    def check(access: Access, request: Request) -> None:
        access.require_datasources(data_sources_of(request.path_params["spec_id"]), method_action(request))

    return _guard(check)


def is_guarded(dependency: Callable[..., Any]) -> bool:
    return getattr(dependency, "guards", False)
