"""The users, credentials, roles and permissions of Druid's basic authenticators and authorizers, kept in the
metadata store's `druid_config` table so that every node sees the same ones at once.

Each authenticator keeps `{user: {"name", "credentials"}}`; each authorizer keeps `{user: {"name", "roles"}}` and
`{role: {"name", "permissions"}}`. Every change is one compare-and-swap of its document. Refusals are
SecurityDbError with Druid's messages (the API answers them 400).
"""

from __future__ import annotations

from typing import Any, Callable

from sluice.metadata.store import MetadataStore
from sluice.security.config import ADMIN_USER, INTERNAL_USER, AuthConfig, Authenticator, Authorizer
from sluice.security.credentials import Credentials
from sluice.security.resources import SUPERUSER_PERMISSIONS, Permission, ResourceAction, permits

Document = dict[str, Any]


class SecurityDbError(ValueError):
    pass


class BasicSecurityDb:
    def __init__(self, metadata: MetadataStore, config: AuthConfig) -> None:
        self._metadata = metadata
        self._authenticators = {a.name: a for a in config.authenticator_chain if a.type == "basic"}
        self._authorizers = {a.name: a for a in config.authorizers.values() if a.type == "basic"}

    def initialize(self) -> None:
        """Druid's start-up: the admin and druid_system users and roles, each only if it does not exist yet (a
        password given here never replaces one already set)."""
        for authenticator in self._authenticators.values():
            for user, password in ((ADMIN_USER, authenticator.initial_admin_password),
                                   (INTERNAL_USER, authenticator.initial_internal_client_password)):
                if password is not None:
                    self._update_users(authenticator.name, _add_user_with(user, password,
                                                                          authenticator.credential_iterations))
        for authorizer in self._authorizers.values():
            for user, role in ((authorizer.initial_admin_user, authorizer.initial_admin_role),
                               (INTERNAL_USER, INTERNAL_USER)):
                self._update_roles(authorizer.name, _add_superuser_role(role))
                self._update_authz_users(authorizer.name, _add_user_in_role(user, role))

    # ---- authentication ----

    def authenticator_names(self) -> list[str]:
        return sorted(self._authenticators)

    def authenticator(self, name: str) -> Authenticator:
        try:
            return self._authenticators[name]
        except KeyError:
            raise SecurityDbError(f"Basic authenticator with name [{name}] does not exist.") from None

    def credentials(self, authenticator: str, user: str) -> Credentials | None:
        """The user's credentials; None for an unknown user or one without a password."""
        entry = self._users(authenticator).get(user)
        return None if entry is None or entry.get("credentials") is None else Credentials.from_json(entry["credentials"])

    def users(self, authenticator: str) -> list[str]:
        return sorted(self._users(self.authenticator(authenticator).name))

    def user(self, authenticator: str, user: str) -> Document:
        entry = self._users(self.authenticator(authenticator).name).get(user)
        if entry is None:
            raise SecurityDbError(f"User [{user}] does not exist.")
        return entry

    def create_user(self, authenticator: str, user: str) -> None:
        self._update_users(self.authenticator(authenticator).name,
                           _adding(user, "User", {"name": user, "credentials": None}))

    def delete_user(self, authenticator: str, user: str) -> None:
        self._update_users(self.authenticator(authenticator).name, _removing(user, "User"))

    def set_password(self, authenticator: str, user: str, password: str) -> None:
        iterations = self.authenticator(authenticator).credential_iterations

        def change(users: Document) -> Document:
            _existing(users, user, "User")
            return {**users, user: {"name": user, "credentials": Credentials.for_password(password, iterations).to_json()}}

        self._update_users(authenticator, change)

    def _users(self, authenticator: str) -> Document:
        return self._metadata.get_config(f"basic.authentication.{authenticator}.users") or {}

    def _update_users(self, authenticator: str, change: Callable[[Document], Document]) -> None:
        self._metadata.update_config(f"basic.authentication.{authenticator}.users", lambda old: change(old or {}))

    # ---- authorization ----

    def authorizer_names(self) -> list[str]:
        return sorted(self._authorizers)

    def authorizer(self, name: str) -> Authorizer:
        try:
            return self._authorizers[name]
        except KeyError:
            raise SecurityDbError(f"Basic authorizer with name [{name}] does not exist.") from None

    def allows(self, authorizer: str, user: str, wanted: ResourceAction) -> bool:
        entry = self._authz_users(authorizer).get(user)
        if entry is None:
            return False
        roles = self._roles(authorizer)
        return any(permits(_permissions(roles.get(role)), wanted) for role in entry["roles"])

    def authz_users(self, authorizer: str) -> list[str]:
        return sorted(self._authz_users(self.authorizer(authorizer).name))

    def authz_user(self, authorizer: str, user: str, full: bool = False, simplify: bool = False) -> Document:
        """Druid's user document: its role names, or (`full`) the roles themselves."""
        entry = self._authz_users(self.authorizer(authorizer).name).get(user)
        if entry is None:
            raise SecurityDbError(f"User [{user}] does not exist.")
        if not full:
            return {"name": user, "roles": sorted(entry["roles"])}
        return {"name": user, "roles": [self.role(authorizer, role, simplify=simplify) for role in sorted(entry["roles"])]}

    def create_authz_user(self, authorizer: str, user: str) -> None:
        self._update_authz_users(self.authorizer(authorizer).name, _adding(user, "User", {"name": user, "roles": []}))

    def delete_authz_user(self, authorizer: str, user: str) -> None:
        self._update_authz_users(self.authorizer(authorizer).name, _removing(user, "User"))

    def roles(self, authorizer: str) -> list[str]:
        return sorted(self._roles(self.authorizer(authorizer).name))

    def role(self, authorizer: str, role: str, full: bool = False, simplify: bool = False) -> Document:
        """Druid's role document; `full` adds the users that have it, `simplify` drops `resourceNamePattern`."""
        entry = self._roles(self.authorizer(authorizer).name).get(role)
        if entry is None:
            raise SecurityDbError(f"Role [{role}] does not exist.")
        permissions = [p if simplify else {"resourceAction": p, "resourceNamePattern": p["resource"]["name"]}
                       for p in entry["permissions"]]
        document: Document = {"name": role}
        if full:
            document["users"] = sorted(u for u, e in self._authz_users(authorizer).items() if role in e["roles"])
        elif simplify:
            document["users"] = None
        document["permissions"] = permissions
        return document

    def create_role(self, authorizer: str, role: str) -> None:
        self._update_roles(self.authorizer(authorizer).name,
                           _adding(role, "Role", {"name": role, "permissions": []}))

    def delete_role(self, authorizer: str, role: str) -> None:
        name = self.authorizer(authorizer).name
        self._update_roles(name, _removing(role, "Role"))
        self._update_authz_users(name, lambda users: {
            u: {**e, "roles": [r for r in e["roles"] if r != role]} for u, e in users.items()})

    def set_permissions(self, authorizer: str, role: str, permissions: list[Permission]) -> None:
        def change(roles: Document) -> Document:
            _existing(roles, role, "Role")
            return {**roles, role: {"name": role, "permissions": [p.to_json() for p in permissions]}}

        self._update_roles(self.authorizer(authorizer).name, change)

    def assign_role(self, authorizer: str, user: str, role: str) -> None:
        name = self.authorizer(authorizer).name
        _existing(self._roles(name), role, "Role")

        def change(users: Document) -> Document:
            entry = _existing(users, user, "User")[user]
            if role in entry["roles"]:
                raise SecurityDbError(f"User [{user}] already has role [{role}].")
            return {**users, user: {**entry, "roles": [*entry["roles"], role]}}

        self._update_authz_users(name, change)

    def unassign_role(self, authorizer: str, user: str, role: str) -> None:
        name = self.authorizer(authorizer).name
        _existing(self._roles(name), role, "Role")

        def change(users: Document) -> Document:
            entry = _existing(users, user, "User")[user]
            if role not in entry["roles"]:
                raise SecurityDbError(f"User [{user}] does not have role [{role}].")
            return {**users, user: {**entry, "roles": [r for r in entry["roles"] if r != role]}}

        self._update_authz_users(name, change)

    def _authz_users(self, authorizer: str) -> Document:
        return self._metadata.get_config(f"basic.authorization.{authorizer}.users") or {}

    def _roles(self, authorizer: str) -> Document:
        return self._metadata.get_config(f"basic.authorization.{authorizer}.roles") or {}

    def _update_authz_users(self, authorizer: str, change: Callable[[Document], Document]) -> None:
        self._metadata.update_config(f"basic.authorization.{authorizer}.users", lambda old: change(old or {}))

    def _update_roles(self, authorizer: str, change: Callable[[Document], Document]) -> None:
        self._metadata.update_config(f"basic.authorization.{authorizer}.roles", lambda old: change(old or {}))


