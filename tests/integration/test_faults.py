"""Exactly once through what an operator or a machine does: the whole `sluice start` process killed with SIGKILL
and started again, a replica shut down, the metadata store stalling a publish past completionTimeout, the topic
deleted and re-created behind the supervisor. Each test ends with SUM(count) equal to the valid events produced
and the committed offsets equal to the topic's end offsets. Each runs SLUICE_FAULT_RUNS times (once by default, to
keep `make test` within CI's budget; `SLUICE_FAULT_RUNS=5 make test PYTEST_ARGS=tests/integration/test_faults.py`
soaks them), on other data each time: a fault lands at another moment every run, and a race lost only sometimes
shows up."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from sluice.dev.sample_data import generate, produce
from sluice.metadata.store import MetadataStore
from sluice.server.node import Node, NodeConfig
from tests.integration.harness import (
    active_tasks, committed_offsets, free_port, read_up_to, sql, supervisor_spec, wait_for,
)
from tests.integration.processes import SluiceProcess

TASKS = "/druid/indexer/v1"


@pytest.fixture(params=range(1, int(os.environ.get("SLUICE_FAULT_RUNS", "1")) + 1), ids=lambda n: f"run{n}")
def run(request: pytest.FixtureRequest) -> int:
    return request.param


def tasks_of(http: httpx.Client, data_source: str, state: str | None = None) -> list[dict[str, Any]]:
    params = {"datasource": data_source, **({"state": state} if state else {})}
    return http.get(f"{TASKS}/tasks", params=params).json()


def stored_offsets(metadata: MetadataStore, data_source: str) -> dict[int, int]:
    stored = metadata.get_stream_offsets(data_source)
    return stored.offsets if stored else {}


def test_kill_9_of_sluice_start_then_a_restart_resumes_the_task_where_it_was(kafka_broker, tmp_path: Path,
                                                                               run: int) -> None:
    topic, ds = f"wiki-kill9-{run}", f"wiki_kill9_{run}"
    kafka_broker.create_topic(topic, 2)
    records = generate(24_000, seed=51 + 100 * run)
    first_end = produce(kafka_broker.bootstrap_servers, topic, records[:8_000], 2)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT1H")
    spec["spec"]["tuningConfig"]["maxRowsInMemory"] = 3_000
    uri = f"sqlite:///{tmp_path / 'metadata.db'}"
    metadata = MetadataStore(uri)
    node = SluiceProcess("start", tmp_path, uri, "--spark-master", "local[2,4]").start(timeout=120)
    try:
        with node.client() as http:
            assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
            # a first task group reads the first part and is handed off; the next one reads the rest, and is killed
            # while it reads: it commits nothing before terminate, so the kill always interrupts uncommitted rows
            wait_for(lambda: read_up_to(http, ds, first_end), 120, "the first part read")
            assert http.post(f"/druid/indexer/v1/supervisor/{ds}/taskGroups/handoff",
                             json={"taskGroupIds": [0]}).status_code == 200
            wait_for(lambda: stored_offsets(metadata, ds) == first_end, 120, "the first part committed")
            end_offsets = produce(kafka_broker.bootstrap_servers, topic, records[8_000:], 2)
            wait_for(lambda: sum(first_end.values()) < sum(
                sum((t["currentOffsets"] or {}).values()) for t in active_tasks(http, ds)), 60, "the rest being read")
            [interrupted] = [t["id"] for t in active_tasks(http, ds)]
        node.kill()  # SIGKILL: no shutdown hook, a read or a persist may be half done
        assert stored_offsets(metadata, ds) == first_end

        node = SluiceProcess("start", tmp_path, uri, "--spark-master", "local[2,4]").start(timeout=120)
        with node.client() as http:
            wait_for(lambda: read_up_to(http, ds, end_offsets), 180, "the resumed task to read to the end")
            assert [t["id"] for t in active_tasks(http, ds)] == [interrupted]  # resumed, not replaced
            assert http.post(f"/druid/indexer/v1/supervisor/{ds}/terminate").status_code == 200
            wait_for(lambda: tasks_of(http, ds, "running") == [], 60, "the task to finish")
            assert stored_offsets(metadata, ds) == end_offsets
            valid = sum(r.kind == "valid" for r in records)
            assert sql(http, f'SELECT SUM("count") AS n FROM {ds}') == [{"n": valid}]
            assert {t["id"]: t["status"] for t in tasks_of(http, ds)}[interrupted] == "SUCCESS"
            assert [t for t in tasks_of(http, ds) if t["status"] != "SUCCESS"] == []
    finally:
        node.stop()
        metadata.close()


def test_a_replica_shut_down_mid_read_is_replaced_without_a_gap(node, http, kafka_broker, run: int) -> None:
    topic, ds = f"wiki-replicas-{run}", f"wiki_replicas_{run}"
    kafka_broker.create_topic(topic, 2)
    records = generate(30_000, seed=53 + 100 * run)
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records, 2)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, replicas=2, taskDuration="PT8S")
    spec["spec"]["tuningConfig"]["maxRowsInMemory"] = 3_000
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200

    def reading_replicas() -> list[dict[str, Any]]:
        active = http.get(f"/druid/indexer/v1/supervisor/{ds}/status").json()["payload"]["activeTasks"]
        return active if len(active) == 2 and all(sum((t["currentOffsets"] or {}).values()) > 0 for t in active) \
            else []

    victim = wait_for(reading_replicas, 120, "two replicas reading")[0]["id"]
    assert http.post(f"{TASKS}/task/{victim}/shutdown").status_code == 200
    wait_for(lambda: committed_offsets(node, ds) == end_offsets, 180, "every offset committed")
    valid = sum(r.kind == "valid" for r in records)
    assert sql(http, f'SELECT SUM("count") AS n FROM {ds}') == [{"n": valid}]
    assert http.get(f"{TASKS}/task/{victim}/status").json()["status"]["statusCode"] == "FAILED"
    http.post(f"/druid/indexer/v1/supervisor/{ds}/terminate")


def test_a_publish_stalled_past_completion_timeout_is_dropped_and_its_range_read_again(spark, kafka_broker,  # noqa: ARG001
                                                                                       tmp_path: Path, run: int) -> None:
    topic, ds = f"wiki-stall-{run}", f"wiki_stall_{run}"
    kafka_broker.create_topic(topic, 2)
    records = generate(20_000, seed=57 + 100 * run)
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records, 2)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT3S",
                           completionTimeout="PT6S")
    node = Node(NodeConfig(port=free_port(), work_dir=tmp_path / "node"))
    node.start()
    database = tmp_path / "node" / "metadata.db"
    try:
        with httpx.Client(base_url=node.config.url, timeout=60) as http:
            assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
            wait_for(lambda: tasks_of(http, ds, "running") and http.get(
                f"/druid/indexer/v1/supervisor/{ds}/status").json()["payload"]["publishingTasks"], 120,
                "a task group publishing")
            # the metadata store stalls (a long transaction holds its write lock) for longer than completionTimeout
            stall = sqlite3.connect(database, timeout=60, check_same_thread=False)
            stall.execute("BEGIN EXCLUSIVE")
            released = threading.Timer(12, stall.rollback)
            released.start()
            try:
                wait_for(lambda: any("completionTimeout exceeded" in e["message"] for e in http.get(
                    f"/druid/indexer/v1/supervisor/{ds}/status").json()["payload"]["recentErrors"]), 60,
                    "the supervisor to give up on the stalled publish")
            finally:
                released.join()
                stall.close()
            wait_for(lambda: committed_offsets(node, ds) == end_offsets, 180, "every offset committed")
            valid = sum(r.kind == "valid" for r in records)
            assert sql(http, f'SELECT SUM("count") AS n FROM {ds}') == [{"n": valid}]
            node.supervisors.terminate(ds)
    finally:
        node.stop()


@pytest.mark.parametrize("reset_automatically", [False, True], ids=["operator-reset", "resetOffsetAutomatically"])
def test_a_topic_recreated_behind_the_supervisor_is_never_skipped_silently(node, http, kafka_broker,
                                                                          reset_automatically: bool, run: int) -> None:
    topic = f"wiki-recreated-{int(reset_automatically)}-{run}"
    ds = topic.replace("-", "_")
    kafka_broker.create_topic(topic, 2)
    before = generate(6_000, seed=59 + 100 * run)
    first_end = produce(kafka_broker.bootstrap_servers, topic, before, 2)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT3S")
    spec["spec"]["tuningConfig"]["resetOffsetAutomatically"] = reset_automatically
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
    wait_for(lambda: committed_offsets(node, ds) == first_end, 120, "the first topic ingested")

    kafka_broker.delete_topic(topic)
    kafka_broker.create_topic(topic, 2)
    after = generate(2_000, seed=61 + 100 * run)
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, after, 2)
    assert all(end_offsets[p] < first_end[p] for p in end_offsets)  # the stored offsets are beyond the topic's end

    def status() -> dict[str, Any]:
        return http.get(f"/druid/indexer/v1/supervisor/{ds}/status").json()["payload"]

    if reset_automatically:
        wait_for(lambda: any("Offsets were reset automatically" in e["message"] for e in status()["recentErrors"]),
                 60, "the automatic reset's alert")
    else:
        wait_for(lambda: status()["state"] == "UNHEALTHY_SUPERVISOR", 60, "the supervisor to go unhealthy")
        assert any("is no longer available for partition" in e["message"] for e in status()["recentErrors"])
        assert committed_offsets(node, ds) == first_end  # nothing skipped while it waits
        assert http.post(f"/druid/indexer/v1/supervisor/{ds}/resetOffsets", json={
            "type": "kafka", "partitions": {"type": "end", "stream": topic,
                                            "partitionOffsetMap": {"0": 0, "1": 0}}}).status_code == 200
    wait_for(lambda: committed_offsets(node, ds) == end_offsets, 120, "the new topic ingested")
    valid = sum(r.kind == "valid" for r in before + after)
    assert sql(http, f'SELECT SUM("count") AS n FROM {ds}') == [{"n": valid}]
    http.post(f"/druid/indexer/v1/supervisor/{ds}/terminate")
