"""Bad input, tried as an attacker would, against a real node over HTTP: every row ends in a clear 4xx that names what
is wrong, and the node stays healthy and answers the next query (issue 17, section 1b)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.integration.harness import supervisor_spec


def spec_with(data_source: str = "bad_input", **io: Any) -> dict[str, Any]:
    return supervisor_spec(data_source, "bad_input_topic", "127.0.0.1:9", **io)


def nested_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def sql_body(query: str, **extra: Any) -> dict[str, Any]:
    return {"query": query, **extra}


ROWS: list[tuple[str, str, str, Any, int, str]] = [
    # (what, method, path, JSON body (a str is sent as is), expected status, text the error holds)
    ("supervisor dataSource is a path", "POST", "/druid/indexer/v1/supervisor", spec_with("/tmp/x"), 400,
     "dataSource"),
    ("supervisor dataSource climbs out", "POST", "/druid/indexer/v1/supervisor", spec_with("../../../tmp/x"), 400,
     "dataSource"),
    ("supervisor id with a slash", "POST", "/druid/indexer/v1/supervisor", {**spec_with("a/b"), "id": "a/b"}, 400,
     "dataSource"),
    ("task id is a path", "POST", "/druid/indexer/v1/task", {"type": "noop", "id": "/tmp/x"}, 400, "task ID"),
    ("task id with NUL", "POST", "/druid/indexer/v1/task", {"type": "noop", "id": "a\x00b"}, 400, "character #0"),
    ("task id of 256 bytes", "POST", "/druid/indexer/v1/task", {"type": "noop", "id": "x" * 256}, 400, "255"),
    ("replicas 1e9", "POST", "/druid/indexer/v1/supervisor", spec_with(replicas=1e9), 400, "replicas"),
    ("taskCount true", "POST", "/druid/indexer/v1/supervisor", spec_with(taskCount=True), 400, "taskCount"),
    ("taskCount \"2\"", "POST", "/druid/indexer/v1/supervisor", spec_with(taskCount="2"), 400, "taskCount"),
    ("taskDuration 30", "POST", "/druid/indexer/v1/supervisor", spec_with(taskDuration=30), 400, "taskDuration"),
    ("period PT0.000001S", "POST", "/druid/indexer/v1/supervisor", spec_with(period="PT0.000001S"), 400, "period"),
    ("noop runTime 1e20", "POST", "/druid/indexer/v1/task", {"type": "noop", "id": "n1", "runTime": 1e20}, 400,
     "runTime"),
    ("noop runTime abc", "POST", "/druid/indexer/v1/task", {"type": "noop", "id": "n2", "runTime": "abc"}, 400,
     "runTime"),
    ("noop context a string", "POST", "/druid/indexer/v1/task", {"type": "noop", "id": "n3", "context": "x"}, 400,
     "context"),
    ("noop dataSource an object", "POST", "/druid/indexer/v1/task", {"type": "noop", "id": "n4", "dataSource": {}},
     400, "dataSource"),
    ("10,000-deep JSON task", "POST", "/druid/indexer/v1/task", nested_json(10_000), 400, "too deeply nested"),
    ("10,000-deep JSON supervisor", "POST", "/druid/indexer/v1/supervisor", nested_json(10_000), 400, "too deeply nested"),
    ("10,000-deep JSON SQL", "POST", "/druid/v2/sql", nested_json(10_000), 400, "too deeply nested"),
    ("10,000-deep JSON native", "POST", "/druid/v2", nested_json(10_000), 400, "too deeply nested"),
    ("SQL UNION ALL x100,000", "POST", "/druid/v2/sql",
     sql_body(" UNION ALL ".join(["SELECT 1 AS x"] * 100_000)), 400, "too large: 100000 SELECTs"),
    ("SQL REPEAT 1e9", "POST", "/druid/v2/sql", sql_body("SELECT REPEAT('x', 1000000000) AS s"), 400,
     "longer than 16777216 characters"),
    ("SQL 1,000 nested subqueries", "POST", "/druid/v2/sql",
     sql_body("SELECT x FROM (" * 1000 + "SELECT 1 AS x" + ")" * 1000), 400, "too large: 1001 SELECTs"),
    ("SQL 200 nested subqueries", "POST", "/druid/v2/sql",
     sql_body("SELECT x FROM (" * 200 + "SELECT 1 AS x" + ")" * 200), 400, "too deeply nested"),
    ("expression with 5,000 nested parentheses", "POST", "/druid/v2/sql",
     sql_body("SELECT " + "(" * 5000 + "1" + ")" * 5000 + " AS x"), 400, "too deeply nested"),
    ("SQL parameter of object type", "POST", "/druid/v2/sql",
     sql_body("SELECT ? AS x", parameters=[{"type": "VARCHAR", "value": {"a": 1}}]), 400,
     "Parameter at position [0] is not a valid VARCHAR"),
    ("SQL parameters not objects", "POST", "/druid/v2/sql", sql_body("SELECT ? AS x", parameters=["a"]), 400,
     "parameters"),
    ("SQL BLOB result", "POST", "/druid/v2/sql", sql_body("SELECT CAST('abc' AS VARBINARY) AS b"), 400,
     "type VARBINARY"),
    ("current_database()", "POST", "/druid/v2/sql", sql_body("SELECT current_database() AS d"), 400,
     "CURRENT_DATABASE is not allowed"),
]


@pytest.mark.parametrize(("what", "method", "path", "body", "status", "says"), ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_gets_a_clear_4xx_and_the_node_stays_healthy(http: httpx.Client, what: str, method: str,
                                                             path: str, body: Any, status: int, says: str) -> None:
    content = body if isinstance(body, str) else json.dumps(body)
    response = http.request(method, path, content=content, headers={"Content-Type": "application/json"})
    assert response.status_code == status, (what, response.text[:500])
    assert says in response.text, (what, response.text[:500])
    assert len(response.content) < 100_000
    assert http.get("/status/health").json() is True
    assert http.post("/druid/v2/sql", json={"query": "SELECT 1 + 1 AS two"}).json() == [{"two": 2}]
