"""Native batch ingestion (`index_parallel`, `index`) through the real HTTP API: input source → connector
readers on Spark → segments → Druid SQL. Expected answers are computed in the test from the rows it wrote."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import httpx
import pytest

from tests.integration.harness import sql, wait_for

DAY1, DAY2 = "2024-03-01", "2024-03-02"


def rows(n: int, day: str = DAY1, seed: int = 0) -> list[dict[str, Any]]:
    """n events over a day's hours, three channels, one page per 5 events."""
    return [{"ts": f"{day}T{(i * 7 + seed) % 24:02d}:{i % 60:02d}:00Z", "channel": f"#c{(i + seed) % 3}",
             "page": f"p{i // 5}", "added": i % 11, "deleted": (i * 3) % 7} for i in range(n)]


def ndjson(events: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(e) for e in events)


def task(data_source: str, input_source: dict[str, Any], input_format: dict[str, Any] | None = None,
         **options: Any) -> dict[str, Any]:
    tuning = options.pop("tuning", {})
    granularity = {"segmentGranularity": "DAY", "queryGranularity": "HOUR", "rollup": True,
                   **options.pop("granularity", {})}
    io = {"type": "index_parallel", "inputSource": input_source, **options.pop("io", {})}
    if input_format is not None:
        io["inputFormat"] = input_format
    return {"type": "index_parallel", "spec": {
        "dataSchema": {"dataSource": data_source, "timestampSpec": {"column": "ts", "format": "iso"},
                       "dimensionsSpec": {"dimensions": ["channel", "page"]},
                       "metricsSpec": [{"type": "count", "name": "count"},
                                       {"type": "longSum", "name": "added", "fieldName": "added"},
                                       {"type": "longSum", "name": "deleted", "fieldName": "deleted"}],
                       "granularitySpec": granularity},
        "ioConfig": io,
        "tuningConfig": {"type": "index_parallel", "maxNumConcurrentSubTasks": 2, **tuning}}, **options}


def run(http: httpx.Client, payload: dict[str, Any], expect: str = "SUCCESS") -> dict[str, Any]:
    response = http.post("/druid/indexer/v1/task", json=payload)
    assert response.status_code == 200, response.text
    task_id = response.json()["task"]
    status = wait_for(lambda: (s := http.get(f"/druid/indexer/v1/task/{task_id}/status").json()["status"])
                      ["statusCode"] != "RUNNING" and s, 240, f"task {task_id}")
    assert status["statusCode"] == expect, status
    return {"id": task_id, "status": status,
            "report": http.get(f"/druid/indexer/v1/task/{task_id}/reports").json()["ingestionStatsAndErrors"]}


def totals(events: list[dict[str, Any]]) -> dict[str, list[int]]:
    per_channel: dict[str, list[int]] = {}
    for e in events:
        sums = per_channel.setdefault(e["channel"], [0, 0, 0])
        sums[0] += 1
        sums[1] += e["added"]
        sums[2] += e["deleted"]
    return per_channel


def by_channel(http: httpx.Client, data_source: str) -> dict[str, list[int]]:
    result = sql(http, f'SELECT channel, SUM("count") AS n, SUM(added) AS a, SUM(deleted) AS d FROM {data_source} '
                       "GROUP BY channel")
    return {r["channel"]: [r["n"], r["a"], r["d"]] for r in result}


def segments(http: httpx.Client, data_source: str) -> list[dict[str, Any]]:
    return sql(http, "SELECT segment_id, \"start\", version, partition_num, num_rows, shard_spec FROM sys.segments "
                     f"WHERE datasource = '{data_source}' AND is_overshadowed = 0 ORDER BY segment_id")


def test_inline_json_is_rolled_up_into_day_segments_with_exact_answers(http):
    events = rows(500) + rows(300, DAY2, seed=5)
    result = run(http, task("batch_inline", {"type": "inline", "data": ndjson(events) + "\nnot json\n"},
                            {"type": "json"}))
    assert by_channel(http, "batch_inline") == totals(events)
    per_hour = Counter(e["ts"][:13] for e in events)
    answer = sql(http, 'SELECT TIME_FORMAT(FLOOR(__time TO HOUR), \'yyyy-MM-dd\'\'T\'\'HH\') AS h, SUM("count") AS n '
                       "FROM batch_inline GROUP BY 1")
    assert {r["h"]: r["n"] for r in answer} == per_hour
    stats = result["report"]["payload"]["rowStats"]["buildSegments"]
    assert stats["processed"] == len(events) and stats["unparseable"] == 1
    assert result["report"]["payload"]["ingestionState"] == "COMPLETED"
    assert sorted({s["start"][:10] for s in segments(http, "batch_inline")}) == [DAY1, DAY2]
    assert result["id"].startswith("index_parallel_batch_inline_")  # Druid's shape for a task without an id