def _adding(name: str, kind: str, entry: Document) -> Callable[[Document], Document]:
    def change(entries: Document) -> Document:
        if name in entries:
            raise SecurityDbError(f"{kind} [{name}] already exists.")
        return {**entries, name: entry}

    return change


def _removing(name: str, kind: str) -> Callable[[Document], Document]:
    return lambda entries: {k: v for k, v in _existing(entries, name, kind).items() if k != name}


def _existing(entries: Document, name: str, kind: str) -> Document:
    if name not in entries:
        raise SecurityDbError(f"{kind} [{name}] does not exist.")
    return entries


def _permissions(role: Document | None) -> list[Permission]:
    return [] if role is None else [Permission.from_json(p) for p in role["permissions"]]


def _add_user_with(user: str, password: str, iterations: int) -> Callable[[Document], Document]:
    def change(users: Document) -> Document:
        if user in users:
            return users
        return {**users, user: {"name": user, "credentials": Credentials.for_password(password, iterations).to_json()}}

    return change


def _add_superuser_role(role: str) -> Callable[[Document], Document]:
    return lambda roles: roles if role in roles else {
        **roles, role: {"name": role, "permissions": [p.to_json() for p in SUPERUSER_PERMISSIONS]}}


def _add_user_in_role(user: str, role: str) -> Callable[[Document], Document]:
    return lambda users: users if user in users else {**users, user: {"name": user, "roles": [role]}}
