"""Native queries over HTTP against segments written with pyarrow: each answer is checked against values computed
from the raw rows and against the Druid SQL answer to the same question. No Spark: the segments are published
straight into a SQLite metadata store, as the broker finds them after a handoff.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi import FastAPI

from sluice.broker.broker import Broker
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.server.api_native import native_router
from sluice.server.api_sql import sql_router
from sluice.server.http_server import HttpServer
from sluice.server.request_log import RequestIdMiddleware, RequestLogConfig, build_request_logger
from tests.integration.harness import free_port

DAY = datetime(2015, 9, 12, tzinfo=UTC)
INTERVALS = ["2015-09-12/2015-09-13"]
CHANNELS = ["#en", "#fr", None, "#de", "#en"]
VERSION = "2026-01-02T00:00:00.000Z"


def _rows() -> list[dict[str, Any]]:
    """Hours 0-11 of one day, nothing in hours 5 and 6 (no segment there), and hour 9 without any #en row."""
    rows = []
    for i in range(96):
        time = DAY + timedelta(minutes=7 * i + i % 3)
        if time.hour in (5, 6) or time.hour >= 12:
            continue
        channel = "#fr" if time.hour == 9 else CHANNELS[i % 5]
        rows.append({"__time": time, "channel": channel, "page": f"page{i % 7}", "added": i * 3, "deleted": i % 4,
                     "delta": i * 3 - i % 4 + 0.5})
    return rows


ROWS = _rows()


def _write(path: Path, rows: list[dict[str, Any]]) -> None:
    pq.write_table(pa.table({
        "__time": pa.array([r["__time"] for r in rows], pa.timestamp("ms", tz="UTC")),
        "channel": pa.array([r["channel"] for r in rows], pa.string()),
        "page": pa.array([r["page"] for r in rows], pa.string()),
        "added": pa.array([r["added"] for r in rows], pa.int64()),
        "deleted": pa.array([r["deleted"] for r in rows], pa.int64()),
        "delta": pa.array([r["delta"] for r in rows], pa.float64()),
    }), path)


def _segment(path: Path, hour: int, version: str, partition: int, rows: int) -> DataSegment:
    start = DAY + timedelta(hours=hour)
    return DataSegment(
        id=SegmentId("wiki", Interval(start, start + timedelta(hours=1)), version, partition),
        dimensions=["channel", "page"], metrics=["added", "deleted", "delta"],
        aggregators=[{"type": "longSum", "name": "added", "fieldName": "added"}],
        shard_spec=numbered_shard_spec(partition), num_rows=rows, size=path.stat().st_size,
        load_spec={"type": "local", "path": str(path)},
    )


