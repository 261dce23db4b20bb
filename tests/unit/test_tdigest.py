"""TDIGEST_GENERATE_SKETCH and TDIGEST_QUANTILE: a merging t-digest in MergingDigest's verbose byte layout, as Druid
serializes it, built from values or merged from a column of digests."""

from __future__ import annotations

import base64
import struct
from datetime import UTC, datetime, timedelta

import datasketches as ds
import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.functions import tdigest
from sluice.broker.broker import Broker
from sluice.broker.errors import SqlError
from sluice.broker.native.queries import NativeQueryRunner
from sluice.broker.functions.sketches import HLL
from sluice.broker.sql.translate import translate_query
from sluice.segment.segment import Interval
from sluice.tdigest import TDIGEST, TDigest
from tests.unit.published import broker_over


def test_a_digest_keeps_every_value_weighted_and_its_quantiles_close() -> None:
    values = np.random.default_rng(7).permutation(np.arange(1, 100_001, dtype=np.float64))
    digest = TDigest.of(values, 100)
    assert sum(digest.weights) == 100_000
    assert (digest.min, digest.max) == (1.0, 100_000.0)
    assert list(digest.means) == sorted(digest.means)
    assert 20 < len(digest.means) <= 100  # about `compression` centroids, small ones at the tails
    assert max(digest.weights[0], digest.weights[-1]) < max(digest.weights) / 10
    cumulative = np.cumsum(digest.weights)
    median = digest.means[int(np.searchsorted(cumulative, 50_000))]
    assert abs(median - 50_000) < 0.02 * 100_000


def test_fewer_values_than_the_compression_are_kept_exactly() -> None:
    digest = TDigest.of(np.array([5.0, 1.0, 3.0, 3.0, 9.0]), 100)
    assert (digest.means, digest.weights) == ((1.0, 3.0, 3.0, 5.0, 9.0), (1.0,) * 5)


def test_the_bytes_are_merging_digests_verbose_encoding() -> None:
    data = TDigest.of(np.array([2.0, 4.0]), 100).serialize()
    assert data == struct.pack(">idddi", 1, 2.0, 4.0, 100.0, 2) + struct.pack(">dddd", 1.0, 2.0, 1.0, 4.0)
    assert TDigest.deserialize(data) == TDigest(100.0, (2.0, 4.0), (1.0, 1.0), 2.0, 4.0)
    empty = TDigest.of(np.array([]), 100)
    assert TDigest.deserialize(empty.serialize()) == empty
    with pytest.raises(ValueError, match="verbose encoding"):
        TDigest.deserialize(struct.pack(">idddi", 2, 0.0, 0.0, 100.0, 0))


def test_the_sql_aggregate_digests_each_groups_values_skipping_nulls() -> None:
    connection = duckdb.connect()
    tdigest.register(connection)
    connection.register("t", pa.table({"k": ["a", "a", "a", "b"], "n": [3, None, 1, 7]}))
    sql = translate_query("SELECT k, TDIGEST_GENERATE_SKETCH(n, 200) AS d FROM t GROUP BY k ORDER BY k", ["t"]).sql
    rows = [(k, TDigest.deserialize(d[TDIGEST])) for k, d in connection.execute(sql).fetchall()]
    assert rows == [("a", TDigest(200.0, (1.0, 3.0), (1.0, 1.0), 1.0, 3.0)),
                    ("b", TDigest(200.0, (7.0,), (1.0,), 7.0, 7.0))]
    with pytest.raises(SqlError, match="compression as an integer literal"):
        translate_query("SELECT TDIGEST_GENERATE_SKETCH(n, 'x') FROM t", ["t"])


def test_a_quantile_reads_as_merging_digest_does() -> None:
    few = TDigest.of(np.array([5.0, 1.0, 3.0, 2.0, 4.0]), 100)
    assert [few.quantile(q) for q in (0.0, 0.1, 0.5, 1.0)] == [1.0, 1.0, 3.0, 5.0]
    assert np.isnan(TDigest.of(np.array([]), 100).quantile(0.5))
    with pytest.raises(ValueError, match="between 0 and 1"):
        few.quantile(1.5)


def test_merged_digests_keep_every_weight_and_answer_close_quantiles() -> None:
    values = np.random.default_rng(11).permutation(np.arange(1, 100_001, dtype=np.float64))
    merged = TDigest.merged([TDigest.of(part, 100) for part in np.array_split(values, 7)] + [TDigest.of(values[:0])])
    assert sum(merged.weights) == 100_000 and (merged.min, merged.max) == (1.0, 100_000.0)
    assert len(merged.means) <= 100
    for q in (0.01, 0.25, 0.5, 0.75, 0.99):
        assert abs(merged.quantile(q) - q * 100_000) < 0.01 * 100_000, q
    assert TDigest.merged([]) == TDigest(100, (), ())


