"""Query control on a broker node over real HTTP: the timeout a query runs under (druid.server.http.defaultQueryTimeout
and maxQueryTimeout), how many queries run at once (druid.query.scheduler.numThreads, 429 past it), and the request
body limit (413)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.errors import SqlError
from sluice.broker.scheduler import QueryLimits, QueryScheduler
from sluice.config import ConfigError
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.server.node import Node, NodeConfig
from sluice.server.roles import Role

#: a triple self-join over 3,000 rows: runs for minutes unless its timeout stops it
SLOW = "SELECT COUNT(*) AS n FROM t AS a, t AS b, t AS c WHERE MOD(a.n * b.n + c.n, 7919) = 7918"


def test_the_timeout_a_query_runs_under() -> None:
    capped = QueryLimits(default_timeout_ms=300_000, max_timeout_ms=2_000)
    assert QueryLimits().context({}) == {"timeout": 300_000}
    assert QueryLimits().context({"timeout": 0}) == {"timeout": 0}  # Druid: no timeout, when no cap is set
    assert capped.context({}) == {"timeout": 2_000}  # the default, at most the cap
    assert capped.context({"timeout": 0, "x": 1}) == {"timeout": 2_000, "x": 1}  # "none" is the cap
    assert capped.context({"timeout": "1500"}) == {"timeout": 1_500}
    for context, message in (({"timeout": 5_000}, "Configured timeout = 5000 is more than enforced limit of 2000."),
                             ({"timeout": -1}, "Timeout must be a non negative value, but was [-1]"),
                             ({"timeout": "abc"}, "must be a number"), ({"timeout": True}, "must be a number")):
        with pytest.raises(SqlError) as refused:
            capped.context(context)
        assert refused.value.status == 400 and message in str(refused.value)
    assert capped.context("not an object") == "not an object"  # left to the query's own validation


def test_query_limits_are_read_from_druids_keys() -> None:
    assert QueryLimits.from_properties({}) == QueryLimits()
    assert QueryLimits.from_properties({"druid.server.http.defaultQueryTimeout": "1000",
                                        "druid.server.http.maxQueryTimeout": "60000",
                                        "druid.query.scheduler.numThreads": "4"}) == QueryLimits(1_000, 60_000, 4)
    with pytest.raises(ConfigError, match=r"druid.query.scheduler.numThreads: \[0\] must be at least 1"):
        QueryLimits.from_properties({"druid.query.scheduler.numThreads": "0"})


def test_hilo_laning_keeps_low_priority_queries_to_their_share_of_the_slots() -> None:
    """Druid's QuerySchedulerTest: 5 slots, 40% for the low lane, so 2 (rounded up)."""
    limits = QueryLimits.from_properties({"druid.query.scheduler.numThreads": "5",
                                          "druid.query.scheduler.laning.strategy": "hilo",
                                          "druid.query.scheduler.laning.maxLowPercent": "40"})
    assert (limits.max_running, limits.low_lane_capacity) == (5, 2)
    scheduler = QueryScheduler(limits)
    with ExitStack() as held:
        for _ in range(2):
            held.enter_context(scheduler.running({"priority": -1}))
        with pytest.raises(SqlError) as refused, scheduler.running({"priority": "-5"}):
            pass
        assert (refused.value.status, refused.value.error_message) == (
            429, "Too many concurrent queries for lane 'low', query capacity of 2 exceeded. "
                 "Please try your query again later.")
        for context in ({}, {"priority": 10}, None):  # interactive queries take the other slots
            held.enter_context(scheduler.running(context))
        with pytest.raises(SqlError) as refused, scheduler.running({}):
            pass
        assert refused.value.error_message.startswith("Too many concurrent queries, total query capacity of 5")
    with scheduler.running({"priority": -1}), scheduler.running({"priority": -1}):  # every slot was given back
        pass
    for unlaned in (scheduler, QueryScheduler()):  # a priority is read as Druid reads it, laning or not
        with unlaned.running({"priority": 1.0}), unlaned.running({"priority": " 7"}):
            pass
        with pytest.raises(SqlError, match=r"\[priority\] must be a number"), unlaned.running({"priority": "high"}):
            pass


