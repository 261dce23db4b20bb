"""Incremental handoff: a task that runs for hours publishes as it goes, one sequence at a time, when a handoff
limit is reached (maxTotalRows, intermediateHandoffPeriod), its replicas ending each sequence at the same offsets.
Checked through the HTTP API, the chat API and the metadata store, with a real broker and Spark."""

from __future__ import annotations

from sluice.dev.sample_data import generate, produce
from tests.integration.harness import committed_offsets, sql, supervisor_spec, wait_for

CHAT = "/druid/worker/v1/chat"


def test_a_long_running_task_group_publishes_sequence_by_sequence_exactly_once(node, http, kafka_broker) -> None:
    topic, ds = "wiki-handoff", "wiki_handoff"
    kafka_broker.create_topic(topic, 2)
    records = generate(24_000, seed=41)
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records, 2)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, replicas=2, taskDuration="PT1H")
    spec["spec"]["tuningConfig"].update({"maxRowsInMemory": 4_000, "maxTotalRows": 9_000,
                                         "intermediateHandoffPeriod": "PT4S"})
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200

    # the group never reaches taskDuration: only checkpoints can have committed everything
    wait_for(lambda: committed_offsets(node, ds) == end_offsets, 180, "every offset committed by checkpoints")
    valid = sum(r.kind == "valid" for r in records)
    assert sql(http, f'SELECT SUM("count") AS n FROM {ds}') == [{"n": valid}]

    replicas = http.get(f"/druid/indexer/v1/supervisor/{ds}/status").json()["payload"]["activeTasks"]
    assert len(replicas) == 2  # the same two tasks, still reading
    checkpoints = [http.get(f"{CHAT}/{t['id']}/checkpoints").json() for t in replicas]
    assert checkpoints[0] == checkpoints[1] and len(checkpoints[0]) >= 3  # several sequences, identical in both
    starts = [checkpoints[0][str(i)] for i in range(len(checkpoints[0]))]
    assert starts[0] == {"0": 0, "1": 0} and starts[-1] == {str(p): o for p, o in end_offsets.items()}

    # each sequence published its own segments, under the sequence's name, and nothing twice
    segments = node.metadata.used_segments(ds)
    assert sum(s.num_rows for s in segments) == sql(http, f"SELECT COUNT(*) AS n FROM {ds}")[0]["n"]
    assert len({s.id for s in segments}) == len(segments)
    published = http.get("/druid/indexer/v1/tasks", params={"datasource": ds, "state": "complete"}).json()
    assert [(t["id"], t["status"], t.get("errorMsg")) for t in published] == []  # no task ended: publishing happened while they read

    assert http.post(f"/druid/indexer/v1/supervisor/{ds}/terminate").status_code == 200
    wait_for(lambda: http.get("/druid/indexer/v1/tasks", params={"datasource": ds, "state": "running"}).json() == [],
             60, "the replicas to finish")
    assert committed_offsets(node, ds) == end_offsets
    assert sql(http, f'SELECT SUM("count") AS n FROM {ds}') == [{"n": valid}]
