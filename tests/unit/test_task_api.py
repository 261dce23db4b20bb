"""Druid's task API on the overlord's TaskQueue: request in -> status and body out (no workers, no Spark)."""

from __future__ import annotations

from typing import Any, Callable

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from sluice.cli import build_parser, node_config
from sluice.emitter import NoopEmitter, ServiceEmitter
from sluice.metadata.store import MetadataStore
from sluice.overlord.task_queue import TaskQueue
from sluice.server.api_task import task_router
from sluice.task.task import TaskSpec, TaskStatus


class IdleRunner:
    """A runner that is never handed anything in these tests: the queue's management loop does not run."""

    def restores(self, spec: TaskSpec) -> bool: return False

    def run(self, spec: TaskSpec) -> None: ...
    def status(self, task_id: str) -> TaskStatus | None: return None
    def runner_status(self, task_id: str) -> str: return "PENDING"
    def location(self, task_id: str) -> tuple[str, int] | None: return None
    def client(self, task_id: str) -> Any: return None
    def shutdown(self, task_id: str, reason: str) -> None: ...
    def add_listener(self, listener: Callable[[TaskStatus], None]) -> None: ...


def client(metadata: MetadataStore, max_size: int = 2**31 - 1) -> tuple[TestClient, TaskQueue]:
    queue = TaskQueue(metadata, IdleRunner(), ServiceEmitter("druid/overlord", "", NoopEmitter()), max_size)
    app = FastAPI()
    app.include_router(task_router(metadata, queue, None, list))  # type: ignore[arg-type]
    return TestClient(app), queue


def noop(task_id: str) -> dict[str, Any]:
    return {"type": "noop", "id": task_id, "dataSource": "wiki", "runTime": 10}


def test_get_task_answers_the_task_id_and_its_payload_as_druid_does(metadata):
    http, _ = client(metadata)
    assert http.post("/druid/indexer/v1/task", json=noop("noop_1")).json() == {"task": "noop_1"}
    response = http.get("/druid/indexer/v1/task/noop_1")
    assert response.status_code == 200
    assert response.json() == {"task": "noop_1", "payload": {
        "type": "noop", "id": "noop_1", "groupId": "noop_1", "dataSource": "wiki", "runTime": 10, "fail": False,
        "context": {"priority": 0}}}
    missing = http.get("/druid/indexer/v1/task/nope")
    assert (missing.status_code, missing.json()) == (404, {"error": "Can't find task for id [nope]"})


def test_a_full_queue_refuses_a_task_with_druids_capacity_error_and_stores_nothing(metadata):
    http, queue = client(metadata, max_size=2)
    for task_id in ("noop_1", "noop_2"):
        assert http.post("/druid/indexer/v1/task", json=noop(task_id)).status_code == 200
    refused = http.post("/druid/indexer/v1/task", json=noop("noop_3"))
    assert refused.status_code == 429
    assert refused.json() == {
        "error": "druidException", "errorCode": "general", "persona": "ADMIN", "category": "CAPACITY_EXCEEDED",
        "errorMessage": "Too many tasks are in the queue (Limit = 2), (Current active tasks = 2). Retry later or "
                        "increase the druid.indexer.queue.maxSize",
        "context": {}}
    assert http.get("/druid/indexer/v1/task/noop_3").status_code == 404

    assert queue.shutdown("noop_1", "make room")  # a task that completes leaves room for the next
    assert http.post("/druid/indexer/v1/task", json=noop("noop_3")).json() == {"task": "noop_3"}


@pytest.mark.parametrize("argv, expected", [
    (["start"], (2**31 - 1, 3, 3, 3, 3, 3, False, False, 600_000)),
    (["overlord", "--indexer-queue-max-size", "50", "--supervisor-unhealthiness-threshold", "5",
      "--supervisor-healthiness-threshold", "2", "--supervisor-task-unhealthiness-threshold", "4",
      "--supervisor-task-healthiness-threshold", "6", "--supervisor-max-stored-exception-events", "10",
      "--supervisor-store-stack-trace", "--supervisor-idle-config-enabled",
      "--supervisor-idle-config-inactive-after-millis", "5000"],
     (50, 5, 2, 4, 6, 10, True, True, 5000)),
])
def test_the_overlords_druid_settings_reach_the_node_config(argv, expected):
    config = node_config(build_parser().parse_args(argv))
    supervisor = config.supervisor
    assert (config.queue_max_size, supervisor.unhealthiness_threshold, supervisor.healthiness_threshold,
            supervisor.task_unhealthiness_threshold, supervisor.task_healthiness_threshold,
            supervisor.stored_exception_events, supervisor.store_stack_trace, supervisor.idle_config_enabled,
            supervisor.idle_config_inactive_after_millis) == expected


