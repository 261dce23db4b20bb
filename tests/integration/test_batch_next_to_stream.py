"""A batch append into the time chunks a supervisor is writing. With Druid's `useConcurrentLocks` on both, the
stream's and the batch's APPEND locks share the chunk: the batch task succeeds while the streaming task still
holds its lock, its segments join the chunk's version next to the stream's, and nothing is counted twice. Without
it, the batch task asks for an EXCLUSIVE lock that the higher-priority streaming task holds, and fails saying so."""

from __future__ import annotations

import copy
import json
from collections import Counter

from sluice.dev.sample_data import generate, produce
from tests.integration.harness import committed_offsets, sql, supervisor_spec, wait_for
from tests.integration.test_batch_ingestion import run



def batch_append(data_source: str, spec: dict, events: list[dict], context: dict) -> dict:
    schema = copy.deepcopy(spec["spec"]["dataSchema"])
    schema["dataSource"] = data_source
    return {"type": "index_parallel", "context": context, "spec": {
        "dataSchema": schema,
        "ioConfig": {"type": "index_parallel", "appendToExisting": True, "inputFormat": {"type": "json"},
                     "inputSource": {"type": "inline", "data": "\n".join(json.dumps(e) for e in events)}},
        "tuningConfig": {"type": "index_parallel"}}}


def test_a_batch_append_shares_the_chunks_a_supervisor_writes_with_concurrent_locks(node, http, kafka_broker):
    topic, ds = "wiki-next-to-batch", "wiki_next_to_batch"
    kafka_broker.create_topic(topic, 1)
    records = generate(6_000, seed=61)
    end = produce(kafka_broker.bootstrap_servers, topic, records, 1)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT1H")
    spec["context"] = {"useConcurrentLocks": True}
    # maxTotalRows checkpoints while the task reads; where the last one lands depends on how far the task read
    # before its supervisor paused it, so intermediateHandoffPeriod hands off whatever is left after it
    spec["spec"]["tuningConfig"].update({"maxRowsInMemory": 1_500, "maxTotalRows": 2_000,
                                         "intermediateHandoffPeriod": "PT5S"})
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
    # incremental handoff publishes what the task read while it reads on: it holds its locks until it ends
    wait_for(lambda: committed_offsets(node, ds) == end, 180, "the stream's rows published")
    [streaming] = [t["id"] for t in http.get(f"/druid/indexer/v1/supervisor/{ds}/status").json()["payload"]
                   ["activeTasks"]]

    extra = [{**r.event, "channel": "#batch"} for r in generate(500, seed=62) if r.kind == "valid"]
    without = run(http, batch_append(ds, spec, extra, {}), expect="FAILED")
    assert "lock" in without["status"]["errorMsg"]
    run(http, batch_append(ds, spec, extra, {"useConcurrentLocks": True}))

    streamed = [r.event for r in records if r.kind == "valid"]
    per_channel = Counter(e["channel"] for e in streamed + extra)
    rows = sql(http, f'SELECT channel, SUM("count") AS n FROM {ds} GROUP BY channel')
    assert {r["channel"]: r["n"] for r in rows} == per_channel
    assert [t["id"] for t in http.get(f"/druid/indexer/v1/supervisor/{ds}/status").json()["payload"]
            ["activeTasks"]] == [streaming]  # the streaming task read on all along, holding its locks
    assert http.post(f"/druid/indexer/v1/supervisor/{ds}/terminate").status_code == 200
