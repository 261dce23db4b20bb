"""Compaction, kill and the coordinator's data-management API through the real HTTP API, on a real node (Spark,
SQLite, local deep storage). Expected answers are computed in the test from the rows it wrote."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from sluice.metadata import tables
from tests.integration.harness import sql, wait_for
from tests.integration.test_batch_ingestion import (
    DAY1,
    DAY2,
    by_channel,
    ndjson,
    rows,
    run,
    segments,
    task,
    totals,
)
from tests.integration.test_sql_ingestion import run as sql_run

COORDINATOR = "/druid/coordinator/v1/datasources"
TWO_DAYS = f"{DAY1}/2024-03-03"


def leveled(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events with a numeric dimension, which compaction must keep numeric."""
    return [{**e, "level": i % 4} for i, e in enumerate(events)]


def ingest(http: httpx.Client, data_source: str, events: list[dict[str, Any]], append: bool = False) -> None:
    payload = task(data_source, {"type": "inline", "data": ndjson(events)}, {"type": "json"},
                   io={"appendToExisting": append}, tuning={"maxNumConcurrentSubTasks": 1})  # a segment per day
    payload["spec"]["dataSchema"]["dimensionsSpec"]["dimensions"] = ["channel", "page", {"name": "level", "type": "long"}]
    run(http, payload)


def answers(http: httpx.Client, data_source: str) -> dict[str, Any]:
    """What the data source answers: per channel, per hour, and over a numeric dimension."""
    per_hour = sql(http, f"SELECT TIME_FORMAT(FLOOR(__time TO HOUR), 'yyyy-MM-dd HH') AS h, SUM(\"count\") AS n, "
                         f"SUM(added) AS a FROM {data_source} GROUP BY 1 ORDER BY 1")
    levels = sql(http, f"SELECT page, SUM(level) AS l FROM {data_source} GROUP BY page")
    return {"channels": by_channel(http, data_source), "hours": per_hour,
            "levels": {r["page"]: r["l"] for r in levels}}


def expected(events: list[dict[str, Any]]) -> dict[str, Any]:
    hours: dict[str, list[int]] = {}
    levels: dict[str, int] = {}
    for e in events:
        levels[e["page"]] = levels.get(e["page"], 0) + e["level"]
        sums = hours.setdefault(f"{e['ts'][:10]} {e['ts'][11:13]}", [0, 0])
        sums[0] += 1
        sums[1] += e["added"]
    return {"channels": totals(events), "hours": [{"h": h, "n": n, "a": a} for h, (n, a) in sorted(hours.items())],
            "levels": levels}


def overshadowed(http: httpx.Client, data_source: str) -> list[str]:
    return [r["segment_id"] for r in sql(http, "SELECT segment_id FROM sys.segments "
                                               f"WHERE datasource = '{data_source}' AND is_overshadowed = 1")]


def pending_segments(node: Any, data_source: str) -> int:
    engine = create_engine(node.metadata.uri)
    try:
        with engine.connect() as conn:
            table = tables.pending_segments
            return conn.scalar(select(func.count()).select_from(table).where(table.c.dataSource == data_source))
    finally:
        engine.dispose()


def finished(http: httpx.Client, task_id: str) -> dict[str, Any]:
    return wait_for(lambda: (s := http.get(f"/druid/indexer/v1/task/{task_id}/status").json()["status"])
                    ["statusCode"] != "RUNNING" and s, 60, f"task {task_id} to finish")


def kill_task_of(http: httpx.Client, data_source: str) -> dict[str, Any]:
    found = wait_for(lambda: http.get("/druid/indexer/v1/tasks",
                                      params={"datasource": data_source, "type": "kill"}).json(), 30, "the kill task")
    [kill] = found
    return finished(http, kill["id"])


