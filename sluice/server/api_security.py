"""Druid's basic-security API (/druid-ext/basic-security/…): users and passwords of each basic authenticator, users,
roles and permissions of each basic authorizer. Every call needs CONFIG `security` (READ to look, WRITE to change);
a refusal of the security store (unknown user, existing role…) is 400 `{"error": <Druid's message>}`."""

from __future__ import annotations

from typing import Any, Callable

from fastapi import APIRouter, Body, Request
from fastapi.responses import JSONResponse, Response

from sluice.security.basic import BasicSecurityDb, SecurityDbError
from sluice.security.resources import InvalidPermission, Permission
from sluice.server.auth import config_guard

PREFIX = "/druid-ext/basic-security"


def security_router(db: BasicSecurityDb) -> APIRouter:
    router = APIRouter(prefix=PREFIX, dependencies=[config_guard()])

    def answer(action: Callable[[], Any]) -> Any:
        try:
            result = action()
        except (SecurityDbError, InvalidPermission) as error:
            return JSONResponse({"error": str(error)}, status_code=400)
        return Response(status_code=200) if result is None else result

    # ---- authentication ----

    authn = "/authentication/db/{authenticator}/users"

    @router.get("/authentication/loadStatus")
    def authentication_load_status() -> dict[str, bool]:
        return {name: True for name in db.authenticator_names()}

    @router.get(authn)
    def authn_users(authenticator: str) -> Any:
        return answer(lambda: db.users(authenticator))

    @router.get(authn + "/{user}")
    def authn_user(authenticator: str, user: str) -> Any:
        return answer(lambda: db.user(authenticator, user))

    @router.post(authn + "/{user}")
    def create_authn_user(authenticator: str, user: str) -> Any:
        return answer(lambda: db.create_user(authenticator, user))

    @router.delete(authn + "/{user}")
    def delete_authn_user(authenticator: str, user: str) -> Any:
        return answer(lambda: db.delete_user(authenticator, user))

    @router.post(authn + "/{user}/credentials")
    def set_credentials(authenticator: str, user: str, body: Any = Body(...)) -> Any:
        password = body.get("password") if isinstance(body, dict) else None
        if not isinstance(password, str) or not password:
            return JSONResponse({"error": "password: a non-empty string is required"}, status_code=400)
        return answer(lambda: db.set_password(authenticator, user, password))

    # ---- authorization ----

    authz = "/authorization/db/{authorizer}"

    @router.get("/authorization/loadStatus")
    def authorization_load_status() -> dict[str, bool]:
        return {name: True for name in db.authorizer_names()}

    @router.get(authz + "/users")
    def authz_users(authorizer: str) -> Any:
        return answer(lambda: db.authz_users(authorizer))

    @router.get(authz + "/users/{user}")
    def authz_user(authorizer: str, user: str, request: Request) -> Any:
        return answer(lambda: db.authz_user(authorizer, user, full="full" in request.query_params,
                                            simplify="simplifyPermissions" in request.query_params))

    @router.post(authz + "/users/{user}")
    def create_authz_user(authorizer: str, user: str) -> Any:
        return answer(lambda: db.create_authz_user(authorizer, user))

    @router.delete(authz + "/users/{user}")
    def delete_authz_user(authorizer: str, user: str) -> Any:
        return answer(lambda: db.delete_authz_user(authorizer, user))

    @router.post(authz + "/users/{user}/roles/{role}")
    def assign_role(authorizer: str, user: str, role: str) -> Any:
        return answer(lambda: db.assign_role(authorizer, user, role))

    @router.delete(authz + "/users/{user}/roles/{role}")
    def unassign_role(authorizer: str, user: str, role: str) -> Any:
        return answer(lambda: db.unassign_role(authorizer, user, role))

    @router.get(authz + "/roles")
    def roles(authorizer: str) -> Any:
        return answer(lambda: db.roles(authorizer))

    @router.get(authz + "/roles/{role}")
    def role(authorizer: str, role: str, request: Request) -> Any:
        return answer(lambda: db.role(authorizer, role, full="full" in request.query_params,
                                      simplify="simplifyPermissions" in request.query_params))

    @router.post(authz + "/roles/{role}")
    def create_role(authorizer: str, role: str) -> Any:
        return answer(lambda: db.create_role(authorizer, role))

    @router.delete(authz + "/roles/{role}")
    def delete_role(authorizer: str, role: str) -> Any:
        return answer(lambda: db.delete_role(authorizer, role))

    @router.post(authz + "/roles/{role}/permissions")
    def set_permissions(authorizer: str, role: str, body: Any = Body(...)) -> Any:
        if not isinstance(body, list):
            return JSONResponse({"error": "permissions: expected a JSON array of resource-action objects"},
                                status_code=400)
        return answer(lambda: db.set_permissions(authorizer, role, [Permission.from_json(p) for p in body]))

    return router
