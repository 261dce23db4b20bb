"""Druid's automatic compaction on a real node (Spark, SQLite, local deep storage) with a one-second coordinator
period: appended chunks become one segment each under a newer version, newest chunk first, the newest data stays as it
was (skipOffsetFromLatest), every answer stays exactly the same, and the config and status APIs answer as Druid's.
Expected answers are computed in the test from the rows it wrote."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sluice.dev.sample_data import SampleRecord, produce
from sluice.server.node import Node
from tests.integration.harness import committed_offsets, running_node, sql, supervisor_spec, wait_for
from tests.integration.test_batch_ingestion import ndjson, rows, run, task

CONFIG = "/druid/coordinator/v1/config/compaction"
STATUS = "/druid/coordinator/v1/compaction"
DAYS = ("2024-03-01", "2024-03-02", "2024-03-03")


@pytest.fixture(scope="module")
def compacting(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:  # noqa: ARG001
    """An all-in-one node of its own, for its coordinator period of a second; it shares the session's Spark."""
    with running_node(tmp_path_factory.mktemp("compacting"), coordinator_period_s=1.0, indexing_period_s=1.0) as node:
        yield node


@pytest.fixture(scope="module")
def http(compacting: Node) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=compacting.config.url, timeout=60) as client:
        yield client


def segments_by_day(http: httpx.Client, data_source: str) -> dict[str, list[tuple[str, int]]]:
    """Each day's visible segments: (version, partition)."""
    found: dict[str, list[tuple[str, int]]] = {}
    for s in sql(http, 'SELECT "start", version, partition_num FROM sys.segments '
                       f"WHERE datasource = '{data_source}' AND is_overshadowed = 0 ORDER BY segment_id"):
        found.setdefault(s["start"][:10], []).append((s["version"], s["partition_num"]))
    return found


def answers(http: httpx.Client, data_source: str) -> dict[str, Any]:
    per_channel = sql(http, f'SELECT channel, SUM("count") AS n, SUM(added) AS a FROM {data_source} GROUP BY 1')
    per_day = sql(http, f"SELECT TIME_FORMAT(FLOOR(__time TO DAY), 'yyyy-MM-dd') AS d, COUNT(*) AS r, "
                        f'SUM("count") AS n FROM {data_source} GROUP BY 1 ORDER BY 1')
    return {"channels": {r["channel"]: [r["n"], r["a"]] for r in per_channel},
            "days": {r["d"]: [r["r"], r["n"]] for r in per_day}}


def stored_rows(parts: list[list[dict[str, Any]]], merged: bool) -> dict[str, int]:
    """Rows per day after rollup to the hour: within each ingested part (one segment per part and day), or over
    all of them (one compacted segment)."""
    groups = [{(e["ts"][:13], e["channel"], e["page"]) for e in part} for part in parts]
    if merged:
        groups = [set().union(*groups)]
    return {d: sum(len({g for g in part if g[0].startswith(d)}) for part in groups) for d in DAYS}


def status_of(http: httpx.Client, data_source: str) -> dict[str, Any]:
    response = http.get(f"{STATUS}/status", params={"dataSource": data_source})
    assert response.status_code == 200, response.text
    [snapshot] = response.json()["latestStatus"]
    return snapshot


