"""The broker over a SQLite metadata store and segments written with pyarrow: INFORMATION_SCHEMA and sys tables,
segments pruned by the query's intervals, realtime pieces, the retry when a file vanishes mid-query, and a broker
node's live state from the overlord it discovers."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi import FastAPI
from fastapi.responses import FileResponse

from sluice.broker.broker import Broker
from sluice.broker.errors import SqlError
from sluice.broker.loaded import LoadedDataSources
from sluice.broker.system_tables import Server
from sluice.dev import free_port
from sluice.metadata.offsets import StreamOffsets
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.server.http_server import HttpServer
from sluice.server.node import Node, NodeConfig
from sluice.server.roles import Role
from sluice.realtime import RealtimeView

DAY = datetime(2015, 9, 12, tzinfo=UTC)
V1, V2 = "2026-01-01T00:00:00.000Z", "2026-01-02T00:00:00.000Z"


def _hour(hour: int) -> Interval:
    return Interval(DAY + timedelta(hours=hour), DAY + timedelta(hours=hour + 1))


def _rows(hour: int, n: int, page: str) -> list[dict[str, Any]]:
    return [{"__time": DAY + timedelta(hours=hour, minutes=10 * i), "page": page, "added": hour * 100 + i}
            for i in range(n)]


def _write(path: Path, rows: list[dict[str, Any]], delta: bool = False) -> Path:
    columns = {
        "__time": pa.array([r["__time"] for r in rows], pa.timestamp("ms", tz="UTC")),
        "page": pa.array([r["page"] for r in rows], pa.string()),
        "added": pa.array([r["added"] for r in rows], pa.int64()),
    }
    if delta:
        columns["delta"] = pa.array([0.5] * len(rows), pa.float32())
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)
    return path


def _segment(source: str, path: Path, interval: Interval, version: str, rows: int, metrics: list[str]) -> DataSegment:
    return DataSegment(
        id=SegmentId(source, interval, version, 0), dimensions=["page"], metrics=metrics, aggregators=[],
        shard_spec=numbered_shard_spec(0), num_rows=rows, size=path.stat().st_size,
        load_spec={"type": "local", "path": str(path)},
    )


# wiki: hours 0, 1 and 2 in V1, hour 1 again in V2 (overshadowing V1's); pages: one hour with a FLOAT metric.
WIKI = {(0, V1): _rows(0, 3, "Cat"), (1, V1): _rows(1, 2, "Dog"), (2, V1): _rows(2, 4, "Emu"), (1, V2): _rows(1, 5, "Owl")}
VISIBLE_ROWS = WIKI[0, V1] + WIKI[1, V2] + WIKI[2, V1]


@pytest.fixture
def store(tmp_path: Path) -> MetadataStore:
    metadata = MetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    metadata.create_tables()
    for (hour, version), rows in WIKI.items():  # one publish each: V1's hour 1 stays used, and overshadowed
        path = _write(tmp_path / "deep" / f"wiki-{hour}-{version[:10]}.parquet", rows)
        segment = _segment("wiki", path, _hour(hour), version, len(rows), ["added"])
        assert metadata.commit_segments_and_metadata([segment], "wiki", None, None).success
    pages = _write(tmp_path / "deep" / "pages.parquet", _rows(5, 2, "Yak"), delta=True)
    assert metadata.commit_segments_and_metadata(
        [_segment("pages", pages, _hour(5), V1, 2, ["added", "delta"])], "pages", None, None).success
    return metadata


def _broker(store: MetadataStore, tmp_path: Path, **options: Any) -> Broker:
    return Broker(store, LocalDeepStorage(tmp_path / "deep"), tmp_path / "cache", **{"snapshot_ttl_s": 0, **options})


@pytest.fixture
def broker(store: MetadataStore, tmp_path: Path) -> Broker:
    return _broker(store, tmp_path)


def _segment_id(hour: int, version: str) -> str:
    return str(SegmentId("wiki", _hour(hour), version, 0))


# ----------------------------------------------------------------------------------------------- INFORMATION_SCHEMA


def test_schemata(broker: Broker) -> None:
    rows = broker.sql('SELECT CATALOG_NAME, SCHEMA_NAME FROM INFORMATION_SCHEMA.SCHEMATA ORDER BY 2').rows
    assert rows == [("druid", "INFORMATION_SCHEMA"), ("druid", "druid"), ("druid", "lookup"), ("druid", "sys"),
                    ("druid", "view")]


def test_tables_lists_data_sources_and_system_tables(broker: Broker) -> None:
    rows = broker.sql("SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_TYPE, IS_JOINABLE, IS_BROADCAST "
                      "FROM INFORMATION_SCHEMA.TABLES ORDER BY 1, 2").rows
    assert rows == [
        ("INFORMATION_SCHEMA", "COLUMNS", "SYSTEM_TABLE", "NO", "NO"),
        ("INFORMATION_SCHEMA", "SCHEMATA", "SYSTEM_TABLE", "NO", "NO"),
        ("INFORMATION_SCHEMA", "TABLES", "SYSTEM_TABLE", "NO", "NO"),
        ("druid", "pages", "TABLE", "NO", "NO"),
        ("druid", "wiki", "TABLE", "NO", "NO"),
        *[("sys", name, "SYSTEM_TABLE", "NO", "NO")
          for name in ("segments", "server_segments", "servers", "supervisors", "tasks")],
    ]


def test_columns_of_a_data_source_have_druids_types(broker: Broker) -> None:
    result = broker.sql("""SELECT ORDINAL_POSITION, COLUMN_NAME, IS_NULLABLE, DATA_TYPE, JDBC_TYPE, NUMERIC_PRECISION,
                                  DATETIME_PRECISION, CHARACTER_SET_NAME
                           FROM INFORMATION_SCHEMA.COLUMNS
                           WHERE TABLE_SCHEMA = 'druid' AND TABLE_NAME = 'pages' ORDER BY ORDINAL_POSITION""")
    assert result.rows == [
        (1, "__time", "NO", "TIMESTAMP", 93, None, 3, None),
        (2, "page", "YES", "VARCHAR", 12, None, None, "UTF-16LE"),
        (3, "added", "YES", "BIGINT", -5, 19, None, None),
        (4, "delta", "YES", "FLOAT", 6, 15, None, None),
    ]
    assert result.sql_types[0] == "BIGINT"


def test_columns_of_system_tables_are_listed_too(broker: Broker) -> None:
    rows = broker.sql("SELECT COLUMN_NAME, DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS "
                      "WHERE TABLE_SCHEMA = 'sys' AND TABLE_NAME = 'tasks' AND ORDINAL_POSITION <= 3").rows
    assert rows == [("task_id", "VARCHAR"), ("group_id", "VARCHAR"), ("type", "VARCHAR")]


# ------------------------------------------------------------------------------------------------------ sys tables


def test_sys_segments(broker: Broker) -> None:
    result = broker.sql("""SELECT segment_id, datasource, "start", "end", version, num_rows, is_active,
                                  is_published, is_available, is_realtime, is_overshadowed, num_replicas, dimensions,
                                  metrics, shard_spec, replication_factor
                           FROM sys.segments WHERE datasource = 'wiki' ORDER BY "start", version""")
    expected = []
    for (hour, version), rows in sorted(WIKI.items()):
        overshadowed = (hour, version) == (1, V1)
        expected.append((
            _segment_id(hour, version), "wiki", f"2015-09-12T0{hour}:00:00.000Z", f"2015-09-12T0{hour + 1}:00:00.000Z",
            version, len(rows), int(not overshadowed), 1, int(not overshadowed), 0, int(overshadowed),
            int(not overshadowed), '["page"]', '["added"]', '{"type":"numbered","partitionNum":0,"partitions":0}', -1,
        ))
    assert result.rows == expected
    assert result.columns[:4] == ["segment_id", "datasource", "start", "end"]


def test_sys_segments_joins_with_data(broker: Broker) -> None:
    sql = """SELECT s.datasource, SUM(s.num_rows) AS stored, (SELECT COUNT(*) FROM wiki) AS queried
             FROM sys.segments s WHERE s.is_active = 1 AND s.datasource = 'wiki' GROUP BY 1"""
    assert broker.sql(sql).rows == [("wiki", len(VISIBLE_ROWS), len(VISIBLE_ROWS))]


def test_sys_tasks_and_supervisors_from_the_metadata_store(store: MetadataStore, broker: Broker) -> None:
    store.insert_task("index_kafka_wiki_a", "wiki", "index_kafka", "index_kafka_wiki", {"id": "index_kafka_wiki_a"},
                      {"id": "index_kafka_wiki_a", "status": "RUNNING", "statusCode": "RUNNING", "duration": -1})
    store.insert_task("index_kafka_wiki_b", "wiki", "index_kafka", "index_kafka_wiki", {"id": "index_kafka_wiki_b"},
                      {"id": "index_kafka_wiki_b", "status": "RUNNING", "statusCode": "RUNNING", "duration": -1})
    store.set_task_status("index_kafka_wiki_b", {"id": "index_kafka_wiki_b", "status": "FAILED",
                                                 "statusCode": "FAILED", "duration": 1234, "errorMsg": "boom"}, False)
    spec = {"type": "kafka", "spec": {"ioConfig": {"topic": "edits"}, "dataSchema": {"dataSource": "wiki"}}}
    store.insert_supervisor("wiki", spec)
    store.insert_supervisor("gone", {"type": "kafka", "spec": {"ioConfig": {"topic": "old"}}})
    store.terminate_supervisor("gone", ["gone"])

    tasks = broker.sql("SELECT task_id, group_id, type, datasource, status, runner_status, duration, location, "
                       "plaintext_port, error_msg FROM sys.tasks ORDER BY task_id").rows
    assert tasks == [
        ("index_kafka_wiki_a", "index_kafka_wiki", "index_kafka", "wiki", "RUNNING", "RUNNING", -1, None, -1, None),
        ("index_kafka_wiki_b", "index_kafka_wiki", "index_kafka", "wiki", "FAILED", "NONE", 1234, None, -1, "boom"),
    ]
    supervisors = broker.sql("SELECT supervisor_id, state, detailed_state, healthy, type, source, suspended, spec "
                             "FROM sys.supervisors").rows
    assert supervisors == [("wiki", "RUNNING", "RUNNING", 1, "kafka", "edits", 0, json.dumps(spec, separators=(",", ":")))]


def test_live_state_replaces_what_is_stored(store: MetadataStore, tmp_path: Path) -> None:
    supervisor = {"id": "wiki", "state": "UNHEALTHY_SUPERVISOR", "detailedState": "UNABLE_TO_CONNECT_TO_STREAM",
                  "healthy": False, "type": "kafka", "source": "edits", "suspended": False, "specString": "{}"}
    task = {"id": "t1", "groupId": "g", "type": "index_kafka", "dataSource": "wiki", "statusCode": "RUNNING",
            "runnerStatusCode": "PENDING", "duration": None, "createdTime": "2026-01-01T00:00:00.000Z",
            "location": {"host": "10.0.0.7", "port": 8100, "tlsPort": -1}}
    servers = [Server("10.0.0.5", 8081, "broker"), Server("10.0.0.6", 8090, "overlord", is_leader=True)]
    persist = _write(tmp_path / "task" / "persist-0.parquet", _rows(3, 2, "Fox"))
    # the task's view as a broker apart from it gets it over HTTP from the peon, and one of the node's own task
    views = [replace(_view("wiki", "seq_0", {0: 0}, 2, persist), server="10.0.0.7:8100"),
             _view("wiki", "seq_1", {1: 0}, 1, _write(tmp_path / "own" / "persist-0.parquet", _rows(4, 1, "Gnu")))]
    broker = _broker(store, tmp_path, supervisors=lambda: [supervisor], tasks=lambda: [task], servers=lambda: servers,
                     realtime=lambda: views)

    assert broker.sql("SELECT state, detailed_state, healthy FROM sys.supervisors").rows == [
        ("UNHEALTHY_SUPERVISOR", "UNABLE_TO_CONNECT_TO_STREAM", 0)]
    assert broker.sql("SELECT runner_status, duration, location, host, plaintext_port, created_time "
                      "FROM sys.tasks").rows == [("PENDING", 0, "10.0.0.7:8100", "10.0.0.7", 8100,
                                                  "2026-01-01T00:00:00.000Z")]
    assert broker.sql("SELECT server, host, plaintext_port, tls_port, server_type, is_leader "
                      "FROM sys.servers ORDER BY 1").rows == [
        ("10.0.0.5:8081", "10.0.0.5", 8081, -1, "broker", None), ("10.0.0.6:8090", "10.0.0.6", 8090, -1, "overlord", 1),
        ("10.0.0.7:8100", "10.0.0.7", 8100, -1, "peon", None)]  # where the running task serves its rows
    served = broker.sql("""SELECT servers.server, segments.is_realtime, COUNT(*) FROM sys.segments AS segments
                           INNER JOIN sys.server_segments AS server_segments
                             ON segments.segment_id = server_segments.segment_id
                           INNER JOIN sys.servers AS servers ON servers.server = server_segments.server
                           WHERE segments.datasource = 'wiki' GROUP BY 1, 2 ORDER BY 1, 2""").rows
    # the published segments and the node's own task's rows from the broker, the peon's rows from the peon
    assert served == [("10.0.0.5:8081", 0, 3), ("10.0.0.5:8081", 1, 1), ("10.0.0.7:8100", 1, 1)]


def test_announced_nodes_are_the_default_servers(store: MetadataStore, broker: Broker) -> None:
    store.announce("broker", "127.0.0.1", 8082, {})
    store.announce("worker", "127.0.0.1", 8091, {})
    assert broker.sql("SELECT server, server_type FROM sys.servers ORDER BY 1").rows == [
        ("127.0.0.1:8082", "broker"), ("127.0.0.1:8091", "middle_manager")]


def test_unknown_system_table(broker: Broker) -> None:
    with pytest.raises(SqlError) as caught:
        broker.sql("SELECT * FROM sys.lookups")
    assert (caught.value.status, caught.value.error_message) == (
        400, "Object 'lookups' not found within 'sys' (line [1], column [19])")


# ------------------------------------------------------------------------------------------ pruning and realtime


def test_only_segments_overlapping_the_query_are_read(broker: Broker, tmp_path: Path) -> None:
    (tmp_path / "deep" / "wiki-2-2026-01-01.parquet").unlink()  # hour 2 is gone: reading it would fail
    rows = broker.sql("SELECT page, COUNT(*) FROM wiki WHERE __time < TIMESTAMP '2015-09-12 02:00:00' "
                      "GROUP BY 1 ORDER BY 1").rows
    assert rows == [("Cat", 3), ("Owl", 5)]
    with pytest.raises(SqlError) as caught:
        broker.sql("SELECT COUNT(*) FROM wiki")
    assert caught.value.status == 500
    assert caught.value.error_message.startswith("Segment files could not be read, even on 4 fresh snapshots")


def test_explain_shows_the_intervals_and_files_read(broker: Broker) -> None:
    result = broker.sql("EXPLAIN PLAN FOR SELECT COUNT(*) FROM wiki WHERE __time >= TIMESTAMP '2015-09-12 01:30:00'")
    assert result.columns == ["PLAN", "RESOURCES", "ATTRIBUTES"]
    plan, resources, attributes = result.rows[0]
    (entry,) = json.loads(plan)
    assert entry["query"]["dataSources"] == {
        "wiki": {"intervals": ["2015-09-12T01:30:00.000Z/9999-12-31T23:59:59.999Z"], "files": 2}}
    assert entry["signature"] == [{"name": "EXPR$0", "type": "LONG"}]
    assert json.loads(resources) == [{"name": "wiki", "type": "DATASOURCE"}]
    assert json.loads(attributes) == {"statementType": "SELECT"}


def test_a_query_matching_no_segment_still_knows_the_columns(broker: Broker) -> None:
    result = broker.sql("SELECT page, added FROM wiki WHERE __time >= TIMESTAMP '2016-01-01 00:00:00'")
    assert (result.columns, result.rows) == (["page", "added"], [])


def _view(source: str, sequence: str, start: dict[int, int], progress: int, *files: Path) -> RealtimeView:
    return RealtimeView(source, sequence, start, progress, tuple(str(f) for f in files))


def test_realtime_pieces_are_read_with_the_segments(store: MetadataStore, tmp_path: Path) -> None:
    fresh = _rows(3, 2, "Fox")
    piece = _write(tmp_path / "task" / "persist-0.parquet", fresh)
    news = _write(tmp_path / "task" / "news.parquet", _rows(4, 1, "Gnu"))
    views = [_view("wiki", "index_kafka_wiki_a", {0: 0}, 2, piece),
             _view("news", "index_kafka_news_a", {0: 0}, 1, news)]
    broker = _broker(store, tmp_path, realtime=lambda: views)

    assert broker.sql("SELECT COUNT(*), SUM(added) FROM wiki").rows == [
        (len(VISIBLE_ROWS) + 2, sum(r["added"] for r in VISIBLE_ROWS + fresh))]
    assert broker.sql("SELECT page FROM news").rows == [("Gnu",)]
    # the piece holds hour 3 only (its footer says so): a query before it does not read it
    (plan,) = broker.sql("EXPLAIN PLAN FOR SELECT COUNT(*) FROM wiki WHERE __time < TIMESTAMP '2015-09-12 03:00:00'"
                         ).rows[0][:1]
    assert json.loads(plan)[0]["query"]["dataSources"]["wiki"]["files"] == 3
    assert broker.sql("SELECT COUNT(*) FROM wiki WHERE __time >= TIMESTAMP '2015-09-12 03:10:00'").rows == [(1,)]


def test_a_piece_handed_off_mid_query_is_retried_on_a_fresh_snapshot(store: MetadataStore, tmp_path: Path) -> None:
    piece = _write(tmp_path / "task" / "persist-0.parquet", _rows(3, 2, "Fox"))
    calls = []

    def realtime() -> list[RealtimeView]:
        calls.append(1)
        return [_view("wiki", "index_kafka_wiki_a", {0: 0}, 2, piece)] if len(calls) == 1 else []

    piece.unlink()  # handed off and deleted after the first listing
    broker = _broker(store, tmp_path, realtime=realtime)
    assert broker.sql("SELECT COUNT(*) FROM wiki").rows == [(len(VISIBLE_ROWS),)]
    assert len(calls) == 2


def test_task_groups_handing_off_one_after_the_other_are_each_retried(store: MetadataStore, tmp_path: Path) -> None:
    """Two task groups that rolled over together publish milliseconds apart: the fresh snapshot taken after the
    first publish still lists the second group's piece, which is gone by the time it is read (the freshness
    benchmark's poll once failed so)."""
    pieces = [_write(tmp_path / group / "persist-0.parquet", _rows(3, 2, "Fox")) for group in ("a", "b")]
    listings = [[_view("wiki", f"index_kafka_wiki_{g}", {0: 0}, 2, p) for g, p in zip("ab", pieces)],
                [_view("wiki", "index_kafka_wiki_b", {0: 0}, 2, pieces[1])], []]
    calls = []

    def realtime() -> list[RealtimeView]:
        calls.append(1)
        return listings[min(len(calls), len(listings)) - 1]

    for piece in pieces:
        piece.unlink()
    broker = _broker(store, tmp_path, realtime=realtime)
    assert broker.sql("SELECT COUNT(*) FROM wiki").rows == [(len(VISIBLE_ROWS),)]
    assert len(calls) == 3


