"""Kafka → supervisor → tasks on Spark → segments → Druid SQL, through the real HTTP API.

A real Tansu broker on loopback, the shared SparkSession, a SQLite metadata store and a local deep
storage; expected answers are computed directly from the produced events.
"""

from __future__ import annotations

import copy
import time
from collections import Counter, defaultdict
from typing import Any

import httpx
import pytest

from sluice.dev.sample_data import generate, produce
from sluice.server.node import Node, NodeConfig
from tests.integration.harness import (
    EXAMPLE, active_tasks, committed_offsets, free_port, read_up_to, sql, supervisor_spec, wait_for,
)

def test_every_event_is_counted_exactly_once_across_task_generations(node, http, kafka_broker):
    topic = "wiki-e2e"
    kafka_broker.create_topic(topic, 4)
    records = generate(120_000, seed=11)
    first, second = records[:60_000], records[60_000:]
    produce(kafka_broker.bootstrap_servers, topic, first, 4)

    spec = supervisor_spec("wiki_e2e", topic, kafka_broker.bootstrap_servers, taskCount=2, taskDuration="PT8S")
    spec["spec"]["tuningConfig"]["maxRowsInMemory"] = 25_000
    response = http.post("/druid/indexer/v1/supervisor", json=spec)
    assert response.status_code == 200 and response.json() == {"id": "wiki_e2e"}

    # the first generation publishes what it read; only then does the second half arrive
    wait_for(lambda: sum(committed_offsets(node, "wiki_e2e").values()) >= len(first), 120, "the first publish")
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, second, 4)
    wait_for(lambda: committed_offsets(node, "wiki_e2e") == end_offsets, 180, "offsets committed to the end")

    valid = [r.event for r in records if r.kind == "valid"]
    assert sql(http, 'SELECT SUM("count") AS n FROM wiki_e2e') == [{"n": len(valid)}]

    per_channel: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for event in valid:
        sums = per_channel[event["channel"]]
        sums[0] += 1
        sums[1] += event["added"]
        sums[2] += event["delta"]
    rows = sql(http, 'SELECT channel, SUM("count") AS n, SUM(added) AS added, SUM(delta) AS delta '
                     "FROM wiki_e2e GROUP BY channel")
    assert {r["channel"]: [r["n"], r["added"], r["delta"]] for r in rows} == per_channel

    per_hour = Counter(event["time"][:13] + ":00:00.000Z" for event in valid)
    rows = sql(http, 'SELECT FLOOR(__time TO HOUR) AS h, SUM("count") AS n FROM wiki_e2e GROUP BY 1')
    assert {r["h"]: r["n"] for r in rows} == per_hour

    # at least two generations of each task group published, and the bad records were counted
    tasks = http.get("/druid/indexer/v1/tasks", params={"state": "complete", "datasource": "wiki_e2e"}).json()
    succeeded = [t for t in tasks if t["status"] == "SUCCESS"]
    assert len(succeeded) >= 4, tasks
    reports = [http.get(f"/druid/indexer/v1/task/{t['id']}/reports").json() for t in succeeded]
    stats = Counter()
    for report in reports:
        stats.update(report["ingestionStatsAndErrors"]["payload"]["rowStats"]["buildSegments"])
    assert stats["unparseable"] == sum(r.kind != "valid" for r in records)
    assert stats["processed"] == len(valid)

    status = http.get("/druid/indexer/v1/supervisor/wiki_e2e/status").json()["payload"]
    assert status["dataSource"] == "wiki_e2e" and status["stream"] == topic and status["partitions"] == 4
    assert status["state"] == "RUNNING" and status["healthy"] is True
    assert {t["id"] for t in status["activeTasks"]} and status["aggregateLag"] == 0


def test_the_legacy_spec_form_is_accepted_and_served_back_in_the_current_form(http, kafka_broker):
    legacy = {
        "type": "kafka",
        "dataSchema": {
            "dataSource": "legacy_form",
            "parser": {"type": "string", "parseSpec": {"format": "json", "timestampSpec": {"column": "time"},
                                                       "dimensionsSpec": {"dimensions": ["channel"]}}},
            "metricsSpec": [{"type": "count", "name": "count"}],
            "granularitySpec": {"segmentGranularity": "HOUR"},
        },
        "ioConfig": {"topic": "legacy", "consumerProperties": {"bootstrap.servers": kafka_broker.bootstrap_servers}},
    }
    assert http.post("/druid/indexer/v1/supervisor", json=legacy).json() == {"id": "legacy_form"}
    assert "legacy_form" in http.get("/druid/indexer/v1/supervisor").json()
    served = http.get("/druid/indexer/v1/supervisor/legacy_form").json()
    assert served["spec"]["ioConfig"]["inputFormat"] == {"type": "json", "keepNullColumns": False,
                                                         "assumeNewlineDelimited": False, "useJsonNodeReader": False}
    assert served["spec"]["dataSchema"]["timestampSpec"]["column"] == "time"
    assert http.post("/druid/indexer/v1/supervisor/legacy_form/terminate").json() == {"id": "legacy_form"}
    assert http.get("/druid/indexer/v1/supervisor/legacy_form/status").status_code == 404


