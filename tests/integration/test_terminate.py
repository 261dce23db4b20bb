"""POST /druid/indexer/v1/supervisor/{id}/terminate while a task reads: the task publishes what it read, then stops."""

from __future__ import annotations

import httpx

from sluice.dev.sample_data import generate, produce
from tests.integration.harness import active_tasks, committed_offsets, sql, supervisor_spec, wait_for


def sum_count(http: httpx.Client, data_source: str) -> int:
    """SUM("count") over what the broker sees (published segments and reading tasks' persists); 0 before any."""
    response = http.post("/druid/v2/sql", json={"query": f'SELECT SUM("count") AS n FROM {data_source}'})
    if response.status_code == 400 and "not found" in response.text:
        return 0  # no task has persisted anything yet
    assert response.status_code == 200, response.text
    return response.json()[0]["n"] or 0


def test_terminate_publishes_what_the_task_read_then_stops_it(node, http, kafka_broker):
    topic, ds = "ops-terminate", "ops_terminate"
    kafka_broker.create_topic(topic, 2)
    records = generate(20_000, seed=41)
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records, 2)
    valid = sum(r.kind == "valid" for r in records)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT1H")
    spec["spec"]["tuningConfig"]["maxRowsInMemory"] = 5_000
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200

    wait_for(lambda: sum_count(http, ds) == valid, 120, "every row queryable from the reading task")
    [task] = active_tasks(http, ds)
    # an hour-long task has published nothing yet: whatever is committed next comes from the terminate
    assert node.metadata.used_segments(ds) == [] and committed_offsets(node, ds) == {0: 0, 1: 0}

    assert http.post(f"/druid/indexer/v1/supervisor/{ds}/terminate").json() == {"id": ds}
    assert ds not in http.get("/druid/indexer/v1/supervisor").json()
    assert http.get(f"/druid/indexer/v1/supervisor/{ds}/status").status_code == 404

    def completed() -> list[dict]:
        return http.get("/druid/indexer/v1/tasks", params={"datasource": ds, "state": "complete"}).json()

    wait_for(completed, 120, "the task to complete")
    assert [(t["id"], t["status"]) for t in completed()] == [(task["id"], "SUCCESS")]
    assert http.get("/druid/indexer/v1/tasks", params={"datasource": ds, "state": "running"}).json() == []

    assert committed_offsets(node, ds) == end_offsets
    assert node.metadata.used_segments(ds)
    # the broker's segment snapshot lives half a second: wait it out before reading the published answer
    wait_for(lambda: sum_count(http, ds) == valid, 10, "the published segments to answer")
    assert sql(http, f'SELECT SUM("count") AS n FROM {ds}') == [{"n": valid}]