def test_sys_segments_lists_what_running_tasks_serve_as_realtime_segments(store: MetadataStore, tmp_path: Path) -> None:
    store.reset_stream_offsets("wiki", StreamOffsets("edits", {0: 100, 1: 40}))
    first, second = _rows(3, 2, "Fox"), _rows(4, 1, "Gnu")
    files = [_write(tmp_path / "r2" / "0.parquet", first), _write(tmp_path / "r2" / "1.parquet", second)]
    views = [
        _view("wiki", "index_kafka_wiki_b", {0: 100, 1: 40}, 3, *files),
        _view("wiki", "index_kafka_wiki_b", {0: 100, 1: 40}, 2, files[0]),  # a replica behind: not served
        # the group before it: its publish moved the committed offsets to where b starts, so segments hold its rows
        _view("wiki", "index_kafka_wiki_a", {0: 60, 1: 40}, 40, _write(tmp_path / "a" / "0.parquet", _rows(6, 9, "X"))),
    ]
    broker = _broker(store, tmp_path, realtime=lambda: views)

    realtime = broker.sql("""SELECT segment_id, datasource, "start", "end", size, version, partition_num, num_replicas,
                                    num_rows, is_active, is_published, is_available, is_realtime, is_overshadowed,
                                    shard_spec FROM sys.segments WHERE is_realtime = 1""").rows
    assert realtime == [("index_kafka_wiki_b", "wiki", "2015-09-12T03:00:00.000Z", "2015-09-12T04:00:00.001Z",
                         sum(f.stat().st_size for f in files), None, None, 1, 3, 1, 0, 1, 1, 0, None)]
    active = "SELECT SUM(num_rows) FROM sys.segments WHERE is_active = 1 AND datasource = 'wiki'"
    assert broker.sql(active).rows == broker.sql("SELECT COUNT(*) FROM wiki").rows == [(len(VISIBLE_ROWS) + 3,)]


