"""Druid's lookups end to end over HTTP on loopback: specs posted to the coordinator's lookups API land in a SQLite
metadata store, and a broker reading that store answers LOOKUP(), `lookup.<name>` joins and native lookup dimension
specs with them. Segments are written with pyarrow and published straight into the store (no Spark); JDBC lookups
read a real SQLite file, and a real PostgreSQL server when one is installed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy
from fastapi import FastAPI

from sluice.broker.broker import Broker
from sluice.broker.engine import SqlEngine
from sluice.lookups.coordinator import read_lookups
from sluice.lookups.references import LookupReferences
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.server.api_lookups import lookups_router
from sluice.server.api_native import native_router
from sluice.server.api_sql import sql_router
from sluice.server.http_server import HttpServer
from tests.integration.harness import free_port, wait_for

DAY = datetime(2015, 9, 12, tzinfo=UTC)
CHANNELS = ["#en", "#fr", "#en", "#de", None, "#en"]
LOOKUPS = "/druid/coordinator/v1/lookups"
#: how often the broker reads the lookups (the test's "short poll")
POLL_S = 0.3


def map_spec(version: str, mapping: dict[str, str]) -> dict[str, Any]:
    return {"version": version, "lookupExtractorFactory": {"type": "map", "map": mapping}}


def jdbc_spec(version: str, connect_uri: str, **namespace: Any) -> dict[str, Any]:
    return {"version": version, "lookupExtractorFactory": {"type": "cachedNamespace", "extractionNamespace": {
        "type": "jdbc", "connectorConfig": {"connectURI": connect_uri}, "table": "countries", "keyColumn": "code",
        "valueColumn": "name", **namespace}}}


@dataclass
class Cluster:
    http: httpx.Client
    work: Path

    def sql(self, query: str, status: int = 200) -> Any:
        response = self.http.post("/druid/v2/sql", json={"query": query, "resultFormat": "array"})
        assert response.status_code == status, response.text
        return response.json()

    def answer(self, query: str | dict[str, Any]) -> Any:
        """The answer to SQL text or a native query, None while it is an error (a lookup not polled yet)."""
        response = self.http.post("/druid/v2/sql", json={"query": query, "resultFormat": "array"}) \
            if isinstance(query, str) else self.http.post("/druid/v2/", json=query)
        return response.json() if response.status_code == 200 else None

    def post_lookup(self, name: str, spec: dict[str, Any], tier: str = "__default") -> httpx.Response:
        return self.http.post(f"{LOOKUPS}/config/{tier}/{name}", json=spec)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A data source `wiki` of six rows (one per hour, `channel` as in CHANNELS) behind a broker that reads the
    lookups of the `__default` tier from the same metadata store the lookups API writes."""
    work = tmp_path_factory.mktemp("lookups")
    path = work / "wiki.parquet"
    times = [DAY + timedelta(hours=h) for h in range(len(CHANNELS))]
    pq.write_table(pa.table({"__time": pa.array(times, pa.timestamp("ms", tz="UTC")),
                             "channel": pa.array(CHANNELS, pa.string()),
                             "added": pa.array(range(1, len(CHANNELS) + 1), pa.int64())}), path)
    segment = DataSegment(
        id=SegmentId("wiki", Interval(DAY, DAY + timedelta(days=1)), "2026-01-01T00:00:00.000Z", 0),
        dimensions=["channel"], metrics=["added"], aggregators=[{"type": "longSum", "name": "added",
                                                                 "fieldName": "added"}],
        shard_spec=numbered_shard_spec(0), num_rows=len(CHANNELS), size=path.stat().st_size,
        load_spec={"type": "local", "path": str(path)})
    metadata = MetadataStore(f"sqlite:///{work / 'metadata.db'}")
    metadata.create_tables()
    assert metadata.commit_segments_and_metadata([segment], "wiki", None, None).success
    lookups = LookupReferences(lambda: read_lookups(metadata), poll_s=POLL_S)
    broker = Broker(metadata, LocalDeepStorage(work), work / "cache", SqlEngine(threads=1, lookups=lookups.get))
    app = FastAPI()
    app.include_router(lookups_router(metadata))
    app.include_router(sql_router(broker))
    app.include_router(native_router(broker, metadata))
    port = free_port()
    server = HttpServer(app, "127.0.0.1", port)
    server.start()
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
        yield Cluster(http, work)
    server.stop()
    metadata.close()


# ------------------------------------------------------------------------------------------------- the config API


