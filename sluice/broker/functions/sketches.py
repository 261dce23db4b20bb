"""Apache DataSketches objects at query time, as DuckDB Python functions over Arrow columns.

A sketch inside a query is a one-field STRUCT named after Druid's complex type (`{'HLLSketch': <bytes>}`), the bytes
being the sketch serialized as DataSketches does in every language (Druid's HLL, Theta and Quantiles bytes). The
name travels with the type, so DuckDB refuses a Theta sketch where an HLL sketch is expected when it binds the
query, and the result says COMPLEX<HLLSketch> even when it has no rows. A Tuple sketch's summaries (arrays of
doubles) are written with the Python library's own serde, which Druid's ArrayOfDoublesSketch cannot read.

DuckDB's Python API has no aggregate functions: an aggregate is its values gathered by LIST and built into a sketch
here, one call per group. The values arrive as a UNION of the types a column can have (text, integers, doubles and
the sketch itself), so one function builds a sketch from raw values and merges a column of sketches, as Druid's
sketch aggregators do.
"""

from __future__ import annotations

import base64
import inspect
import json
import math
import struct
from collections.abc import Callable, Iterable
from typing import Any

import datasketches as ds
import duckdb
import numpy as np
import pyarrow as pa

HLL, THETA, QUANTILES, TUPLE = "HLLSketch", "thetaSketch", "quantilesDoublesSketch", "arrayOfDoublesSketch"
#: the Druid complex type names of the sketches
KINDS = (HLL, THETA, QUANTILES, TUPLE)
#: What native queries need of a quantiles sketch and Druid SQL has no function for: the count of its values (the
#: quantilesDoublesSketch aggregator's finalized value) and a histogram over a number of equal bins. Native queries
#: run as Druid SQL, so these are functions of Sluice's SQL too, under names of its own.
QUANTILES_COUNT, HISTOGRAM_BINS = "SLUICE_QUANTILES_SKETCH_COUNT", "SLUICE_QUANTILES_SKETCH_HISTOGRAM"


def to_base64(value: dict[str, bytes]) -> str:
    """A sketch as Druid writes a complex value in a result: Base64 of its bytes."""
    return base64.b64encode(next(iter(value.values()))).decode("ascii")


# --------------------------------------------------------------------------------------------------------- sketches


def _hll(data: bytes) -> ds.hll_sketch:
    return ds.hll_sketch.deserialize(data)


def _theta(data: bytes) -> ds.compact_theta_sketch:
    return ds.compact_theta_sketch.deserialize(data)


def _quantiles(data: bytes) -> ds.quantiles_doubles_sketch:
    return ds.quantiles_doubles_sketch.deserialize(data)


class _SummedDoubles(ds.TuplePolicy):
    """Druid's ArrayOfDoubles summaries: an update and a union add the arrays element by element."""

    def create_summary(self) -> tuple[float, ...]:
        return ()

    def update_summary(self, summary: tuple[float, ...], update: Iterable[float]) -> tuple[float, ...]:
        return tuple(update) if not summary else tuple(a + b for a, b in zip(summary, update))

    def __call__(self, summary: tuple[float, ...], update: Iterable[float]) -> tuple[float, ...]:
        return self.update_summary(summary, update)


class _DoublesSerDe(ds.PyObjectSerDe):
    """A summary as its count of doubles (one byte), then the doubles, little-endian."""

    def get_size(self, item: tuple[float, ...]) -> int:
        return 1 + 8 * len(item)

    def to_bytes(self, item: tuple[float, ...]) -> bytes:
        return struct.pack(f"<B{len(item)}d", len(item), *item)

    def from_bytes(self, data: bytes, offset: int) -> tuple[tuple[float, ...], int]:
        count = data[offset]
        return struct.unpack_from(f"<{count}d", data, offset + 1), 1 + 8 * count


_POLICY, _SERDE = _SummedDoubles(), _DoublesSerDe()


def _tuple(data: bytes) -> ds.compact_tuple_sketch:
    return ds.compact_tuple_sketch.deserialize(data, _SERDE)


def _lg(size: int) -> int:
    """log2 of Druid's size / nominal entries (a power of 2, checked when the call is translated)."""
    return size.bit_length() - 1


# ------------------------------------------------------------------------------------------------------ aggregates


def _values(values: list[Any]) -> Iterable[Any]:
    """The non-null raw values and sketch bytes of one group."""
    for value in values:
        if isinstance(value, dict):
            value = next(iter(value.values()))
        if value is not None:
            yield value


def _build_hll(values: list[Any], lg_k: int, target: str) -> bytes:
    kind = getattr(ds.tgt_hll_type, target)
    sketch, union = ds.hll_sketch(lg_k, kind), None
    for value in _values(values):
        if isinstance(value, bytes):
            union = ds.hll_union(lg_k) if union is None else union
            union.update(_hll(value))
        else:
            sketch.update(value)
    if union is not None:
        union.update(sketch)
        sketch = union.get_result(kind)
    return sketch.serialize_compact()


