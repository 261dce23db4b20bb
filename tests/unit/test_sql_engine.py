"""The engine's own duties: timeouts, the locked-down DuckDB connection, parameters, result types, and the limits a
broker node sets."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import duckdb
import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.engine import ClippedFile, SqlEngine, bind_parameters, lock_down
from sluice.broker.sql.translate import SqlError
from sluice.dev import free_port
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.server.node import Node, NodeConfig
from sluice.server.roles import Role


@pytest.fixture
def segment(tmp_path: Path) -> str:
    """3,000 rows, one a second from midnight, enough to make a triple self-join run for minutes."""
    seconds = [datetime(2024, 1, 1, i // 3600, i // 60 % 60, i % 60) for i in range(3000)]
    times = pa.array(seconds, pa.timestamp("us", tz="UTC"))
    path = str(tmp_path / "segment.parquet")
    pq.write_table(pa.table({"__time": times, "n": pa.array(range(3000), pa.int64())}), path)
    return path


def test_query_past_its_timeout_is_interrupted(segment: str) -> None:
    sql = "SELECT COUNT(*) FROM t AS a, t AS b, t AS c WHERE MOD(a.n * b.n + c.n, 7919) = 7918"
    started = time.monotonic()
    with pytest.raises(SqlError) as caught:
        SqlEngine(threads=1).execute(sql, {"t": [segment]}, context={"timeout": 200})
    assert time.monotonic() - started < 10
    assert caught.value.status == 504
    assert caught.value.to_json() == {
        "error": "Query timeout",
        "errorCode": "legacyQueryException",
        "persona": "OPERATOR",
        "category": "TIMEOUT",
        "errorMessage": "Query did not complete within configured timeout period. "
        "You can increase query timeout or tune the performance of query.",
        "errorClass": "org.apache.druid.query.QueryTimeoutException",
        "host": None,
        "context": {},
    }


def test_a_shorter_timeout_that_comes_while_a_longer_one_runs_still_interrupts_on_time(segment: str) -> None:
    """One watchdog thread times every query: it must wake earlier for a query that comes with an earlier deadline
    than the one it sleeps towards, and leave the other query running."""
    engine = SqlEngine(threads=1)
    outcome: list[SqlError] = []

    def long_timeout() -> None:
        try:
            engine.execute(SLOW, {"t": [segment]}, context={"sqlQueryId": "q-long", "timeout": 60_000})
        except SqlError as error:
            outcome.append(error)

    worker = threading.Thread(target=long_timeout)
    worker.start()
    time.sleep(0.3)
    started = time.monotonic()
    with pytest.raises(SqlError) as caught:
        engine.execute(SLOW, {"t": [segment]}, context={"timeout": 300})
    assert caught.value.status == 504 and time.monotonic() - started < 10
    assert worker.is_alive() and not outcome  # its own deadline is a minute away
    assert engine.cancel("q-long")
    worker.join(10)
    assert [error.error for error in outcome] == ["Query cancelled"]


def test_a_query_within_its_timeout_answers(segment: str) -> None:
    sql = "SELECT COUNT(*), MAX(__time) FROM t"
    result = SqlEngine(threads=1).execute(sql, {"t": [segment]}, context={"timeout": 60_000})
    assert result.rows == [(3000, datetime(2024, 1, 1, 0, 49, 59))]


def test_locked_down_connection_reads_its_segments_and_nothing_else(segment: str, tmp_path: Path) -> None:
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1]}), str(other))
    conn = duckdb.connect()
    lock_down(conn, {"t": [segment]})

    assert conn.execute("SELECT COUNT(*) FROM t").fetchall() == [(3000,)]
    with pytest.raises(duckdb.PermissionException):
        conn.execute(f"SELECT * FROM read_parquet('{other}')")
    with pytest.raises(duckdb.PermissionException):
        conn.execute(f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'")
    with pytest.raises(duckdb.InvalidInputException, match="locked"):
        conn.execute("SET enable_external_access = true")
    assert not (tmp_path / "out.csv").exists()


def test_data_source_without_segments_does_not_exist_yet(segment: str) -> None:
    with pytest.raises(SqlError, match="Object 'fresh' not found"):
        SqlEngine().execute("SELECT * FROM fresh", {"fresh": [], "t": [segment]})


@pytest.mark.parametrize(
    ("parameter", "value"),
    [
        ({"type": "VARCHAR", "value": "bar"}, "bar"),
        ({"type": "BIGINT", "value": "7"}, 7),
        ({"type": "DOUBLE", "value": 2}, 2.0),
        ({"type": "BOOLEAN", "value": "true"}, True),
        ({"type": "TIMESTAMP", "value": "2015-09-12 00:47:53"}, datetime(2015, 9, 12, 0, 47, 53)),
        ({"type": "TIMESTAMP", "value": "2015-09-12T02:47:53+02:00"}, datetime(2015, 9, 12, 0, 47, 53)),
        ({"type": "TIMESTAMP", "value": 1442018873000}, datetime(2015, 9, 12, 0, 47, 53)),
        ({"type": "ARRAY", "value": [999.0, None, 5.5]}, [999.0, None, 5.5]),
        ({"type": "VARCHAR", "value": None}, None),
    ],
)
def test_druid_parameters_become_values(parameter: dict, value: object) -> None:
    assert bind_parameters([parameter], 1) == [value]


def test_result_types_are_druids() -> None:
    sql = """SELECT 1, 1.5, CAST(1 AS DOUBLE), CAST(1 AS FLOAT), 'x', TRUE, DATE '2020-01-01', ARRAY['a'],
                    TIME_PARSE('2020-01-01')"""
    result = SqlEngine().execute(sql, {})
    assert list(zip(result.druid_types, result.sql_types)) == [
        ("LONG", "INTEGER"),
        ("DOUBLE", "DECIMAL"),
        ("DOUBLE", "DOUBLE"),
        ("FLOAT", "FLOAT"),
        ("STRING", "VARCHAR"),
        ("LONG", "BOOLEAN"),
        ("LONG", "DATE"),
        ("ARRAY<STRING>", "ARRAY"),
        ("LONG", "TIMESTAMP"),
    ]
    assert result.rows[0][1] == 1.5 and isinstance(result.rows[0][1], float)


SLOW = "SELECT COUNT(*) FROM t AS a, t AS b, t AS c WHERE MOD(a.n * b.n + c.n, 7919) = 7918"


def test_a_running_query_is_cancelled_by_its_sql_query_id(segment: str) -> None:
    engine = SqlEngine(threads=1)
    outcome: list[Exception] = []

    def run() -> None:
        try:
            engine.execute(SLOW, {"t": [segment]}, context={"sqlQueryId": "q-7", "timeout": 60_000})
        except SqlError as error:
            outcome.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 10
    while not engine.cancel("q-7") and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.join(10)
    assert not worker.is_alive()
    (error,) = outcome
    assert (error.status, error.error, error.category, error.error_message) == (
        500, "Query cancelled", "CANCELED", "Query [q-7] was cancelled")
    assert error.error_class == "org.apache.druid.query.QueryInterruptedException"
    assert not engine.cancel("q-7")


def test_a_result_larger_than_the_row_limit_is_refused(segment: str) -> None:
    engine = SqlEngine(threads=1, max_result_rows=100)
    assert len(engine.execute("SELECT n FROM t LIMIT 100", {"t": [segment]}).rows) == 100
    with pytest.raises(SqlError) as caught:
        engine.execute("SELECT n FROM t", {"t": [segment]})
    assert (caught.value.status, caught.value.error) == (400, "Resource limit exceeded")
    assert caught.value.error_message.startswith("Query returned more than the 100 rows a query may return")


def test_a_query_over_the_memory_limit_is_refused(segment: str) -> None:
    engine = SqlEngine(threads=1, memory_limit="10MB")
    with pytest.raises(SqlError) as caught:
        engine.execute("SELECT a.n, LIST(b.n) FROM t a, t b GROUP BY a.n", {"t": [segment]})
    assert (caught.value.status, caught.value.error) == (400, "Resource limit exceeded")
    assert "memory" in caught.value.error_message


def test_the_kept_database_of_a_file_set_stays_locked_down(segment: str, tmp_path: Path) -> None:
    engine = SqlEngine(threads=1)
    assert engine.execute("SELECT COUNT(*) FROM t", {"t": [segment]}).rows == [(3000,)]
    # the database the next query of this file set uses, with the Python functions registered after its lock-down
    cursor = engine._cursor({"t": [segment]}, python_functions=True)  # noqa: SLF001
    with pytest.raises(duckdb.PermissionException):
        cursor.execute(f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'")
    with pytest.raises(duckdb.InvalidInputException, match="locked"):
        cursor.execute("SET enable_external_access = true")
    assert engine.execute("SELECT MAX(n) FROM t", {"t": [segment]}).rows == [(2999,)]


def test_the_python_functions_are_registered_once_a_query_calls_one(segment: str) -> None:
    """Registering them costs more than a small query, and most file sets (a streaming task's persists) never see
    a query that calls one."""
    engine = SqlEngine(threads=1)
    registered = "SELECT COUNT(*) FROM duckdb_functions() WHERE function_name IN ('DS_HLL', 'IPV6_MATCH')"

    def functions_of_the_kept_database() -> int:
        cursor = engine._cursor({"t": [segment]}, python_functions=False)  # noqa: SLF001
        return cursor.execute(registered).fetchone()[0]

    assert engine.execute("SELECT COUNT(*) FROM t", {"t": [segment]}).rows == [(3000,)]
    assert functions_of_the_kept_database() == 0
    sketch = "SELECT HLL_SKETCH_ESTIMATE(DS_HLL(n), TRUE) FROM t WHERE n < 10"
    assert engine.execute(sketch, {"t": [segment]}).rows == [(10.0,)]
    assert functions_of_the_kept_database() == 2


def test_timestamps_come_back_in_the_session_time_zone(segment: str) -> None:
    result = SqlEngine(threads=1).execute("SELECT MIN(__time), CAST(MIN(__time) AS DATE) FROM t", {"t": [segment]},
                                          context={"sqlTimeZone": "Asia/Tokyo"})
    tokyo = ZoneInfo("Asia/Tokyo")
    assert result.rows == [(datetime(2024, 1, 1, 9, tzinfo=tokyo), datetime(2024, 1, 1, tzinfo=tokyo))]
    assert result.sql_types == ["TIMESTAMP", "DATE"]


def test_files_storing_time_without_a_zone_read_the_same(tmp_path: Path) -> None:
    """Segments that store `__time` as a plain TIMESTAMP (no UTC adjustment) need no conversion in the view."""
    naive = str(tmp_path / "naive.parquet")
    moments = [datetime(2024, 1, 1, 0, 0, s) for s in range(3)]
    pq.write_table(pa.table({"__time": pa.array(moments, pa.timestamp("ms")), "n": [1, 2, 3]}), naive)
    adjusted = str(tmp_path / "adjusted.parquet")
    later = [datetime(2024, 1, 2, tzinfo=UTC)]
    pq.write_table(pa.table({"__time": pa.array(later, pa.timestamp("ms", tz="UTC")), "n": [4]}), adjusted)
    result = SqlEngine(threads=1).execute("SELECT __time, n FROM t ORDER BY n", {"t": [naive, adjusted]})
    assert result.rows == [*zip(moments, [1, 2, 3]), (datetime(2024, 1, 2), 4)]
    assert result.sql_types == ["TIMESTAMP", "BIGINT"]


def _minutes(start: int, end: int) -> Interval:
    return Interval(datetime(2024, 1, 1, start // 60, start % 60, tzinfo=UTC),
                    datetime(2024, 1, 1, end // 60, end % 60, tzinfo=UTC))


def test_a_clipped_file_shows_only_its_rows_within_its_intervals(segment: str, tmp_path: Path) -> None:
    """Minutes 10–20 and 40–45 of `segment` (a row a second), beside a whole file storing `__time` without a zone."""
    naive = str(tmp_path / "naive.parquet")
    moments = [datetime(2024, 1, 1, 0, 30, s) for s in range(10)]
    pq.write_table(pa.table({"__time": pa.array(moments, pa.timestamp("ms")), "n": pa.array([1] * 10)}), naive)
    clipped = ClippedFile(segment, (_minutes(10, 20), _minutes(40, 45)))
    sql = "SELECT COUNT(*), SUM(n), MIN(__time), MAX(__time) FROM t"
    result = SqlEngine(threads=1).execute(sql, {"t": [clipped, naive]})
    kept = [*range(600, 1200), *range(2400, 2700)]
    assert result.rows == [(900 + 10, sum(kept) + 10, datetime(2024, 1, 1, 0, 10), datetime(2024, 1, 1, 0, 44, 59))]

    only_naive = SqlEngine(threads=1).execute(sql, {"t": [ClippedFile(naive, (_minutes(30, 31),))]}).rows
    assert only_naive == [(10, 10, moments[0], moments[-1])]
    assert SqlEngine(threads=1).execute(sql, {"t": [ClippedFile(naive, (_minutes(31, 32),))]}).rows == [
        (0, None, None, None)]


def test_one_file_clipped_differently_answers_differently_from_the_kept_databases(segment: str) -> None:
    engine = SqlEngine(threads=1)
    count = "SELECT COUNT(*) FROM t"
    assert engine.execute(count, {"t": [ClippedFile(segment, (_minutes(0, 1),))]}).rows == [(60,)]
    assert engine.execute(count, {"t": [ClippedFile(segment, (_minutes(0, 2),))]}).rows == [(120,)]
    assert engine.execute(count, {"t": [segment]}).rows == [(3000,)]
    assert engine.execute(count, {"t": [ClippedFile(segment, (_minutes(0, 1),))]}).rows == [(60,)]


def test_a_locked_down_connection_over_a_clipped_file_reads_nothing_else(segment: str, tmp_path: Path) -> None:
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1]}), str(other))
    conn = duckdb.connect()
    lock_down(conn, {"t": [ClippedFile(segment, (_minutes(0, 1),))]})

    assert conn.execute("SELECT COUNT(*) FROM t").fetchall() == [(60,)]
    with pytest.raises(duckdb.PermissionException):
        conn.execute(f"SELECT * FROM read_parquet('{other}')")
    with pytest.raises(duckdb.InvalidInputException, match="locked"):
        conn.execute("SET enable_external_access = true")


def test_a_file_gone_since_the_files_were_chosen_is_reported_as_gone_not_as_a_user_error(segment: str) -> None:
    engine = SqlEngine(threads=1)
    assert engine.execute("SELECT COUNT(*) FROM t", {"t": [segment]}).rows == [(3000,)]
    Path(segment).unlink()  # a realtime persist handed off, or a segment dropped, between two queries
    with pytest.raises(SqlError) as caught:
        engine.execute("SELECT COUNT(*) FROM t", {"t": [segment]})
    assert caught.value.status == 500 and f"Segment file {segment} no longer exists" in str(caught.value.to_json())


def test_a_broker_node_refuses_a_result_over_its_max_query_rows_with_druids_error(segment: str, tmp_path: Path) -> None:
    """NodeConfig.max_query_rows (`--max-query-rows`) reaches the engine; the refusal is Druid's error JSON, a 400."""
    config = NodeConfig(port=free_port(), work_dir=tmp_path / "broker", role=Role.BROKER, max_query_rows=2_999,
                        deep_storage=tmp_path.as_uri())  # where the segment file is
    node = Node(config)
    node.start()
    try:
        day = Interval(datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 2, tzinfo=UTC))
        segment_id = SegmentId("t", day, "v1", 0)
        assert node.metadata.commit_segments_and_metadata([DataSegment(
            id=segment_id, dimensions=[], metrics=["n"], aggregators=[], shard_spec=numbered_shard_spec(0),
            num_rows=3000, size=Path(segment).stat().st_size, load_spec={"type": "local", "path": segment})],
            "t", None, None).success
        with httpx.Client(base_url=config.url) as client:
            refused = client.post("/druid/v2/sql", json={"query": "SELECT n FROM t"})
            assert refused.status_code == 400
            assert refused.json() == {
                "error": "Resource limit exceeded",
                "errorCode": "legacyQueryException",
                "persona": "OPERATOR",
                "category": "CAPACITY_EXCEEDED",
                "errorMessage": "Query returned more than the 2999 rows a query may return (the broker's "
                                "--max-query-rows); add a LIMIT or a narrower WHERE clause",
                "errorClass": "org.apache.druid.query.ResourceLimitExceededException",
                "host": None,
                "context": {},
            }
            answered = client.post("/druid/v2/sql", json={"query": "SELECT n FROM t LIMIT 2999"})
            assert answered.status_code == 200 and len(answered.json()) == 2_999
    finally:
        node.stop()