@pytest.mark.parametrize("change, status, error", [
    (lambda s: s["spec"]["dataSchema"]["metricsSpec"][1].pop("fieldName"), 400,
     "spec.dataSchema.metricsSpec[1].fieldName: longSum needs fieldName"),
    (lambda s: s["spec"]["ioConfig"].pop("topic"), 400, "spec.ioConfig.topic: Field required"),
    (lambda s: s["spec"]["tuningConfig"].update(skipSequenceNumberAvailabilityCheck=True), 400,
     "spec.tuningConfig.skipSequenceNumberAvailabilityCheck: only False (Druid's default) is supported"),
    (lambda s: s["spec"]["tuningConfig"].update(maxRowsInMemroy=1000), 400,
     "spec.tuningConfig.maxRowsInMemroy: Sluice does not support this field"),
    (lambda s: s["spec"]["dataSchema"]["granularitySpec"].update(segmentGranularity="fortnight"), 400,
     "spec.dataSchema.granularitySpec.segmentGranularity: unknown granularity 'fortnight'"),
])
def test_an_invalid_spec_is_a_400_naming_the_field(http, change, status, error):
    spec = copy.deepcopy(EXAMPLE)
    change(spec)
    response = http.post("/druid/indexer/v1/supervisor", json=spec)
    assert response.status_code == status
    assert response.json()["error"].startswith(error)