def _build_theta(values: list[Any], size: int) -> bytes:
    sketch, union = ds.update_theta_sketch(_lg(size)), None
    for value in _values(values):
        if isinstance(value, bytes):
            union = ds.theta_union(_lg(size)) if union is None else union
            union.update(_theta(value))
        else:
            sketch.update(value)
    if union is None:
        return sketch.compact().serialize()
    union.update(sketch)
    return union.get_result().serialize()


def _build_quantiles(values: list[Any], k: int) -> bytes:
    sketch = ds.quantiles_doubles_sketch(k)
    for value in _values(values):
        if isinstance(value, bytes):
            sketch.merge(_quantiles(value))
        else:
            sketch.update(value)
    return sketch.serialize()


def _build_tuple(rows: list[dict[str, Any]], nominal_entries: int) -> bytes:
    """Rows of {k: key text, v: [values]}: Druid skips a row whose key is null."""
    sketch = ds.update_tuple_sketch(_POLICY, _lg(nominal_entries))
    for row in rows:
        if row is not None and row["k"] is not None:
            sketch.update(row["k"], tuple(math.nan if v is None else v for v in row["v"]))
    return sketch.compact().serialize(_SERDE)


# ------------------------------------------------------------------------------------------------- set operations


def _theta_set(operation: str) -> Callable[[list[Any], int], bytes]:
    def apply(sketches: list[Any], size: int) -> bytes:
        inputs = [_theta(data) for data in _values(sketches)]
        if operation == "UNION":
            union = ds.theta_union(_lg(size))
            for sketch in inputs:
                union.update(sketch)
            return union.get_result().serialize()
        if operation == "INTERSECT":
            intersection = ds.theta_intersection()
            for sketch in inputs:
                intersection.update(sketch)
            return (intersection.get_result() if intersection.has_result()
                    else ds.update_theta_sketch(_lg(size)).compact()).serialize()
        result = inputs[0] if inputs else ds.update_theta_sketch(_lg(size)).compact()
        for sketch in inputs[1:]:
            result = ds.theta_a_not_b().compute(result, sketch)
        return result.serialize()
    return apply


def _tuple_set(operation: str) -> Callable[[list[Any], int], bytes]:
    """Druid's ArrayOfDoublesSketchSetOpPostAggregator: a union and an intersection add the values of a key, A NOT B
    keeps A's."""
    def apply(sketches: list[Any], nominal_entries: int) -> bytes:
        inputs = [_tuple(data) for data in _values(sketches)]
        empty = ds.update_tuple_sketch(_POLICY, _lg(nominal_entries)).compact()
        if operation == "UNION":
            union = ds.tuple_union(_POLICY, _lg(nominal_entries))
            for sketch in inputs:
                union.update(sketch)
            return union.get_result().serialize(_SERDE)
        if operation == "INTERSECT":
            intersection = ds.tuple_intersection(_POLICY)
            for sketch in inputs:
                intersection.update(sketch)
            return (intersection.get_result() if intersection.has_result() else empty).serialize(_SERDE)
        result = inputs[0] if inputs else empty
        for sketch in inputs[1:]:
            result = ds.tuple_a_not_b().compute(result, sketch)
        return result.serialize(_SERDE)
    return apply


# ------------------------------------------------------------------------------------------------------ estimates


def _hll_summary(data: bytes) -> str:
    """The C++ summary under Java's heading and footer, which Druid's HLL_SKETCH_TO_STRING writes."""
    lines = _hll(data).to_string().rstrip("\n").split("\n")
    return "\n".join(["### HLL SKETCH SUMMARY: ", *lines[1:-1], "### END SKETCH SUMMARY"]) + "\n"


def _theta_bounds(data: bytes, std_devs: int) -> str:
    """Druid's SketchEstimateWithErrorBounds as JSON text (the translated call casts it to JSON)."""
    sketch = _theta(data)
    return json.dumps({"estimate": sketch.get_estimate(), "highBound": sketch.get_upper_bound(std_devs),
                       "lowBound": sketch.get_lower_bound(std_devs), "numStdDev": std_devs})


def _java_doubles(values: Iterable[float]) -> str:
    """An array of doubles as Druid's DS_GET_QUANTILES, DS_HISTOGRAM and DS_CDF write it: `[3.0,5.0]`."""
    return "[" + ",".join("NaN" if math.isnan(v) else repr(float(v)) for v in values) + "]"


def _quantiles_of(data: bytes, fractions: list[float]) -> str:
    sketch = _quantiles(data)
    return _java_doubles(math.nan for _ in fractions) if sketch.is_empty() else _java_doubles(
        sketch.get_quantiles(fractions))


