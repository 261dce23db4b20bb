"""Druid's basic security over real HTTP: a node configured with Druid's own keys refuses strangers on every route
but the health check and isLeader (401), lets each user do what their roles permit on which data sources (403
otherwise: SQL over joins and subqueries, system tables filtered, native queries, tasks, supervisors, the security
API), and its internal calls (a peon's task actions, the overlord's calls to workers and peons) go through as the
escalator's druid_system user. Expected answers are counted from the rows the test ingests."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.dependencies.models import Dependant

import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from sluice.security.config import AuthConfig, ConfigError
from sluice.server.auth import UNSECURED_PATHS, is_guarded
from sluice.server.node import Node
from sluice.server.tls import TlsConfig
from tests.integration.harness import free_port, running_node, wait_for
from tests.integration.processes import SluiceProcess, start_all, stop_all
from tests.integration.test_batch_ingestion import ndjson, rows, run, task

PROPERTIES = {
    "druid.auth.authenticatorChain": '["basic"]',
    "druid.auth.authenticator.basic.type": "basic",
    "druid.auth.authenticator.basic.initialAdminPassword": "admin-pw",
    "druid.auth.authenticator.basic.initialInternalClientPassword": "internal-pw",
    "druid.auth.authenticator.basic.authorizerName": "basic",
    "druid.escalator.type": "basic",
    "druid.escalator.internalClientUsername": "druid_system",
    "druid.escalator.internalClientPassword": "internal-pw",
    "druid.escalator.authorizerName": "basic",
    "druid.auth.authorizers": '["basic"]',
    "druid.auth.authorizer.basic.type": "basic",
}
AUTHN = "/druid-ext/basic-security/authentication/db/basic"
AUTHZ = "/druid-ext/basic-security/authorization/db/basic"
FORBIDDEN = {"Access-Check-Result": "Unauthorized"}
TASKS = "/druid/indexer/v1"


@pytest.fixture(scope="module")
def certificate_authority() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def secure(spark, certificate_authority: trustme.CA,  # noqa: ARG001 - Spark first
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """A node with basic security, and HTTPS on a TLS port from a throw-away certificate in a PKCS #12 key store."""
    work_dir = tmp_path_factory.mktemp("secure")
    issued = certificate_authority.issue_cert("127.0.0.1")
    key_store = work_dir / "keystore.p12"
    key_store.write_bytes(pkcs12.serialize_key_and_certificates(
        b"sluice", serialization.load_pem_private_key(issued.private_key_pem.bytes(), None),
        x509.load_pem_x509_certificate(issued.cert_chain_pems[0].bytes()), None,
        serialization.BestAvailableEncryption(b"store-pw")))
    tls = {"druid.enableTlsPort": "true", "druid.tlsPort": str(free_port()),
           "druid.server.https.keyStorePath": str(key_store), "druid.server.https.keyStoreType": "pkcs12",
           "druid.server.https.keyStorePassword": "store-pw"}
    with running_node(work_dir, auth=AuthConfig.from_properties(PROPERTIES), tls=TlsConfig.from_properties(tls)) as node:
        yield node


def client(node: Node, user: str | None = None, password: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=node.config.url, timeout=120, auth=(user, password or "") if user else None)


def sql(http: httpx.Client, query: str) -> httpx.Response:
    return http.post("/druid/v2/sql", json={"query": query})


def guards(dependant: Dependant) -> bool:
    return any(is_guarded(d.call) or guards(d) for d in dependant.dependencies)


def test_every_route_is_guarded_and_refuses_strangers_with_401(secure: Node) -> None:
    routes = [(c.path, c.methods, c.original_route) for c in iter_route_contexts(secure.app.routes)]
    api = [(path, route) for path, _, route in routes if isinstance(route, APIRoute)]
    assert len(api) > 80
    unguarded = sorted(path for path, route in api if path not in UNSECURED_PATHS and not guards(route.dependant))
    assert unguarded == []
    with client(secure) as stranger, client(secure, "admin", "wrong") as wrong:
        for route_path, methods, _ in routes:
            path = route_path.replace("{", "").replace("}", "")  # any value: authentication comes first
            for method in methods:
                if route_path in UNSECURED_PATHS:
                    assert stranger.request(method, path).status_code == 200, path
                    continue
                for who in (stranger, wrong):
                    response = who.request(method, path)
                    assert response.status_code == 401, (method, path, response.text)
                    assert response.headers["WWW-Authenticate"].startswith("Basic")
                    if method != "HEAD":
                        assert response.json()["error"] == "Unauthorized request"
        malformed = stranger.get("/status", headers={"Authorization": "Basic %%%"})
        assert malformed.status_code == 401


