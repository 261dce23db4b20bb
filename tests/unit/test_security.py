"""Druid's basic security without a server: configuration keys, password storage, permissions, the authenticator
chain and the users and roles kept in a (real, SQLite) metadata store."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from sluice.metadata.store import MetadataStore
from sluice.security.access import Security, Unauthenticated
from sluice.security.basic import BasicSecurityDb, SecurityDbError
from sluice.security.config import AuthConfig, ConfigError
from sluice.security.credentials import Credentials
from sluice.security.resources import (
    SUPERUSER_PERMISSIONS, Action, InvalidPermission, Permission, Resource, ResourceAction, ResourceType, permits)

#: Druid's documented example, word for word (names as in druid-basic-security.md)
DRUID_EXAMPLE = {
    "druid.auth.authenticatorChain": '["MyBasicMetadataAuthenticator"]',
    "druid.auth.authenticator.MyBasicMetadataAuthenticator.type": "basic",
    "druid.auth.authenticator.MyBasicMetadataAuthenticator.initialAdminPassword": "password1",
    "druid.auth.authenticator.MyBasicMetadataAuthenticator.initialInternalClientPassword": "password2",
    "druid.auth.authenticator.MyBasicMetadataAuthenticator.credentialsValidator.type": "metadata",
    "druid.auth.authenticator.MyBasicMetadataAuthenticator.skipOnFailure": "false",
    "druid.auth.authenticator.MyBasicMetadataAuthenticator.authorizerName": "MyBasicMetadataAuthorizer",
    "druid.escalator.type": "basic",
    "druid.escalator.internalClientUsername": "druid_system",
    "druid.escalator.internalClientPassword": "password2",
    "druid.escalator.authorizerName": "MyBasicMetadataAuthorizer",
    "druid.auth.authorizers": '["MyBasicMetadataAuthorizer"]',
    "druid.auth.authorizer.MyBasicMetadataAuthorizer.type": "basic",
}
AUTHN, AUTHZ = "MyBasicMetadataAuthenticator", "MyBasicMetadataAuthorizer"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# ---- configuration ----

def test_without_keys_everything_is_open_as_in_druid() -> None:
    config = AuthConfig.from_properties({})
    assert config.open and config == AuthConfig()
    assert config.escalator.basic_auth is None


def test_druids_documented_example_is_read_as_written() -> None:
    config = AuthConfig.from_properties(DRUID_EXAMPLE)
    assert not config.open
    [authenticator] = config.authenticator_chain
    assert (authenticator.name, authenticator.type, authenticator.authorizer_name) == (AUTHN, "basic", AUTHZ)
    assert authenticator.initial_admin_password == "password1"
    assert authenticator.initial_internal_client_password == "password2"
    assert authenticator.credential_iterations == 10_000 and not authenticator.skip_on_failure
    assert config.escalator.basic_auth == ("druid_system", "password2")
    assert config.authorizers[AUTHZ].initial_admin_user == "admin"
    assert "password1" not in repr(config)


@pytest.mark.parametrize(("change", "message"), [
    ({"druid.auth.authenticatorChain": "basic"}, "druid.auth.authenticatorChain: [basic] is not a JSON list"),
    ({f"druid.auth.authenticator.{AUTHN}.authorizerName": None},
     f"druid.auth.authenticator.{AUTHN}.authorizerName: required"),
    ({f"druid.auth.authenticator.{AUTHN}.authorizerName": "other"},
     f"druid.auth.authenticator.{AUTHN}.authorizerName: no authorizer named [other]"),
    ({f"druid.auth.authenticator.{AUTHN}.type": "kerberos"}, f"druid.auth.authenticator.{AUTHN}.type: [kerberos]"),
    ({f"druid.auth.authenticator.{AUTHN}.credentialsValidator.type": "ldap"}, "only [metadata] is supported"),
    ({f"druid.auth.authenticator.{AUTHN}.skipOnFailure": "yes"}, "skipOnFailure: [yes] is not true or false"),
    ({f"druid.auth.authenticator.{AUTHN}.credentialIterations": "0"}, "credentialIterations: must be at least 1"),
    ({"druid.escalator.internalClientPassword": None}, "druid.escalator.internalClientPassword: required"),
    ({"druid.escalator.type": "kerberos"}, "druid.escalator.type: [kerberos]"),
    ({"druid.escalator.internalClientPassword": '{"type": "environment", "variable": "SLUICE_TEST_UNSET_VAR"}'},
     "environment variable [SLUICE_TEST_UNSET_VAR] of a password provider is not set"),
])
def test_a_wrong_key_is_refused_by_name(change: dict[str, str | None], message: str) -> None:
    properties = {k: v for k, v in {**DRUID_EXAMPLE, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        AuthConfig.from_properties(properties)


def test_passwords_come_from_druids_password_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_TEST_ESCALATOR_PASSWORD", "from-env")
    config = AuthConfig.from_properties({
        **DRUID_EXAMPLE,
        "druid.escalator.internalClientPassword": '{"type": "environment", "variable": "SLUICE_TEST_ESCALATOR_PASSWORD"}',
        f"druid.auth.authenticator.{AUTHN}.initialAdminPassword": '{"type": "default", "password": "pw"}'})
    assert config.escalator.internal_client_password == "from-env"
    assert config.authenticator_chain[0].initial_admin_password == "pw"


def test_unknown_security_keys_are_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    AuthConfig.from_properties({**DRUID_EXAMPLE, "druid.auth.authenticator.MyBasicMetadataAuthenticator.tpye": "x",
                                "druid.host": "elsewhere"})
    assert "druid.auth.authenticator.MyBasicMetadataAuthenticator.tpye" in caplog.text
    assert "druid.host" not in caplog.text  # not a security key: not this reader's to judge


# ---- passwords ----

def test_passwords_are_stored_as_druid_stores_them() -> None:
    stored = Credentials.for_password("s3cret")
    assert (len(stored.salt), len(stored.hash), stored.iterations) == (32, 64, 10_000)
    assert stored.hash == hashlib.pbkdf2_hmac("sha512", b"s3cret", stored.salt, 10_000, 64)
    assert stored.verify("s3cret") and not stored.verify("s3cret ") and not stored.verify("")
    assert Credentials.from_json(stored.to_json()) == stored
    assert Credentials.for_password("s3cret").salt != stored.salt


# ---- permissions ----

def wanted(name: str, type_: ResourceType = ResourceType.DATASOURCE, action: Action = Action.READ) -> ResourceAction:
    return ResourceAction(Resource(name, type_), action)


def test_a_permission_name_is_a_regex_matching_the_whole_name() -> None:
    wiki = Permission.from_json({"resource": {"name": "wiki.*", "type": "DATASOURCE"}, "action": "READ"})
    assert wiki.permits(wanted("wikipedia")) and wiki.permits(wanted("wiki"))
    assert not wiki.permits(wanted("my_wikipedia"))
    exact = Permission.from_json({"resource": {"name": "wiki", "type": "DATASOURCE"}, "action": "READ"})
    assert not exact.permits(wanted("wikipedia"))
    assert not wiki.permits(wanted("wikipedia", action=Action.WRITE))  # READ does not give WRITE
    assert not wiki.permits(wanted("wikipedia", ResourceType.VIEW))
    write = Permission.from_json({"resource": {"name": ".*", "type": "DATASOURCE"}, "action": "WRITE"})
    assert not write.permits(wanted("wikipedia"))  # nor WRITE READ
    assert permits(SUPERUSER_PERMISSIONS, wanted("STATE", ResourceType.STATE, Action.WRITE))


@pytest.mark.parametrize(("document", "message"), [
    ({"resource": {"name": "(", "type": "DATASOURCE"}, "action": "READ"}, r"regex\[\(\] does not compile"),
    ({"resource": {"name": "x", "type": "TABLE"}, "action": "READ"}, "resource.type must be one of"),
    ({"resource": {"name": "x", "type": "DATASOURCE"}, "action": "DELETE"}, "action must be READ or WRITE"),
    ({"resource": {"name": 1, "type": "DATASOURCE"}, "action": "READ"}, "resource.name must be a string"),
    ("READ", "expected"),
])
def test_a_malformed_permission_is_refused(document: object, message: str) -> None:
    with pytest.raises(InvalidPermission, match=message):
        Permission.from_json(document)


# ---- users, roles and the authenticator chain ----

@pytest.fixture
def metadata(tmp_path: Path) -> MetadataStore:
    store = MetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    store.create_tables()
    return store


def secured(metadata: MetadataStore, **extra: str) -> tuple[Security, BasicSecurityDb]:
    config = AuthConfig.from_properties({**DRUID_EXAMPLE, **extra})
    db = BasicSecurityDb(metadata, config)
    db.initialize()
    return Security(config, db), db


def test_start_up_creates_admin_and_druid_system_with_every_permission(metadata: MetadataStore) -> None:
    security, db = secured(metadata)
    assert db.users(AUTHN) == ["admin", "druid_system"]
    assert db.authz_user(AUTHZ, "admin") == {"name": "admin", "roles": ["admin"]}
    admin = security.authenticate(basic("admin", "password1"))
    system = security.authenticate(basic("druid_system", "password2"))
    for who in (admin, system):
        assert security.authorize(who, wanted("anything", ResourceType.CONFIG, Action.WRITE))
    # a second start with another password does not replace the first
    secured(metadata, **{f"druid.auth.authenticator.{AUTHN}.initialAdminPassword": "changed"})
    security.authenticate(basic("admin", "password1"))
    with pytest.raises(Unauthenticated):
        security.authenticate(basic("admin", "changed"))


def test_a_user_reads_what_their_roles_permit_and_nothing_else(metadata: MetadataStore) -> None:
    security, db = secured(metadata)
    db.create_user(AUTHN, "alice")
    db.set_password(AUTHN, "alice", "alice-pw")
    db.create_authz_user(AUTHZ, "alice")
    alice = security.authenticate(basic("alice", "alice-pw"))
    assert not security.authorize(alice, wanted("wikipedia"))  # no role yet
    db.create_role(AUTHZ, "wiki_reader")
    db.set_permissions(AUTHZ, "wiki_reader", [
        Permission.from_json({"resource": {"name": "wiki.*", "type": "DATASOURCE"}, "action": "READ"})])
    db.assign_role(AUTHZ, "alice", "wiki_reader")
    assert security.authorize(alice, wanted("wikipedia"))
    assert not security.authorize(alice, wanted("sales"))
    assert not security.authorize(alice, wanted("wikipedia", action=Action.WRITE))
    assert db.role(AUTHZ, "wiki_reader", full=True)["users"] == ["alice"]
    assert db.authz_user(AUTHZ, "alice", full=True, simplify=True)["roles"] == [
        {"name": "wiki_reader", "users": None,
         "permissions": [{"resource": {"name": "wiki.*", "type": "DATASOURCE"}, "action": "READ"}]}]
    db.delete_role(AUTHZ, "wiki_reader")
    assert db.authz_user(AUTHZ, "alice") == {"name": "alice", "roles": []}
    assert not security.authorize(alice, wanted("wikipedia"))


@pytest.mark.parametrize(("call", "message"), [
    (lambda db: db.create_user(AUTHN, "admin"), "User [admin] already exists."),
    (lambda db: db.set_password(AUTHN, "nobody", "x"), "User [nobody] does not exist."),
    (lambda db: db.users("nope"), "Basic authenticator with name [nope] does not exist."),
    (lambda db: db.roles("nope"), "Basic authorizer with name [nope] does not exist."),
    (lambda db: db.assign_role(AUTHZ, "admin", "nope"), "Role [nope] does not exist."),
    (lambda db: db.assign_role(AUTHZ, "admin", "admin"), "User [admin] already has role [admin]."),
    (lambda db: db.unassign_role(AUTHZ, "druid_system", "admin"), "User [druid_system] does not have role [admin]."),
    (lambda db: db.delete_role(AUTHZ, "nope"), "Role [nope] does not exist."),
])
def test_the_security_store_refuses_with_druids_messages(metadata: MetadataStore, call, message: str) -> None:
    _, db = secured(metadata)
    with pytest.raises(SecurityDbError) as refused:
        call(db)
    assert str(refused.value) == message


def test_the_chain_answers_as_druids(metadata: MetadataStore) -> None:
    security, db = secured(metadata)
    with pytest.raises(Unauthenticated, match="Unauthorized request"):
        security.authenticate(None)  # no credentials, no authenticator left
    with pytest.raises(Unauthenticated):
        security.authenticate(basic("admin", "wrong"))
    with pytest.raises(Unauthenticated):
        security.authenticate(basic("nobody", "x"))
    with pytest.raises(Unauthenticated, match="Malformed"):
        security.authenticate("Basic not-base64!")
    # skipOnFailure sends unknown users on, and an anonymous authenticator at the end takes them (and the rest)
    anonymous, _ = secured(metadata, **{
        "druid.auth.authenticatorChain": f'["{AUTHN}", "anon"]',
        f"druid.auth.authenticator.{AUTHN}.skipOnFailure": "true",
        "druid.auth.authenticator.anon.type": "anonymous", "druid.auth.authenticator.anon.authorizerName": AUTHZ})
    assert anonymous.authenticate(basic("nobody", "x")).identity == "defaultUser"
    assert anonymous.authenticate(None).identity == "defaultUser"
    assert anonymous.authenticate(basic("admin", "password1")).identity == "admin"
    with pytest.raises(Unauthenticated):  # a wrong password for a known user never falls through
        anonymous.authenticate(basic("admin", "wrong"))