def _histogram(data: bytes, split_points: list[float]) -> str:
    """The PMF over the split points times the count of values (NaN for an empty sketch), as Druid's
    DoublesSketchToHistogramPostAggregator makes it."""
    return _counts(_quantiles(data), split_points, len(split_points) + 1)


def _histogram_bins(data: bytes, bins: int) -> str:
    """The histogram over `bins` equal bins from the least value to the greatest, as Druid's histogram
    post-aggregator makes it when given numBins instead of split points."""
    sketch = _quantiles(data)
    if sketch.is_empty():
        return _counts(sketch, [], bins)
    low, step = sketch.get_min_value(), (sketch.get_max_value() - sketch.get_min_value()) / bins
    return _counts(sketch, [low + step * (i + 1) for i in range(bins - 1)], bins)


def _counts(sketch: ds.quantiles_doubles_sketch, split_points: list[float], bins: int) -> str:
    if sketch.is_empty():
        return _java_doubles(math.nan for _ in range(bins))
    return _java_doubles(p * sketch.n for p in sketch.get_pmf(split_points))


def _cdf(data: bytes, split_points: list[float]) -> str:
    sketch = _quantiles(data)
    if sketch.is_empty():
        return _java_doubles(math.nan for _ in range(len(split_points) + 1))
    return _java_doubles(sketch.get_cdf(split_points))


def _metrics_sum(data: bytes) -> list[float]:
    """Druid's ArrayOfDoublesSketchToMetricsSumEstimatePostAggregator: each column of values summed over the retained
    keys, scaled by 1/theta."""
    sketch = _tuple(data)
    sums: list[float] = []
    for _, summary in sketch:
        sums = list(summary) if not sums else [a + b for a, b in zip(sums, summary)]
    return [total / sketch.theta for total in sums]


# ------------------------------------------------------------------------------------------------- registration


def _sketch_type(kind: str) -> duckdb.sqltypes.DuckDBPyType:
    return duckdb.struct_type({kind: "BLOB"})


def _raw_or(kind: str) -> duckdb.sqltypes.DuckDBPyType:
    """What DS_HLL / DS_THETA read: a text, integer or double value, or a sketch of their kind to merge."""
    members = {"s": "VARCHAR", "l": "BIGINT", "d": "DOUBLE", "sketch": _sketch_type(kind)}
    return duckdb.list_type(duckdb.union_type(members))


def _quantile(data: bytes, fraction: float) -> float:
    sketch = _quantiles(data)
    return math.nan if sketch.is_empty() else sketch.get_quantile(fraction)


def _rank(data: bytes, value: float) -> float:
    sketch = _quantiles(data)
    return math.nan if sketch.is_empty() else sketch.get_rank(value)


def _hll_bounds(data: bytes, std_devs: int) -> list[float]:
    sketch = _hll(data)
    return [sketch.get_estimate(), sketch.get_lower_bound(std_devs), sketch.get_upper_bound(std_devs)]


_ARROW_TYPES = {"BIGINT": pa.int64(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
                "DOUBLE[]": pa.list_(pa.float64())}


def _python_values(column: pa.ChunkedArray) -> list[Any]:
    """A column's values as Python values; a LIST of UNIONs (an aggregate's values) is read from the union's member
    arrays, several times faster than pyarrow's own conversion, which makes an object per union value."""
    lists = column.combine_chunks()
    if not (pa.types.is_list(lists.type) and pa.types.is_union(lists.type.value_type)):
        return lists.to_pylist()
    offsets, codes = lists.offsets.to_numpy(), lists.values.type_codes.to_numpy()
    nulls = lists.is_null().to_numpy(zero_copy_only=False)
    out: list[Any] = []
    for i, null in enumerate(nulls):
        start, end = int(offsets[i]), int(offsets[i + 1])
        values: list[Any] = []
        for code in np.unique(codes[start:end]):
            member = lists.values.field(int(code)).slice(start, end - start)
            values += member.filter(pa.array(codes[start:end] == code)).to_pylist()
        out.append(None if null else values)
    return out


def _arrow_function(body: Callable[..., Any], result: str, aggregate: bool, arity: int) -> Callable[..., pa.Array]:
    """An Arrow UDF applying `body` row by row. `body` gets a sketch's bytes for a sketch, and returns the bytes of
    the sketch of kind `result` where `result` is one. A NULL first argument (the sketch) is a NULL result, except
    for an aggregate, where it is the LIST of a group without rows: the empty sketch, as Druid's aggregators give."""
    arrow = pa.struct([(result, pa.binary())]) if result in KINDS else _ARROW_TYPES[result]

    def udf(*columns: pa.ChunkedArray) -> pa.Array:
        out = []
        for first, *rest in zip(*(_python_values(column) for column in columns)):
            if first is None and not aggregate:
                out.append(None)
                continue
            value = body(next(iter(first.values())) if isinstance(first, dict) else first or [], *rest)
            out.append({result: value} if result in KINDS else value)
        return pa.array(out, arrow)

    # DuckDB counts the parameters of the Python function against the declared ones.
    udf.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter(f"argument{i}", inspect.Parameter.POSITIONAL_ONLY) for i in range(arity)])
    return udf