def test_appended_days_are_compacted_newest_first_behind_the_skip_offset(compacting: Node, http: httpx.Client) -> None:
    ds = "auto_compact"
    parts = [[e for d in DAYS for e in rows(120, d, seed=i)] for i in range(3)]
    for i, part in enumerate(parts):  # one overwrite, two appends, each by one writer: three segments in each day
        run(http, task(ds, {"type": "inline", "data": ndjson(part)}, {"type": "json"}, io={"appendToExisting": i > 0},
                       tuning={"maxNumConcurrentSubTasks": 1}))
    before = segments_by_day(http, ds)
    assert {d: len(s) for d, s in before.items()} == {d: 3 for d in DAYS}
    everything = [e for part in parts for e in part]
    expected_channels: dict[str, list[int]] = {}
    for e in everything:
        sums = expected_channels.setdefault(e["channel"], [0, 0])
        sums[0] += 1
        sums[1] += e["added"]
    per_day = {d: sum(e["ts"].startswith(d) for e in everything) for d in DAYS}
    appended_rows, merged_rows = stored_rows(parts, merged=False), stored_rows(parts, merged=True)
    assert answers(http, ds) == {"channels": expected_channels,
                                 "days": {d: [appended_rows[d], per_day[d]] for d in DAYS}}

    # the config API, as Druid's: an unknown data source is a 404, an unknown field a 400 naming it
    assert http.get(CONFIG).json()["compactionConfigs"] == []
    assert http.get(f"{CONFIG}/{ds}").status_code == 404
    refused = http.post(CONFIG, json={"dataSource": ds, "skipOffsetFromLatest": "P1D", "skipOfsetFromLatest": "P2D"})
    assert refused.status_code == 400 and refused.json()["error"].startswith("skipOfsetFromLatest: ")
    refused = http.post(CONFIG, json={"dataSource": ds, "tuningConfig": {"maxRowsInMemory": 0}})
    assert refused.status_code == 400 and refused.json()["error"].startswith("tuningConfig.maxRowsInMemory: ")
    assert http.get(f"{CONFIG}/{ds}").status_code == 404  # nothing stored
    with pytest.raises(AssertionError):  # the duty leaves a data source without a config alone
        wait_for(lambda: len(segments_by_day(http, ds)["2024-03-02"]) == 1, 3, "no compaction")

    posted = {"dataSource": ds, "skipOffsetFromLatest": "P1D",
              "tuningConfig": {"type": "index_parallel", "maxNumConcurrentSubTasks": 1}}  # one segment per day
    response = http.post(CONFIG, json=posted, headers={"X-Druid-Author": "ops", "X-Druid-Comment": "tidy up"})
    assert response.status_code == 200
    stored = http.get(f"{CONFIG}/{ds}").json()
    assert stored | posted == stored and stored["taskPriority"] == 25
    assert stored["inputSegmentSizeBytes"] == 100_000_000_000_000
    assert http.get(CONFIG).json()["compactionConfigs"] == [stored]

    # the last day (P1D from the latest segment's end) is skipped; the others get a task each, newest first
    wait_for(lambda: {d: len(s) for d, s in segments_by_day(http, ds).items()} ==
             {"2024-03-01": 1, "2024-03-02": 1, "2024-03-03": 3}, 300, "the two older days compacted")
    after = segments_by_day(http, ds)
    newest_before = max(v for s in before.values() for v, _ in s)
    assert all(s[0][0] > newest_before for d, s in after.items() if d != "2024-03-03")
    assert after["2024-03-03"] == before["2024-03-03"]  # untouched
    assert answers(http, ds) == {"channels": expected_channels, "days": {
        "2024-03-01": [merged_rows["2024-03-01"], per_day["2024-03-01"]],
        "2024-03-02": [merged_rows["2024-03-02"], per_day["2024-03-02"]],
        "2024-03-03": [appended_rows["2024-03-03"], per_day["2024-03-03"]]}}
    tasks = [t for t in compacting.metadata.list_tasks(data_source=ds) if t.task_type == "compact"]
    assert [t.payload["ioConfig"]["inputSpec"]["interval"][:10] for t in tasks] == ["2024-03-02", "2024-03-01"]
    assert all(t.id.startswith(f"coordinator-issued_compact_{ds}_") and t.payload["context"]["priority"] == 25
               and t.status["status"] == "SUCCESS" for t in tasks)

    # the status, once a run has seen the compacted days
    snapshot = wait_for(lambda: (s := status_of(http, ds))["segmentCountCompacted"] == 2 and s, 30, "a run after")
    day3_bytes = sum(s.size for s in compacting.metadata.used_segments(ds) if str(s.interval.start)[:10] == DAYS[2])
    assert snapshot == {"dataSource": ds, "scheduleStatus": "RUNNING", "message": None,
                        "bytesAwaitingCompaction": 0, "segmentCountAwaitingCompaction": 0,
                        "intervalCountAwaitingCompaction": 0, "bytesCompacted": snapshot["bytesCompacted"],
                        "segmentCountCompacted": 2, "intervalCountCompacted": 2, "bytesSkipped": day3_bytes,
                        "segmentCountSkipped": 3, "intervalCountSkipped": 1}
    assert snapshot["bytesCompacted"] > 0
    assert http.get(f"{STATUS}/progress", params={"dataSource": ds}).json() == {"remainingSegmentSize": 0}
    assert http.get(f"{STATUS}/progress").status_code == 400
    unknown = http.get(f"{STATUS}/status", params={"dataSource": "nothing_here"})
    assert unknown.status_code == 404 and unknown.json()["errorMessage"] == "Unknown DataSource"
    assert [s["dataSource"] for s in http.get(f"{STATUS}/status").json()["latestStatus"]] == [ds]

    # task slots, and the history of every change
    assert http.post(f"{CONFIG}/taskslots", params={"ratio": "0.5", "max": "4"}).status_code == 200
    cluster = http.get(CONFIG).json()
    assert (cluster["compactionTaskSlotRatio"], cluster["maxCompactionTaskSlots"]) == (0.5, 4)
    refused = http.post(f"{CONFIG}/taskslots", params={"ratio": "lots"})
    assert refused.status_code == 400 and refused.json()["error"].startswith("ratio: ")
    assert http.delete(f"{CONFIG}/{ds}").status_code == 200
    assert http.get(f"{CONFIG}/{ds}").status_code == 404
    assert http.delete(f"{CONFIG}/{ds}").status_code == 404
    history = http.get(f"{CONFIG}/{ds}/history").json()
    assert [(h["compactionConfig"] or {}).get("skipOffsetFromLatest") for h in history] == ["P1D", "P1D", None]
    assert [h["globalConfig"]["compactionTaskSlotRatio"] for h in history] == [0.1, 0.5, 0.5]
    assert history[0]["auditInfo"] == {"author": "ops", "comment": "tidy up", "ip": "127.0.0.1"}
    assert http.get(f"{STATUS}/status", params={"dataSource": ds}).status_code == 404
    assert http.post(f"{CONFIG}/cluster", json={"compactionTaskSlotRatio": 0.1,
                                                "maxCompactionTaskSlots": 2**31 - 1}).status_code == 200