def test_lookup_specs_are_stored_listed_versioned_and_deleted(cluster: Cluster) -> None:
    http = cluster.http
    assert http.get(f"{LOOKUPS}/config").status_code == 404  # never configured: Druid's console offers to initialize
    assert http.post(f"{LOOKUPS}/config", json={}).status_code == 202
    assert http.get(f"{LOOKUPS}/config").json() == []

    posted = {"api": {"colors": map_spec("v1", {"r": "red"}), "sizes": map_spec("v1", {"s": "small"})}}
    response = http.post(f"{LOOKUPS}/config", json=posted)
    assert (response.status_code, response.json()) == (202, posted)
    assert "api" in http.get(f"{LOOKUPS}/config").json()
    assert http.get(f"{LOOKUPS}/config/api").json() == ["colors", "sizes"]
    assert http.get(f"{LOOKUPS}/config/api", params={"detailed": "true"}).json() == posted["api"]
    assert http.get(f"{LOOKUPS}/config/all").json()["api"] == posted["api"]
    assert http.get(f"{LOOKUPS}/config/api/colors").json() == map_spec("v1", {"r": "red"})
    assert http.get(f"{LOOKUPS}/status/api").json() == {"colors": {"loaded": True}, "sizes": {"loaded": True}}
    assert http.get(f"{LOOKUPS}/status/api/colors", params={"detailed": "true"}).json() == \
        {"loaded": True, "pendingNodes": []}

    # a version that does not grow (string order: "v10" < "v9") is refused, and the stored spec stays
    for version in ("v1", "v0"):
        refused = cluster.post_lookup("colors", map_spec(version, {"r": "rot"}), tier="api")
        assert refused.status_code == 400
        assert refused.json()["error"].startswith("given update for lookup [api]:[colors] can't replace existing spec")
    assert cluster.post_lookup("colors", map_spec("v2", {"r": "rot"}), tier="api").status_code == 202
    assert cluster.post_lookup("colors", map_spec("v10", {"r": "rouge"}), tier="api").status_code == 400
    assert http.get(f"{LOOKUPS}/config/api/colors").json() == map_spec("v2", {"r": "rot"})

    assert http.delete(f"{LOOKUPS}/config/api/colors").status_code == 202
    missing = http.get(f"{LOOKUPS}/config/api/colors")
    assert (missing.status_code, missing.json()) == (404, {"error": "lookup [colors] not found"})
    assert http.delete(f"{LOOKUPS}/config/api/colors").status_code == 404
    assert http.delete(f"{LOOKUPS}/config/api/sizes").status_code == 202  # its tier's last lookup: the tier goes
    assert http.get(f"{LOOKUPS}/config/api").status_code == 404
    assert http.delete(f"{LOOKUPS}/config/api").status_code == 404
    assert http.get(f"{LOOKUPS}/status/api").json() == {"error": "No lookups found for tier [api]."}


@pytest.mark.parametrize(("path", "spec", "error"), [
    ("/config/__default/x", {"version": "v1", "lookupExtractorFactory": {
        "type": "cachedNamespace", "extractionNamespace": {"type": "uri", "uri": "file:/tmp/x.csv"}}},
     "lookupExtractorFactory.extractionNamespace.type: Sluice reads the jdbc extraction namespace, not 'uri'"),
    ("/config/__default/x", {"version": "v1", "lookupExtractorFactory": {"type": "kafka"}},
     "lookupExtractorFactory.type: Sluice serves lookups of type map or cachedNamespace, not 'kafka'"),
    ("/config/__default/x", {"lookupExtractorFactory": {"type": "map", "map": {}}},
     "version: lookup [__default]:[x] does not have version."),
    ("/config/__default/x", jdbc_spec("v1", "jdbc:sqlite:/tmp/x.db", table=None),
     "lookupExtractorFactory.extractionNamespace.table: Input should be a valid string"),
    ("/config", {"__default": {"x": jdbc_spec("v1", "jdbc:sqlite:/tmp/x.db", pollPeriod="often")}},
     "__default.x.lookupExtractorFactory.extractionNamespace.pollPeriod: '"),
    ("/config", {"__default": {"x": map_spec("v1", {"k": ["not", "text"]})}},  # type: ignore[dict-item]
     "__default.x.lookupExtractorFactory.map.k: "),
])
def test_a_spec_sluice_cannot_serve_is_a_400_naming_the_field(cluster: Cluster, path: str, spec: dict[str, Any],
                                                              error: str) -> None:
    response = cluster.http.post(LOOKUPS + path, json=spec)
    assert response.status_code == 400
    assert response.json()["error"].startswith(error), response.json()
    assert "x" not in cluster.http.get(f"{LOOKUPS}/config/all").json().get("__default", {})


# ------------------------------------------------------------------------------------------------- queries


