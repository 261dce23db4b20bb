"""What an operator does to a running supervisor, over Druid's HTTP API; each ends with exact counts."""

from __future__ import annotations

import time

import httpx

from sluice.dev.sample_data import generate, produce
from sluice.server.node import Node, NodeConfig
from tests.integration.harness import (
    committed_offsets, free_port, read_to, reading, sql, supervisor_spec, wait_for,
)


def valid(records) -> int:
    return sum(r.kind == "valid" for r in records)


def test_suspend_publishes_and_resume_continues_without_gap_or_duplicate(node, http, kafka_broker):
    topic, ds = "ops-suspend", "ops_suspend"
    kafka_broker.create_topic(topic, 2)
    records = generate(30_000, seed=21)
    produce(kafka_broker.bootstrap_servers, topic, records[:15_000], 2)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT1H")
    spec["spec"]["tuningConfig"]["maxRowsInMemory"] = 3_000
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
    wait_for(lambda: reading(http, ds), 120, "the task to read")

    suspended = http.post(f"/druid/indexer/v1/supervisor/{ds}/suspend")
    assert suspended.status_code == 200 and suspended.json()["suspended"] is True
    again = http.post(f"/druid/indexer/v1/supervisor/{ds}/suspend")
    assert again.status_code == 400 and again.json() == {"error": f"[{ds}] is already suspended"}
    def status() -> dict:
        return http.get(f"/druid/indexer/v1/supervisor/{ds}/status").json()["payload"]

    # as in Druid, the re-submitted spec's supervisor is PENDING until its first run, then SUSPENDED
    wait_for(lambda: status()["state"] == "SUSPENDED", 30, "the suspended supervisor's first run")
    assert (status()["suspended"], status()["activeTasks"]) == (True, [])
    assert http.get(f"/druid/indexer/v1/supervisor/{ds}/health").json() == {"healthy": True}
    published = wait_for(lambda: sum(committed_offsets(node, ds).values()), 120, "the suspended group's publish")

    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records[15_000:], 2)
    assert sum(committed_offsets(node, ds).values()) == published  # nothing reads while suspended

    resumed = http.post(f"/druid/indexer/v1/supervisor/{ds}/resume")
    assert resumed.status_code == 200 and resumed.json()["suspended"] is False
    wait_for(lambda: read_to(http, ds, end_offsets), 120, "the resumed task to read to the end")
    handoff = http.post(f"/druid/indexer/v1/supervisor/{ds}/taskGroups/handoff", json={"taskGroupIds": [0]})
    assert handoff.status_code == 200  # the group publishes now instead of after its hour
    wait_for(lambda: committed_offsets(node, ds) == end_offsets, 120, "everything committed")
    assert sql(http, f'SELECT SUM("count") AS n FROM {ds}') == [{"n": valid(records)}]

    history = http.get(f"/druid/indexer/v1/supervisor/{ds}/history").json()
    assert [h["spec"]["suspended"] for h in history[:3]] == [False, True, False]  # newest first


def test_reset_offsets_moves_the_start_and_a_hard_reset_starts_over_at_latest(node, http, kafka_broker):
    topic, ds = "ops-reset", "ops_reset"
    kafka_broker.create_topic(topic, 1)
    records = generate(10_000, seed=22)
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records, 1)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT2S")
    spec["suspended"] = True
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200

    body = {"type": "kafka", "partitions": {"type": "end", "stream": topic, "partitionOffsetMap": {"0": 6_000}}}
    assert http.post(f"/druid/indexer/v1/supervisor/{ds}/resetOffsets", json=body).json() == {"id": ds}
    assert committed_offsets(node, ds) == {0: 6_000}
    bad = http.post(f"/druid/indexer/v1/supervisor/{ds}/resetOffsets", json={"type": "kafka", "partitions": {}})
    assert bad.status_code == 400 and "partitionOffsetMap" in bad.json()["error"]

    http.post(f"/druid/indexer/v1/supervisor/{ds}/resume")
    wait_for(lambda: committed_offsets(node, ds) == end_offsets, 120, "the rest after offset 6000")
    assert sql(http, f'SELECT SUM("count") AS n FROM {ds}') == [{"n": valid(records[6_000:])}]

    # a hard reset forgets the committed offsets; with useEarliestOffset=false reading restarts at the end
    spec["suspended"] = False
    spec["spec"]["ioConfig"]["useEarliestOffset"] = False
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
    assert http.post(f"/druid/indexer/v1/supervisor/{ds}/reset").json() == {"id": ds}
    wait_for(lambda: committed_offsets(node, ds) == end_offsets, 60, "the starting offsets recorded at the end")
    more = generate(3_000, seed=23)
    new_end = produce(kafka_broker.bootstrap_servers, topic, more, 1)
    wait_for(lambda: committed_offsets(node, ds) == new_end, 120, "the new events")
    assert sql(http, f'SELECT SUM("count") AS n FROM {ds}') == [{"n": valid(records[6_000:]) + valid(more)}]