@dataclass
class Cluster:
    http: httpx.Client
    visible_ids: list[str]
    overshadowed_id: str
    request_logs: Path

    def native(self, query: dict[str, Any], status: int = 200) -> Any:
        response = self.http.post("/druid/v2/", json=query)
        assert response.status_code == status, response.text
        return response.json()

    def sql(self, query: str) -> list[list[Any]]:
        response = self.http.post("/druid/v2/sql", json={"query": query, "resultFormat": "array"})
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One segment per hour, two partitions for even hours, and hour 3 re-published at a higher version over an
    older segment whose rows must never show (it stays used in the metadata store, overshadowed)."""
    work = tmp_path_factory.mktemp("native")
    by_hour: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in ROWS:
        by_hour[row["__time"].hour].append(row)
    segments = []
    for hour, rows in sorted(by_hour.items()):
        parts = [rows[::2], rows[1::2]] if hour % 2 == 0 else [rows]
        for partition, part in enumerate(parts):
            path = work / f"wiki_{hour:02d}_{partition}.parquet"
            _write(path, part)
            segments.append(_segment(path, hour, VERSION, partition, len(part)))
    old_path = work / "wiki_03_old.parquet"
    _write(old_path, [{**by_hour[3][0], "page": "overshadowed", "added": 1_000_000}])
    old = _segment(old_path, 3, "2026-01-01T00:00:00.000Z", 0, 1)

    metadata = MetadataStore(f"sqlite:///{work / 'metadata.db'}")
    metadata.create_tables()
    assert metadata.commit_segments_and_metadata([old], "wiki", None, None).success
    assert metadata.commit_segments_and_metadata(segments, "wiki", None, None).success
    broker = Broker(metadata, LocalDeepStorage(work), work / "cache")
    app = FastAPI()
    request_logger = build_request_logger(RequestLogConfig(type="file", dir=work / "request-logs"))
    app.include_router(native_router(broker, metadata, request_logger=request_logger))
    app.include_router(sql_router(broker, request_logger=request_logger))
    app.add_middleware(RequestIdMiddleware)
    port = free_port()
    server = HttpServer(app, "127.0.0.1", port)
    server.start()
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        yield Cluster(http, sorted(str(s.id) for s in segments), str(old.id), work / "request-logs")
    server.stop()
    metadata.close()


def _iso(time: datetime) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.") + f"{time.microsecond // 1000:03d}Z"


def _hour(time: datetime) -> datetime:
    return time.replace(minute=0, second=0, microsecond=0)


# ---------------------------------------------------------------------------------------------------- timeseries


def test_timeseries_sums_per_hour_and_fills_hours_without_matching_rows(cluster: Cluster) -> None:
    answer = cluster.native({
        "queryType": "timeseries", "dataSource": "wiki", "intervals": INTERVALS, "granularity": "hour",
        "filter": {"type": "selector", "dimension": "channel", "value": "#en"},
        "aggregations": [{"type": "count", "name": "rows"}, {"type": "longSum", "name": "added", "fieldName": "added"}],
        "postAggregations": [{"type": "arithmetic", "name": "avg", "fn": "/",
                              "fields": [{"type": "fieldAccess", "fieldName": "added"},
                                         {"type": "fieldAccess", "fieldName": "rows"}]}],
    })
    expected = []
    for hour in [0, 1, 2, 3, 4, 7, 8, 9, 10, 11]:  # hours 5 and 6 have no segment: not filled
        rows = [r for r in ROWS if r["__time"].hour == hour and r["channel"] == "#en"]
        added = sum(r["added"] for r in rows) if rows else None
        result = {"rows": len(rows), "added": added, "avg": added / len(rows) if rows else None}
        expected.append({"timestamp": _iso(DAY + timedelta(hours=hour)), "result": result})
    assert answer == expected
    assert answer[7]["result"] == {"rows": 0, "added": None, "avg": None}  # hour 9: only #fr

    sql = cluster.sql("SELECT TIME_FLOOR(__time, 'PT1H'), COUNT(*), SUM(added) FROM wiki "
                      "WHERE channel = '#en' GROUP BY 1 ORDER BY 1")
    assert [[row["timestamp"], row["result"]["rows"], row["result"]["added"]]
            for row in answer if row["result"]["rows"]] == sql


def test_timeseries_all_with_grand_total_skips_empty_buckets_and_limits(cluster: Cluster) -> None:
    query = {"queryType": "timeseries", "dataSource": "wiki", "intervals": INTERVALS, "granularity": "hour",
             "descending": True, "limit": 2, "context": {"skipEmptyBuckets": True, "grandTotal": True},
             "filter": {"type": "in", "dimension": "channel", "values": ["#de", None]},
             "aggregations": [{"type": "doubleSum", "name": "delta", "fieldName": "delta"}]}
    answer = cluster.native(query)
    matching = [r for r in ROWS if r["channel"] in ("#de", None)]
    hours = sorted({_hour(r["__time"]) for r in matching}, reverse=True)[:2]
    assert answer == [
        *({"timestamp": _iso(h), "result": {"delta": sum(r["delta"] for r in matching if _hour(r["__time"]) == h)}}
          for h in hours),
        {"timestamp": None, "result": {"delta": sum(r["delta"] for r in matching)}},
    ]

    everything = cluster.native({**query, "granularity": "all", "context": {}})
    assert everything == [{"timestamp": "2015-09-12T00:00:00.000Z", "result": {"delta": answer[-1]["result"]["delta"]}}]


def test_aggregators_over_the_filtered_rows(cluster: Cluster) -> None:
    answer = cluster.native({
        "queryType": "timeseries", "dataSource": "wiki", "intervals": INTERVALS,
        "filter": {"type": "selector", "dimension": "channel", "value": "#en"},
        "aggregations": [
            {"type": "cardinality", "name": "pages", "fields": ["page"], "round": True},
            {"type": "stringLast", "name": "last", "fieldName": "page", "maxStringBytes": 4},
            {"type": "longFirst", "name": "first", "fieldName": "added"},
            {"type": "longMin", "name": "min", "fieldName": "deleted"},
            {"type": "doubleMean", "name": "mean", "fieldName": "added"},
            {"type": "filtered", "name": "late", "filter": {"type": "bound", "dimension": "__time",
                                                           "lower": "1442034000000", "ordering": "numeric"},
             "aggregator": {"type": "count", "name": "ignored"}},
        ]})
    en = [r for r in ROWS if r["channel"] == "#en"]
    assert answer == [{"timestamp": "2015-09-12T00:00:00.000Z", "result": {
        "pages": len({r["page"] for r in en}),
        "last": en[-1]["page"][:4],
        "first": en[0]["added"],
        "min": min(r["deleted"] for r in en),
        "mean": sum(r["added"] for r in en) / len(en),
        "late": sum(1 for r in en if r["__time"] >= DAY + timedelta(hours=5)),
    }}]


def test_finalizing_field_access_reads_the_finished_value_of_a_sketch_aggregator(cluster: Cluster) -> None:
    """Druid's fieldAccess on a cardinality aggregator is the sketch, finalizingFieldAccess its estimate: the
    arithmetic over it must use the count of distinct pages (exact at this size)."""
    answer = cluster.native({
        "queryType": "groupBy", "dataSource": "wiki", "intervals": INTERVALS, "granularity": "all",
        "dimensions": ["channel"],
        "aggregations": [{"type": "cardinality", "name": "pages", "fields": ["page"]},
                         {"type": "longSum", "name": "added", "fieldName": "added"}],
        "postAggregations": [
            {"type": "finalizingFieldAccess", "name": "distinct_pages", "fieldName": "pages"},
            {"type": "arithmetic", "name": "added_per_page", "fn": "/",
             "fields": [{"type": "fieldAccess", "fieldName": "added"},
                        {"type": "finalizingFieldAccess", "fieldName": "pages"}]}]})
    groups: dict[str | None, list[dict[str, Any]]] = defaultdict(list)
    for r in ROWS:
        groups[r["channel"]].append(r)
    expected = {channel: (len({r["page"] for r in rows}), sum(r["added"] for r in rows))
                for channel, rows in groups.items()}
    assert {row["event"]["channel"]: (row["event"]["distinct_pages"], row["event"]["added_per_page"])
            for row in answer} == {channel: (pages, pytest.approx(added / pages))
                                   for channel, (pages, added) in expected.items()}


def test_div_in_a_virtual_column_truncates_like_druids_long_division(cluster: Cluster) -> None:
    """div() of doubles is (long) (x / y): 2.5 / 0.5 is 5, not the 3 that rounding the operands first would give."""
    answer = cluster.native({
        "queryType": "scan", "dataSource": "wiki", "intervals": INTERVALS, "resultFormat": "compactedList",
        "columns": ["__time", "quotient"],
        "virtualColumns": [{"type": "expression", "name": "quotient", "expression": "div(delta, 0.5)",
                            "outputType": "LONG"}]})
    assert sorted(tuple(row) for batch in answer for row in batch["events"]) == sorted(
        (int(r["__time"].timestamp() * 1000), int(r["delta"] / 0.5)) for r in ROWS)


def test_long_aggregators_over_a_double_column_read_each_value_as_a_long(cluster: Cluster) -> None:
    """Druid's longSum, longMin and longMax call getLong() on every row: a double loses its fraction (Java's cast),
    and the answer is a whole number, not 210.0."""
    answer = cluster.native({
        "queryType": "timeseries", "dataSource": "wiki", "intervals": INTERVALS, "granularity": "all",
        "aggregations": [{"type": "longSum", "name": "ls", "fieldName": "delta"},
                         {"type": "longMin", "name": "lmin", "fieldName": "delta"},
                         {"type": "longMax", "name": "lmax", "fieldName": "delta"},
                         {"type": "doubleSum", "name": "ds", "fieldName": "delta"}]})
    deltas = [r["delta"] for r in ROWS]
    [result] = [bucket["result"] for bucket in answer]
    assert result == {"ls": sum(int(d) for d in deltas), "lmin": int(min(deltas)), "lmax": int(max(deltas)),
                      "ds": sum(deltas)}
    assert all(isinstance(result[name], int) for name in ("ls", "lmin", "lmax"))
    assert result["ls"] != int(sum(deltas))  # each value is cut, not the sum


def test_timeseries_of_a_period_in_a_time_zone_prints_local_bucket_starts(cluster: Cluster) -> None:
    answer = cluster.native({
        "queryType": "timeseries", "dataSource": "wiki", "intervals": INTERVALS,
        "granularity": {"type": "period", "period": "P1D", "timeZone": "America/Los_Angeles"},
        "aggregations": [{"type": "count", "name": "rows"}]})
    before_local_midnight = sum(1 for r in ROWS if r["__time"].hour < 7)
    assert answer == [
        {"timestamp": "2015-09-11T00:00:00.000-07:00", "result": {"rows": before_local_midnight}},
        {"timestamp": "2015-09-12T00:00:00.000-07:00", "result": {"rows": len(ROWS) - before_local_midnight}},
    ]


def test_an_unknown_data_source_answers_like_druid(cluster: Cluster) -> None:
    aggregations = [{"type": "count", "name": "rows"}, {"type": "longSum", "name": "s", "fieldName": "x"}]
    timeseries = {"queryType": "timeseries", "dataSource": "nope", "intervals": INTERVALS,
                  "aggregations": aggregations}
    assert cluster.native(timeseries) == [{"timestamp": "2015-09-12T00:00:00.000Z", "result": {"rows": 0, "s": None}}]
    assert cluster.native({**timeseries, "queryType": "groupBy", "dimensions": ["page"]}) == []


# ------------------------------------------------------------------------------------------------ topN, groupBy


def test_topn_returns_the_pages_with_most_added_as_druid_and_sql_do(cluster: Cluster) -> None:
    answer = cluster.native({
        "queryType": "topN", "dataSource": "wiki", "intervals": ["2015-09-12T01:00/2015-09-13"], "granularity": "all",
        "dimension": {"type": "default", "dimension": "page", "outputName": "p"}, "metric": "added", "threshold": 3,
        "aggregations": [{"type": "longSum", "name": "added", "fieldName": "added"}, {"type": "count", "name": "n"}],
        "postAggregations": [{"type": "expression", "name": "per_row", "expression": "added / n"}]})
    rows = [r for r in ROWS if r["__time"].hour >= 1]
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        totals[r["page"]][0] += r["added"]
        totals[r["page"]][1] += 1
    top = sorted(totals.items(), key=lambda kv: -kv[1][0])[:3]
    assert answer == [{
        "timestamp": _iso(min(r["__time"] for r in rows)),  # where the data starts, as Druid's cursor does
        "result": [{"p": page, "added": added, "n": n, "per_row": added // n} for page, (added, n) in top],
    }]
    sql = cluster.sql("SELECT page, SUM(added) AS added FROM wiki WHERE __time >= TIMESTAMP '2015-09-12 01:00:00' "
                      "GROUP BY page ORDER BY added DESC LIMIT 3")
    assert [[r["p"], r["added"]] for r in answer[0]["result"]] == sql


def test_group_by_with_having_limit_spec_and_a_virtual_column(cluster: Cluster) -> None:
    answer = cluster.native({
        "queryType": "groupBy", "dataSource": "wiki", "intervals": INTERVALS, "granularity": "all",
        "virtualColumns": [{"type": "expression", "name": "odd", "expression": "deleted % 2", "outputType": "LONG"}],
        "dimensions": ["channel", {"type": "default", "dimension": "odd", "outputType": "LONG"}],
        "aggregations": [{"type": "count", "name": "rows"},
                         {"type": "filtered", "filter": {"type": "bound", "dimension": "added", "lower": "100",
                                                         "ordering": "numeric"},
                          "aggregator": {"type": "longMax", "name": "big", "fieldName": "added"}}],
        "having": {"type": "greaterThan", "aggregation": "rows", "value": 5},
        "limitSpec": {"type": "default", "limit": 4, "columns": [{"dimension": "rows", "direction": "descending"}]}})
    groups: dict[tuple[Any, int], list[dict[str, Any]]] = defaultdict(list)
    for r in ROWS:
        groups[(r["channel"], r["deleted"] % 2)].append(r)
    expected = sorted(
        ({"channel": c, "odd": o, "rows": len(rs),
          "big": max((r["added"] for r in rs if r["added"] >= 100), default=None)}
         for (c, o), rs in groups.items() if len(rs) > 5),
        key=lambda e: (-e["rows"], e["channel"] is not None, e["channel"] or "", e["odd"]))[:4]
    assert answer == [{"version": "v1", "timestamp": "2015-09-12T00:00:00.000Z", "event": e} for e in expected]


def test_group_by_all_without_dimensions_is_stamped_with_the_first_interval_start(cluster: Cluster) -> None:
    query = {"queryType": "groupBy", "dataSource": "wiki", "granularity": "all",
             "intervals": ["-146136543-09-08T08:23:32.096Z/146140482-04-24T15:36:27.903Z"],
             "aggregations": [{"type": "count", "name": "rows"}]}
    assert cluster.native(query) == [
        {"version": "v1", "timestamp": "-146136543-09-08T08:23:32.096Z", "event": {"rows": len(ROWS)}}]
    assert cluster.native({**query, "intervals": ["2020/2021"]}) == []  # no rows, no group


# ------------------------------------------------------------------------------------------------------- scan etc.


def test_scan_batches_rows_per_segment_and_never_shows_overshadowed_rows(cluster: Cluster) -> None:
    answer = cluster.native({"queryType": "scan", "dataSource": "wiki", "intervals": ["2015-09-12T02/2015-09-12T04"],
                             "columns": ["__time", "page", "added"], "resultFormat": "compactedList", "batchSize": 4})
    rows = sorted((r for r in ROWS if r["__time"].hour in (2, 3)), key=lambda r: r["__time"])
    assert [event for batch in answer for event in batch["events"]] == [
        [int(r["__time"].timestamp() * 1000), r["page"], r["added"]] for r in rows]
    chunk_2 = f"wiki_2015-09-12T02:00:00.000Z_2015-09-12T03:00:00.000Z_{VERSION}"
    chunk_3 = f"wiki_2015-09-12T03:00:00.000Z_2015-09-12T04:00:00.000Z_{VERSION}"
    hour_2, hour_3 = (sum(1 for r in rows if r["__time"].hour == h) for h in (2, 3))
    assert (hour_2, hour_3) == (9, 9)
    assert [(b["segmentId"], len(b["events"])) for b in answer] == [
        (chunk_2, 4), (chunk_2, 4), (chunk_2, 1), (chunk_3, 4), (chunk_3, 4), (chunk_3, 1)]
    assert answer[0]["columns"] == ["__time", "page", "added"]
    assert answer[0]["rowSignature"] == [{"name": "__time", "type": "LONG"}, {"name": "page", "type": "STRING"},
                                         {"name": "added", "type": "LONG"}]


def test_time_boundary_and_data_source_metadata(cluster: Cluster) -> None:
    first, last = _iso(ROWS[0]["__time"]), _iso(ROWS[-1]["__time"])
    assert cluster.native({"queryType": "timeBoundary", "dataSource": "wiki"}) == [
        {"timestamp": first, "result": {"minTime": first, "maxTime": last}}]
    fr = [r["__time"] for r in ROWS if r["channel"] == "#fr"]
    assert cluster.native({"queryType": "timeBoundary", "dataSource": "wiki", "bound": "maxTime",
                           "filter": {"type": "selector", "dimension": "channel", "value": "#fr"}}) == [
        {"timestamp": _iso(max(fr)), "result": {"maxTime": _iso(max(fr))}}]
    assert cluster.native({"queryType": "dataSourceMetadata", "dataSource": "wiki"}) == [
        {"timestamp": last, "result": {"maxIngestedEventTime": last}}]
    assert cluster.native({"queryType": "timeBoundary", "dataSource": "nope"}) == []


def test_search_counts_matching_values_per_dimension(cluster: Cluster) -> None:
    answer = cluster.native({"queryType": "search", "dataSource": "wiki", "intervals": INTERVALS,
                             "searchDimensions": ["channel", "page"], "sort": {"type": "lexicographic"},
                             "query": {"type": "insensitive_contains", "value": "E"}})
    counts: dict[tuple[str, str], int] = defaultdict(int)
    for r in ROWS:
        for dimension in ("channel", "page"):
            if r[dimension] and "e" in r[dimension].lower():
                counts[(dimension, r[dimension])] += 1
    hits = sorted(counts.items(), key=lambda kv: (kv[0][1], kv[0][0]))
    assert answer == [{"timestamp": _iso(ROWS[0]["__time"]),
                       "result": [{"dimension": d, "value": v, "count": n} for (d, v), n in hits]}]


def test_segment_metadata_merged(cluster: Cluster) -> None:
    answer = cluster.native({"queryType": "segmentMetadata", "dataSource": "wiki", "intervals": INTERVALS,
                             "merge": True, "analysisTypes": ["cardinality", "minmax", "aggregators"]})
    assert len(answer) == 1
    merged = answer[0]
    assert (merged["id"], merged["numRows"], merged["intervals"]) == ("merged", len(ROWS), None)
    assert merged["aggregators"] == {"added": {"type": "longSum", "name": "added", "fieldName": "added"}}
    pages = sorted({r["page"] for r in ROWS})
    assert {k: merged["columns"]["page"][k] for k in ("type", "hasNulls", "cardinality", "minValue", "maxValue")} == {
        "type": "STRING", "hasNulls": False, "cardinality": len(pages), "minValue": pages[0], "maxValue": pages[-1]}
    assert merged["columns"]["channel"]["hasNulls"] is True
    assert merged["columns"]["delta"]["type"] == "DOUBLE"
    assert list(merged["columns"]) == ["__time", "channel", "page", "added", "deleted", "delta"]


# --------------------------------------------------------------------------------------------------------- errors


def test_bad_queries_get_druids_400(cluster: Cluster) -> None:
    response = cluster.http.post("/druid/v2", content=b"{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json()["error"] == "Json parse failed"

    body = cluster.native({"queryType": "timeseries", "dataSource": "wiki", "intervals": INTERVALS,
                           "aggregations": [{"type": "longSum", "name": "a", "fieldName": "added",
                                             "extraField": 1}]}, status=400)
    assert body["errorMessage"] == (
        "Invalid native query: aggregations[0].extraField: Sluice does not support this field")
    assert body["errorClass"] == "com.fasterxml.jackson.databind.JsonMappingException"


def test_query_id_header_and_pretty_output(cluster: Cluster) -> None:
    response = cluster.http.post("/druid/v2?pretty", json={"queryType": "dataSourceMetadata", "dataSource": "wiki",
                                                           "context": {"queryId": "q-42"}})
    assert response.headers["X-Druid-Query-Id"] == "q-42"
    assert response.text.startswith('[\n  {\n    "timestamp": ')
    assert cluster.http.delete("/druid/v2/q-42").status_code == 404  # it has finished: nothing to cancel


# -------------------------------------------------------------------------------------------- data source metadata


def test_broker_data_source_endpoints(cluster: Cluster) -> None:
    assert cluster.http.get("/druid/v2/datasources").json() == ["wiki"]
    columns = cluster.http.get("/druid/v2/datasources/wiki", params={"interval": "2015-09-12/2015-09-13"}).json()
    assert columns == {"dimensions": ["channel", "page"], "metrics": ["added", "deleted", "delta"]}
    # without an interval Druid looks at the week before now, where this data source has nothing
    assert cluster.http.get("/druid/v2/datasources/wiki").json() == {"dimensions": [], "metrics": []}
    full = cluster.http.get("/druid/v2/datasources/wiki", params={"interval": "2015-09-12/2015-09-13", "full": ""})
    assert list(full.json()) == ["2015-09-12T00:00:00.000Z/2015-09-12T05:00:00.000Z",
                                 "2015-09-12T07:00:00.000Z/2015-09-12T12:00:00.000Z"]


def test_coordinator_and_metadata_data_source_endpoints(cluster: Cluster) -> None:
    assert cluster.http.get("/druid/coordinator/v1/datasources").json() == ["wiki"]
    simple = cluster.http.get("/druid/coordinator/v1/datasources", params={"simple": ""}).json()
    assert simple[0]["name"] == "wiki"
    assert simple[0]["properties"]["segments"]["count"] == len(cluster.visible_ids)
    assert simple[0]["properties"]["segments"]["minTime"] == "2015-09-12T00:00:00.000Z"
    assert simple[0]["properties"]["segments"]["maxTime"] == "2015-09-12T12:00:00.000Z"
    assert cluster.http.get("/druid/coordinator/v1/datasources/wiki/segments").json() == cluster.visible_ids
    full = cluster.http.get("/druid/coordinator/v1/datasources/wiki", params={"full": ""}).json()
    assert [s["identifier"] for s in full["segments"]] == cluster.visible_ids
    assert set(full["segments"][0]) == {"dataSource", "interval", "version", "loadSpec", "dimensions", "metrics",
                                        "shardSpec", "binaryVersion", "size", "identifier"}
    assert cluster.http.get("/druid/coordinator/v1/datasources/nope").status_code == 204

    assert cluster.http.get("/druid/coordinator/v1/metadata/datasources").json() == ["wiki"]
    used = cluster.http.get("/druid/coordinator/v1/metadata/datasources/wiki/segments").json()
    assert used == sorted(cluster.visible_ids + [cluster.overshadowed_id])
    assert cluster.http.get("/druid/coordinator/v1/metadata/datasources/nope/segments").status_code == 404


# ------------------------------------------------------------------------------------------------ request log


def test_each_query_gets_a_line_of_druids_request_log_and_each_request_an_id(cluster: Cluster) -> None:
    def lines() -> list[list[str]]:
        return [line.split("\t") for f in sorted(cluster.request_logs.glob("*.log")) for line in f.read_text().splitlines()]

    before = len(lines())
    native = {"queryType": "timeseries", "dataSource": "wiki", "granularity": "all", "intervals": ["2015/2016"],
              "aggregations": [{"type": "count", "name": "rows"}], "context": {"queryId": "native-1"}}
    answered = cluster.http.post("/druid/v2/", json=native, headers={"X-Request-Id": "trace-42"})
    assert answered.headers["X-Request-Id"] == "trace-42"
    sql = cluster.http.post("/druid/v2/sql", json={"query": "SELECT COUNT(*) AS n FROM wiki",
                                                   "context": {"sqlQueryId": "sql-1"}})
    assert len(sql.headers["X-Request-Id"]) == 32  # made up: the request had none
    bad = cluster.http.post("/druid/v2/sql", json={"query": "SELECT nope FROM wiki"})
    assert bad.status_code == 400

    (native_line, sql_line, bad_line) = lines()[before:]
    assert native_line[1] == "127.0.0.1" and len(native_line) == 4
    stats, query = json.loads(native_line[2]), json.loads(native_line[3])
    assert (stats["success"], stats["identity"], query["queryType"], query["context"]["queryId"]) == (
        True, "allowAll", "timeseries", "native-1")
    assert stats["query/bytes"] == len(answered.content)
    assert sql_line[2] == "" and len(sql_line) == 5
    stats, query = json.loads(sql_line[3]), json.loads(sql_line[4])
    assert (stats["success"], stats["sqlQuery/bytes"], query["query"], query["context"]["sqlQueryId"]) == (
        True, len(sql.content), "SELECT COUNT(*) AS n FROM wiki", "sql-1")
    stats = json.loads(bad_line[3])
    assert stats["success"] is False and "nope" in stats["exception"]
    assert datetime.strptime(native_line[0], "%Y-%m-%dT%H:%M:%S.%fZ").year >= 2026