def stream_events(n: int, first: int = 0) -> list[SampleRecord]:
    """n events alternating between two days, every one its own row (a page of its own), so that each publish of
    the stream writes a segment into both days."""
    events = [{"time": f"2024-05-0{1 + i % 2}T{i // 2 % 24:02d}:{i % 60:02d}:00Z", "channel": f"#c{i % 3}",
               "page": f"p{i}", "added": i % 7, "deleted": 0, "delta": i % 7} for i in range(first, first + n)]
    return [SampleRecord(json.dumps(e).encode(), e, "valid") for e in events]


def test_a_supervisor_keeps_ingesting_while_its_older_chunk_is_compacted(compacting: Node, http: httpx.Client,
                                                                          kafka_broker: Any) -> None:
    topic, ds = "auto-compact-stream", "auto_compact_stream"
    kafka_broker.create_topic(topic, 1)
    first = stream_events(2_000)
    end = produce(kafka_broker.bootstrap_servers, topic, first, 1)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT10S")
    spec["spec"]["dataSchema"]["granularitySpec"].update({"segmentGranularity": "DAY", "queryGranularity": "HOUR"})
    spec["spec"]["tuningConfig"].update({"maxRowsInMemory": 150, "maxTotalRows": 300})
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
    wait_for(lambda: committed_offsets(compacting, ds) == end, 180, "the first events published")
    before = segments_by_day(http, ds)
    assert len(before["2024-05-01"]) > 1 and len(before["2024-05-02"]) > 1

    assert http.post(CONFIG, json={"dataSource": ds, "skipOffsetFromLatest": "P1D"}).status_code == 200
    # a compaction of the older day starts once the streaming task that wrote it has ended and released its lock;
    # then the stream gets more events for both days: its lock (priority 75) wins over the compaction's (25)
    wait_for(lambda: any(t.type == "compact" for t in compacting.task_queue.active(ds)), 120, "a compaction task")
    second = stream_events(1_000, first=2_000)
    end = produce(kafka_broker.bootstrap_servers, topic, second, 1)
    wait_for(lambda: committed_offsets(compacting, ds) == end, 180, "the stream to go on publishing")

    # once the stream is idle, the older day ends up in one segment, the newest day is left as the stream wrote it
    wait_for(lambda: len(segments_by_day(http, ds)["2024-05-01"]) == 1, 180, "the older day compacted")
    assert len(segments_by_day(http, ds)["2024-05-02"]) > 1
    written = [r.event for r in first + second]
    days = sql(http, f'SELECT TIME_FORMAT(FLOOR(__time TO DAY), \'yyyy-MM-dd\') AS d, SUM("count") AS n, '
                     f"SUM(added) AS a FROM {ds} GROUP BY 1 ORDER BY 1")
    assert days == [{"d": d, "n": sum(e["time"].startswith(d) for e in written),
                     "a": sum(e["added"] for e in written if e["time"].startswith(d))}
                    for d in ("2024-05-01", "2024-05-02")]
    # a compaction either succeeded or lost its lock to the stream (which of the two happens depends on timing)
    ended = [t.status for t in compacting.metadata.list_tasks(active=False, data_source=ds) if t.task_type == "compact"]
    assert any(s["status"] == "SUCCESS" for s in ended)
    assert [s for s in ended if s["status"] != "SUCCESS" and "revoked" not in (s.get("errorMsg") or "")] == []
    assert http.post(f"/druid/indexer/v1/supervisor/{ds}/terminate").status_code == 200