def test_sql_lookup_and_lookup_tables_answer_with_the_newest_version(cluster: Cluster) -> None:
    assert cluster.post_lookup("channels", map_spec("v1", {"#en": "English", "#fr": "French"})).status_code == 202
    grouped = "SELECT LOOKUP(channel, 'channels', 'other') AS lang, SUM(added) FROM wiki GROUP BY 1 ORDER BY 1"
    assert wait_for(lambda: cluster.answer(grouped) == [["English", 1 + 3 + 6], ["French", 2], ["other", 4 + 5]],
                    10, "the lookup to be answered")
    assert cluster.sql("SELECT LOOKUP(channel, 'channels') FROM wiki WHERE __time < TIMESTAMP '2015-09-12 02:00:00'"
                       " ORDER BY __time") == [["English"], ["French"]]
    joined = ("SELECT w.channel, l.v, COUNT(*) FROM wiki w JOIN lookup.channels l ON w.channel = l.k "
              "GROUP BY 1, 2 ORDER BY 1")
    assert cluster.sql(joined) == [["#en", "English", 3], ["#fr", "French", 1]]
    assert cluster.sql("SELECT k, v FROM lookup.channels ORDER BY k") == [["#en", "English"], ["#fr", "French"]]

    assert cluster.post_lookup("channels", map_spec("v2", {"#en": "Anglais", "#de": "Allemand"})).status_code == 202
    assert wait_for(lambda: cluster.answer(grouped) == [["Allemand", 4], ["Anglais", 10], ["other", 7]],
                    POLL_S * 10, "the new version to be answered within the broker's poll")


def test_a_query_of_a_lookup_that_does_not_exist_is_a_400(cluster: Cluster) -> None:
    for query in ("SELECT LOOKUP(channel, 'nope') FROM wiki", "SELECT k FROM lookup.nope"):
        assert cluster.sql(query, status=400)["errorMessage"] == "Lookup [nope] not found"


def test_native_group_by_maps_dimensions_through_registered_and_inline_lookups(cluster: Cluster) -> None:
    assert cluster.post_lookup("native_channels", map_spec("v1", {"#en": "English", "#fr": "French"})).status_code \
        == 202
    registered = {"type": "extraction", "dimension": "channel", "outputName": "lang", "extractionFn": {
        "type": "registeredLookup", "lookup": "native_channels", "retainMissingValue": True}}
    inline = {"type": "lookup", "dimension": "channel", "outputName": "short", "replaceMissingValueWith": "?",
              "lookup": {"type": "map", "map": {"#en": "en", "#de": "de"}}}
    query = {"queryType": "groupBy", "dataSource": "wiki", "intervals": ["2015-09-12/2015-09-13"],
             "granularity": "all", "dimensions": [registered, inline],
             "aggregations": [{"type": "longSum", "name": "added", "fieldName": "added"}]}
    rows = [(r["event"]["lang"], r["event"]["short"], r["event"]["added"])
            for r in wait_for(lambda: cluster.answer(query), 10, "the lookup to be answered")]
    assert sorted(rows, key=str) == sorted([("#de", "de", 4), ("English", "en", 10), ("French", "?", 2),
                                            (None, "?", 5)], key=str)


def test_native_lookup_extraction_refuses_retaining_and_replacing_at_once(cluster: Cluster) -> None:
    dimension = {"type": "extraction", "dimension": "channel", "extractionFn": {
        "type": "registeredLookup", "lookup": "channels", "retainMissingValue": True, "replaceMissingValueWith": "x"}}
    response = cluster.http.post("/druid/v2/", json={
        "queryType": "groupBy", "dataSource": "wiki", "intervals": ["2015-09-12/2015-09-13"], "granularity": "all",
        "dimensions": [dimension]})
    assert response.status_code == 400
    assert response.json()["errorMessage"] == (
        "Invalid native query: dimensions[0].extractionFn: Cannot specify a [replaceMissingValueWith] and set "
        "[retainMissingValue] to true")


# ------------------------------------------------------------------------------------------------- JDBC lookups


def test_jdbc_lookup_reads_a_sqlite_table_and_its_filter(cluster: Cluster) -> None:
    database = cluster.work / "countries.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE countries (code TEXT, name TEXT, active INTEGER)")
        connection.executemany("INSERT INTO countries VALUES (?, ?, ?)",
                               [("#en", "England", 1), ("#fr", "France", 1), ("#de", "Germany", 0)])
    spec = jdbc_spec("v1", f"jdbc:sqlite:{database}", filter="active = 1")
    assert cluster.post_lookup("countries_sqlite", spec).status_code == 202
    query = "SELECT channel, LOOKUP(channel, 'countries_sqlite') FROM wiki WHERE channel <> '#en' ORDER BY __time"
    assert wait_for(lambda: cluster.answer(query) == [["#fr", "France"], ["#de", None]], 10, "the JDBC lookup")


def test_jdbc_lookup_reads_a_postgresql_table(cluster: Cluster, postgres_uri: str) -> None:
    engine = sqlalchemy.create_engine(postgres_uri)
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text('CREATE TABLE countries (code TEXT, name TEXT, "Weird Col" TEXT)'))
        connection.execute(sqlalchemy.text("INSERT INTO countries VALUES ('#en', 'England', 'e'), ('#de', NULL, 'd')"))
    engine.dispose()
    spec = jdbc_spec("v1", postgres_uri, valueColumn="Weird Col")
    assert cluster.post_lookup("countries_pg", spec).status_code == 202
    query = "SELECT k, v FROM lookup.countries_pg ORDER BY k"
    assert wait_for(lambda: cluster.answer(query) == [["#de", "d"], ["#en", "e"]], 10, "the PostgreSQL lookup")