@pytest.mark.parametrize(("properties", "message"), [
    ({"druid.query.scheduler.laning.strategy": "manual"}, "druid.query.scheduler.laning.strategy: [manual] is not"),
    ({"druid.query.scheduler.laning.strategy": "hilo", "druid.query.scheduler.laning.maxLowPercent": "10"},
     "druid.query.scheduler.laning.strategy: hilo shares out druid.query.scheduler.numThreads"),
    ({"druid.query.scheduler.numThreads": "4", "druid.query.scheduler.laning.strategy": "hilo"},
     "druid.query.scheduler.laning.maxLowPercent: a percentage"),
    ({"druid.query.scheduler.numThreads": "4", "druid.query.scheduler.laning.strategy": "hilo",
      "druid.query.scheduler.laning.maxLowPercent": "101"}, "druid.query.scheduler.laning.maxLowPercent: a percentage"),
])
def test_laning_settings_that_cannot_work_are_refused_by_key(properties: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        QueryLimits.from_properties(properties)
    assert str(refused.value).startswith(message)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Node]:
    """A broker node with one data source `t` of 3,000 rows, one query at a time, timeouts capped at 2 s and request
    bodies at 10 kB."""
    path = tmp_path / "t.parquet"
    seconds = [datetime(2024, 1, 1, i // 3600, i // 60 % 60, i % 60, tzinfo=UTC) for i in range(3000)]
    pq.write_table(pa.table({"__time": pa.array(seconds, pa.timestamp("us", tz="UTC")),
                             "n": pa.array(range(3000), pa.int64())}), path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    node = Node(NodeConfig(port=port, work_dir=tmp_path / "broker", role=Role.BROKER, deep_storage=tmp_path.as_uri(),
                           query_limits=QueryLimits(default_timeout_ms=300_000, max_timeout_ms=2_000, max_running=1),
                           max_request_bytes=10_000, load_max_rows=0))
    node.start()
    day = Interval(datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 2, tzinfo=UTC))
    assert node.metadata.commit_segments_and_metadata([DataSegment(
        id=SegmentId("t", day, "v1", 0), dimensions=[], metrics=["n"], aggregators=[],
        shard_spec=numbered_shard_spec(0), num_rows=3000, size=path.stat().st_size,
        load_spec={"type": "local", "path": str(path)})], "t", None, None).success
    yield node
    node.stop()


def post(node: Node, path: str, body: Any) -> httpx.Response:
    return httpx.post(node.config.url + path, json=body, timeout=60)


def test_a_broker_enforces_its_timeouts_its_capacity_and_its_body_limit(broker: Node) -> None:
    too_long = post(broker, "/druid/v2/sql", {"query": "SELECT 1 AS x", "context": {"timeout": 5_000}})
    assert too_long.status_code == 400
    assert too_long.json()["errorMessage"] == "Configured timeout = 5000 is more than enforced limit of 2000."
    native = {"queryType": "timeseries", "dataSource": "t", "granularity": "all", "intervals": ["2024/2025"],
              "aggregations": [{"type": "count", "name": "rows"}]}
    assert post(broker, "/druid/v2", {**native, "context": {"timeout": 5_000}}).status_code == 400
    assert post(broker, "/druid/v2", native).json()[0]["result"]["rows"] == 3000

    # a timeout of 0 ("none") runs under the cap, and the one slot it holds meanwhile refuses a second query
    outcome: dict[str, Any] = {}

    def slow() -> None:
        started = time.monotonic()
        outcome["response"] = post(broker, "/druid/v2/sql", {"query": SLOW, "context": {"timeout": 0}})
        outcome["seconds"] = time.monotonic() - started

    runner = threading.Thread(target=slow)
    runner.start()
    time.sleep(0.5)
    refused = post(broker, "/druid/v2/sql", {"query": "SELECT 1 AS x"})
    runner.join(30)
    assert refused.status_code == 429
    assert refused.json()["error"] == "Query capacity exceeded"
    assert refused.json()["errorMessage"] == ("Too many concurrent queries, total query capacity of 1 exceeded. "
                                              "Please try your query again later.")
    assert outcome["response"].status_code == 504 and outcome["seconds"] < 10
    assert post(broker, "/druid/v2/sql", {"query": "SELECT COUNT(*) AS n FROM t"}).json() == [{"n": 3000}]

    large = post(broker, "/druid/v2/sql", {"query": "SELECT 1 AS x", "context": {"pad": "x" * 20_000}})
    assert large.status_code == 413
    assert post(broker, "/druid/v2/sql", {"query": "SELECT 2 AS x"}).json() == [{"x": 2}]