def test_compaction_merges_appended_segments_and_kill_deletes_what_it_replaced(http, node):
    ds = "compact_appends"
    events = leveled(rows(300) + rows(200, DAY2, seed=3))
    ingest(http, ds, events[:150] + events[300:400])
    for part in (events[150:225], events[225:300] + events[400:450], events[450:]):
        ingest(http, ds, part, append=True)
    before = segments(http, ds)
    assert len(before) == 6 and answers(http, ds) == expected(events)
    assert pending_segments(node, ds) > 0  # the appends allocated their ids there

    result = run(http, {"type": "compact", "dataSource": ds,
                        "ioConfig": {"type": "compact", "inputSpec": {"type": "interval", "interval": TWO_DAYS}},
                        "tuningConfig": {"type": "index_parallel", "maxNumConcurrentSubTasks": 2}})
    assert result["id"].startswith(f"compact_{ds}_")
    after = segments(http, ds)
    # each of the two writers (maxNumConcurrentSubTasks) writes its own segment of a day it has rows of
    assert {s["start"][:10] for s in after} == {DAY1, DAY2} and len(after) <= 4
    assert min(s["version"] for s in after) > max(s["version"] for s in before)
    assert answers(http, ds) == expected(events)
    types = sql(http, "SELECT COLUMN_NAME, DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS "
                      f"WHERE TABLE_NAME = '{ds}' AND COLUMN_NAME = 'level'")
    assert types == [{"COLUMN_NAME": "level", "DATA_TYPE": "BIGINT"}]  # from the segment files' types
    task = http.get(f"/druid/indexer/v1/task/{result['id']}").json()["payload"]
    assert task["context"]["priority"] == 25

    old = overshadowed(http, ds)
    assert sorted(old) == sorted(s["segment_id"] for s in before)
    files = [Path(s.load_spec["path"]) for s, _ in node.metadata.segments_by_id(ds, old).values()]
    assert len(files) == 6 and all(f.exists() for f in files)
    marked = http.post(f"{COORDINATOR}/{ds}/markUnused", json={"segmentIds": old})
    assert marked.status_code == 200 and marked.json() == {"numChangedSegments": 6}
    assert wait_for(lambda: overshadowed(http, ds) == [], 10, "the overshadowed segments to be unused")

    killed = http.delete(f"{COORDINATOR}/{ds}/intervals/{TWO_DAYS.replace('/', '_')}")
    assert killed.status_code == 200 and killed.content == b""  # Druid's empty body
    status = kill_task_of(http, ds)
    assert status["statusCode"] == "SUCCESS", status
    assert status["id"].startswith(f"api-issued_kill_{ds}_")
    report = http.get(f"/druid/indexer/v1/task/{status['id']}/reports").json()["killUnusedSegments"]
    assert report["payload"] == {"numSegmentsKilled": 6, "numBatchesProcessed": 1}
    assert not any(f.exists() for f in files)
    assert node.metadata.segments_by_id(ds, old) == {}
    assert pending_segments(node, ds) == 0
    assert [s["segment_id"] for s in segments(http, ds)] == [s["segment_id"] for s in after]
    assert answers(http, ds) == expected(events)