def test_period_and_duration_granularities_bucket_segments_and_rollup_as_druid(http):
    """Six-hour segments counted from 03:00 and rows rolled up to 90 minutes from the epoch."""
    events = rows(300)
    granularity = {"segmentGranularity": {"type": "period", "period": "PT6H", "origin": "2000-01-01T03:00:00Z"},
                   "queryGranularity": {"type": "duration", "duration": 90 * 60_000}}
    run(http, task("batch_periods", {"type": "inline", "data": ndjson(events)}, {"type": "json"},
                   granularity=granularity))
    assert by_channel(http, "batch_periods") == totals(events)

    def minute(e: dict[str, Any]) -> int:
        return int(e["ts"][11:13]) * 60 + int(e["ts"][14:16])
    starts = {"2024-02-29T21" if minute(e) < 180 else f"{DAY1}T{(minute(e) - 180) // 360 * 6 + 3:02d}" for e in events}
    # each of the task's two writers (maxNumConcurrentSubTasks) writes its own segment of a chunk it has rows of
    chunks = Counter(s["start"][:13] for s in segments(http, "batch_periods"))
    assert sorted(chunks) == sorted(starts) and set(chunks.values()) <= {1, 2}
    rolled = Counter(f"{DAY1}T{minute(e) // 90 * 90 // 60:02d}:{minute(e) // 90 * 90 % 60:02d}" for e in events)
    answer = sql(http, "SELECT TIME_FORMAT(__time, 'yyyy-MM-dd''T''HH:mm') AS t, SUM(\"count\") AS n "
                       "FROM batch_periods GROUP BY 1")
    assert {r["t"]: r["n"] for r in answer} == rolled


def test_replace_twice_gives_the_same_answers_under_a_newer_version(http):
    events = rows(400)
    payload = task("batch_replace", {"type": "inline", "data": ndjson(events)}, {"type": "json"})
    run(http, payload)
    first = segments(http, "batch_replace")
    run(http, payload)
    assert by_channel(http, "batch_replace") == totals(events)
    second = segments(http, "batch_replace")
    assert len(second) == len(first) and second[0]["version"] > first[0]["version"]


def test_drop_existing_leaves_a_tombstone_where_the_new_data_has_no_rows(http):
    run(http, task("batch_drop", {"type": "inline", "data": ndjson(rows(200) + rows(100, DAY2))}, {"type": "json"}))
    replacement = rows(50, DAY2, seed=1)
    run(http, task("batch_drop", {"type": "inline", "data": ndjson(replacement)}, {"type": "json"},
                   io={"dropExisting": True}, granularity={"intervals": [f"{DAY1}/P2D"]}))
    assert by_channel(http, "batch_drop") == totals(replacement)
    shards = [json.loads(s["shard_spec"])["type"] for s in segments(http, "batch_drop")]
    assert "tombstone" in shards


def test_intervals_throw_away_rows_outside_them(http):
    events = rows(100) + rows(60, DAY2)
    result = run(http, task("batch_intervals", {"type": "inline", "data": ndjson(events)}, {"type": "json"},
                            granularity={"intervals": [f"{DAY2}/P1D"]}))
    assert by_channel(http, "batch_intervals") == totals(rows(60, DAY2))
    assert result["report"]["payload"]["rowStats"]["buildSegments"]["thrownAway"] == 100


