"""Metrics that ingestion rolled up into first/last pairs and DataSketches, read by Druid SQL and native queries.

Seven events in three hourly segments, rolled up per hour and channel as ingestion writes them: a first/last
aggregator's column holds the pair STRUCT<lhs: event time in epoch millis, rhs: value>, a sketch aggregator's column
the one-field STRUCT<HLLSketch | thetaSketch | quantilesDoublesSketch: bytes>. Every sketch here is small enough to
be exact, so the answers are the plain counts, firsts and quantiles of the events below; several segments make every
answer a merge across files.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import datasketches as ds
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.broker import Broker
from sluice.broker.engine import SqlEngine
from sluice.broker.errors import SqlError
from sluice.broker.native.queries import NativeQueryRunner
from sluice.segment.segment import Interval
from tests.unit.published import broker_over

DAY = datetime(2024, 1, 1, tzinfo=UTC)
# (minutes into the day, channel, user, added, latency, page)
EVENTS = [
    (5, "#en", "alice", 3, 10.0, "Main"),
    (20, "#en", "bob", 7, 30.0, "Talk"),
    (40, "#fr", "alice", 2, 20.0, "Accueil"),
    (65, "#fr", "dave", 9, 40.0, None),
    (70, "#en", "carol", 4, 50.0, "Help"),
    (135, "#en", "bob", 6, 60.0, "Main"),
    (165, "#fr", "erin", 1, 70.0, "Portail"),
]
METRICS = [
    {"type": "count", "name": "count"},
    {"type": "longFirst", "name": "added_first", "fieldName": "added"},
    {"type": "longLast", "name": "added_last", "fieldName": "added"},
    {"type": "doubleFirst", "name": "latency_first", "fieldName": "latency"},
    {"type": "floatLast", "name": "latency_last", "fieldName": "latency"},
    {"type": "stringFirst", "name": "page_first", "fieldName": "page"},
    {"type": "stringLast", "name": "page_last", "fieldName": "page"},
    {"type": "HLLSketchBuild", "name": "users", "fieldName": "user"},
    {"type": "hyperUnique", "name": "visitors", "fieldName": "user"},
    {"type": "thetaSketch", "name": "users_theta", "fieldName": "user"},
    {"type": "quantilesDoublesSketch", "name": "latencies", "fieldName": "latency"},
]
USERS = len({user for _, _, user, *_ in EVENTS})
EN_USERS = {user for _, channel, user, *_ in EVENTS if channel == "#en"}
FR_USERS = {user for _, channel, user, *_ in EVENTS if channel == "#fr"}


def _millis(minutes: int) -> int:
    return int((DAY + timedelta(minutes=minutes)).timestamp() * 1000)


def _pairs(value_type: pa.DataType, pairs: list[tuple[int, Any]]) -> pa.Array:
    return pa.array([{"lhs": lhs, "rhs": rhs} for lhs, rhs in pairs],
                    pa.struct([("lhs", pa.int64()), ("rhs", value_type)]))


def _sketches(kind: str, sketches: list[bytes]) -> pa.Array:
    return pa.array([{kind: data} for data in sketches], pa.struct([(kind, pa.binary())]))


def _hll(users: list[str], lg_k: int) -> bytes:
    sketch = ds.hll_sketch(lg_k)
    for user in users:
        sketch.update(user)
    return sketch.serialize_compact()


def _theta(users: list[str]) -> bytes:
    sketch = ds.update_theta_sketch(14)
    for user in users:
        sketch.update(user)
    return sketch.compact().serialize()


def _quantiles(values: list[float]) -> bytes:
    sketch = ds.quantiles_doubles_sketch(128)
    for value in values:
        sketch.update(value)
    return sketch.serialize()


def _rolled_up(hour: int) -> pa.Table:
    """The hour's events rolled up per channel, as ingestion writes a segment with the METRICS above."""
    groups: dict[str, list[tuple]] = {}
    for event in EVENTS:
        if event[0] // 60 == hour:
            groups.setdefault(event[1], []).append(event)
    rows = [groups[channel] for channel in sorted(groups)]
    first, last = (lambda events: events[0]), (lambda events: events[-1])
    return pa.table({
        "__time": pa.array([DAY + timedelta(hours=hour)] * len(rows), pa.timestamp("ms", tz="UTC")),
        "channel": [events[0][1] for events in rows],
        "count": pa.array([len(events) for events in rows], pa.int64()),
        "added_first": _pairs(pa.int64(), [(_millis(first(e)[0]), first(e)[3]) for e in rows]),
        "added_last": _pairs(pa.int64(), [(_millis(last(e)[0]), last(e)[3]) for e in rows]),
        "latency_first": _pairs(pa.float64(), [(_millis(first(e)[0]), first(e)[4]) for e in rows]),
        "latency_last": _pairs(pa.float32(), [(_millis(last(e)[0]), last(e)[4]) for e in rows]),
        "page_first": _pairs(pa.string(), [(_millis(first(e)[0]), first(e)[5]) for e in rows]),
        "page_last": _pairs(pa.string(), [(_millis(last(e)[0]), last(e)[5]) for e in rows]),
        "users": _sketches("HLLSketch", [_hll([event[2] for event in e], 12) for e in rows]),
        "visitors": _sketches("HLLSketch", [_hll([event[2] for event in e], 11) for e in rows]),
        "users_theta": _sketches("thetaSketch", [_theta([event[2] for event in e]) for e in rows]),
        "latencies": _sketches("quantilesDoublesSketch", [_quantiles([event[4] for event in e]) for e in rows]),
    })