def test_snapshot_is_kept_for_its_ttl(store: MetadataStore, tmp_path: Path) -> None:
    cached = _broker(store, tmp_path, snapshot_ttl_s=3600)
    assert cached.sql("SELECT COUNT(*) FROM wiki").rows == [(len(VISIBLE_ROWS),)]
    path = _write(tmp_path / "deep" / "wiki-6.parquet", _rows(6, 7, "Ant"))
    assert store.commit_segments_and_metadata(
        [_segment("wiki", path, _hour(6), V1, 7, ["added"])], "wiki", None, None).success
    assert cached.sql("SELECT COUNT(*) FROM wiki").rows == [(len(VISIBLE_ROWS),)]
    assert _broker(store, tmp_path).sql("SELECT COUNT(*) FROM wiki").rows == [(len(VISIBLE_ROWS) + 7,)]


# ------------------------------------------------------------------------------------- a broker apart from the overlord


def test_a_broker_node_asks_the_overlord_it_discovers_and_shows_the_stored_state_without_one(
        store: MetadataStore, tmp_path: Path) -> None:
    """The overlord lists supervisors and tasks (with where they run); the task's peon, found through that list, tells
    what it has persisted. Here one small app plays overlord and peon."""
    spec = {"type": "kafka", "spec": {"ioConfig": {"topic": "edits"}, "dataSchema": {"dataSource": "wiki"}}}
    store.insert_supervisor("wiki", spec)
    persisted = _write(tmp_path / "peon" / "persist-0.parquet", _rows(3, 2, "Fox"))
    port = free_port()
    overlord = FastAPI()
    task_id = "index_kafka_wiki_a_abcdefgh"

    @overlord.get("/druid/indexer/v1/supervisor")
    def supervisors(system: str) -> list[dict[str, Any]]:  # noqa: ARG001 - Druid's ?system
        return [{"id": "wiki", "state": "UNHEALTHY_SUPERVISOR", "detailedState": "UNABLE_TO_CONNECT_TO_STREAM",
                 "healthy": False, "type": "kafka", "source": "edits", "suspended": False, "specString": "{}"}]

    @overlord.get("/druid/indexer/v1/tasks")
    def tasks() -> list[dict[str, Any]]:
        return [{"id": task_id, "groupId": "index_kafka_wiki", "type": "index_kafka", "dataSource": "wiki",
                 "statusCode": "RUNNING", "runnerStatusCode": "RUNNING", "duration": -1,
                 "location": {"host": "127.0.0.1", "port": port, "tlsPort": -1}}]

    @overlord.get(f"/druid/worker/v1/chat/{task_id}/realtime")
    def realtime() -> list[dict[str, Any]]:
        return [_view("wiki", "index_kafka_wiki_a_0", {0: 0}, 2, persisted).to_json()]

    @overlord.get(f"/druid/worker/v1/chat/{task_id}/realtime/file")
    def realtime_file(path: str) -> FileResponse:  # the peon sends its persist file to the broker's copy
        return FileResponse(path)

    server = HttpServer(overlord, "127.0.0.1", port)
    server.start()
    store.announce("overlord", "127.0.0.1", port, {})
    node = Node(NodeConfig(port=free_port(), work_dir=tmp_path / "broker", metadata_uri=store.uri, role=Role.BROKER,
                           deep_storage=(tmp_path / "deep").as_uri()))
    node.start()
    try:
        with httpx.Client(base_url=node.config.url) as client:
            def query(sql: str) -> list[list[Any]]:
                response = client.post("/druid/v2/sql", json={"query": sql, "resultFormat": "array"})
                assert response.status_code == 200, response.text
                return response.json()

            assert query("SELECT state, detailed_state, healthy FROM sys.supervisors") == [
                ["UNHEALTHY_SUPERVISOR", "UNABLE_TO_CONNECT_TO_STREAM", 0]]
            assert query("SELECT task_id, location FROM sys.tasks") == [[task_id, f"127.0.0.1:{port}"]]
            assert query("SELECT COUNT(*) FROM wiki") == [[len(VISIBLE_ROWS) + 2]]
            copies = tmp_path / "broker" / "realtime-cache"
            assert len(list(copies.glob("*/*.parquet"))) == 1  # the persist file, copied over the chat API

            store.unannounce("overlord", "127.0.0.1", port)
            assert query("SELECT state, detailed_state, healthy FROM sys.supervisors") == [["RUNNING", "RUNNING", 1]]
            time.sleep(0.6)  # the broker's snapshot, views included, lives half a second
            assert query("SELECT COUNT(*) FROM wiki") == [[len(VISIBLE_ROWS)]]
            assert list(copies.glob("*/*.parquet")) == []  # no view lists it any more
    finally:
        node.stop()
        server.stop()


