"""First/last pairs, DataSketches and t-digests built at ingestion by Spark: rolled up within a persist, merged
across persists and segments, read back by the DataSketches library and by the broker's SQL; and re-ingested as a
re-index reads them (pairs as JSON, sketches as Base64), which merges instead of building anew.

Every sketch here holds fewer values than its exact-mode limit, so estimates are exact counts.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import datasketches as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from sluice.broker.engine import SqlEngine
from sluice.connectors.formats.values import stringify
from sluice.spec.data_schema import DataSchema
from sluice.spec.granularity import parse_granularity
from sluice.task.compact_task import combining_aggregator
from sluice.task.ingest_plan import compile_plan
from sluice.task.pipeline import RowPipeline
from sluice.tdigest import TDIGEST, TDigest

pytestmark = pytest.mark.spark

RAW_SCHEMA = "partition INT, offset BIGINT, timestamp TIMESTAMP, value BINARY"
METRICS = [
    {"type": "count", "name": "rows"},
    {"type": "longFirst", "name": "first_v", "fieldName": "v"},
    {"type": "longLast", "name": "last_v", "fieldName": "v"},
    {"type": "doubleLast", "name": "last_x", "fieldName": "x"},
    {"type": "stringFirst", "name": "first_user", "fieldName": "user", "maxStringBytes": 3},
    {"type": "HLLSketchBuild", "name": "users_hll", "fieldName": "user"},
    {"type": "thetaSketch", "name": "users_theta", "fieldName": "user"},
    {"type": "hyperUnique", "name": "users_unique", "fieldName": "user"},
    {"type": "quantilesDoublesSketch", "name": "v_quantiles", "fieldName": "v", "k": 64},
    {"type": "tDigestSketch", "name": "v_digest", "fieldName": "v", "compression": 50},
]
#: two persists of one hour; page a's earliest event is in the second persist, its latest in the first
FIRST = [
    {"ts": "2024-01-01T00:30:00Z", "page": "a", "user": "alice", "v": 5, "x": 0.5},
    {"ts": "2024-01-01T00:50:00Z", "page": "a", "user": "bob", "v": 9, "x": 1.5},
    {"ts": "2024-01-01T00:40:00Z", "page": "b", "user": "carol", "v": 1, "x": None},
]
SECOND = [
    {"ts": "2024-01-01T00:10:00Z", "page": "a", "user": "dave", "v": 2, "x": 2.5},
    {"ts": "2024-01-01T00:20:00Z", "page": "a", "user": "alice", "v": 7},
    {"ts": "2024-01-01T00:45:00Z", "page": "b", "user": "erin", "v": "not a number", "x": 3.0},
]


def pipeline(spark: SparkSession, metrics: list[dict[str, Any]], rollup: bool = True) -> RowPipeline:
    spec = {"dataSource": "events", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": ["page"]},
            "metricsSpec": metrics, "granularitySpec": {"queryGranularity": "HOUR", "rollup": rollup}}
    return RowPipeline(spark, compile_plan(DataSchema.model_validate(spec)))


def records(spark: SparkSession, events: list[dict[str, Any]]) -> Any:
    rows = [(0, offset, None, json.dumps(e).encode()) for offset, e in enumerate(events)]
    return spark.createDataFrame(rows, RAW_SCHEMA)


def segment_rows(p: RowPipeline, batches: list[list[dict[str, Any]]], tmp_path: Path,
                 rollups: tuple[bool, ...] = (True, False)) -> tuple[Path, dict[str, dict[str, Any]]]:
    """Persist each batch (rolled up, then not), merge them into segment files; the merged rows by page."""
    persists = []
    for i, batch in enumerate(batches):
        persists.append(tmp_path / f"persist-{i}")
        p.persist(records(p.spark, batch), persists[-1], rollup=rollups[i % len(rollups)])
    [segment] = p.merge(persists, parse_granularity("DAY"), 1000, tmp_path / "segments")
    rows = pq.read_table(segment.path).to_pylist()
    return segment.path, {row["page"]: row for row in rows}


@pytest.fixture(scope="module")
def merged(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, dict[str, Any]]]:
    return segment_rows(pipeline(spark, METRICS), [FIRST, SECOND], tmp_path_factory.mktemp("metrics"))


def millis(iso: str) -> int:
    from datetime import datetime
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def test_first_and_last_are_pairs_of_the_earliest_and_latest_event_across_persists(merged):
    _, rows = merged
    assert rows["a"]["rows"] == 4
    assert rows["a"]["first_v"] == {"lhs": millis("2024-01-01T00:10:00Z"), "rhs": 2}
    assert rows["a"]["last_v"] == {"lhs": millis("2024-01-01T00:50:00Z"), "rhs": 9}
    assert rows["a"]["last_x"] == {"lhs": millis("2024-01-01T00:50:00Z"), "rhs": 1.5}
    assert rows["a"]["first_user"] == {"lhs": millis("2024-01-01T00:10:00Z"), "rhs": "dav"}  # maxStringBytes
    # the latest event's value is taken even when it does not parse (a processedWithError row, null there)
    assert rows["b"]["last_v"] == {"lhs": millis("2024-01-01T00:45:00Z"), "rhs": None}
    assert rows["b"]["first_v"] == {"lhs": millis("2024-01-01T00:40:00Z"), "rhs": 1}


def test_sketches_hold_every_distinct_value_across_persists(merged):
    _, rows = merged
    a, b = rows["a"], rows["b"]
    assert ds.hll_sketch.deserialize(a["users_hll"]["HLLSketch"]).get_estimate() == pytest.approx(3.0)
    assert ds.hll_sketch.deserialize(a["users_unique"]["HLLSketch"]).get_estimate() == pytest.approx(3.0)
    assert ds.compact_theta_sketch.deserialize(a["users_theta"]["thetaSketch"]).get_estimate() == 3.0
    assert ds.hll_sketch.deserialize(b["users_hll"]["HLLSketch"]).get_estimate() == pytest.approx(2.0)
    quantiles = ds.quantiles_doubles_sketch.deserialize(a["v_quantiles"]["quantilesDoublesSketch"])
    assert (quantiles.n, quantiles.k, quantiles.get_min_value(), quantiles.get_max_value()) == (4, 64, 2.0, 9.0)
    # b's second value is not a number: a processedWithError row whose value the sketch does not hold
    assert ds.quantiles_doubles_sketch.deserialize(b["v_quantiles"]["quantilesDoublesSketch"]).n == 1
    digest = TDigest.deserialize(a["v_digest"][TDIGEST])
    assert (digest.means, digest.weights, digest.min, digest.max, digest.compression) == (
        (2.0, 5.0, 7.0, 9.0), (1.0,) * 4, 2.0, 9.0, 50.0)
    assert TDigest.deserialize(b["v_digest"][TDIGEST]).weights == (1.0,)


def test_the_broker_reads_the_ingested_pairs_and_sketches(merged):
    path, _ = merged
    engine = SqlEngine(threads=1)
    result = engine.execute(
        "SELECT page, EARLIEST(first_v), LATEST(last_v), APPROX_COUNT_DISTINCT_DS_HLL(users_hll), "
        "APPROX_COUNT_DISTINCT_DS_THETA(users_theta), APPROX_COUNT_DISTINCT(users_unique), "
        "APPROX_QUANTILE_DS(v_quantiles, 0.5), TDIGEST_QUANTILE(v_digest, 0.5) FROM events GROUP BY page ORDER BY page",
        {"events": [str(path)]})
    assert result.rows == [("a", 2, 9, 3, 3, 3, 7.0, 7.0), ("b", 1, None, 2, 2, 2, 1.0, 1.0)]


def test_without_rollup_each_row_keeps_its_own_pair_and_sketch(spark, tmp_path):
    _, rows = segment_rows(pipeline(spark, METRICS[:2] + METRICS[5:6], rollup=False), [FIRST[:1]], tmp_path)
    assert rows["a"]["first_v"] == {"lhs": millis("2024-01-01T00:30:00Z"), "rhs": 5}
    assert ds.hll_sketch.deserialize(rows["a"]["users_hll"]["HLLSketch"]).get_estimate() == pytest.approx(1.0)


def test_a_reindex_reads_pairs_and_sketches_back_and_merges_them(spark, merged, tmp_path):
    """What the druid input source hands a re-index (segments' columns as text), ingested with the combining
    aggregators a compaction uses, gives the same metrics as the segments hold: nothing is counted twice, no pair
    loses its time."""
    path, rows = merged
    table = pq.read_table(path)
    text = {name: stringify(table[name]).to_pylist() for name in table.column_names}
    events = [{**{name: text[name][i] for name in text}, "ts": text["__time"][i]} for i in range(table.num_rows)]
    assert base64.b64decode(events[0]["users_hll"]) == rows[events[0]["page"]]["users_hll"]["HLLSketch"]
    combining = [combining_aggregator(m) for m in METRICS]
    _, again = segment_rows(pipeline(spark, combining), [events[:1], events[1:], events], tmp_path)
    for page in ("a", "b"):
        for name in ("first_v", "last_v", "last_x", "first_user"):
            assert again[page][name] == rows[page][name]
        assert again[page]["rows"] == 2 * rows[page]["rows"]  # each event was re-ingested twice
        for name, kind in (("users_hll", "HLLSketch"), ("users_unique", "HLLSketch")):
            assert ds.hll_sketch.deserialize(again[page][name][kind]).get_estimate() == pytest.approx(
                ds.hll_sketch.deserialize(rows[page][name][kind]).get_estimate())
        assert ds.compact_theta_sketch.deserialize(again[page]["users_theta"]["thetaSketch"]).get_estimate() == \
            ds.compact_theta_sketch.deserialize(rows[page]["users_theta"]["thetaSketch"]).get_estimate()
        # quantiles sketches merge: every value counted once per re-ingestion
        assert ds.quantiles_doubles_sketch.deserialize(again[page]["v_quantiles"]["quantilesDoublesSketch"]).n == \
            2 * ds.quantiles_doubles_sketch.deserialize(rows[page]["v_quantiles"]["quantilesDoublesSketch"]).n
        assert sum(TDigest.deserialize(again[page]["v_digest"][TDIGEST]).weights) == \
            2 * sum(TDigest.deserialize(rows[page]["v_digest"][TDIGEST]).weights)
