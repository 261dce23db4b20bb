"""Druid's t-digest sketch (the druid-tdigestsketch extension), as ingestion builds it and the broker reads it.

Druid keeps a com.tdunning MergingDigest and serializes it with `asBytes` (TDigestSketchUtils): the verbose encoding,
big-endian, `int 1, double min, double max, double compression, int centroids`, then each centroid's
`double weight, double mean` in order of mean. The digest here is a merging t-digest under the k1 scale function
(Dunning and Ertl, "Computing extremely accurate quantiles using t-digests"): the values sorted, then merged into
centroids whose k1 span is at most 1, so that centroids are small at both tails: about `compression` / 2 centroids,
a few values kept exactly. Digests merge as MergingDigest.add(digest) does, their centroids compressed again under
the same rule, and a quantile is read off as MergingDigest.quantile reads it.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

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
        return cls._compressed(ordered, np.ones(len(ordered)), compression, float(ordered[0]), float(ordered[-1]))

    @classmethod
    def merged(cls, digests: list[TDigest], compression: float = DEFAULT_COMPRESSION) -> TDigest:
        """One digest of what `digests` digested: every centroid of theirs, in order of mean, compressed again."""
        digests = [d for d in digests if d.weights]
        if not digests:
            return cls(compression, (), ())
        means = np.concatenate([np.asarray(d.means) for d in digests])
        weights = np.concatenate([np.asarray(d.weights) for d in digests])
        order = np.argsort(means, kind="stable")
        return cls._compressed(means[order], weights[order], compression, min(d.min for d in digests),
                               max(d.max for d in digests))

    @classmethod
    def _compressed(cls, means: np.ndarray, weights: np.ndarray, compression: float, low: float,
                    high: float) -> TDigest:
        """Centroids (`means` in order, each of its weight; single values weigh 1) merged left to right while a
        centroid spans at most one k1 unit."""
        total = float(weights.sum())
        merged_means: list[float] = []
        merged_weights: list[float] = []
        mean, weight, before = float(means[0]), float(weights[0]), 0.0
        limit = _q_limit(0.0, compression)
        for value, value_weight in zip(means[1:].tolist(), weights[1:].tolist()):
            if (before + weight + value_weight) / total <= limit:
                weight += value_weight
                mean += (value - mean) * value_weight / weight
                continue
            merged_means.append(mean)
            merged_weights.append(weight)
            before += weight
            limit = _q_limit(before / total, compression)
            mean, weight = value, value_weight
        merged_means.append(mean)
        merged_weights.append(weight)
        return cls(compression, tuple(merged_means), tuple(merged_weights), low, high)

    def quantile(self, q: float) -> float:
        """MergingDigest.quantile: interpolated between centroid centres, a centroid of one value being exactly
        that value, and towards min and max at the ends; NaN for an empty digest."""
        if not 0 <= q <= 1:
            raise ValueError(f"a quantile is between 0 and 1, got {q}")
        means, weights, n = self.means, self.weights, len(self.means)
        if n == 0:
            return math.nan
        if n == 1:
            return means[0]
        total = sum(weights)
        index = q * total
        if index < 1:
            return self.min
        if weights[0] > 1 and index < weights[0] / 2:
            return self.min + (index - 1) / (weights[0] / 2 - 1) * (means[0] - self.min)
        if index > total - 1:
            return self.max
        if weights[-1] > 1 and total - index <= weights[-1] / 2:
            return self.max - (total - index - 1) / (weights[-1] / 2 - 1) * (self.max - means[-1])
        so_far = weights[0] / 2
        for i in range(n - 1):
            step = (weights[i] + weights[i + 1]) / 2
            if so_far + step > index:
                left = right = 0.0
                if weights[i] == 1:
                    if index - so_far < 0.5:
                        return means[i]
                    left = 0.5
                if weights[i + 1] == 1:
                    if so_far + step - index <= 0.5:
                        return means[i + 1]
                    right = 0.5
                return _weighted_average(means[i], so_far + step - index - right, means[i + 1],
                                         index - so_far - left)
            so_far += step
        beyond = index - total - weights[-1] / 2
        return _weighted_average(means[-1], beyond, self.max, weights[-1] / 2 - beyond)

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


def _weighted_average(x1: float, w1: float, x2: float, w2: float) -> float:
    """MergingDigest's weightedAverage: kept between the two values whatever rounding does."""
    low, high = min(x1, x2), max(x1, x2)
    return max(low, min(high, (x1 * w1 + x2 * w2) / (w1 + w2)))


def _k1(q: float, compression: float) -> float:
    return compression / (2 * math.pi) * math.asin(2 * q - 1)


def _q_limit(q: float, compression: float) -> float:
    """The largest quantile a centroid starting at `q` may reach: one k1 unit further, at most 1."""
    k = min(_k1(q, compression) + 1, compression / 4)
    return (math.sin(k * 2 * math.pi / compression) + 1) / 2
