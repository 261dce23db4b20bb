"""Druid's security configuration keys (`druid.auth.*`, `druid.escalator.*`), read from runtime properties.

Everything defaults to Druid's defaults: the `allowAll` authenticator and authorizer and the `noop` escalator, so a
node without these keys is open, as Druid is. Values that are JSON in Druid (lists, password providers) are JSON
here; a wrong value is a ConfigError that names its key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from sluice.config import ConfigError, PropertyReader

ALLOW_ALL = "allowAll"
#: Druid's names for the users its basic authenticator and authorizer create at start
ADMIN_USER = "admin"
INTERNAL_USER = "druid_system"


@dataclass(frozen=True)
class Authenticator:
    """One link of `druid.auth.authenticatorChain`: `basic` (users in the metadata store), `anonymous` (everyone is
    `identity`) or `allowAll`."""

    name: str
    type: str
    authorizer_name: str = ALLOW_ALL
    initial_admin_password: str | None = field(default=None, repr=False)
    initial_internal_client_password: str | None = field(default=None, repr=False)
    skip_on_failure: bool = False
    credential_iterations: int = 10_000
    identity: str = "defaultUser"


@dataclass(frozen=True)
class Authorizer:
    """One of `druid.auth.authorizers`: `basic` (roles in the metadata store) or `allowAll`."""

    name: str
    type: str
    initial_admin_user: str = ADMIN_USER
    initial_admin_role: str = ADMIN_USER


@dataclass(frozen=True)
class Escalator:
    """How this node's own calls to other nodes authenticate (`druid.escalator.*`): `noop` sends nothing."""

    type: str = "noop"
    internal_client_username: str = INTERNAL_USER
    internal_client_password: str | None = field(default=None, repr=False)
    authorizer_name: str = ALLOW_ALL

    @property
    def basic_auth(self) -> tuple[str, str] | None:
        """The credentials an httpx client sends, or None when there are none to send."""
        if self.type != "basic" or self.internal_client_password is None:
            return None
        return self.internal_client_username, self.internal_client_password


@dataclass(frozen=True)
class AuthConfig:
    authenticator_chain: tuple[Authenticator, ...] = (Authenticator(ALLOW_ALL, ALLOW_ALL),)
    authorizers: Mapping[str, Authorizer] = field(default_factory=lambda: {ALLOW_ALL: Authorizer(ALLOW_ALL, ALLOW_ALL)})
    escalator: Escalator = Escalator()
    #: druid.auth.unsecuredPaths: paths served without authentication, besides the health check and isLeader
    unsecured_paths: tuple[str, ...] = ()
    #: druid.auth.allowUnauthenticatedHttpOptions
    allow_unauthenticated_http_options: bool = False
    #: druid.auth.authorizeQueryContextParams: each query context key a caller sets needs QUERY_CONTEXT WRITE on it,
    #: but those in druid.auth.unsecuredContextKeys, and, when druid.auth.securedContextKeys is set, all but those
    authorize_query_context_params: bool = False
    unsecured_context_keys: frozenset[str] = frozenset()
    secured_context_keys: frozenset[str] | None = None
    #: druid.sql.planner.authorizeSystemTablesDirectly: a sys table needs SYSTEM_TABLE READ on its name, besides
    #: showing only the rows of readable data sources
    authorize_system_tables_directly: bool = False
    #: the druid.auth.* and druid.escalator.* properties this was read from, for the peons a worker starts
    properties: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def context_keys_to_authorize(self, keys: Iterable[str]) -> set[str]:
        """Druid's AuthConfig.contextKeysToAuthorize: the keys Druid itself sets are never checked."""
        if not self.authorize_query_context_params:
            return set()
        checked = set(keys) - _ALLOWED_CONTEXT_KEYS - self.unsecured_context_keys
        return checked if self.secured_context_keys is None else checked & self.secured_context_keys

    @property
    def open(self) -> bool:
        """True when every request is let in and allowed everything (Druid's default), so no check need run."""
        return (all(a.type == ALLOW_ALL for a in self.authenticator_chain)
                and all(a.type == ALLOW_ALL for a in self.authorizers.values()))

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> AuthConfig:
        """The security settings among Druid runtime properties; keys other than druid.auth.* and druid.escalator.*
        are not looked at."""
        reader = PropertyReader(properties)
        chain = tuple(_authenticator(reader, name)
                      for name in reader.names("druid.auth.authenticatorChain", [ALLOW_ALL]))
        authorizers = {name: _authorizer(reader, name) for name in reader.names("druid.auth.authorizers", [ALLOW_ALL])}
        escalator = _escalator(reader)
        for authenticator in chain:
            if authenticator.authorizer_name not in authorizers:
                raise ConfigError(f"druid.auth.authenticator.{authenticator.name}.authorizerName: no authorizer "
                                  f"named [{authenticator.authorizer_name}] in druid.auth.authorizers")
        if escalator.type == "basic" and escalator.authorizer_name not in authorizers:
            raise ConfigError(f"druid.escalator.authorizerName: no authorizer named [{escalator.authorizer_name}] "
                              "in druid.auth.authorizers")
        secured = reader.raw("druid.auth.securedContextKeys")
        config = cls(chain, authorizers, escalator, tuple(reader.names("druid.auth.unsecuredPaths", [])),
                     reader.boolean("druid.auth.allowUnauthenticatedHttpOptions", False),
                     reader.boolean("druid.auth.authorizeQueryContextParams", False),
                     frozenset(reader.names("druid.auth.unsecuredContextKeys", [])),
                     None if secured is None else frozenset(reader.names("druid.auth.securedContextKeys", [])),
                     reader.boolean("druid.sql.planner.authorizeSystemTablesDirectly", False),
                     {k: v for k, v in properties.items() if k.startswith(_PREFIXES)})
        reader.warn_unread(_PREFIXES)
        return config