def test_append_adds_to_what_a_chunk_holds(http):
    first, second = rows(120), rows(80, seed=2)
    run(http, task("batch_append", {"type": "inline", "data": ndjson(first)}, {"type": "json"}))
    written = len(segments(http, "batch_append"))
    run(http, task("batch_append", {"type": "inline", "data": ndjson(second)}, {"type": "json"},
                   io={"appendToExisting": True}))
    assert by_channel(http, "batch_append") == totals(first + second)
    found = segments(http, "batch_append")
    # the appended segments join the chunk's version, numbered after what it held
    assert len({s["version"] for s in found}) == 1 and len(found) > written
    assert sorted(s["partition_num"] for s in found) == list(range(len(found)))


@pytest.mark.parametrize("partitions", [
    {"type": "hashed", "numShards": 3, "partitionDimensions": ["page"]},
    {"type": "range", "partitionDimensions": ["channel", "page"], "targetRowsPerSegment": 40},
    {"type": "single_dim", "partitionDimension": "page", "maxRowsPerSegment": 50},
])
def test_perfect_rollup_partitions_each_chunk_into_shards(http, partitions):
    data_source = f"batch_{partitions['type']}"
    events = rows(600)
    run(http, task(data_source, {"type": "inline", "data": ndjson(events)}, {"type": "json"},
                   tuning={"forceGuaranteedRollup": True, "partitionsSpec": partitions}))
    assert by_channel(http, data_source) == totals(events)
    found = segments(http, data_source)
    specs = [json.loads(s["shard_spec"]) for s in found]
    assert len(found) > 1 and sorted(s["partition_num"] for s in found) == list(range(len(found)))
    if partitions["type"] != "hashed":  # ranges tile the value space: open at both ends, each end the next start
        ordered = sorted(specs, key=lambda s: s["partitionNum"])
        assert ordered[0]["start"] is None and ordered[-1]["end"] is None
        assert all(a["end"] == b["start"] for a, b in zip(ordered, ordered[1:]))
    # perfect rollup: one row per (hour, channel, page) across all shards
    keys = {(e["ts"][:13], e["channel"], e["page"]) for e in events}
    assert sum(s["num_rows"] for s in found) == len(keys)


def test_too_many_parse_exceptions_fail_the_task_and_publish_nothing(http):
    data = ndjson(rows(30)) + "\n{bad\n{worse\n"
    result = run(http, task("batch_parse_fail", {"type": "inline", "data": data}, {"type": "json"},
                            tuning={"maxParseExceptions": 1}), expect="FAILED")
    assert "Max parse exceptions[1] exceeded" in result["status"]["errorMsg"]
    assert segments(http, "batch_parse_fail") == []


@pytest.mark.parametrize(("change", "path", "message"), [
    (lambda t: t["spec"]["ioConfig"]["inputSource"].update(type="ftp"), "spec.ioConfig.inputSource", "ftp"),
    (lambda t: t["spec"]["ioConfig"].update(inputSource={"type": "local", "filter": "*.json"}),
     "spec.ioConfig.inputSource", "baseDir or files"),
    (lambda t: t["spec"]["ioConfig"].pop("inputFormat"), "spec.ioConfig", "inputFormat is required"),
    (lambda t: t["spec"]["ioConfig"].update(inputFormat={"type": "csv"}), "spec.ioConfig.inputFormat",
     "columns are required"),
    (lambda t: t["spec"]["tuningConfig"].update(partitionsSpec={"type": "hashed", "numShards": 2}),
     "spec.tuningConfig", "DynamicPartitionsSpec must be used for best-effort rollup"),
    (lambda t: t["spec"]["tuningConfig"].update(forceGuaranteedRollup=True, partitionsSpec={"type": "dynamic"}),
     "spec.tuningConfig", "DynamicPartitionsSpec cannot be used for perfect rollup"),
    (lambda t: t["spec"]["ioConfig"].update(appendToExisting=True, dropExisting=True), "spec.ioConfig",
     "Cannot both drop existing segments and append"),
    (lambda t: t["spec"]["ioConfig"].update(inputSource={"type": "sql", "database": {
        "type": "sqlite", "connectorConfig": {"connectURI": "jdbc:sqlite:/tmp/x.db"}}, "sqls": ["SELECT 1"],
        "numSplits": 4}) or t["spec"]["ioConfig"].pop("inputFormat"), "spec.ioConfig.inputSource", "splitColumn"),
    (lambda t: t["spec"]["dataSchema"]["granularitySpec"].update(intervals=["2024-13-01/P1D"]),
     "spec.dataSchema.granularitySpec.intervals", "2024-13-01"),
])
def test_a_bad_batch_spec_is_a_400_naming_the_field(http, change, path, message):
    payload = task("batch_bad", {"type": "inline", "data": "{}"}, {"type": "json"})
    change(payload)
    response = http.post("/druid/indexer/v1/task", json=payload)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error.startswith(path) and message in error, error