def _functions() -> list[tuple[str, Callable[..., Any], list[Any], str, bool]]:
    """(name, body, parameter types, result, is an aggregate) of every sketch function."""
    hll, theta, quantiles, tuple_ = (_sketch_type(kind) for kind in KINDS)
    sketches = {kind: duckdb.list_type(_sketch_type(kind)) for kind in KINDS}
    tuple_rows = duckdb.list_type(duckdb.struct_type({"k": "VARCHAR", "v": "DOUBLE[]"}))
    quantile_values = duckdb.list_type(duckdb.union_type({"d": "DOUBLE", "sketch": quantiles}))
    aggregates: list[tuple[str, Callable[..., Any], list[Any], str]] = [
        ("DS_HLL", _build_hll, [_raw_or(HLL), "INTEGER", "VARCHAR"], HLL),
        ("DS_THETA", _build_theta, [_raw_or(THETA), "INTEGER"], THETA),
        ("DS_QUANTILES_SKETCH", _build_quantiles, [quantile_values, "INTEGER"], QUANTILES),
        ("DS_TUPLE_DOUBLES", _build_tuple, [tuple_rows, "INTEGER"], TUPLE),
    ]
    scalars: list[tuple[str, Callable[..., Any], list[Any], str]] = [
        ("HLL_SKETCH_UNION", _build_hll, [sketches[HLL], "INTEGER", "VARCHAR"], HLL),
        ("HLL_SKETCH_ESTIMATE", lambda data: _hll(data).get_estimate(), [hll], "DOUBLE"),
        ("HLL_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS", _hll_bounds, [hll, "INTEGER"], "DOUBLE[]"),
        ("HLL_SKETCH_TO_STRING", _hll_summary, [hll], "VARCHAR"),
        ("THETA_SKETCH_ESTIMATE", lambda data: _theta(data).get_estimate(), [theta], "DOUBLE"),
        ("THETA_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS", _theta_bounds, [theta, "INTEGER"], "VARCHAR"),
        *((f"THETA_SKETCH_{op}", _theta_set(op), [sketches[THETA], "INTEGER"], THETA)
          for op in ("UNION", "INTERSECT", "NOT")),
        ("DS_GET_QUANTILE", _quantile, [quantiles, "DOUBLE"], "DOUBLE"),
        ("DS_GET_QUANTILES", _quantiles_of, [quantiles, "DOUBLE[]"], "VARCHAR"),
        ("DS_HISTOGRAM", _histogram, [quantiles, "DOUBLE[]"], "VARCHAR"),
        (HISTOGRAM_BINS, _histogram_bins, [quantiles, "INTEGER"], "VARCHAR"),
        ("DS_CDF", _cdf, [quantiles, "DOUBLE[]"], "VARCHAR"),
        ("DS_RANK", _rank, [quantiles, "DOUBLE"], "DOUBLE"),
        ("DS_QUANTILE_SUMMARY", lambda data: _quantiles(data).to_string(), [quantiles], "VARCHAR"),
        (QUANTILES_COUNT, lambda data: _quantiles(data).n, [quantiles], "BIGINT"),
        ("DS_TUPLE_DOUBLES_METRICS_SUM_ESTIMATE", _metrics_sum, [tuple_], "DOUBLE[]"),
        *((f"DS_TUPLE_DOUBLES_{op}", _tuple_set(op), [sketches[TUPLE], "INTEGER"], TUPLE)
          for op in ("UNION", "INTERSECT", "NOT")),
    ]
    return [(*function, True) for function in aggregates] + [(*function, False) for function in scalars]


_FUNCTIONS = _functions()
#: the names of the sketch functions, which a query needs registered on its connection (see `register`)
FUNCTIONS = frozenset(name for name, *_ in _FUNCTIONS)


def register(conn: duckdb.DuckDBPyConnection) -> None:
    """The sketch functions on a connection (every cursor of it sees them), named as the Druid functions whose
    translated calls use them."""
    for name, body, parameters, result, aggregate in _FUNCTIONS:
        duckdb_result = _sketch_type(result) if result in KINDS else result
        conn.create_function(name, _arrow_function(body, result, aggregate, len(parameters)),
                             parameters, duckdb_result, type="arrow", null_handling="special")