def _authenticator(reader: PropertyReader, name: str) -> Authenticator:
    prefix = f"druid.auth.authenticator.{name}."
    type_ = reader.string(prefix + "type", ALLOW_ALL if name == ALLOW_ALL else None)
    if type_ == ALLOW_ALL:
        return Authenticator(name, type_)
    if type_ == "anonymous":
        return Authenticator(name, type_, authorizer_name=reader.string(prefix + "authorizerName"),
                             identity=reader.string(prefix + "identity", "defaultUser"))
    if type_ != "basic":
        raise ConfigError(f"{prefix}type: [{type_}] is not an authenticator type Sluice has (basic, anonymous, "
                          f"{ALLOW_ALL})")
    validator = reader.string(prefix + "credentialsValidator.type", "metadata")
    if validator != "metadata":
        raise ConfigError(f"{prefix}credentialsValidator.type: only [metadata] is supported, not [{validator}]")
    iterations = reader.integer(prefix + "credentialIterations", 10_000)
    if iterations < 1:
        raise ConfigError(f"{prefix}credentialIterations: must be at least 1, not {iterations}")
    return Authenticator(name, type_, authorizer_name=reader.string(prefix + "authorizerName"),
                         initial_admin_password=reader.password(prefix + "initialAdminPassword"),
                         initial_internal_client_password=reader.password(prefix + "initialInternalClientPassword"),
                         skip_on_failure=reader.boolean(prefix + "skipOnFailure", False),
                         credential_iterations=iterations)


def _authorizer(reader: PropertyReader, name: str) -> Authorizer:
    prefix = f"druid.auth.authorizer.{name}."
    type_ = reader.string(prefix + "type", ALLOW_ALL if name == ALLOW_ALL else None)
    if type_ == ALLOW_ALL:
        return Authorizer(name, type_)
    if type_ != "basic":
        raise ConfigError(f"{prefix}type: [{type_}] is not an authorizer type Sluice has (basic, {ALLOW_ALL})")
    provider = reader.string(prefix + "roleProvider.type", "metadata")
    if provider != "metadata":
        raise ConfigError(f"{prefix}roleProvider.type: only [metadata] is supported, not [{provider}]")
    return Authorizer(name, type_, initial_admin_user=reader.string(prefix + "initialAdminUser", ADMIN_USER),
                      initial_admin_role=reader.string(prefix + "initialAdminRole", ADMIN_USER))


def _escalator(reader: PropertyReader) -> Escalator:
    type_ = reader.string("druid.escalator.type", "noop")
    if type_ == "noop":
        return Escalator()
    if type_ != "basic":
        raise ConfigError(f"druid.escalator.type: [{type_}] is not an escalator type Sluice has (basic, noop)")
    password = reader.password("druid.escalator.internalClientPassword")
    if password is None:
        raise ConfigError("druid.escalator.internalClientPassword: required when druid.escalator.type is basic")
    return Escalator(type_, reader.string("druid.escalator.internalClientUsername"), password,
                     reader.string("druid.escalator.authorizerName"))


_PREFIXES = ("druid.auth.", "druid.escalator.")
#: context keys Druid sets itself before the check (its AuthConfig.ALLOWED_CONTEXT_KEYS)
_ALLOWED_CONTEXT_KEYS = frozenset({"sqlStringifyArrays", "sqlQueryId"})