def create_user(admin: httpx.Client, user: str, password: str, permissions: list[dict[str, Any]] | None) -> None:
    """As a Druid operator's script does it: the user in the authenticator and the authorizer, a password, and a
    role of the user's own with `permissions`."""
    for call in (f"{AUTHN}/users/{user}", f"{AUTHZ}/users/{user}"):
        assert admin.post(call).status_code == 200
    assert admin.post(f"{AUTHN}/users/{user}/credentials", json={"password": password}).status_code == 200
    if permissions is not None:
        assert admin.post(f"{AUTHZ}/roles/{user}_role").status_code == 200
        assert admin.post(f"{AUTHZ}/roles/{user}_role/permissions", json=permissions).status_code == 200
        assert admin.post(f"{AUTHZ}/users/{user}/roles/{user}_role").status_code == 200


def permission(name: str, action: str, type_: str = "DATASOURCE") -> dict[str, Any]:
    return {"resource": {"name": name, "type": type_}, "action": action}


def inline(data_source: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    return task(data_source, {"type": "inline", "data": ndjson(events)}, {"type": "json"})


def count(http: httpx.Client, data_source: str) -> int:
    response = sql(http, f'SELECT SUM("count") AS n FROM {data_source}')
    assert response.status_code == 200, response.text
    return response.json()[0]["n"]


def test_each_user_reads_and_writes_only_the_data_sources_their_roles_permit(secure: Node) -> None:
    wiki, sales = rows(40, seed=1), rows(25, seed=2)
    with client(secure, "admin", "admin-pw") as admin:
        create_user(admin, "alice", "alice-pw", [permission("wiki.*", "READ")])
        create_user(admin, "wendy", "wendy-pw", [permission("wiki.*", "WRITE")])
        create_user(admin, "bob", "bob-pw", None)
        wiki_task = run(admin, inline("wiki_edits", wiki))["id"]
        sales_task = run(admin, inline("secret_sales", sales))["id"]
        assert (count(admin, "wiki_edits"), count(admin, "secret_sales")) == (40, 25)
        assert admin.get("/druid/v2/datasources").json() == ["secret_sales", "wiki_edits"]

    with client(secure, "alice", "alice-pw") as alice:
        assert count(alice, "wiki_edits") == 40
        for query in ("SELECT COUNT(*) FROM secret_sales",
                      "SELECT w.channel FROM wiki_edits w JOIN secret_sales s ON w.channel = s.channel",
                      "SELECT COUNT(*) FROM wiki_edits WHERE channel IN (SELECT channel FROM secret_sales)",
                      "WITH s AS (SELECT * FROM druid.secret_sales) SELECT COUNT(*) FROM s",
                      "SELECT * FROM sys.servers"):
            refused = sql(alice, query)
            assert (refused.status_code, refused.json()) == (403, FORBIDDEN if "servers" not in query else
                                                             {"Access-Check-Result":
                                                              "Insufficient permission to view servers"}), query
        assert sql(alice, "SELECT TABLE_NAME FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = 'druid'"
                   ).json() == [{"TABLE_NAME": "wiki_edits"}]
        assert {r["datasource"] for r in sql(alice, "SELECT datasource FROM sys.segments").json()} == {"wiki_edits"}
        assert {r["datasource"] for r in sql(alice, "SELECT datasource FROM sys.tasks").json()} == {"wiki_edits"}
        native = {"queryType": "timeseries", "granularity": "all", "intervals": ["2024-01-01/2025-01-01"],
                  "aggregations": [{"type": "longSum", "name": "n", "fieldName": "count"}]}
        assert alice.post("/druid/v2", json={**native, "dataSource": "wiki_edits"}).json()[0]["result"]["n"] == 40
        assert alice.post("/druid/v2", json={**native, "dataSource": "secret_sales"}).status_code == 403
        assert alice.get("/druid/v2/datasources").json() == ["wiki_edits"]
        assert alice.get("/druid/coordinator/v1/datasources").json() == ["wiki_edits"]
        assert alice.get("/druid/coordinator/v1/datasources/secret_sales").status_code == 403
        assert {t["dataSource"] for t in alice.get(f"{TASKS}/tasks").json()} == {"wiki_edits"}
        assert alice.get(f"{TASKS}/task/{wiki_task}/status").status_code == 200
        assert alice.get(f"{TASKS}/task/{sales_task}/status").status_code == 403
        assert alice.get(f"{TASKS}/task/{sales_task}/reports").status_code == 403
        # READ is not WRITE: no ingestion, no shutdown, no marking segments unused
        assert alice.post(f"{TASKS}/task", json=inline("wiki_more", wiki)
                          ).status_code == 403
        assert alice.post(f"{TASKS}/task/{wiki_task}/shutdown").status_code == 403
        assert alice.delete("/druid/coordinator/v1/datasources/wiki_edits").status_code == 403
        for call in (f"{AUTHN}/users", f"{AUTHZ}/roles", "/status", f"{TASKS}/workers", "/metrics"):
            assert alice.get(call).status_code == 403, call
        assert alice.get(f"{TASKS}/isLeader").status_code == 200

    with client(secure, "wendy", "wendy-pw") as wendy:  # WRITE without READ: may ingest, may not query
        more = rows(7, seed=3)
        response = wendy.post(f"{TASKS}/task", json=inline("wiki_more", more))
        assert response.status_code == 200, response.text
        wendys_task = response.json()["task"]
        assert wendy.get(f"{TASKS}/task/{wendys_task}/status").status_code == 403  # looking is READ
        assert sql(wendy, "SELECT COUNT(*) FROM wiki_edits").status_code == 403
        assert wendy.post(f"{TASKS}/task", json=inline("sales_more", more)
                          ).status_code == 403
    with client(secure, "alice", "alice-pw") as alice:
        wait_for(lambda: alice.get(f"{TASKS}/task/{wendys_task}/status").json()["status"]["statusCode"] == "SUCCESS",
                 240, "wendy's task")
        assert count(alice, "wiki_more") == 7  # written by wendy, readable by alice's wiki.* role

    with client(secure, "bob", "bob-pw") as bob:  # authenticated, but no role: nothing
        assert sql(bob, "SELECT COUNT(*) FROM wiki_edits").status_code == 403
        assert bob.get("/druid/v2/datasources").json() == []
        assert sql(bob, "SELECT COUNT(*) AS n FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = 'druid'"
                   ).json() == [{"n": 0}]

    with client(secure, "admin", "admin-pw") as admin:  # a new password replaces the old; a deleted user is gone
        assert admin.post(f"{AUTHN}/users/alice/credentials", json={"password": "new-pw"}).status_code == 200
        assert admin.delete(f"{AUTHN}/users/bob").status_code == 200
    with client(secure, "alice", "alice-pw") as old, client(secure, "alice", "new-pw") as new, \
            client(secure, "bob", "bob-pw") as bob:
        assert old.get("/druid/v2/datasources").status_code == 401
        assert new.get("/druid/v2/datasources").json() == ["wiki_edits", "wiki_more"]
        assert bob.get("/druid/v2/datasources").status_code == 401


@pytest.fixture(scope="module")
def strict(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:  # noqa: ARG001 - Spark first
    """Basic security with Druid's two opt-in checks: system tables and query context keys are authorized too."""
    properties = {**PROPERTIES, "druid.sql.planner.authorizeSystemTablesDirectly": "true",
                  "druid.auth.authorizeQueryContextParams": "true", "druid.auth.unsecuredContextKeys": '["priority"]'}
    with running_node(tmp_path_factory.mktemp("strict"), auth=AuthConfig.from_properties(properties)) as node:
        yield node


def test_system_tables_and_context_keys_need_their_own_permissions_where_druid_asks_for_them(
        secure: Node, strict: Node) -> None:
    grants = [permission(".*", "READ"), permission("segments", "READ", "SYSTEM_TABLE"),
              permission("timeout", "WRITE", "QUERY_CONTEXT")]
    native = {"queryType": "timeseries", "dataSource": "wiki_edits", "granularity": "all",
              "intervals": ["2024-01-01/2025-01-01"], "aggregations": [{"type": "count", "name": "n"}]}
    with client(strict, "admin", "admin-pw") as admin:
        create_user(admin, "carol", "carol-pw", grants)
        run(admin, inline("wiki_edits", rows(12, seed=3)))
    with client(strict, "carol", "carol-pw") as carol:
        assert sql(carol, "SELECT COUNT(*) AS n FROM sys.segments").status_code == 200
        assert (sql(carol, "SELECT COUNT(*) FROM sys.tasks").status_code,
                sql(carol, "SELECT COUNT(*) FROM sys.tasks").json()) == (403, FORBIDDEN)
        assert sql(carol, "SELECT COUNT(*) FROM INFORMATION_SCHEMA.TABLES").status_code == 200  # not a sys table

        def with_context(context: dict[str, Any]) -> int:
            return carol.post("/druid/v2/sql", json={"query": "SELECT COUNT(*) FROM wiki_edits",
                                                     "context": context}).status_code

        assert with_context({"timeout": 60_000}) == 200  # granted
        assert with_context({"priority": 5, "sqlQueryId": "carol-1"}) == 200  # unsecured, and set by Druid itself
        assert with_context({"useCache": False}) == 403
        assert with_context({"timeout": 60_000, "useCache": False}) == 403
        assert carol.post("/druid/v2", json={**native, "context": {"timeout": 60_000}}).json()[0]["result"]["n"] == 12
        assert carol.post("/druid/v2", json={**native, "context": {"useCache": False}}).status_code == 403
    with client(secure, "admin", "admin-pw") as admin:  # where Druid does not ask, neither is checked
        create_user(admin, "dave", "dave-pw", [permission(".*", "READ")])
    with client(secure, "dave", "dave-pw") as dave:
        assert sql(dave, "SELECT COUNT(*) FROM sys.tasks").status_code == 200
        assert dave.post("/druid/v2/sql", json={"query": "SELECT 1", "context": {"useCache": False}}).status_code == 200


def test_the_security_api_answers_in_druids_shapes(secure: Node) -> None:
    with client(secure, "admin", "admin-pw") as admin:
        create_user(admin, "carol", "carol-pw", [permission("sales", "READ"), permission("STATE", "READ", "STATE")])
        stored = admin.get(f"{AUTHN}/users/carol").json()
        assert stored["name"] == "carol" and stored["credentials"]["iterations"] == 10_000
        assert len(base64.b64decode(stored["credentials"]["salt"])) == 32
        assert len(base64.b64decode(stored["credentials"]["hash"])) == 64
        assert "carol-pw" not in str(stored)
        assert admin.get(f"{AUTHZ}/users/carol").json() == {"name": "carol", "roles": ["carol_role"]}
        assert admin.get(f"{AUTHZ}/roles/carol_role").json() == {"name": "carol_role", "permissions": [
            {"resourceAction": permission("sales", "READ"), "resourceNamePattern": "sales"},
            {"resourceAction": permission("STATE", "READ", "STATE"), "resourceNamePattern": "STATE"}]}
        assert admin.get(f"{AUTHZ}/roles/carol_role?full").json()["users"] == ["carol"]
        assert admin.get(f"{AUTHZ}/roles/carol_role?simplifyPermissions").json() == {
            "name": "carol_role", "users": None,
            "permissions": [permission("sales", "READ"), permission("STATE", "READ", "STATE")]}
        assert "admin" in admin.get(f"{AUTHZ}/roles").json()
        for method, call, body, message in (
                ("POST", f"{AUTHN}/users/carol", None, "User [carol] already exists."),
                ("GET", f"{AUTHN}/users/nobody", None, "User [nobody] does not exist."),
                ("GET", "/druid-ext/basic-security/authentication/db/other/users", None,
                 "Basic authenticator with name [other] does not exist."),
                ("POST", f"{AUTHZ}/users/carol/roles/nope", None, "Role [nope] does not exist."),
                ("POST", f"{AUTHZ}/roles/carol_role/permissions", [permission("(", "READ")],
                 "Invalid permission, resource name regex[(] does not compile"),
                ("POST", f"{AUTHN}/users/carol/credentials", {"password": ""}, "password: a non-empty string")):
            response = admin.request(method, call, json=body)
            assert response.status_code == 400, (call, response.text)
            assert response.json()["error"].startswith(message), response.text
    with client(secure, "carol", "carol-pw") as carol:  # STATE READ: the status, not the security API
        assert carol.get("/status").status_code == 200
        assert carol.get(f"{AUTHZ}/roles").status_code == 403


def test_the_tls_port_serves_https_with_the_key_stores_certificate(secure: Node,
                                                                   certificate_authority: trustme.CA) -> None:
    assert secure.config.tls is not None
    https = f"https://127.0.0.1:{secure.config.tls.port}"
    trusting = ssl.create_default_context()
    certificate_authority.configure_trust(trusting)
    with httpx.Client(verify=trusting, timeout=30) as client:
        assert client.get(f"{https}/status/health").json() is True
        assert client.get(f"{https}/status").status_code == 401  # the same checks as on the plaintext port
        assert client.get(f"{https}/status", auth=("admin", "admin-pw")).json()["version"]
    with pytest.raises(httpx.ConnectError):  # a client that does not trust the certificate's CA
        httpx.get(f"{https}/status/health", timeout=10)


@pytest.mark.parametrize(("change", "message"), [
    ({"druid.tlsPort": None}, "druid.tlsPort: [] is not a port number"),
    ({"druid.server.https.keyStoreType": "jks"}, "druid.server.https.keyStoreType: [jks] is not supported"),
    ({"druid.server.https.keyStorePassword": "wrong"}, "druid.server.https.keyStorePath: cannot read the key store"),
    ({"druid.server.https.keyStorePath": "/nonexistent.p12"}, "cannot read the key store /nonexistent.p12"),
    ({"druid.enablePlaintextPort": "false"}, "druid.enablePlaintextPort: false is not supported"),
])
def test_tls_settings_that_cannot_work_are_refused_by_key(secure: Node, change: dict[str, str | None],
                                                          message: str) -> None:
    assert secure.config.tls is not None
    properties = {"druid.enableTlsPort": "true", "druid.tlsPort": "8281",
                  "druid.server.https.keyStorePath": str(secure.config.tls.key_store_path),
                  "druid.server.https.keyStorePassword": "store-pw"}
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        TlsConfig.from_properties({k: v for k, v in {**properties, **change}.items() if v is not None})


def test_internal_calls_go_as_the_escalator_between_processes(tmp_path: Path) -> None:
    """An overlord and a worker started with `--config` holding Druid's keys: the kill task runs in a peon and
    takes its lock through the overlord's task-action API as druid_system; the worker's API refuses strangers."""
    config = tmp_path / "runtime.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in PROPERTIES.items()))
    uri = f"sqlite:///{tmp_path / 'metadata.db'}"
    overlord, worker = start_all(SluiceProcess("overlord", tmp_path, uri, "--config", str(config)),
                                 SluiceProcess("worker", tmp_path, uri, "--capacity", "1", "--config", str(config)))
    try:
        with httpx.Client(base_url=overlord.url, timeout=60, auth=("admin", "admin-pw")) as admin:
            kill = {"type": "kill", "id": "kill_secured", "dataSource": "nothing_here",
                    "interval": "2024-01-01/2024-02-01"}
            assert admin.post(f"{TASKS}/task", json=kill).status_code == 200
            status = wait_for(lambda: (s := admin.get(f"{TASKS}/task/kill_secured/status").json()["status"])
                              ["statusCode"] != "RUNNING" and s, 60, "the kill task")
            assert status["statusCode"] == "SUCCESS", status
            assert admin.post(f"{TASKS}/action", json={"task": "kill_secured", "action": {"type": "lockList"}}
                              ).status_code == 400  # admin may call it (STATE WRITE); the task is no longer active
        assert httpx.get(f"{worker.url}/druid/worker/v1/tasks").status_code == 401
        assert httpx.get(f"{worker.url}/druid/worker/v1/tasks", auth=("druid_system", "internal-pw")).status_code == 200
        assert httpx.post(f"{overlord.url}{TASKS}/action", json={"task": "x", "action": {"type": "lockList"}}
                          ).status_code == 401
    finally:
        stop_all((worker, overlord))


MATRIX_USERS = {"admin": "admin-pw", "m_reader": "pw", "m_writer": "pw", "m_watcher": "pw", "m_nobody": "pw",
                "stranger": None}


@pytest.fixture(scope="module")
def matrix_users(secure: Node) -> dict[str, str | None]:
    with client(secure, "admin", "admin-pw") as admin:
        create_user(admin, "m_reader", "pw", [permission("matrix_ds", "READ")])
        create_user(admin, "m_writer", "pw", [permission("matrix_ds", "WRITE")])
        create_user(admin, "m_watcher", "pw", [permission("STATE", "READ", "STATE")])
        create_user(admin, "m_nobody", "pw", None)
    return MATRIX_USERS


OK = "ok"  # neither 401 nor 403: what the endpoint answers past the checks (200, 204, 400 or 404 here)
#: (method, path, body) → (admin, reader, writer, watcher, nobody, stranger)
MATRIX: list[tuple[str, str, Any, tuple[Any, ...]]] = [
    ("GET", "/status/health", None, (OK, OK, OK, OK, OK, OK)),
    ("GET", f"{TASKS}/isLeader", None, (OK, OK, OK, OK, OK, OK)),
    ("GET", "/status", None, (OK, 403, 403, OK, 403, 401)),
    ("GET", "/metrics", None, (OK, 403, 403, OK, 403, 401)),
    ("GET", f"{TASKS}/leader", None, (OK, 403, 403, OK, 403, 401)),
    ("POST", "/druid/v2/sql", {"query": "SELECT 1 AS x"}, (OK, OK, OK, OK, OK, 401)),
    ("POST", "/druid/v2/sql", {"query": "SELECT * FROM sys.servers"}, (OK, 403, 403, OK, 403, 401)),
    ("GET", "/druid/coordinator/v1/datasources/matrix_ds", None, (OK, OK, 403, 403, 403, 401)),
    ("DELETE", "/druid/coordinator/v1/datasources/matrix_ds", None, (OK, 403, OK, 403, 403, 401)),
    ("GET", "/druid/coordinator/v1/rules/matrix_ds", None, (OK, OK, 403, 403, 403, 401)),
    ("POST", "/druid/coordinator/v1/rules/matrix_ds", [{"type": "loadForever"}], (OK, 403, OK, 403, 403, 401)),
    ("GET", "/druid/coordinator/v1/rules", None, (OK, 403, 403, OK, 403, 401)),
    ("GET", f"{TASKS}/supervisor/matrix_ds/status", None, (OK, OK, 403, 403, 403, 401)),
    ("POST", f"{TASKS}/supervisor/matrix_ds/suspend", None, (OK, 403, OK, 403, 403, 401)),
    ("POST", f"{TASKS}/datasources/matrix_ds/shutdownAllTasks", None, (OK, 403, OK, 403, 403, 401)),
    ("POST", f"{TASKS}/task", {"type": "noop", "id": "matrix_noop_{user}", "dataSource": "matrix_ds", "runTime": 1},
     (OK, 403, OK, 403, 403, 401)),
    ("POST", f"{TASKS}/action", {"task": "none", "action": {"type": "lockList"}}, (OK, 403, 403, 403, 403, 401)),
    ("GET", f"{AUTHN}/users", None, (OK, 403, 403, 403, 403, 401)),
    ("POST", f"{AUTHZ}/roles/matrix_role", None, (OK, 403, 403, 403, 403, 401)),
]


@pytest.mark.parametrize(("method", "path", "body", "expected"), MATRIX, ids=[f"{m} {p}" for m, p, _, _ in MATRIX])
def test_who_gets_what_on_which_endpoint(secure: Node, matrix_users: dict[str, str | None], method: str, path: str,
                                         body: Any, expected: tuple[Any, ...]) -> None:
    for (user, password), wanted in zip(matrix_users.items(), expected):
        with client(secure, user if password else None, password) as http:
            sent = json.loads(json.dumps(body).replace("{user}", user)) if body is not None else None
            status = http.request(method, path, json=sent).status_code
            if wanted == OK:
                assert status not in (401, 403), (user, method, path, status)
            else:
                assert status == wanted, (user, method, path, status)