@pytest.fixture(scope="module")
def timings(tmp_path_factory: pytest.TempPathFactory) -> Broker:
    """A tDigestSketch metric's column ({tDigestSketch: bytes}, as ingestion writes it) over two hourly segments:
    each hour holds half of each channel's latencies, digested per row."""
    tmp_path = tmp_path_factory.mktemp("timings")
    day = datetime(2024, 1, 1, tzinfo=UTC)
    latencies = {"#en": np.arange(1, 1001, dtype=np.float64), "#fr": np.arange(1001, 2001, dtype=np.float64)}
    files = []
    for hour in range(2):  # each hour's half of each channel's values, digested per row
        rows = [(channel, TDigest.of(values[hour::2]).serialize()) for channel, values in latencies.items()]
        path = tmp_path / f"hour-{hour}" / "index.parquet"
        path.parent.mkdir()
        pq.write_table(pa.table({
            "__time": pa.array([day + timedelta(hours=hour)] * 2, pa.timestamp("ms", tz="UTC")),
            "channel": [channel for channel, _ in rows],
            "latency": pa.array([{TDIGEST: data} for _, data in rows], pa.struct([(TDIGEST, pa.binary())])),
            "users": pa.array([{HLL: ds.hll_sketch(12).serialize_compact()}] * 2, pa.struct([(HLL, pa.binary())])),
        }), path)
        files.append((path, Interval(day + timedelta(hours=hour), day + timedelta(hours=hour + 1))))
    return broker_over(tmp_path / "broker", tmp_path, "timings", files, ["channel"],
                       [{"type": "tDigestSketch", "name": "latency", "fieldName": "latency"},
                        {"type": "HLLSketchBuild", "name": "users", "fieldName": "users"}])


def test_sql_over_a_column_of_digests_merges_them(timings: Broker) -> None:
    """TDIGEST_QUANTILE and TDIGEST_GENERATE_SKETCH merge the rows' digests, per group and over segments."""
    rows = timings.sql("SELECT channel, TDIGEST_QUANTILE(latency, 0.5) AS p50, TDIGEST_GENERATE_SKETCH(latency, 200) "
                      "AS d FROM timings GROUP BY channel ORDER BY channel").rows
    assert [(channel, round(p50)) for channel, p50, _ in rows] == [("#en", 500), ("#fr", 1500)]
    sketches = [TDigest.deserialize(base64.b64decode(d)) for _, _, d in rows]
    assert [(sum(s.weights), s.min, s.max, s.compression) for s in sketches] == [
        (1000, 1.0, 1000.0, 200.0), (1000, 1001.0, 2000.0, 200.0)]
    [(overall,)] = timings.sql("SELECT TDIGEST_QUANTILE(latency, 0.9) FROM timings").rows
    assert abs(overall - 1800) < 20
    with pytest.raises(SqlError, match="TDIGEST_QUANTILE cannot read column users of type COMPLEX<HLLSketch>"):
        timings.sql("SELECT TDIGEST_QUANTILE(users, 0.5) FROM timings")


def test_native_tdigest_aggregator_and_quantiles_post_aggregator(timings: Broker) -> None:
    """The extension's tDigestSketch aggregator answers with the merged digest (Base64), quantilesFromTDigestSketch
    with the digest's values at the fractions."""
    [row] = NativeQueryRunner(timings).run({
        "queryType": "timeseries", "dataSource": "timings", "intervals": ["2024-01-01/2024-01-02"],
        "granularity": "all",
        "aggregations": [{"type": "tDigestSketch", "name": "digest", "fieldName": "latency", "compression": 200}],
        "postAggregations": [{"type": "quantilesFromTDigestSketch", "name": "quantiles",
                              "field": {"type": "fieldAccess", "fieldName": "digest"}, "fractions": [0, 0.5, 1]}]})
    digest = TDigest.deserialize(base64.b64decode(row["result"]["digest"]))
    assert (sum(digest.weights), digest.min, digest.max, digest.compression) == (2000, 1.0, 2000.0, 200.0)
    low, median, high = row["result"]["quantiles"]
    assert (low, high) == (1.0, 2000.0) and abs(median - 1000) < 20