def test_marking_unused_hides_rows_and_marking_used_brings_them_back(http, node):
    ds = "mark_used_unused"
    day1, day2 = rows(120), rows(80, DAY2, seed=1)
    run(http, task(ds, {"type": "inline", "data": ndjson(day1 + day2)}, {"type": "json"},
                   tuning={"maxNumConcurrentSubTasks": 1}))
    [first, second] = [s["segment_id"] for s in segments(http, ds)]

    def shows(events: list[dict[str, Any]]) -> bool:
        """The answers are those of `events` (a data source without used segments is not a table: not yet)."""
        query = f'SELECT channel, SUM("count") AS n, SUM(added) AS a, SUM(deleted) AS d FROM {ds} GROUP BY channel'
        response = http.post("/druid/v2/sql", json={"query": query})
        found = {r["channel"]: [r["n"], r["a"], r["d"]] for r in response.json()} if response.status_code == 200 else None
        return found == totals(events)

    day2_interval = f"{DAY2}/2024-03-03"
    partly = http.post(f"{COORDINATOR}/{ds}/markUnused", json={"interval": f"{DAY2}T06:00:00Z/2024-03-03"})
    assert partly.json() == {"numChangedSegments": 0}  # only segments wholly inside the interval
    assert http.post(f"{COORDINATOR}/{ds}/markUnused", json={"interval": day2_interval}).json() == \
        {"numChangedSegments": 1}
    wait_for(lambda: shows(day1), 10, "day 2 to vanish")
    assert http.post(f"{COORDINATOR}/{ds}/markUsed", json={"interval": day2_interval}).json() == \
        {"numChangedSegments": 1}
    wait_for(lambda: shows(day1 + day2), 10, "day 2 to come back")

    assert http.delete(f"{COORDINATOR}/{ds}/segments/{first}").json() == {"segmentStateChanged": True}
    assert http.delete(f"{COORDINATOR}/{ds}/segments/{first}").json() == {"segmentStateChanged": False}
    wait_for(lambda: shows(day2), 10, "day 1 to vanish")
    assert http.post(f"{COORDINATOR}/{ds}/segments/{first}").json() == {"segmentStateChanged": True}
    wait_for(lambda: shows(day1 + day2), 10, "day 1 to come back")

    assert http.delete(f"{COORDINATOR}/{ds}").json() == {"numChangedSegments": 2}
    wait_for(lambda: segments(http, ds) == [], 10, "every segment to be unused")
    assert http.post(f"{COORDINATOR}/{ds}").json() == {"numChangedSegments": 2}
    wait_for(lambda: shows(day1 + day2), 10, "everything to come back")

    unknown = http.post(f"{COORDINATOR}/{ds}/markUsed", json={"segmentIds": [f"{ds}_nope"]})
    assert unknown.status_code == 400 and unknown.json()["error"].startswith("segmentIds: Could not find")
    assert http.post(f"{COORDINATOR}/no_such_source/markUnused", json={"interval": day2_interval}).status_code == 204

    # a kill task with a limit deletes no more than it; what it deleted cannot be marked used again
    assert http.post(f"{COORDINATOR}/{ds}/markUnused", json={"segmentIds": [first, second]}).json() == \
        {"numChangedSegments": 2}
    submitted = http.post("/druid/indexer/v1/task", json={"type": "kill", "dataSource": ds, "interval": f"{DAY1}/P2D",
                                                          "batchSize": 1, "limit": 1})
    kill = finished(http, submitted.json()["task"])
    assert kill["statusCode"] == "SUCCESS", kill
    report = http.get(f"/druid/indexer/v1/task/{kill['id']}/reports").json()["killUnusedSegments"]
    assert report["payload"] == {"numSegmentsKilled": 1, "numBatchesProcessed": 1}
    assert http.post(f"{COORDINATOR}/{ds}").json() == {"numChangedSegments": 1}
    assert len(node.metadata.segments_by_id(ds, [first, second])) == 1


def test_compacting_nothing_fails_with_druids_message(http):
    result = run(http, {"type": "compact", "dataSource": "compact_nothing", "interval": TWO_DAYS}, expect="FAILED")
    assert "No segments found for compaction" in result["status"]["errorMsg"]


