"""Druid's security configuration keys (`druid.auth.*`, `druid.escalator.*`), read from runtime properties.

Everything defaults to Druid's defaults: the `allowAll` authenticator and authorizer and the `noop` escalator, so a
node without these keys is open, as Druid is. Values that are JSON in Druid (lists, password providers) are JSON
here; a wrong value is a ConfigError that names its key.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

log = logging.getLogger(__name__)

ALLOW_ALL = "allowAll"
#: Druid's names for the users its basic authenticator and authorizer create at start
ADMIN_USER = "admin"
INTERNAL_USER = "druid_system"


class ConfigError(ValueError):
    pass


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
    #: the druid.auth.* and druid.escalator.* properties this was read from, for the peons a worker starts
    properties: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def open(self) -> bool:
        """True when every request is let in and allowed everything (Druid's default), so no check need run."""
        return (all(a.type == ALLOW_ALL for a in self.authenticator_chain)
                and all(a.type == ALLOW_ALL for a in self.authorizers.values()))

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> AuthConfig:
        """The security settings among Druid runtime properties; keys other than druid.auth.* and druid.escalator.*
        are not looked at."""
        reader = _Reader(properties)
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
        config = cls(chain, authorizers, escalator, tuple(reader.names("druid.auth.unsecuredPaths", [])),
                     reader.boolean("druid.auth.allowUnauthenticatedHttpOptions", False),
                     {k: v for k, v in properties.items() if k.startswith(_PREFIXES)})
        reader.warn_unread(_PREFIXES)
        return config


def _authenticator(reader: _Reader, name: str) -> Authenticator:
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


def _authorizer(reader: _Reader, name: str) -> Authorizer:
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


def _escalator(reader: _Reader) -> Escalator:
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
_REQUIRED: Any = object()


class _Reader:
    """Typed reads of runtime properties that remember which keys were read, so the others can be warned about."""

    def __init__(self, properties: Mapping[str, str]) -> None:
        self._properties = properties
        self._read: set[str] = set()

    def _raw(self, key: str) -> str | None:
        self._read.add(key)
        value = self._properties.get(key)
        return None if value is None or value.strip() == "" else value.strip()

    def string(self, key: str, default: Any = _REQUIRED) -> str:
        value = self._raw(key)
        if value is not None:
            return value
        if default is _REQUIRED or default is None:
            raise ConfigError(f"{key}: required")
        return default

    def integer(self, key: str, default: int) -> int:
        value = self._raw(key)
        try:
            return default if value is None else int(value)
        except ValueError:
            raise ConfigError(f"{key}: [{value}] is not an integer") from None

    def boolean(self, key: str, default: bool) -> bool:
        value = self._raw(key)
        if value is None:
            return default
        if value.lower() not in ("true", "false"):
            raise ConfigError(f"{key}: [{value}] is not true or false")
        return value.lower() == "true"

    def names(self, key: str, default: list[str]) -> list[str]:
        """A JSON list of strings, e.g. `["basic"]`."""
        value = self._raw(key)
        if value is None:
            return default
        try:
            names = json.loads(value)
        except json.JSONDecodeError:
            names = None
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise ConfigError(f'{key}: [{value}] is not a JSON list of names, e.g. ["basic"]')
        return names

    def password(self, key: str) -> str | None:
        return read_password({key: self._raw(key) or ""}, key)

    def warn_unread(self, prefixes: tuple[str, ...]) -> None:
        for key in sorted(set(self._properties) - self._read):
            if key.startswith(prefixes):
                log.warning("configuration key %s is not one Sluice knows; it is ignored", key)


def read_password(properties: Mapping[str, str], key: str) -> str | None:
    """Druid's password provider: the password itself, or `{"type": "default", "password": ...}` or
    `{"type": "environment", "variable": ...}`; None when the key is not set."""
    value = (properties.get(key) or "").strip() or None
    if value is None or not value.startswith("{"):
        return value
    try:
        provider = json.loads(value)
    except json.JSONDecodeError:
        raise ConfigError(f"{key}: a password provider must be valid JSON") from None
    if provider.get("type") == "default" and isinstance(provider.get("password"), str):
        return provider["password"]
    if provider.get("type") == "environment" and isinstance(provider.get("variable"), str):
        password = os.environ.get(provider["variable"])
        if password is None:
            raise ConfigError(f"{key}: environment variable [{provider['variable']}] is not set")
        return password
    raise ConfigError(f'{key}: password provider must be {{"type": "default", "password": ...}} or '
                      '{"type": "environment", "variable": ...}')

