"""TDIGEST_GENERATE_SKETCH: a merging t-digest in MergingDigest's verbose byte layout, as Druid serializes it."""

from __future__ import annotations

import struct

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from sluice.broker import tdigest
from sluice.broker.errors import SqlError
from sluice.broker.sql import translate_query
from sluice.broker.tdigest import TDIGEST, TDigest


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
