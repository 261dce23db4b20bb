"""POST /druid/v2/sql and DELETE /druid/v2/sql/{sqlQueryId}: request in → status, headers and body out."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from sluice.broker.broker import Broker
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.server.api_sql import sql_router

DAY = datetime(2015, 9, 12, tzinfo=UTC)


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    metadata = MetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    metadata.create_tables()
    path = tmp_path / "segment.parquet"
    times = [DAY + timedelta(seconds=s) for s in range(2000)]
    pq.write_table(pa.table({"__time": pa.array(times, pa.timestamp("ms", tz="UTC")),
                             "page": [f"p{s % 3}" for s in range(2000)], "n": list(range(2000))}), path)
    segment = DataSegment(
        id=SegmentId("wiki", Interval(DAY, DAY + timedelta(days=1)), "v1", 0), dimensions=["page"], metrics=["n"],
        aggregators=[], shard_spec=numbered_shard_spec(0), num_rows=2000, size=path.stat().st_size,
        load_spec={"type": "local", "path": str(path)})
    assert metadata.commit_segments_and_metadata([segment], "wiki", None, None).success
    app = FastAPI()
    app.include_router(sql_router(Broker(metadata, LocalDeepStorage(tmp_path), tmp_path / "cache")))
    return TestClient(app)


def test_query_id_is_echoed_or_made_up(client: TestClient) -> None:
    named = client.post("/druid/v2/sql", json={"query": "SELECT 1", "context": {"sqlQueryId": "my-query"}})
    assert (named.status_code, named.headers["X-Druid-SQL-Query-Id"]) == (200, "my-query")
    made_up = client.post("/druid/v2/sql", json={"query": "SELECT 1"})
    assert len(made_up.headers["X-Druid-SQL-Query-Id"]) == 36
    failed = client.post("/druid/v2/sql", json={"query": "SELECT * FROM nope", "context": {"sqlQueryId": "bad"}})
    assert (failed.status_code, failed.headers["X-Druid-SQL-Query-Id"]) == (400, "bad")
    assert failed.json()["errorMessage"] == "Object 'nope' not found (line [1], column [15])"


def test_cancelling_an_unknown_query_is_not_found(client: TestClient) -> None:
    response = client.delete("/druid/v2/sql/no-such-query")
    assert (response.status_code, response.content) == (404, b"")


def test_cancelling_a_running_query(client: TestClient) -> None:
    slow = "SELECT COUNT(*) FROM wiki a, wiki b, wiki c WHERE MOD(a.n * b.n + c.n, 7919) = 7918"
    responses = []
    thread = threading.Thread(target=lambda: responses.append(client.post(
        "/druid/v2/sql", json={"query": slow, "context": {"sqlQueryId": "slow-1"}})))
    thread.start()
    deadline = time.monotonic() + 10
    while (cancel := client.delete("/druid/v2/sql/slow-1")).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.02)
    thread.join(10)
    assert (cancel.status_code, cancel.content) == (202, b"")
    (response,) = responses
    assert response.status_code == 500
    assert response.json()["error"] == "Query cancelled"
    assert response.headers["X-Druid-SQL-Query-Id"] == "slow-1"


def test_time_zone_and_arrays_in_the_response(client: TestClient) -> None:
    sql = "SELECT MIN(__time) AS t, ARRAY_AGG(DISTINCT page) AS pages FROM wiki"
    zoned = client.post("/druid/v2/sql", json={"query": sql, "context": {"sqlTimeZone": "America/Los_Angeles"}})
    assert zoned.json() == [{"t": "2015-09-11T17:00:00.000-07:00", "pages": '["p0","p1","p2"]'}]
    arrays = client.post("/druid/v2/sql", json={"query": sql, "context": {"sqlStringifyArrays": False}})
    assert arrays.json() == [{"t": "2015-09-12T00:00:00.000Z", "pages": ["p0", "p1", "p2"]}]


def test_a_bad_context_is_a_bad_request(client: TestClient) -> None:
    response = client.post("/druid/v2/sql", json={"query": "SELECT 1", "context": {"sqlTimeZone": "Nowhere/Land"}})
    assert response.status_code == 400
    assert response.json()["errorMessage"].startswith("Invalid time zone [Nowhere/Land]")