def test_an_idle_supervisor_starts_no_tasks_until_new_data_arrives(node, http, kafka_broker):
    topic, ds = "ops-idle", "ops_idle"
    kafka_broker.create_topic(topic, 1)
    records = generate(4_000, seed=25)
    first_end = produce(kafka_broker.bootstrap_servers, topic, records[:2_000], 1)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT5S",
                           idleConfig={"enabled": True, "inactiveAfterMillis": 3_000})
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200

    def status() -> dict:
        return http.get(f"/druid/indexer/v1/supervisor/{ds}/status").json()["payload"]

    def running_tasks() -> list:
        return http.get("/druid/indexer/v1/tasks", params={"state": "running", "datasource": ds}).json()

    wait_for(lambda: committed_offsets(node, ds) == first_end, 120, "the first events committed")
    wait_for(lambda: (status()["state"], status()["detailedState"]) == ("IDLE", "IDLE"), 60, "the supervisor idle")
    wait_for(lambda: not running_tasks(), 60, "the last group to publish and finish")
    time.sleep(4)  # four more runs of the idle supervisor
    assert not running_tasks() and status()["state"] == "IDLE"  # no group was started while idle
    lag = f'druid_ingest_kafka_lag{{dataSource="{ds}",stream="{ds}"}} 0.0'
    assert lag in http.get("/metrics").text.splitlines()  # lag is reported while idle, as in Druid

    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records[2_000:], 1)
    wait_for(lambda: committed_offsets(node, ds) == end_offsets, 120, "the new events read by a new group")
    assert sql(http, f'SELECT SUM("count") AS n FROM {ds}') == [{"n": valid(records)}]
    http.post(f"/druid/indexer/v1/supervisor/{ds}/terminate")


def test_an_update_mid_ingestion_hands_over_at_the_same_offsets(node, http, kafka_broker):
    topic, ds = "ops-update", "ops_update"
    kafka_broker.create_topic(topic, 4)
    records = generate(40_000, seed=24)
    produce(kafka_broker.bootstrap_servers, topic, records[:20_000], 4)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT1H")
    spec["spec"]["tuningConfig"]["maxRowsInMemory"] = 4_000
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
    wait_for(lambda: reading(http, ds), 120, "the task to read")

    unchanged = node.supervisors.get(ds)
    assert http.post("/druid/indexer/v1/supervisor", params={"skipRestartIfUnmodified": "true"}, json=spec).json() == {
        "id": ds}
    assert node.supervisors.get(ds) is unchanged and len(http.get(f"/druid/indexer/v1/supervisor/{ds}/history").json()) == 1

    spec["spec"]["ioConfig"].update(taskCount=2, taskDuration="PT5S")
    assert http.post("/druid/indexer/v1/supervisor", json=spec).json() == {"id": ds}
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records[20_000:], 4)
    wait_for(lambda: committed_offsets(node, ds) == end_offsets, 180, "everything committed")
    assert sql(http, f'SELECT SUM("count") AS n FROM {ds}') == [{"n": valid(records)}]
    assert http.get(f"/druid/indexer/v1/supervisor/{ds}").json()["spec"]["ioConfig"]["taskCount"] == 2