@pytest.mark.parametrize("argv, message", [
    (["overlord", "--indexer-queue-max-size", "0"], "druid.indexer.queue.maxSize: [0] must be at least 1"),
    (["start", "--supervisor-unhealthiness-threshold", "5", "--supervisor-max-stored-exception-events", "3"],
     "maxStoredExceptionEvents must be >= to max(healthinessThreshold, unhealthinessThreshold)"),
])
def test_settings_druid_refuses_are_refused_at_the_command_line(argv, message):
    with pytest.raises(ValueError) as error:
        node_config(build_parser().parse_args(argv))
    assert str(error.value) == message


def test_only_the_overlord_roles_take_overlord_settings():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["broker", "--indexer-queue-max-size", "5"])


@pytest.mark.parametrize(("payload", "error"), [
    ({"type": "noop", "id": "/tmp/x"}, "task ID cannot contain the '/' character."),
    ({"type": "noop", "id": "noop_evil", "dataSource": "../../../tmp/evil"},
     "dataSource cannot start with the '.' character."),
    ({"type": "noop", "id": "noop\x00"}, "task ID cannot contain character #0 (at position 4)."),
    ({"type": "noop", "id": "n" * 256}, "task ID cannot be longer than 255 bytes."),
])
def test_a_task_whose_id_or_data_source_is_a_path_is_a_400_and_stores_nothing(metadata, payload, error):
    http, _ = client(metadata)
    refused = http.post("/druid/indexer/v1/task", json=payload)
    assert (refused.status_code, refused.json()) == (400, {"error": error})
    assert http.get("/druid/indexer/v1/tasks").json() == []


@pytest.mark.parametrize(("payload", "error"), [
    ({"type": "noop", "id": "n", "runTime": 1e20}, "runTime: Input should be a valid integer"),
    ({"type": "noop", "id": "n", "runTime": 10**20}, "runTime: Input should be less than or equal to"),
    ({"type": "noop", "id": "n", "runTime": "abc"}, "runTime: Input should be a valid integer"),
    ({"type": "noop", "id": "n", "runTime": -1}, "runTime: Input should be greater than or equal to 0"),
    ({"type": "noop", "id": "n", "context": "x"}, "context: Input should be a valid dictionary"),
    ({"type": "noop", "id": "n", "context": {"priority": "high"}}, "context.priority: Input should be a valid integer"),
    ({"type": "noop", "id": "n", "dataSource": {}}, "dataSource: Input should be a valid string"),
    ({"type": "noop", "id": "n", "fail": "yes"}, "fail: Input should be a valid boolean"),
])
def test_a_noop_task_of_the_wrong_shape_is_a_400_naming_the_field(metadata, payload, error):
    http, _ = client(metadata)
    refused = http.post("/druid/indexer/v1/task", json=payload)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"].startswith(error)
    assert http.get("/druid/indexer/v1/tasks").json() == []


def test_a_noop_task_accepts_context_keys_it_does_not_read_and_keeps_its_priority(metadata):
    http, _ = client(metadata)
    payload = {"type": "noop", "id": "noop_ctx", "runTime": 10, "context": {"priority": 7, "lookupLoadingMode": "ALL"}}
    assert http.post("/druid/indexer/v1/task", json=payload).status_code == 200
    assert http.get("/druid/indexer/v1/task/noop_ctx").json()["payload"]["context"] == {"priority": 7}


def test_context_numbers_and_booleans_are_read_as_druid_reads_them_json_or_text(metadata):
    http, _ = client(metadata)
    payload = {"type": "noop", "id": "noop_text", "runTime": 10, "context": {"priority": "12", "forceTimeChunkLock": "TRUE"}}
    assert http.post("/druid/indexer/v1/task", json=payload).status_code == 200
    assert http.get("/druid/indexer/v1/task/noop_text").json()["payload"]["context"] == {"priority": 12}
    for context, field in (({"priority": True}, "priority"), ({"priority": "high"}, "priority"),
                           ({"forceTimeChunkLock": "no"}, "forceTimeChunkLock"),
                           ({"forceTimeChunkLock": "false"}, "forceTimeChunkLock")):
        refused = http.post("/druid/indexer/v1/task", json={**payload, "id": "noop_bad", "context": context})
        assert refused.status_code == 400 and f"context.{field}" in refused.json()["error"], refused.text
