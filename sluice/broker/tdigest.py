"""Druid's t-digest sketch (the druid-tdigestsketch extension): TDIGEST_GENERATE_SKETCH, as a DuckDB Python
aggregate over Arrow columns.

Druid keeps a com.tdunning MergingDigest and serializes it with `asBytes` (TDigestSketchUtils): the verbose encoding,
big-endian, `int 1, double min, double max, double compression, int centroids`, then each centroid's
`double weight, double mean` in order of mean. The digest here is a merging t-digest under the k1 scale function
(Dunning and Ertl, "Computing extremely accurate quantiles using t-digests"): the values sorted, then merged into
centroids whose k1 span is at most 1, so that centroids are small at both tails: about `compression` / 2 centroids,
a few values kept exactly. Over a column of digests (rather than values) it is not supported yet.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

from sluice.broker.bloom import arrow_udf

#: Druid's complex type name of the sketch
TDIGEST = "tDigestSketch"
#: TDigestSketchAggregatorFactory's default compression
DEFAULT_COMPRESSION = 100
_VERBOSE_ENCODING = 1
_HEADER = struct.Struct(">idddi")
_CENTROID = struct.Struct(">dd")


@dataclass(frozen=True)
class TDigest:
    compression: float
    means: tuple[float, ...]
    weights: tuple[float, ...]
    min: float = math.inf  # a digest of no values, as MergingDigest starts
    max: float = -math.inf

    @classmethod
    def of(cls, values: np.ndarray, compression: float = DEFAULT_COMPRESSION) -> TDigest:
        """The digest of `values` (no NaN)."""
        if not len(values):
            return cls(compression, (), ())
        ordered = np.sort(values.astype(np.float64))
        total = len(ordered)
        means: list[float] = []
        weights: list[float] = []
        mean, weight, before = float(ordered[0]), 1.0, 0.0
        limit = _q_limit(0.0, compression)
        for value in ordered[1:]:
            if (before + weight + 1) / total <= limit:
                weight += 1
                mean += (float(value) - mean) / weight
                continue
            means.append(mean)
            weights.append(weight)
            before += weight
            limit = _q_limit(before / total, compression)
            mean, weight = float(value), 1.0
        means.append(mean)
        weights.append(weight)
        return cls(compression, tuple(means), tuple(weights), float(ordered[0]), float(ordered[-1]))

    def serialize(self) -> bytes:
        """MergingDigest.asBytes."""
        header = _HEADER.pack(_VERBOSE_ENCODING, self.min, self.max, self.compression, len(self.means))
        return header + b"".join(_CENTROID.pack(w, m) for w, m in zip(self.weights, self.means))

    @classmethod
    def deserialize(cls, data: bytes) -> TDigest:
        """MergingDigest.fromBytes of the verbose encoding; ValueError for anything else."""
        if len(data) < _HEADER.size:
            raise ValueError("not a serialized t-digest: too short")
        encoding, low, high, compression, count = _HEADER.unpack_from(data)
        if encoding != _VERBOSE_ENCODING or len(data) != _HEADER.size + count * _CENTROID.size:
            raise ValueError(f"not a t-digest in the verbose encoding (encoding {encoding}, {len(data)} bytes)")
        pairs = [_CENTROID.unpack_from(data, _HEADER.size + i * _CENTROID.size) for i in range(count)]
        return cls(compression, tuple(m for _, m in pairs), tuple(w for w, _ in pairs), low, high)


def _k1(q: float, compression: float) -> float:
    return compression / (2 * math.pi) * math.asin(2 * q - 1)


def _q_limit(q: float, compression: float) -> float:
    """The largest quantile a centroid starting at `q` may reach: one k1 unit further, at most 1."""
    k = min(_k1(q, compression) + 1, compression / 4)
    return (math.sin(k * 2 * math.pi / compression) + 1) / 2


# ------------------------------------------------------------------------------------------------- Arrow function


def _build(lists: pa.Array, compressions: pa.Array) -> pa.Array:
    """TDIGEST_GENERATE_SKETCH's groups: each list of values digested at its compression (a group without values is
    the empty digest, as Druid's aggregator gives)."""
    offsets = lists.offsets.to_numpy(zero_copy_only=False)
    values = lists.values.to_numpy(zero_copy_only=False) if len(lists.values) else np.array([], np.float64)
    out = []
    for i, compression in enumerate(compressions.to_pylist()):
        group = values[int(offsets[i]):int(offsets[i + 1])]
        digest = TDigest.of(group[~np.isnan(group)], compression)
        out.append({TDIGEST: digest.serialize()})
    return pa.array(out, pa.struct([(TDIGEST, pa.binary())]))


#: the names of the functions, which a query needs registered on its connection (see `register`)
FUNCTIONS = frozenset({"TDIGEST_GENERATE_SKETCH"})


def register(conn: duckdb.DuckDBPyConnection) -> None:
    """TDIGEST_GENERATE_SKETCH(values, compression) on a connection: `values` an ARRAY_AGG of the group's DOUBLEs
    (nulls as NaN, which no digest takes)."""
    conn.create_function("TDIGEST_GENERATE_SKETCH", arrow_udf(_build, 2), [duckdb.list_type("DOUBLE"), "INTEGER"],
                         duckdb.struct_type({TDIGEST: "BLOB"}), type="arrow", null_handling="special")