def test_too_many_parse_exceptions_fail_the_task_with_the_reason(node, http, kafka_broker):
    topic = "wiki-bad"
    kafka_broker.create_topic(topic, 1)
    records = generate(20_000, seed=3)
    produce(kafka_broker.bootstrap_servers, topic, records, 1)
    spec = supervisor_spec("wiki_bad", topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT1H")
    spec["spec"]["tuningConfig"]["maxParseExceptions"] = 5
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200

    def failed_task() -> dict[str, Any] | None:
        tasks = http.get("/druid/indexer/v1/tasks", params={"datasource": "wiki_bad", "state": "complete"}).json()
        return next((t for t in tasks if t["status"] == "FAILED"), None)

    task = wait_for(failed_task, 120, "a FAILED task")
    assert "Max parse exceptions [5] exceeded" in task["errorMsg"]
    status = http.get(f"/druid/indexer/v1/task/{task['id']}/status").json()["status"]
    assert status["statusCode"] == "FAILED" and status["dataSource"] == "wiki_bad"
    assert node.metadata.used_segments("wiki_bad") == []  # a failed task commits nothing
    http.post("/druid/indexer/v1/supervisor/wiki_bad/terminate")


def test_a_node_restart_mid_ingestion_resumes_its_tasks_and_neither_loses_nor_doubles_rows(spark, kafka_broker,  # noqa: ARG001
                                                                                             tmp_path):
    topic, ds = "wiki-restart", "wiki_restart"
    kafka_broker.create_topic(topic, 2)
    records = generate(40_000, seed=5)
    first_end = produce(kafka_broker.bootstrap_servers, topic, records[:20_000], 2)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT1H")
    spec["spec"]["tuningConfig"]["maxRowsInMemory"] = 4_000  # many persists per task

    config = NodeConfig(port=free_port(), work_dir=tmp_path / "node")
    first = Node(config)
    first.start()
    with httpx.Client(base_url=f"http://127.0.0.1:{config.port}", timeout=60) as client:
        assert client.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
        # the first half is read and handed off by the operator; the next group then reads the second half
        wait_for(lambda: read_up_to(client, ds, first_end), 120, "the first half read")
        assert client.post(f"/druid/indexer/v1/supervisor/{ds}/taskGroups/handoff",
                           json={"taskGroupIds": [0]}).status_code == 200
        wait_for(lambda: committed_offsets(first, ds) == first_end, 120, "the first half committed")
        end_offsets = produce(kafka_broker.bootstrap_servers, topic, records[20_000:], 2)
        wait_for(lambda: read_up_to(client, ds, end_offsets), 120, "the second half read")
        interrupted = {t["id"] for t in active_tasks(client, ds)}
    first.stop()  # the reading task stops gracefully: it keeps what it read, uncommitted, to resume from
    assert committed_offsets(first, ds) == first_end

    second = Node(NodeConfig(port=free_port(), work_dir=config.work_dir))
    second.start()  # the task resumes from its task directory; the supervisor adopts it
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{second.config.port}", timeout=60) as client:
            wait_for(lambda: {t["id"] for t in active_tasks(client, ds)} == interrupted, 120,
                     "the interrupted task to be adopted")
            assert client.post(f"/druid/indexer/v1/supervisor/{ds}/terminate").status_code == 200
            wait_for(lambda: committed_offsets(second, ds) == end_offsets, 120, "the rest to be committed")
            valid = sum(r.kind == "valid" for r in records)
            assert sql(client, 'SELECT SUM("count") AS n, COUNT(*) > 0 AS any FROM wiki_restart') == [
                {"n": valid, "any": True}]
            def processed_by_finished_tasks() -> int:
                tasks = client.get("/druid/indexer/v1/tasks", params={"datasource": "wiki_restart"}).json()
                reports = [client.get(f"/druid/indexer/v1/task/{t['id']}/reports").json() for t in tasks
                           if t["status"] == "SUCCESS"]
                return sum(r["ingestionStatsAndErrors"]["payload"]["rowStats"]["buildSegments"]["processed"]
                           for r in reports)

            # what was read before the stop was not read again: every valid event is processed exactly once
            wait_for(lambda: processed_by_finished_tasks() == valid, 60, "the tasks that read to finish")
            tasks = client.get("/druid/indexer/v1/tasks", params={"datasource": "wiki_restart"}).json()
            assert [t for t in tasks if t["status"] == "FAILED"] == []
            assert {t["status"] for t in tasks if t["id"] in interrupted} == {"SUCCESS"}  # resumed, not replaced
    finally:
        second.supervisors.terminate("wiki_restart")
        second.stop()


def test_rows_are_queryable_while_tasks_read_and_never_doubled_through_handoff(node, http, kafka_broker):
    """Every row is counted exactly once in every answer: from the reading task's persists, then, once its publish has
    committed, from its segments, with no answer in between that misses or doubles any."""
    topic, ds = "wiki-realtime", "wiki_realtime"
    kafka_broker.create_topic(topic, 2)
    records = generate(20_000, seed=31)
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records, 2)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT1H")
    spec["spec"]["tuningConfig"]["maxRowsInMemory"] = 5_000
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
    expected = sum(r.kind == "valid" for r in records)

    def total() -> int:
        response = http.post("/druid/v2/sql", json={"query": f'SELECT SUM("count") AS n FROM {ds}'})
        if response.status_code == 400 and "not found" in response.text:
            return 0  # no task has persisted anything yet
        assert response.status_code == 200, response.text
        return response.json()[0]["n"] or 0

    wait_for(lambda: total() == expected, 120, "every row queryable from the reading task")
    assert node.metadata.used_segments(ds) == [] and committed_offsets(node, ds) == {0: 0, 1: 0}

    # the reading task serves its rows as one realtime segment, and runs in this node
    realtime = sql(http, "SELECT COUNT(*) AS segments, SUM(num_rows) AS num_rows, MIN(is_published) AS published "
                         f"FROM sys.segments WHERE datasource = '{ds}' AND is_realtime = 1")
    assert realtime == [{"segments": 1, "num_rows": sql(http, f"SELECT COUNT(*) AS n FROM {ds}")[0]["n"],
                         "published": 0}]
    running = sql(http, "SELECT runner_status, location FROM sys.tasks "
                        f"WHERE datasource = '{ds}' AND status = 'RUNNING'")
    assert running == [{"runner_status": "RUNNING", "location": f"127.0.0.1:{node.config.port}"}]

    def handed_off() -> bool:
        tasks = http.get("/druid/indexer/v1/tasks", params={"state": "complete", "datasource": ds}).json()
        return any(t["status"] == "SUCCESS" for t in tasks)

    http.post(f"/druid/indexer/v1/supervisor/{ds}/taskGroups/handoff", json={"taskGroupIds": [0]})
    answers: Counter[tuple[bool, int]] = Counter()  # (committed yet, answer)
    deadline = time.monotonic() + 120
    while not handed_off():  # until the task has deleted its persists and left
        committed = committed_offsets(node, ds) == end_offsets
        answers[committed, total()] += 1
        assert time.monotonic() < deadline, "the handoff did not finish"
    for _ in range(20):  # and a while after, as the broker's snapshots move on
        answers[True, total()] += 1
    assert {answer for _, answer in answers} == {expected}, answers
    assert answers[False, expected] > 0, "no query ran before the commit"
    assert node.metadata.used_segments(ds)
    assert sql(http, f"SELECT COUNT(*) AS n FROM sys.segments WHERE datasource = '{ds}' AND is_realtime = 1") == [
        {"n": 0}]
    http.post(f"/druid/indexer/v1/supervisor/{ds}/terminate")