@pytest.mark.parametrize(("parse_spec", "data"), [
    ({"format": "csv", "columns": ["ts", "channel", "page", "added", "deleted"], "hasHeaderRow": True},
     lambda events: "ts,channel,page,added,deleted\n" + "\n".join(
         f'{e["ts"]},{e["channel"]},"{e["page"]}",{e["added"]},{e["deleted"]}' for e in events)),
    ({"columns": ["ts", "channel", "page", "added", "deleted"]},  # no format: Druid's default, tsv
     lambda events: "\n".join(f'{e["ts"]}\t{e["channel"]}\t{e["page"]}\t{e["added"]}\t{e["deleted"]}' for e in events)),
    ({"format": "json"}, ndjson),
])
def test_the_legacy_parser_form_is_moved_into_todays_places(http, parse_spec, data):
    data_source = f"batch_legacy_{parse_spec.get('format', 'tsv')}"
    events = rows(120)
    payload = task(data_source, {"type": "inline", "data": data(events)})
    schema = payload["spec"]["dataSchema"]
    schema["parser"] = {"type": "string", "parseSpec": {**parse_spec, "timestampSpec": schema.pop("timestampSpec"),
                                                        "dimensionsSpec": schema.pop("dimensionsSpec")}}
    run(http, payload)
    assert by_channel(http, data_source) == totals(events)


def test_parse_exceptions_are_reported_with_where_the_row_came_from(http):
    data = ndjson(rows(20)) + '\n{"ts": "not a time", "channel": "#x"}\n{oops\n'
    result = run(http, task("batch_parse_report", {"type": "inline", "data": data}, {"type": "json"},
                            tuning={"maxSavedParseExceptions": 5, "logParseExceptions": True}))
    stats = result["report"]["payload"]["rowStats"]["buildSegments"]
    assert (stats["processed"], stats["unparseable"]) == (20, 2)
    [saved] = result["report"]["payload"]["unparseableEvents"]["buildSegments"]
    assert saved["input"].startswith("inline:2") and saved["errorType"] == "unparseable"


def test_a_transform_maps_a_column_through_a_lookup(http):
    """lookup() in a transformSpec reads the lookup the coordinator's API holds when the task starts, as Druid's
    ingestion does: a missing key is null, or the replacement given."""
    response = http.post("/druid/coordinator/v1/lookups/config/__default/channel_names", json={
        "version": "v1", "lookupExtractorFactory": {"type": "map", "map": {"#c0": "zero", "#c1": "one"}}})
    assert response.status_code == 202, response.text
    events = rows(60)
    payload = task("batch_lookup", {"type": "inline", "data": ndjson(events)}, {"type": "json"})
    payload["spec"]["dataSchema"]["dimensionsSpec"]["dimensions"] = ["channel", "name", "named"]
    payload["spec"]["dataSchema"]["transformSpec"] = {"transforms": [
        {"type": "expression", "name": "name", "expression": "lookup(channel, 'channel_names')"},
        {"type": "expression", "name": "named", "expression": "lookup(channel, 'channel_names', 'unnamed')"}]}
    run(http, payload)
    answer = sql(http, 'SELECT channel, name, named, SUM("count") AS n FROM batch_lookup GROUP BY 1, 2, 3 ORDER BY 1')
    counts = Counter(e["channel"] for e in events)
    assert answer == [{"channel": "#c0", "name": "zero", "named": "zero", "n": counts["#c0"]},
                      {"channel": "#c1", "name": "one", "named": "one", "n": counts["#c1"]},
                      {"channel": "#c2", "name": None, "named": "unnamed", "n": counts["#c2"]}]
    payload["spec"]["dataSchema"]["transformSpec"]["transforms"][0]["expression"] = "lookup(channel, 'nope')"
    failed = run(http, payload, expect="FAILED")
    assert "lookup [nope], which does not exist" in failed["status"]["errorMsg"]
