"""Generated input against a live node, as a careless or hostile client sends it: every operation of the node's
OpenAPI description with parameters and bodies schemathesis generates, and supervisor specs, task specs, native
queries and SQL text that hypothesis generates or mutates from valid ones. Every answer is a 2xx, or a 4xx whose body
says what is wrong; never a 500, a hang or a dead node. The node is this module's own: the run deletes and
terminates whatever it likes."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from sluice.server.node import Node
from tests.integration.harness import running_node

#: generated examples per operation and per property; the whole module runs in about a minute
EXAMPLES = 20
FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                database=None)


@pytest.fixture(scope="module")
def target(spark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:  # noqa: ARG001 - Spark first
    with running_node(tmp_path_factory.mktemp("fuzzed")) as node:
        yield node
        with httpx.Client(base_url=node.config.url, timeout=30) as http:
            assert http.get("/status/health").json() is True  # alive after all of it


@pytest.fixture(scope="module")
def http(target: Node) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=target.config.url, timeout=60) as client:
        yield client


def says_what_is_wrong(ctx: Any, response: schemathesis.Response, case: schemathesis.Case) -> bool | None:
    """A refusal carries a message a person can read, not an empty body."""
    if 400 <= response.status_code < 500 and response.status_code != 404:
        assert response.content.strip(), f"{case.method} {case.formatted_path}: {response.status_code} with no body"
    return None


def test_no_operation_of_the_openapi_description_answers_with_a_server_error(target: Node) -> None:
    """Each operation with its own hypothesis run (schemathesis's pytest loader does not work with pytest 9.2, its
    strategies do); the failures of all operations are said together."""
    api = schemathesis.openapi.from_url(f"{target.config.url}/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) > 100
    failures = []
    for operation in operations:
        @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True,
                  database=None)
        @given(case=operation.as_strategy())
        def call(case: schemathesis.Case) -> None:
            case.call_and_validate(checks=[not_a_server_error, says_what_is_wrong], timeout=60)

        try:
            call()
        except Exception as failure:  # noqa: BLE001 - each operation's failure is collected and said at the end
            failures.append(f"{operation.method.upper()} {operation.path}: {str(failure)[:800]}")
    assert failures == []


def post(http: httpx.Client, path: str, body: Any) -> httpx.Response:
    """As JSON the way a careless client writes it: NaN and Infinity included (httpx's json= refuses those)."""
    return http.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})


def assert_refused_or_taken(response: httpx.Response, what: Any) -> None:
    assert response.status_code < 500, (what, response.status_code, response.text[:500])
    if response.status_code >= 400:
        assert response.text.strip(), what


JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                                 max_size=4), max_leaves=12)

SUPERVISOR = {
    "type": "kafka",
    "spec": {
        "dataSchema": {"dataSource": "fuzzed", "timestampSpec": {"column": "time", "format": "iso"},
                       "dimensionsSpec": {"dimensions": ["channel", {"type": "long", "name": "delta"}]},
                       "metricsSpec": [{"type": "count", "name": "count"},
                                       {"type": "longSum", "name": "added", "fieldName": "added"}],
                       "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "MINUTE",
                                           "rollup": True}},
        "ioConfig": {"topic": "fuzzed", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "127.0.0.1:9"}, "taskCount": 1,
                     "taskDuration": "PT1H"},
        "tuningConfig": {"type": "kafka", "maxRowsPerSegment": 5000000},
    },
    "suspended": True,  # a spec that passes starts no task: nothing reads from the made-up broker
}


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document a value could be replaced."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += paths(inner, (*prefix, index))
    return found


def mutated(document: dict[str, Any], where: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(document)
    parent = changed
    for step in where[:-1]:
        parent = parent[step]
    parent[where[-1]] = value
    return changed


@FUZZ
@given(where=st.sampled_from([p for p in paths(SUPERVISOR) if p != ("suspended",)]), value=JSON)
def test_a_supervisor_spec_with_any_field_replaced_is_refused_or_taken_never_a_500(
        http: httpx.Client, where: tuple[Any, ...], value: Any) -> None:
    spec = mutated(SUPERVISOR, where, value)
    assert_refused_or_taken(post(http, "/druid/indexer/v1/supervisor", spec), (where, value))


@FUZZ
@given(body=JSON)
def test_any_json_as_a_supervisor_task_or_native_query_is_refused_never_a_500(http: httpx.Client, body: Any) -> None:
    for path in ("/druid/indexer/v1/supervisor", "/druid/indexer/v1/task", "/druid/v2", "/druid/v2/sql"):
        assert_refused_or_taken(post(http, path, body), (path, body))


NATIVE = {"queryType": "groupBy", "dataSource": "fuzzed", "granularity": "all", "intervals": ["2024/2025"],
          "dimensions": ["channel"], "filter": {"type": "selector", "dimension": "channel", "value": "x"},
          "aggregations": [{"type": "longSum", "name": "added", "fieldName": "added"}],
          "limitSpec": {"type": "default", "limit": 10, "columns": [{"dimension": "added", "direction": "descending"}]},
          "context": {"timeout": 10000}}


@FUZZ
@given(where=st.sampled_from(paths(NATIVE)), value=JSON)
def test_a_native_query_with_any_field_replaced_is_answered_or_refused_never_a_500(
        http: httpx.Client, where: tuple[Any, ...], value: Any) -> None:
    assert_refused_or_taken(post(http, "/druid/v2", mutated(NATIVE, where, value)), (where, value))


SQL_WORDS = ["SELECT", "FROM", "WHERE", "GROUP BY", "ORDER BY", "LIMIT", "JOIN", "ON", "UNION ALL", "(", ")", ",",
             "*", "COUNT(*)", "SUM(added)", "__time", "channel", "fuzzed", "sys.segments", "INFORMATION_SCHEMA.TABLES",
             "'x'", "1", "-1", "1e309", "NULL", "TIME_FLOOR(__time, 'PT1H')", "CAST(", "AS", "BIGINT", "VARCHAR",
             "=", "<", "AND", "OR", "NOT", "IN", "LIKE", "'%'", "?", ";", "--", "/*", "*/", "\"", "`", "\\", "\x00"]


@FUZZ
@given(text=st.lists(st.sampled_from(SQL_WORDS), min_size=1, max_size=14).map(" ".join) | st.text(max_size=60))
def test_any_sql_text_is_answered_or_refused_never_a_500(http: httpx.Client, text: str) -> None:
    assert_refused_or_taken(post(http, "/druid/v2/sql", {"query": text, "context": {"timeout": 10000}}), text)