def test_listing_and_bulk_operations(kafka_broker, tmp_path):
    config = NodeConfig(port=free_port(), work_dir=tmp_path)
    node = Node(config)
    node.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{config.port}", timeout=60) as http:
            for ds in ("bulk_a", "bulk_b"):
                kafka_broker.create_topic(ds, 1)
                http.post("/druid/indexer/v1/supervisor", json=supervisor_spec(ds, ds, kafka_broker.bootstrap_servers))
            base = "/druid/indexer/v1/supervisor"
            assert http.get(base).json() == ["bulk_a", "bulk_b"]
            full = http.get(base, params={"full": ""}).json()
            assert [(s["id"], s["spec"]["spec"]["ioConfig"]["topic"]) for s in full] == [("bulk_a", "bulk_a"),
                                                                                          ("bulk_b", "bulk_b")]
            states = http.get(base, params={"state": "true"}).json()
            assert set(states[0]) == {"id", "state", "detailedState", "healthy", "suspended"}
            system = http.get(base, params={"system": ""}).json()
            assert {s["type"] for s in system} == {"kafka"} and "specString" in system[0]

            assert http.post(f"{base}/suspendAll").json() == {"status": "success"}
            assert all(s["suspended"] for s in http.get(base, params={"state": "true"}).json())
            assert http.post(f"{base}/resumeAll").json() == {"status": "success"}
            assert not any(s["suspended"] for s in http.get(base, params={"state": "true"}).json())
            assert set(http.get(f"{base}/history").json()) == {"bulk_a", "bulk_b"}
            assert http.post(f"{base}/terminateAll").json() == {"status": "success"}
            assert http.get(base).json() == []
            assert http.get(f"{base}/bulk_a/health").status_code == 404
        node.stop()
        node = Node(config)  # terminated supervisors leave a tombstone and do not come back
        node.start()
        assert node.supervisors.ids() == []
    finally:
        node.stop()


def test_stats_parse_errors_and_metrics_of_a_reading_supervisor(node, http, kafka_broker):
    topic, ds = "ops-stats", "ops_stats"
    kafka_broker.create_topic(topic, 2)
    records = generate(20_000, seed=23)
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records, 2)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT1H")
    spec["spec"]["tuningConfig"].update(maxRowsInMemory=5_000, maxSavedParseExceptions=5)
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
    wait_for(lambda: read_to(http, ds, end_offsets), 120, "the task to read everything")

    stats = http.get(f"/druid/indexer/v1/supervisor/{ds}/stats").json()
    [(task_id, task_stats)] = stats["0"].items()
    totals = task_stats["totals"]["buildSegments"]
    bad = len(records) - valid(records)
    assert (totals["processed"], totals["unparseable"], totals["thrownAway"]) == (valid(records), bad, 0)
    assert set(task_stats["movingAverages"]["buildSegments"]) == {"1m", "5m", "15m"}
    chat = http.get(f"/druid/worker/v1/chat/{task_id}/rowStats").json()
    assert chat["totals"] == task_stats["totals"]

    errors = http.get(f"/druid/indexer/v1/supervisor/{ds}/parseErrors").json()
    assert 1 <= len(errors) <= 5 and {e["errorType"] for e in errors} == {"unparseable"}
    bad_inputs = {r.value.decode() for r in records if r.kind != "valid"}
    # the input names where the record is and what it was: "partition=P offset=O: <the record>"
    assert all(e["input"].startswith("partition=") and e["input"].split(": ", 1)[1] in bad_inputs for e in errors)

    exposition = http.get("/metrics").text
    processed = [line for line in exposition.splitlines()
                 if line.startswith("druid_ingest_events_processed_total{") and f'dataSource="{ds}"' in line]
    assert processed and float(processed[0].rsplit(" ", 1)[1]) == valid(records)
    http.post(f"/druid/indexer/v1/supervisor/{ds}/terminate")