def test_sys_supervisors_show_the_running_supervisors_health(node, http, kafka_broker):
    spec = supervisor_spec("no_stream", "no-such-topic", kafka_broker.bootstrap_servers)
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
    try:
        query = "SELECT state, detailed_state, healthy, source FROM sys.supervisors WHERE supervisor_id = 'no_stream'"
        unhealthy = {"state": "UNHEALTHY_SUPERVISOR", "detailed_state": "UNABLE_TO_CONNECT_TO_STREAM", "healthy": 0,
                     "source": "no-such-topic"}
        wait_for(lambda: sql(http, query) == [unhealthy], 60, "the supervisor's health in sys.supervisors")
    finally:
        http.post("/druid/indexer/v1/supervisor/no_stream/terminate")


def test_sketches_pairs_and_discovered_dimensions_answer_alike_from_a_reading_task_and_after_handoff(
        node, http, kafka_broker):
    """A supervisor whose spec discovers its dimensions and keeps first/last pairs and sketches: the answers from the
    reading task's persists (realtime) and from its published segments are the same, and exact."""
    topic, ds = "wiki-sketches", "wiki_sketches"
    kafka_broker.create_topic(topic, 2)
    records = generate(6_000, seed=41)
    produce(kafka_broker.bootstrap_servers, topic, records, 2)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT1H")
    schema = spec["spec"]["dataSchema"]
    schema["dimensionsSpec"] = {"dimensions": ["channel"], "useSchemaDiscovery": True,
                                "dimensionExclusions": ["cityName", "countryIsoCode", "countryName", "delta", "page"]}
    schema["metricsSpec"] = [{"type": "count", "name": "count"},
                             {"type": "thetaSketch", "name": "users", "fieldName": "user"},
                             {"type": "HLLSketchBuild", "name": "users_hll", "fieldName": "user"},
                             {"type": "longFirst", "name": "first_added", "fieldName": "added"},
                             {"type": "longSum", "name": "deleted", "fieldName": "deleted"}]
    spec["spec"]["tuningConfig"]["maxRowsInMemory"] = 2_000
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200

    valid = [r.event for r in records if r.kind == "valid"]
    expected = []
    for channel in sorted({e["channel"] for e in valid}):
        mine = [e for e in valid if e["channel"] == channel]
        earliest = min(e["time"] for e in mine)
        expected.append({"channel": channel, "n": len(mine), "users": len({e["user"] for e in mine}),
                         "firsts": sorted({e["added"] for e in mine if e["time"] == earliest}),
                         "deleted": sum(e["deleted"] for e in mine)})
    namespaces = Counter(e["namespace"] for e in valid)
    query = (f'SELECT channel, SUM("count") AS n, APPROX_COUNT_DISTINCT_DS_THETA(users) AS users, '
             f"APPROX_COUNT_DISTINCT_DS_HLL(users_hll) AS hll, EARLIEST(first_added) AS f, SUM(deleted) AS deleted "
             f"FROM {ds} GROUP BY channel ORDER BY channel")

    def answers() -> tuple[list[dict[str, Any]], dict[str, int]] | None:
        response = http.post("/druid/v2/sql", json={"query": query})
        if response.status_code != 200 or sum(r["n"] for r in response.json()) != len(valid):
            return None
        by_namespace = sql(http, f'SELECT namespace, SUM("count") AS n FROM {ds} GROUP BY namespace')
        return response.json(), {r["namespace"]: r["n"] for r in by_namespace}

    def check(found: tuple[list[dict[str, Any]], dict[str, int]]) -> None:
        rows, by_namespace = found
        assert [{"channel": r["channel"], "n": r["n"], "users": r["users"], "deleted": r["deleted"]} for r in rows] \
            == [{k: v for k, v in e.items() if k != "firsts"} for e in expected]
        assert all(r["f"] in e["firsts"] for r, e in zip(rows, expected))
        assert all(abs(r["hll"] - e["users"]) <= max(2, 0.03 * e["users"]) for r, e in zip(rows, expected))
        assert by_namespace == namespaces

    check(wait_for(answers, 120, "every row queryable from the reading task"))
    assert node.metadata.used_segments(ds) == []
    http.post(f"/druid/indexer/v1/supervisor/{ds}/taskGroups/handoff", json={"taskGroupIds": [0]})
    wait_for(lambda: node.metadata.used_segments(ds), 120, "the handoff")
    check(wait_for(answers, 60, "the answers from the published segments"))
    [segment] = {tuple(s.dimensions) for s in node.metadata.used_segments(ds)}
    assert segment[0] == "channel" and {"namespace", "isRobot", "isNew"} <= set(segment)
    # not the timestamp, an excluded field, an aggregator's input or output
    assert not {"time", "cityName", "page", "user", "added", "deleted", "count"} & set(segment)
    http.post(f"/druid/indexer/v1/supervisor/{ds}/terminate")