@pytest.mark.parametrize(("method", "path", "body", "message"), [
    ("post", "markUnused", {}, "Specify either 'interval' or 'segmentIds'"),
    ("post", "markUsed", {"interval": "2024-03-01/2024-03-02", "segmentIds": ["x"]}, "but not both"),
    ("post", "markUnused", {"interval": "2024-13-01/P1D"}, "interval: "),
    ("post", "markUnused", {"segmentIds": "wiki_2024"}, "segmentIds: "),
    ("post", "markUsed", {"segmentIds": ["x"], "versions": ["v1"]}, "versions: "),
    ("post", "markUnused", {"interval": "2024-03-01/P1D", "version": ["v1"]}, "version: unknown field"),
    ("post", "markUnused", [1, 2], "request body: "),
    ("post", "markUnused", "not json", "request body is not valid JSON"),
    ("delete", "intervals/2024-03-01_nonsense", None, "interval: "),
    ("delete", "segments/other_2024-03-01T00:00:00.000Z_2024-03-02T00:00:00.000Z_v1", None,
     "segmentId: Could not parse Segment ID"),
])
def test_a_bad_data_management_request_is_a_400_naming_the_field(http, method, path, body, message):
    url = f"{COORDINATOR}/wiki_bad/{path}"
    if body == "not json":
        response = http.post(url, content=b"{not json", headers={"Content-Type": "application/json"})
    elif body is None:
        response = http.request(method.upper(), url)
    else:
        response = http.post(url, content=json.dumps(body), headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json().get("error") or response.json().get("detail")
    assert message in error, error


@pytest.mark.parametrize(("payload", "message"), [
    ({"type": "compact", "dataSource": "wiki_bad"}, "exactly one of ioConfig and interval"),
    ({"type": "compact", "dataSource": "wiki_bad", "interval": "2024-03-01/P1D", "granularitySpec": {
        "segmentGranularity": "MONTH"}}, "ioConfig.inputSpec.interval: Interval["),
    ({"type": "kill", "dataSource": "wiki_bad", "interval": "2024-03-01/P1D", "batchSize": 0}, "batchSize: "),
    ({"type": "kill", "dataSource": "wiki_bad"}, "interval: "),
])
def test_a_bad_compact_or_kill_task_is_a_400_naming_the_field(http, payload, message):
    response = http.post("/druid/indexer/v1/task", json=payload)
    assert response.status_code == 400 and message in response.json()["error"], response.text


def test_compaction_merges_first_last_pairs_and_sketches_without_counting_twice(http):
    """Segments with first/last and sketch metrics, appended in three parts, compacted into one segment per day:
    Druid SQL gives the same earliest/latest values and distinct counts before and after (each combining aggregator
    reads the pairs and sketches its aggregator wrote)."""
    ds = "compact_sketches"
    events = [{**e, "user": f"u{i % 37}"} for i, e in enumerate(rows(120) + rows(80, DAY2, seed=3))]
    metrics = [{"type": "count", "name": "count"},
               {"type": "longFirst", "name": "first_added", "fieldName": "added"},
               {"type": "longLast", "name": "last_added", "fieldName": "added"},
               {"type": "HLLSketchBuild", "name": "users", "fieldName": "user"},
               {"type": "thetaSketch", "name": "users_theta", "fieldName": "user"},
               {"type": "quantilesDoublesSketch", "name": "added_q", "fieldName": "added"}]
    for i, part in enumerate((events[:70], events[70:150], events[150:])):
        payload = task(ds, {"type": "inline", "data": ndjson(part)}, {"type": "json"}, io={"appendToExisting": i > 0},
                       tuning={"maxNumConcurrentSubTasks": 1})
        payload["spec"]["dataSchema"]["metricsSpec"] = metrics
        run(http, payload)
    query = (f"SELECT channel, SUM(\"count\") AS n, EARLIEST(first_added) AS f, LATEST(last_added) AS l, "
             f"APPROX_COUNT_DISTINCT_DS_HLL(users) AS u, APPROX_COUNT_DISTINCT_DS_THETA(users_theta) AS t, "
             f"APPROX_QUANTILE_DS(added_q, 1.0) AS mx FROM {ds} GROUP BY channel ORDER BY channel")

    def expect() -> list[dict[str, Any]]:
        out = []
        for channel in sorted({e["channel"] for e in events}):
            mine = sorted((e for e in events if e["channel"] == channel), key=lambda e: e["ts"])
            # ties on a timestamp are not in these events: first and last are one event each
            assert len({e["ts"] for e in mine}) == len(mine)
            out.append({"channel": channel, "n": len(mine), "f": mine[0]["added"], "l": mine[-1]["added"],
                        "u": len({e["user"] for e in mine}), "t": len({e["user"] for e in mine}),
                        "mx": float(max(e["added"] for e in mine))})
        return out

    assert len(segments(http, ds)) == 4 and sql(http, query) == expect()
    run(http, {"type": "compact", "dataSource": ds,
               "ioConfig": {"type": "compact", "inputSpec": {"type": "interval", "interval": TWO_DAYS}}})
    assert len(segments(http, ds)) == 2 and sql(http, query) == expect()
    # an SQL re-index rolls the channel's rows of a day into one: the sketch and pair columns merge, not rehash
    sql_run(http, f"REPLACE INTO {ds} OVERWRITE ALL SELECT FLOOR(__time TO DAY) AS __time, channel, "
                  f"SUM(\"count\") AS \"count\", EARLIEST(first_added) AS first_added, LATEST(last_added) AS last_added, "
                  f"DS_HLL(users) AS users, DS_THETA(users_theta) AS users_theta, DS_QUANTILES_SKETCH(added_q) AS added_q "
                  f"FROM {ds} GROUP BY 1, 2 PARTITIONED BY DAY", {"finalizeAggregations": False})
    assert sql(http, query) == expect()
    assert sql(http, f"SELECT COUNT(*) AS n FROM {ds}") == [{"n": 6}]  # three channels on each of two days
