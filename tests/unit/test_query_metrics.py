"""Every SQL and native query emits Druid's query metrics: request in -> metric events and /metrics text out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from sluice.broker.broker import Broker
from sluice.emitter import ComposingEmitter, Emitter, Event, PrometheusEmitter, ServiceEmitter, ServiceMetricEvent
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.server.api_metrics import metrics_router
from sluice.server.api_native import native_router, query_dimensions
from sluice.server.api_sql import data_sources_dimension, sql_router

DAY = datetime(2015, 9, 12, tzinfo=UTC)
TIMESERIES = {"queryType": "timeseries", "dataSource": "wiki", "intervals": ["2015-09-12/2015-09-13"],
              "granularity": "all", "aggregations": [{"type": "count", "name": "rows"}],
              "context": {"queryId": "native-1"}}


class Recording(Emitter):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[ServiceMetricEvent] = []

    def _emit(self, event: Event) -> None:
        assert isinstance(event, ServiceMetricEvent)
        self.events.append(event)


@pytest.fixture
def served(tmp_path: Path) -> tuple[TestClient, Recording]:
    metadata = MetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    metadata.create_tables()
    path = tmp_path / "segment.parquet"
    times = [DAY + timedelta(minutes=m) for m in range(10)]
    pq.write_table(pa.table({"__time": pa.array(times, pa.timestamp("ms", tz="UTC")), "page": ["p"] * 10}), path)
    segment = DataSegment(
        id=SegmentId("wiki", Interval(DAY, DAY + timedelta(days=1)), "v1", 0), dimensions=["page"], metrics=[],
        aggregators=[], shard_spec=numbered_shard_spec(0), num_rows=10, size=path.stat().st_size,
        load_spec={"type": "local", "path": str(path)})
    assert metadata.commit_segments_and_metadata([segment], "wiki", None, None).success
    broker = Broker(metadata, LocalDeepStorage(tmp_path), tmp_path / "cache")
    recording = Recording()
    emitter = ServiceEmitter("druid/broker", "localhost:8082", ComposingEmitter([recording, PrometheusEmitter()]))
    app = FastAPI()
    app.include_router(sql_router(broker, emitter))
    app.include_router(native_router(broker, metadata, emitter))
    app.include_router(metrics_router(emitter))
    return TestClient(app), recording


def emitted(recording: Recording) -> dict[str, dict[str, Any]]:
    return {e.metric: {"value": e.value, **e.dimensions} for e in recording.events}


def test_a_sql_query_emits_druids_sql_query_time_and_bytes(served):
    http, recording = served
    response = http.post("/druid/v2/sql", json={"query": "SELECT COUNT(*) AS n FROM wiki",
                                                "context": {"sqlQueryId": "sql-1"}})
    assert response.json() == [{"n": 10}]
    metrics = emitted(recording)
    dimensions = {"id": "sql-1", "nativeQueryIds": "[]", "dataSource": "[wiki]", "remoteAddress": "testclient",
                  "success": "true"}
    assert metrics["sqlQuery/bytes"] == {"value": len(response.content), **dimensions}
    assert metrics["sqlQuery/time"].keys() == {"value", *dimensions} and metrics["sqlQuery/time"]["value"] > 0
    assert set(metrics) == {"sqlQuery/time", "sqlQuery/bytes"}


def test_a_failed_sql_query_is_measured_as_unsuccessful(served):
    http, recording = served
    response = http.post("/druid/v2/sql", json={"query": "SELECT * FROM nope"})
    assert response.status_code == 400
    metrics = emitted(recording)
    assert (metrics["sqlQuery/time"]["success"], metrics["sqlQuery/time"]["dataSource"]) == ("false", "[nope]")
    assert metrics["sqlQuery/bytes"]["value"] == len(response.content)


def test_a_native_query_emits_druids_query_time_and_bytes(served):
    http, recording = served
    response = http.post("/druid/v2", json=TIMESERIES)
    assert response.json()[0]["result"] == {"rows": 10}
    metrics = emitted(recording)
    dimensions = {"id": "native-1", "dataSource": "wiki", "type": "timeseries", "remoteAddress": "testclient",
                  "success": "true"}
    assert metrics["query/bytes"] == {"value": len(response.content), **dimensions}
    assert metrics["query/time"].keys() == {"value", *dimensions} and metrics["query/time"]["value"] > 0

    failed = http.post("/druid/v2", json={**TIMESERIES, "granularity": "fortnight"})
    assert failed.status_code == 400
    assert emitted(recording)["query/time"]["success"] == "false"


def test_query_metrics_reach_the_prometheus_endpoint(served):
    http, _ = served
    http.post("/druid/v2", json=TIMESERIES)
    http.post("/druid/v2/sql", json={"query": "SELECT COUNT(*) FROM wiki"})
    text = http.get("/metrics").text
    assert 'druid_query_time_count{dataSource="wiki",type="timeseries"} 1.0' in text
    assert 'druid_query_bytes_total{dataSource="wiki",type="timeseries"}' in text
    assert 'druid_sqlquery_time_count{dataSource="_wiki_"} 1.0' in text  # "[wiki]" sanitized as Druid does


@pytest.mark.parametrize("sql, expected", [
    ("SELECT 1", "[]"),
    ("SELECT * FROM wiki", "[wiki]"),
    ('SELECT * FROM druid."wiki" a JOIN other b ON a.page = b.page', "[other, wiki]"),
    ("WITH recent AS (SELECT * FROM wiki) SELECT * FROM recent", "[wiki]"),  # a CTE is not a data source
    ("SELECT * FROM sys.segments", "[]"),
    ("SELEC nonsense FROM", "[]"),
])
def test_the_data_sources_of_a_sql_query_are_printed_as_druid_prints_them(sql, expected):
    assert data_sources_dimension(sql) == expected


@pytest.mark.parametrize(("data_source", "metric_name"), [
    ("wiki", "wiki"),
    ({"type": "table", "name": "wiki"}, "wiki"),
    ({"type": "union", "dataSources": ["a", "b"]}, "[a, b]"),
    ({"type": "join", "left": {"type": "join", "left": "w", "right": "x", "rightPrefix": "x.", "condition": "c",
                                "joinType": "LEFT"},
      "right": {"type": "lookup", "lookup": "l"}, "rightPrefix": "r.", "condition": "c", "joinType": "INNER"}, "[w, x]"),
    ({"type": "query", "query": {"queryType": "scan", "dataSource": "t"}}, "[t]"),
    ({"type": "inline", "columnNames": ["a"], "rows": [[1]]}, "[]"),
])
def test_a_native_querys_data_source_dimension_names_the_tables_it_reads(data_source, metric_name):
    assert query_dimensions({"queryType": "scan", "dataSource": data_source}) == {"dataSource": metric_name,
                                                                                  "type": "scan"}