def test_a_loaded_data_source_answers_published_rows_and_the_files_answer_with_realtime_ones(
        store: MetadataStore, tmp_path: Path) -> None:
    """Once a data source's segments are loaded into DuckDB's storage, queries over published rows are answered there
    (same answers); a query that meets realtime rows is answered from the files, which hold them."""
    fresh = _rows(3, 2, "Fox")
    views: list[RealtimeView] = []
    loaded = LoadedDataSources({"threads": 1}, settle_s=0.0)
    broker = _broker(store, tmp_path, realtime=lambda: views, loaded=loaded)
    try:
        assert broker.load_status() == {"wiki": 0.0, "pages": 0.0}  # asked for now, loaded in the background
        wait = time.monotonic() + 30
        while broker.load_status() != {"wiki": 100.0, "pages": 100.0}:
            assert time.monotonic() < wait, broker.load_status()
            time.sleep(0.05)
        sql = "SELECT page, COUNT(*) AS n, SUM(added) AS added FROM wiki GROUP BY page ORDER BY page"
        plan = json.loads(broker.sql(f"EXPLAIN PLAN FOR {sql}").rows[0][0])[0]["query"]["physicalPlan"]
        assert "READ_PARQUET" not in plan.upper() and "PARQUET_SCAN" not in plan.upper()  # the loaded table
        assert broker.sql(sql).rows == [("Cat", 3, 3), ("Emu", 4, 806), ("Owl", 5, 510)]

        views.append(_view("wiki", "index_kafka_wiki_a_0", {0: 0}, 2, _write(tmp_path / "task" / "0.parquet", fresh)))
        assert broker.sql(sql).rows == [("Cat", 3, 3), ("Emu", 4, 806), ("Fox", 2, 601), ("Owl", 5, 510)]
        plan = json.loads(broker.sql(f"EXPLAIN PLAN FOR {sql}").rows[0][0])[0]["query"]["physicalPlan"]
        assert "PARQUET" in plan.upper()
    finally:
        loaded.stop()
