"""Who a request comes from (the authenticator chain) and whether they may do something (their authorizer).

Druid's rules: the chain is tried in order; a request without Basic credentials passes to the next authenticator;
credentials a basic authenticator does not know pass on only with `skipOnFailure`; a wrong password ends the chain
with 401; past the last authenticator the request is unauthenticated (401). The identity then carries the name of
the authorizer that decides for it.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Protocol

from sluice.security.basic import BasicSecurityDb
from sluice.security.config import ALLOW_ALL, AuthConfig
from sluice.security.resources import Action, Resource, ResourceAction, ResourceType


@dataclass(frozen=True)
class AuthenticationResult:
    identity: str
    authorizer_name: str
    authenticated_by: str


class Unauthenticated(Exception):
    """The request is answered 401."""


class Forbidden(Exception):
    """The request is answered 403 with Druid's `{"Access-Check-Result": <message>}`."""


class Permissions(Protocol):
    """What one caller may do; the broker and the query runners see only this."""

    def allows(self, resource: Resource, action: Action) -> bool: ...


class _AllowAll:
    def allows(self, resource: Resource, action: Action) -> bool:
        return True


#: for calls from inside the node, and for nodes without security
ALLOW_ALL_PERMISSIONS: Permissions = _AllowAll()


def require(permissions: Permissions, resource: Resource, action: Action, message: str = "Unauthorized") -> None:
    if not permissions.allows(resource, action):
        raise Forbidden(message)


def require_query_context(permissions: Permissions, context: Mapping[str, Any]) -> None:
    """QUERY_CONTEXT WRITE on every key the caller set (asked only under druid.auth.authorizeQueryContextParams)."""
    for key in sorted(context):
        require(permissions, Resource(key, ResourceType.QUERY_CONTEXT), Action.WRITE)


def readable(permissions: Permissions, data_sources: Iterable[str]) -> list[str]:
    return [name for name in data_sources if permissions.allows(Resource.datasource(name), Action.READ)]


class Security:
    def __init__(self, config: AuthConfig, db: BasicSecurityDb) -> None:
        self.config = config
        self._db = db

    def authenticate(self, authorization: str | None) -> AuthenticationResult:
        """The identity an `Authorization` header proves; raises Unauthenticated."""
        credentials = _basic_credentials(authorization)
        for authenticator in self.config.authenticator_chain:
            if authenticator.type == ALLOW_ALL:
                return AuthenticationResult(ALLOW_ALL, ALLOW_ALL, authenticator.name)
            if authenticator.type == "anonymous":
                return AuthenticationResult(authenticator.identity, authenticator.authorizer_name, authenticator.name)
            if credentials is None:
                continue
            user, password = credentials
            stored = self._db.credentials(authenticator.name, user)
            if stored is None:
                if authenticator.skip_on_failure:
                    continue
                raise Unauthenticated("User metadata store authentication failed.")
            if not stored.verify(password):
                raise Unauthenticated("User metadata store authentication failed.")
            return AuthenticationResult(user, authenticator.authorizer_name, authenticator.name)
        raise Unauthenticated("Unauthorized request")

    def authorize(self, who: AuthenticationResult, wanted: ResourceAction) -> bool:
        authorizer = self.config.authorizers.get(who.authorizer_name)
        if authorizer is None:
            return False
        if authorizer.type == ALLOW_ALL:
            return True
        return self._db.allows(authorizer.name, who.identity, wanted)


def _basic_credentials(authorization: str | None) -> tuple[str, str] | None:
    """(user, password) from `Basic <base64>`; None without a Basic header; Unauthenticated for a malformed one."""
    if authorization is None:
        return None
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise Unauthenticated("Malformed Basic credentials") from None
    user, colon, password = decoded.partition(":")
    if not colon:
        raise Unauthenticated("Malformed Basic credentials")
    return user, password
