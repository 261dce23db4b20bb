"""TDIGEST_GENERATE_SKETCH and TDIGEST_QUANTILE over a column of digests, as DuckDB Python functions over Arrow
columns; the digest itself is `sluice.tdigest`."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa

from sluice.broker.functions.bloom import arrow_udf
from sluice.tdigest import TDIGEST, TDigest

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


def _merge(lists: pa.Array, compressions: pa.Array) -> pa.Array:
    """SLUICE_TDIGEST_MERGE's groups: each list of digests merged at its compression (null digests skipped)."""
    out = []
    for digests, compression in zip(lists.to_pylist(), compressions.to_pylist()):
        parts = [TDigest.deserialize(d[TDIGEST]) for d in digests or () if d is not None and d[TDIGEST] is not None]
        out.append({TDIGEST: TDigest.merged(parts, compression).serialize()})
    return pa.array(out, pa.struct([(TDIGEST, pa.binary())]))


def _quantile(digests: pa.Array, fractions: pa.Array) -> pa.Array:
    """SLUICE_TDIGEST_QUANTILE: the quantile of each digest (null for a null digest)."""
    return pa.array([None if d is None or d[TDIGEST] is None else TDigest.deserialize(d[TDIGEST]).quantile(q)
                     for d, q in zip(digests.to_pylist(), fractions.to_pylist())], pa.float64())


#: what translated calls of TDIGEST_GENERATE_SKETCH and TDIGEST_QUANTILE over a column of digests use (not Druid's)
MERGE, QUANTILE = "SLUICE_TDIGEST_MERGE", "SLUICE_TDIGEST_QUANTILE"
#: the names of the functions, which a query needs registered on its connection (see `register`)
FUNCTIONS = frozenset({"TDIGEST_GENERATE_SKETCH", MERGE, QUANTILE})


def register(conn: duckdb.DuckDBPyConnection) -> None:
    """On a connection: TDIGEST_GENERATE_SKETCH(values, compression), `values` an ARRAY_AGG of the group's DOUBLEs
    (nulls as NaN, which no digest takes); SLUICE_TDIGEST_MERGE(digests, compression), `digests` an ARRAY_AGG of a
    digest column; SLUICE_TDIGEST_QUANTILE(digest, fraction)."""
    digest = duckdb.struct_type({TDIGEST: "BLOB"})
    conn.create_function("TDIGEST_GENERATE_SKETCH", arrow_udf(_build, 2), [duckdb.list_type("DOUBLE"), "INTEGER"],
                         digest, type="arrow", null_handling="special")
    conn.create_function(MERGE, arrow_udf(_merge, 2), [duckdb.list_type(digest), "INTEGER"],
                         digest, type="arrow", null_handling="special")
    conn.create_function(QUANTILE, arrow_udf(_quantile, 2), [digest, "DOUBLE"], "DOUBLE",
                         type="arrow", null_handling="special")