@pytest.fixture(scope="module")
def deep_storage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One segment file per hour."""
    deep = tmp_path_factory.mktemp("deep")
    for hour in range(3):
        (deep / f"hour-{hour}").mkdir()
        pq.write_table(_rolled_up(hour), deep / f"hour-{hour}" / "index.parquet")
    return deep


@pytest.fixture(scope="module")
def broker(deep_storage: Path, tmp_path_factory: pytest.TempPathFactory) -> Broker:
    files = [(deep_storage / f"hour-{hour}" / "index.parquet",
              Interval(DAY + timedelta(hours=hour), DAY + timedelta(hours=hour + 1))) for hour in range(3)]
    return broker_over(tmp_path_factory.mktemp("broker"), deep_storage, "metrics", files, ["channel"], METRICS)


def _sql(broker: Broker, sql: str) -> list[tuple]:
    return broker.sql(sql).rows


def _native(broker: Broker, query: dict[str, Any]) -> list[dict[str, Any]]:
    return NativeQueryRunner(broker).run({"dataSource": "metrics", "intervals": ["2024-01-01/2024-01-02"], **query})


def _totals(broker: Broker, aggregations: list[dict], post_aggregations: list[dict] = ()) -> dict[str, Any]:
    """The timeseries answer over everything (granularity all)."""
    [row] = _native(broker, {"queryType": "timeseries", "aggregations": aggregations,
                             "postAggregations": list(post_aggregations)})
    return row["result"]


def _sketch_bytes(text: str) -> bytes:
    return base64.b64decode(text)


# ---------------------------------------------------------------------------------------------------- Druid SQL


@pytest.mark.parametrize(("sql", "expected"), [
    # the pair with the least / greatest time of its own decides, across segments
    ("SELECT EARLIEST(added_first), LATEST(added_last) FROM metrics", [(3, 1)]),
    ("SELECT EARLIEST(latency_first), LATEST(latency_last) FROM metrics", [(10.0, 70.0)]),
    ("SELECT channel, EARLIEST(page_first), LATEST(page_last) FROM metrics GROUP BY channel ORDER BY channel",
     [("#en", "Main", "Main"), ("#fr", "Accueil", "Portail")]),
    # a null value is the answer when its pair is the earliest (SQL-compatible null handling)
    ("SELECT EARLIEST(page_first) FROM metrics WHERE __time >= TIMESTAMP '2024-01-01 01:00:00' AND channel = '#fr'",
     [(None,)]),
    # the _BY forms read a pair's own time too
    ("SELECT EARLIEST_BY(added_first, __time), LATEST_BY(added_last, __time) FROM metrics", [(3, 1)]),
    ("SELECT ANY_VALUE(added_first) IN (3, 2, 9, 4, 6, 1) FROM metrics", [(True,)]),
    # through a derived table, a CTE and a table alias
    ("SELECT EARLIEST(a) FROM (SELECT added_first AS a FROM metrics)", [(3,)]),
    ("WITH m AS (SELECT * FROM metrics) SELECT LATEST(m.added_last) FROM m", [(1,)]),
    ("SELECT LATEST(x.page_last) FROM metrics AS x WHERE x.channel = '#en'", [("Main",)]),
    # sketches are merged, then estimated
    (("SELECT APPROX_COUNT_DISTINCT(users), APPROX_COUNT_DISTINCT_DS_HLL(users), "
      "APPROX_COUNT_DISTINCT_DS_THETA(users_theta), APPROX_COUNT_DISTINCT(visitors), COUNT(DISTINCT users_theta) "
      "FROM metrics"), [(USERS,) * 5]),
    ("SELECT channel, APPROX_COUNT_DISTINCT_DS_HLL(users, 14, 'HLL_8') FROM metrics GROUP BY 1 ORDER BY 1",
     [("#en", len(EN_USERS)), ("#fr", len(FR_USERS))]),
    ("SELECT APPROX_COUNT_DISTINCT(users) FILTER (WHERE channel = '#fr'), APPROX_COUNT_DISTINCT(channel) FROM metrics",
     [(len(FR_USERS), 2)]),
    ("SELECT APPROX_QUANTILE_DS(latencies, 0.5), APPROX_QUANTILE_DS(latencies, 1.0, 256) FROM metrics",
     [(40.0, 70.0)]),
    ("SELECT APPROX_QUANTILE_DS(latencies, 0.5) FILTER (WHERE channel = '#en') FROM metrics", [(50.0,)]),
    (("SELECT THETA_SKETCH_ESTIMATE(THETA_SKETCH_INTERSECT(DS_THETA(users_theta) FILTER (WHERE channel = '#en'), "
      "DS_THETA(users_theta) FILTER (WHERE channel = '#fr'))) FROM metrics"), [(len(EN_USERS & FR_USERS),)]),
    ("SELECT DS_RANK(DS_QUANTILES_SKETCH(latencies), 40) FROM metrics", [(3 / 7,)]),
    # plain columns keep DuckDB's own distinct count
    ("SELECT APPROX_COUNT_DISTINCT(channel), COUNT(DISTINCT channel) FROM metrics", [(2, 2)]),
])
def test_sql_reads_pairs_and_merges_sketches(broker: Broker, sql: str, expected: list[tuple]) -> None:
    assert _sql(broker, sql) == [tuple(pytest.approx(v) if isinstance(v, float) else v for v in row)
                                 for row in expected]


def test_the_engine_reads_the_column_types_from_the_files_it_is_given(deep_storage: Path) -> None:
    files = [str(path) for path in sorted(deep_storage.rglob("*.parquet"))]
    result = SqlEngine(threads=1).execute("SELECT EARLIEST(added_first), APPROX_COUNT_DISTINCT(users) FROM metrics",
                                          {"metrics": files})
    assert result.rows == [(3, USERS)]


def test_earliest_of_a_pair_has_the_type_of_its_value(broker: Broker) -> None:
    result = broker.sql("SELECT EARLIEST(added_first), EARLIEST(latency_first), LATEST(latency_last), "
                        "EARLIEST(page_first), APPROX_COUNT_DISTINCT(users) FROM metrics")
    assert result.druid_types == ["LONG", "DOUBLE", "FLOAT", "STRING", "LONG"]


def test_a_pair_selected_as_it_is_is_an_object_and_a_sketch_its_base64(broker: Broker) -> None:
    result = broker.sql("SELECT added_first, page_last, users FROM metrics "
                        "WHERE __time < TIMESTAMP '2024-01-01 01:00:00' AND channel = '#en'")
    assert result.druid_types == ["COMPLEX<serializablePairLongLong>", "COMPLEX<serializablePairLongString>",
                                  "COMPLEX<HLLSketch>"]
    [(pair, last, users)] = result.rows
    assert (pair, last) == ({"lhs": _millis(5), "rhs": 3}, {"lhs": _millis(20), "rhs": "Talk"})
    assert ds.hll_sketch.deserialize(_sketch_bytes(users)).get_estimate() == pytest.approx(2)


def test_information_schema_types_the_ingested_metrics_as_druid_does(broker: Broker) -> None:
    rows = _sql(broker, "SELECT COLUMN_NAME, DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_NAME = 'metrics'")
    assert dict(rows) == {
        "__time": "TIMESTAMP", "channel": "VARCHAR", "count": "BIGINT",
        "added_first": "COMPLEX<serializablePairLongLong>", "added_last": "COMPLEX<serializablePairLongLong>",
        "latency_first": "COMPLEX<serializablePairLongDouble>", "latency_last": "COMPLEX<serializablePairLongFloat>",
        "page_first": "COMPLEX<serializablePairLongString>", "page_last": "COMPLEX<serializablePairLongString>",
        "users": "COMPLEX<HLLSketch>", "visitors": "COMPLEX<HLLSketch>", "users_theta": "COMPLEX<thetaSketch>",
        "latencies": "COMPLEX<quantilesDoublesSketch>"}


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT APPROX_COUNT_DISTINCT_DS_HLL(users_theta) FROM metrics",
     "APPROX_COUNT_DISTINCT_DS_HLL cannot read column users_theta of type COMPLEX<thetaSketch>"),
    ("SELECT APPROX_COUNT_DISTINCT(latencies) FROM metrics",
     "APPROX_COUNT_DISTINCT cannot read column latencies of type COMPLEX<quantilesDoublesSketch>"),
    ("SELECT APPROX_QUANTILE_DS(users, 0.5) FROM metrics",
     "APPROX_QUANTILE_DS cannot read column users of type COMPLEX<HLLSketch>"),
])
def test_a_sketch_of_another_kind_is_refused_by_name(broker: Broker, sql: str, message: str) -> None:
    with pytest.raises(SqlError, match=message):
        broker.sql(sql)


# ---------------------------------------------------------------------------------------------- native queries


def test_first_last_aggregators_read_the_pairs(broker: Broker) -> None:
    assert _totals(broker, [
        {"type": "longFirst", "name": "added_first", "fieldName": "added_first"},
        {"type": "longLast", "name": "added_last", "fieldName": "added_last"},
        {"type": "doubleFirst", "name": "latency_first", "fieldName": "latency_first"},
        {"type": "floatLast", "name": "latency_last", "fieldName": "latency_last"},
        {"type": "stringLast", "name": "page_last", "fieldName": "page_last", "maxStringBytes": 4},
        {"type": "stringFirst", "name": "page_first", "fieldName": "page_first"},
    ]) == {"added_first": 3, "added_last": 1, "latency_first": 10.0, "latency_last": 70.0, "page_last": "Port",
           "page_first": "Main"}


def test_any_aggregators_read_a_pairs_value(broker: Broker) -> None:
    """longAny, doubleAny and stringAny over first/last pair columns answer with one row's value, of the value's type."""
    result = _totals(broker, [{"type": "longAny", "name": "added", "fieldName": "added_first"},
                              {"type": "doubleAny", "name": "latency", "fieldName": "latency_first"},
                              {"type": "stringAny", "name": "page", "fieldName": "page_first"}])
    rows: dict[tuple[int, str], list[tuple]] = {}
    for event in EVENTS:
        rows.setdefault((event[0] // 60, event[1]), []).append(event)
    firsts = [events[0] for events in rows.values()]  # what each rolled-up row's first pair holds
    assert isinstance(result["added"], int) and result["added"] in {e[3] for e in firsts}
    assert isinstance(result["latency"], float) and result["latency"] in {e[4] for e in firsts}
    assert result["page"] in {e[5] for e in firsts}


def test_sketch_aggregators_merge_across_segments_and_finalize_as_druid_does(broker: Broker) -> None:
    assert _totals(broker, [
        {"type": "HLLSketchMerge", "name": "users", "fieldName": "users"},
        {"type": "HLLSketchBuild", "name": "rounded", "fieldName": "users", "round": True},
        {"type": "HLLSketchBuild", "name": "channels", "fieldName": "channel", "lgK": 10, "tgtHllType": "HLL_8",
         "round": True},
        {"type": "hyperUnique", "name": "visitors", "fieldName": "visitors", "round": True},
        {"type": "cardinality", "name": "cardinality", "fields": ["visitors"]},
        {"type": "thetaSketch", "name": "theta", "fieldName": "users_theta"},
        {"type": "quantilesDoublesSketch", "name": "latencies", "fieldName": "latencies"},
    ]) == {"users": pytest.approx(USERS), "rounded": USERS, "channels": 2, "visitors": USERS,
           "cardinality": pytest.approx(USERS), "theta": USERS, "latencies": len(EVENTS)}


def test_an_unfinalized_sketch_is_its_base64(broker: Broker) -> None:
    result = _totals(broker, [
        {"type": "HLLSketchMerge", "name": "users", "fieldName": "users", "shouldFinalize": False},
        {"type": "thetaSketch", "name": "theta", "fieldName": "users_theta", "shouldFinalize": False},
        {"type": "quantilesDoublesSketch", "name": "latencies", "fieldName": "latencies", "shouldFinalize": False},
    ])
    assert ds.hll_sketch.deserialize(_sketch_bytes(result["users"])).get_estimate() == pytest.approx(USERS)
    assert ds.compact_theta_sketch.deserialize(_sketch_bytes(result["theta"])).get_estimate() == USERS
    assert ds.quantiles_doubles_sketch.deserialize(_sketch_bytes(result["latencies"])).n == len(EVENTS)


def test_finalize_false_answers_with_pairs_and_sketches_and_post_aggregators_still_finalize(broker: Broker) -> None:
    """Druid's query context `finalize: false`: each aggregator's intermediate value, a first/last aggregator's
    {lhs: time, rhs: value} (of the stored pairs, or made from a plain column and __time) and a cardinality's
    sketch; a finalizingFieldAccess post-aggregator still reads the answer."""
    [row] = _native(broker, {"queryType": "timeseries", "granularity": "all", "context": {"finalize": False},
                             "aggregations": [
        {"type": "count", "name": "rows"},
        {"type": "longFirst", "name": "added_first", "fieldName": "added_first"},
        {"type": "stringLast", "name": "page_last", "fieldName": "page_last"},
        {"type": "longLast", "name": "count_last", "fieldName": "count"},
        {"type": "cardinality", "name": "channels", "fields": ["channel"], "round": True},
        {"type": "HLLSketchMerge", "name": "users", "fieldName": "users"},
    ], "postAggregations": [{"type": "finalizingFieldAccess", "name": "added", "fieldName": "added_first"}]})
    result = row["result"]
    assert {name: result[name] for name in ("rows", "added_first", "page_last", "count_last", "added")} == {
        "rows": 6, "added_first": {"lhs": _millis(5), "rhs": 3}, "page_last": {"lhs": _millis(165), "rhs": "Portail"},
        "count_last": {"lhs": _millis(120), "rhs": 1}, "added": 3}
    assert ds.hll_sketch.deserialize(_sketch_bytes(result["channels"])).get_estimate() == pytest.approx(2)
    assert ds.hll_sketch.deserialize(_sketch_bytes(result["users"])).get_estimate() == pytest.approx(USERS)
    grouped = _native(broker, {"queryType": "groupBy", "granularity": "all", "dimensions": ["channel"],
                               "context": {"finalize": "false"},
                               "aggregations": [{"type": "longLast", "name": "added", "fieldName": "added_last"}]})
    assert [(r["event"]["channel"], r["event"]["added"]) for r in grouped] == [
        ("#en", {"lhs": _millis(135), "rhs": 6}), ("#fr", {"lhs": _millis(165), "rhs": 1})]


def _by_channel(channel: str, aggregator: dict[str, Any]) -> dict[str, Any]:
    return {"type": "filtered", "filter": {"type": "selector", "dimension": "channel", "value": channel},
            "aggregator": aggregator}


def _access(name: str, kind: str = "fieldAccess") -> dict[str, str]:
    return {"type": kind, "fieldName": name}


def test_hll_post_aggregators(broker: Broker) -> None:
    result = _totals(broker, [
        _by_channel("#en", {"type": "HLLSketchMerge", "name": "en", "fieldName": "users"}),
        _by_channel("#fr", {"type": "HLLSketchMerge", "name": "fr", "fieldName": "users"}),
        {"type": "hyperUnique", "name": "visitors", "fieldName": "visitors"},
    ], [
        {"type": "HLLSketchEstimate", "name": "both", "round": True,
         "field": {"type": "HLLSketchUnion", "fields": [_access("en"), _access("fr")], "lgK": 14,
                   "tgtHllType": "HLL_8"}},
        {"type": "HLLSketchEstimateWithBounds", "name": "bounds", "field": _access("en"), "numStdDev": 2},
        {"type": "HLLSketchToString", "name": "summary", "field": _access("fr")},
        {"type": "hyperUniqueCardinality", "name": "cardinality", "fieldName": "visitors"},
        {"type": "arithmetic", "name": "ratio", "fn": "/",
         "fields": [_access("en", "finalizingFieldAccess"), _access("visitors", "finalizingFieldAccess")]},
    ])
    assert result["both"] == USERS
    estimate, low, high = result["bounds"]
    assert low <= estimate <= high and estimate == pytest.approx(len(EN_USERS))
    assert result["summary"].startswith("### HLL SKETCH SUMMARY: \n")
    assert result["cardinality"] == pytest.approx(USERS)
    assert result["ratio"] == pytest.approx(len(EN_USERS) / USERS)
    assert (result["en"], result["fr"]) == (pytest.approx(len(EN_USERS)), pytest.approx(len(FR_USERS)))


def test_theta_post_aggregators(broker: Broker) -> None:
    result = _totals(broker, [
        _by_channel("#en", {"type": "thetaSketch", "name": "en", "fieldName": "users_theta"}),
        _by_channel("#fr", {"type": "thetaSketch", "name": "fr", "fieldName": "users_theta"}),
    ], [
        {"type": "thetaSketchEstimate", "name": f.lower(),
         "field": {"type": "thetaSketchSetOp", "func": f, "fields": [_access("en"), _access("fr")]}}
        for f in ("UNION", "INTERSECT", "NOT")
    ] + [
        {"type": "thetaSketchEstimate", "name": "bounds", "field": _access("en"), "errorBoundsStdDev": 1},
        {"type": "finalizingFieldAccess", "name": "fr_estimate", "fieldName": "fr"},
    ])
    assert (result["union"], result["intersect"], result["not"]) == (
        len(EN_USERS | FR_USERS), len(EN_USERS & FR_USERS), len(EN_USERS - FR_USERS))
    assert result["bounds"] == {"estimate": len(EN_USERS), "highBound": len(EN_USERS),
                                "lowBound": len(EN_USERS), "numStdDev": 1}
    assert result["fr_estimate"] == len(FR_USERS)


def test_quantiles_post_aggregators(broker: Broker) -> None:
    latency = _access("latencies")
    result = _totals(broker, [{"type": "quantilesDoublesSketch", "name": "latencies", "fieldName": "latencies"}], [
        {"type": "quantilesDoublesSketchToQuantile", "name": "median", "field": latency, "fraction": 0.5},
        {"type": "quantilesDoublesSketchToQuantiles", "name": "extremes", "field": latency, "fractions": [0, 1]},
        {"type": "quantilesDoublesSketchToRank", "name": "rank", "field": latency, "value": 40},
        {"type": "quantilesDoublesSketchToCDF", "name": "cdf", "field": latency, "splitPoints": [35]},
        {"type": "quantilesDoublesSketchToHistogram", "name": "split", "field": latency, "splitPoints": [35]},
        {"type": "quantilesDoublesSketchToHistogram", "name": "bins", "field": latency, "numBins": 2},
        {"type": "quantilesDoublesSketchToHistogram", "name": "ten_bins", "field": latency},
        {"type": "quantilesDoublesSketchToString", "name": "summary", "field": latency},
    ])
    # latencies 10…70 in steps of 10: two bins split at 40, ten bins 6 wide from 10
    assert {name: result[name] for name in ("latencies", "median", "extremes", "rank", "cdf", "split", "bins")} == {
        "latencies": 7, "median": 40.0, "extremes": [10.0, 70.0], "rank": pytest.approx(3 / 7),
        "cdf": [pytest.approx(3 / 7), 1.0], "split": [3.0, 4.0], "bins": [3.0, 4.0]}
    assert result["ten_bins"] == pytest.approx([1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    assert "Quantiles" in result["summary"]


def test_group_by_and_top_n_rank_by_the_finalized_sketch(broker: Broker) -> None:
    users = {"type": "HLLSketchMerge", "name": "users", "fieldName": "users", "round": True}
    grouped = _native(broker, {
        "queryType": "groupBy", "granularity": "all", "dimensions": ["channel"], "aggregations": [users],
        "limitSpec": {"type": "default", "columns": [{"dimension": "users", "direction": "descending"}]},
        "having": {"type": "greaterThan", "aggregation": "users", "value": 1}})
    assert [row["event"] for row in grouped] == [{"channel": "#en", "users": len(EN_USERS)},
                                                 {"channel": "#fr", "users": len(FR_USERS)}]
    [top] = _native(broker, {"queryType": "topN", "granularity": "all", "dimension": "channel", "threshold": 1,
                             "metric": "users", "aggregations": [users]})
    assert top["result"] == [{"channel": "#en", "users": len(EN_USERS)}]


def test_hourly_buckets_merge_the_hours_sketches(broker: Broker) -> None:
    answer = _native(broker, {"queryType": "timeseries", "granularity": "hour", "aggregations": [
        {"type": "HLLSketchMerge", "name": "users", "fieldName": "users", "round": True},
        {"type": "longLast", "name": "added", "fieldName": "added_last"}]})
    assert [(row["timestamp"], row["result"]) for row in answer] == [
        ("2024-01-01T00:00:00.000Z", {"users": 2, "added": 2}),
        ("2024-01-01T01:00:00.000Z", {"users": 2, "added": 4}),
        ("2024-01-01T02:00:00.000Z", {"users": 2, "added": 1})]


def test_scan_shows_pairs_as_objects_and_types_them(broker: Broker) -> None:
    [batch] = _native(broker, {"queryType": "scan", "columns": ["channel", "added_first"], "limit": 1,
                               "order": "ascending", "filter": {"type": "selector", "dimension": "channel",
                                                                "value": "#en"}})
    assert batch["events"] == [{"channel": "#en", "added_first": {"lhs": _millis(5), "rhs": 3}}]
    assert batch["rowSignature"] == [{"name": "channel", "type": "STRING"},
                                     {"name": "added_first", "type": "COMPLEX<serializablePairLongLong>"}]


def test_segment_metadata_types_complex_columns_as_druid_does(broker: Broker) -> None:
    [analysis] = _native(broker, {"queryType": "segmentMetadata", "merge": True})
    columns = analysis["columns"]
    assert {name: (columns[name]["typeSignature"], columns[name]["type"]) for name in (
        "users", "users_theta", "latencies", "added_first", "page_last")} == {
        "users": ("COMPLEX<HLLSketch>", "HLLSketch"),
        "users_theta": ("COMPLEX<thetaSketch>", "thetaSketch"),
        "latencies": ("COMPLEX<quantilesDoublesSketch>", "quantilesDoublesSketch"),
        "added_first": ("COMPLEX<serializablePairLongLong>", "serializablePairLongLong"),
        "page_last": ("COMPLEX<serializablePairLongString>", "serializablePairLongString")}
    assert columns["users"]["cardinality"] is None and columns["users"]["minValue"] is None
    assert columns["count"]["type"] == "LONG"


@pytest.mark.parametrize(("query", "message"), [
    ({"aggregations": [{"type": "thetaSketch", "name": "t", "fieldName": "users_theta", "size": 1000}]},
     "aggregations[0].size: must be a power of 2 from 16 to 67108864, got 1000"),
    ({"aggregations": [{"type": "HLLSketchMerge", "name": "u", "fieldName": "users", "lgK": 3}]},
     "aggregations[0].lgK: Input should be greater than or equal to 4"),
    ({"postAggregations": [{"type": "quantilesDoublesSketchToHistogram", "name": "h", "field": _access("latencies"),
                            "splitPoints": [1], "numBins": 3}]},
     "postAggregations[0]: Cannot accept both 'splitPoints' and 'numBins'"),
    ({"postAggregations": [{"type": "thetaSketchEstimate", "name": "e",
                            "field": {"type": "thetaSketchSetOp", "func": "XOR", "fields": [_access("t")]}}]},
     "postAggregations[0].field.func: Input should be 'UNION', 'INTERSECT' or 'NOT'"),
])
def test_a_wrong_sketch_spec_names_its_field(broker: Broker, query: dict[str, Any], message: str) -> None:
    with pytest.raises(SqlError) as caught:
        _native(broker, {"queryType": "timeseries", **query})
    assert caught.value.error_message == f"Invalid native query: {message}"
