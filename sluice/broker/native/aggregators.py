"""Aggregators and post-aggregators of native queries as Druid SQL expressions."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import reduce
from typing import Any

from sqlglot import exp

from sluice.broker.native import query as q
from sluice.broker.native import sketches as sk
from sluice.broker.sql.complex_types import is_pair, pair_part
from sluice.broker.native.filters import (
    SQL_TYPES,
    Columns,
    all_of,
    cast_to,
    dimension_value,
    filter_condition,
)
from sluice.broker.functions.scalar_functions import as_long
from sluice.broker.functions.sketches import HISTOGRAM_BINS, HLL, QUANTILES, QUANTILES_COUNT, THETA
from sluice.broker.functions.tdigest import QUANTILE as TDIGEST_QUANTILE
from sluice.expressions import ExpressionError, druid_function, to_sql
from sluice.spec.errors import SpecError
from sluice.tdigest import TDIGEST

# ---------------------------------------------------------------------------------------------------- aggregators


_NUMERIC = {"longSum": exp.Sum, "doubleSum": exp.Sum, "floatSum": exp.Sum, "longMin": exp.Min, "doubleMin": exp.Min,
            "floatMin": exp.Min, "longMax": exp.Max, "doubleMax": exp.Max, "floatMax": exp.Max, "doubleMean": exp.Avg,
            "longAny": exp.AnyValue, "doubleAny": exp.AnyValue, "floatAny": exp.AnyValue}
_MAX_STRING_BYTES = 1024  # stringFirst / stringLast keep this much of a value unless told otherwise


def unfinalized(context: Mapping[str, Any]) -> bool:
    """Druid's query context `finalize: false`: aggregators answer with their intermediate values (a sketch, a
    first/last aggregator's time and value pair) instead of what those finalize to."""
    return context.get("finalize", True) in (False, "false")


def aggregate(spec: q.Aggregator, columns: Columns, condition: exp.Expr | None, unfinalized: bool = False) -> exp.Expr:
    """One aggregator over the rows that pass `condition`, as post-aggregators' fieldAccess reads it: a sketch
    aggregator's sketch, and when `unfinalized` a first/last aggregator's {lhs: time, rhs: value} and a cardinality's
    sketch too (`finalize` makes their answers). Over no rows, count and cardinality give 0, sketches are empty and
    the others null, as Druid's SQL-compatible mode fills empty buckets."""
    if isinstance(spec, q.FilteredAggregator):
        passing = all_of(condition, filter_condition(spec.filter, columns))
        return aggregate(spec.aggregator, columns, passing, unfinalized)
    function, finish = _aggregate_function(spec, columns, unfinalized)
    if condition is not None:
        function = exp.Filter(this=function, expression=exp.Where(this=condition.copy()))
    return finish(function)


def _aggregate_function(spec: q.Aggregator, columns: Columns,
                        unfinalized: bool) -> tuple[exp.Expr, Callable[[exp.Expr], exp.Expr]]:
    """The aggregate function call, and what is done to its result (outside any FILTER clause)."""
    unchanged: Callable[[exp.Expr], exp.Expr] = lambda value: value  # noqa: E731
    if isinstance(spec, q.CountAggregator):
        return exp.Count(this=exp.Star()), unchanged
    if isinstance(spec, q.NumericAggregator):
        if spec.expression is not None:
            try:
                source = to_sql(spec.expression, columns.expression_ref)
            except ExpressionError as e:
                raise SpecError(f"aggregations.{spec.name}", str(e)) from None
        else:
            source = columns.sql(spec.field_name or "", null_type="DOUBLE")
            if spec.type.endswith("Any") and is_pair(_complex_type(columns, spec.field_name or "")):
                return druid_function("ANY_VALUE", source), unchanged  # a pair's value, as stringAny reads one
        if not spec.type.startswith("long"):
            source = exp.TryCast(this=source, to=exp.DataType.build("DOUBLE"))
        elif spec.expression is None and columns.sql_type(spec.field_name or "") in ("DOUBLE", "FLOAT", "REAL"):
            source = as_long(source)  # Druid's long aggregators read each value as a long
        return _NUMERIC[spec.type](this=source), unchanged
    if isinstance(spec, q.FirstLastAggregator):
        string = spec.type.startswith("string")
        source = columns.sql(spec.field_name, null_type="VARCHAR" if string else "DOUBLE")
        if unfinalized and spec.type != "stringAny":
            return _pair_of(spec, source, columns), unchanged
        if is_pair(_complex_type(columns, spec.field_name)):  # the pairs' own times decide, whatever timeColumn
            name = "ANY_VALUE" if spec.type == "stringAny" else "EARLIEST" if spec.type.endswith("First") else "LATEST"
            function: exp.Expr = druid_function(name, source)
        elif spec.type == "stringAny":
            function = exp.AnyValue(this=source)
        else:
            by = exp.ArgMin if spec.type.endswith("First") else exp.ArgMax
            function = by(this=source, expression=columns.sql(spec.time_column, null_type="TIMESTAMP"))
        if not string:
            return function, unchanged
        length = exp.Literal.number(spec.max_string_bytes or _MAX_STRING_BYTES)
        return function, lambda value: exp.Substring(this=value, start=exp.Literal.number(1), length=length)
    if (sketch := _sketch(spec, columns)) is not None:
        return sketch[1], unchanged
    if isinstance(spec, q.CardinalityAggregator | q.HyperUniqueAggregatorSpec):
        if unfinalized:
            return druid_function("DS_HLL", _distinct_input(spec, columns)), unchanged
        estimate = exp.DType.BIGINT if spec.round else exp.DType.DOUBLE
        return exp.ApproxDistinct(this=_distinct_input(spec, columns)), lambda value: exp.cast(value, estimate)
    raise SpecError("aggregations", f"unsupported aggregator {spec!r}")


def _pair_of(spec: q.FirstLastAggregator, source: exp.Expr, columns: Columns) -> exp.Expr:
    """The {lhs: epoch millis, rhs: value} pair of the first or last row with a value, as Druid's first/last
    aggregators keep it: the stored pairs' own, or one made of each row's time and value."""
    by = exp.ArgMin if spec.type.endswith("First") else exp.ArgMax
    if is_pair(_complex_type(columns, spec.field_name)):
        return by(this=source, expression=pair_part(source, "lhs"))
    time = columns.sql(spec.time_column, null_type="TIMESTAMP")
    if spec.type.startswith("string"):
        length = exp.Literal.number(spec.max_string_bytes or _MAX_STRING_BYTES)
        source = exp.Substring(this=source, start=exp.Literal.number(1), length=length)
    pair = exp.Struct(expressions=[
        exp.PropertyEQ(this=exp.to_identifier("lhs"), expression=druid_function("TIMESTAMP_TO_MILLIS", time)),
        exp.PropertyEQ(this=exp.to_identifier("rhs"), expression=source.copy())])
    with_value = exp.case().when(exp.Is(this=source.copy(), expression=exp.null()), exp.null()).else_(pair)
    return by(this=with_value, expression=time.copy())


def _complex_type(columns: Columns, name: str) -> str | None:
    """The complex type of a data source column (a first/last pair, a sketch), which its SQL type COMPLEX<…> names."""
    sql_type = columns.sql_type(name) or ""
    return sql_type[len("COMPLEX<"):-1] if sql_type.startswith("COMPLEX<") else None


def _sketch(spec: q.Aggregator, columns: Columns) -> tuple[str, exp.Expr] | None:
    """The kind of sketch an aggregator makes (its intermediate value) and the Druid SQL aggregate that makes it, or
    None for an aggregator of plain values. A sketch aggregate builds from values and merges a column of sketches
    alike; hyperUnique and a cardinality of one column merge a column of HLL sketches (ingestion stores hyperUnique
    as one)."""
    match spec:
        case q.HllSketchAggregatorSpec(field_name=name, lg_k=lg_k, tgt_hll_type=target):
            parameters = exp.Literal.number(lg_k), exp.Literal.string(target)
            return HLL, druid_function("DS_HLL", columns.sql(name), *parameters)
        case q.ThetaSketchAggregatorSpec(field_name=name, size=size):
            return THETA, druid_function("DS_THETA", columns.sql(name), exp.Literal.number(size))
        case q.QuantilesSketchAggregatorSpec(field_name=name, k=k):
            values = columns.sql(name, null_type="DOUBLE")
            return QUANTILES, druid_function("DS_QUANTILES_SKETCH", values, exp.Literal.number(k))
        case q.TDigestSketchAggregatorSpec(field_name=name, compression=compression):
            values = columns.sql(name, null_type="DOUBLE")
            return TDIGEST, druid_function("TDIGEST_GENERATE_SKETCH", values, exp.Literal.number(compression))
        case q.HyperUniqueAggregatorSpec(field_name=name) | q.CardinalityAggregator(fields=[q.DefaultDimensionSpec(
                dimension=name)]) if _complex_type(columns, name) == HLL:
            return HLL, druid_function("DS_HLL", columns.sql(name))
    return None


def finalize(spec: q.Aggregator, value: exp.Expr, columns: Columns, unfinalized: bool = False) -> exp.Expr:
    """An aggregator's answer from its intermediate `value`: a sketch's estimate (rounded to a LONG with `round`),
    a quantiles sketch's count of values, unless `shouldFinalize` is false; when `unfinalized` (see `aggregate`) a
    pair's value and a cardinality's estimate; any other value as it is."""
    inner = spec
    while isinstance(inner, q.FilteredAggregator):
        inner = inner.aggregator
    if unfinalized and isinstance(inner, q.FirstLastAggregator) and inner.type != "stringAny":
        return pair_part(value, "rhs")
    if unfinalized and isinstance(inner, q.CardinalityAggregator | q.HyperUniqueAggregatorSpec) \
            and _sketch(inner, columns) is None:
        estimate = exp.DType.BIGINT if inner.round else exp.DType.DOUBLE
        return exp.cast(druid_function("HLL_SKETCH_ESTIMATE", value), estimate)
    sketch = _sketch(inner, columns)
    if sketch is None or not getattr(inner, "should_finalize", True):
        return value
    kind = sketch[0]
    if kind == TDIGEST:
        return value
    if kind == THETA:
        return druid_function("THETA_SKETCH_ESTIMATE", value)
    if kind == QUANTILES:
        return druid_function(QUANTILES_COUNT, value)
    if getattr(inner, "round", False):
        return exp.cast(druid_function("HLL_SKETCH_ESTIMATE", value, exp.true()), exp.DType.BIGINT)
    return druid_function("HLL_SKETCH_ESTIMATE", value)


def _distinct_input(spec: q.CardinalityAggregator | q.HyperUniqueAggregatorSpec, columns: Columns) -> exp.Expr:
    if isinstance(spec, q.HyperUniqueAggregatorSpec):
        return columns.string(spec.field_name)
    values = [dimension_value(d, columns) for d in spec.fields]
    if len(values) == 1:
        return values[0]
    if not spec.by_row:
        raise SpecError(f"aggregations.{spec.name}", "cardinality over several fields needs byRow: true in Sluice")
    # one value per row: the fields' values joined by a separator that cannot occur in text
    parts: list[exp.Expr] = []
    for value in values:
        if parts:
            parts.append(exp.Literal.string("\u0001"))
        parts.append(exp.Coalesce(this=value, expressions=[exp.Literal.string("\u0000")]))
    return exp.Concat(expressions=parts)


# ----------------------------------------------------------------------------------------------- post-aggregators


def post_aggregate(spec: q.PostAggregator, refs: Mapping[str, exp.Expr], finalized: Mapping[str, exp.Expr],
                   path: str) -> exp.Expr:
    """A post-aggregator over `refs` (aggregator and earlier post-aggregator names → their values; an aggregator's
    sketch, whose answer `finalized` holds). Arithmetic is in doubles, and `/` gives 0 when dividing by 0
    (`quotient` does not), as in Druid."""

    def ref(name: str, values: Mapping[str, exp.Expr] = refs) -> exp.Expr:
        if name not in values:
            raise SpecError(path, f"'{name}' is neither an aggregator nor an earlier post-aggregator")
        return values[name].copy()

    def fields(operands: Sequence[q.PostAggregator]) -> list[exp.Expr]:
        return [post_aggregate(f, refs, finalized, f"{path}.fields[{i}]") for i, f in enumerate(operands)]

    match spec:
        case q.FieldAccessPostAggregator(type="fieldAccess", field_name=name):
            return ref(name)
        case q.FieldAccessPostAggregator(field_name=name):  # finalizingFieldAccess, hyperUniqueCardinality
            return ref(name, finalized)
        case q.ConstantPostAggregator(value=value):
            return exp.Literal.number(value)
        case q.ArithmeticPostAggregator(fn=fn, fields=operands):
            return exp.paren(reduce(lambda a, b: _arithmetic(fn, a, b), [_double(f) for f in fields(operands)]))
        case q.GreatestLeastPostAggregator(type=kind, fields=operands):
            cast = [_double(o) if kind.startswith("double") else exp.cast(o, exp.DType.BIGINT)
                    for o in fields(operands)]
            node = exp.Greatest if kind.endswith("Greatest") else exp.Least
            return node(this=cast[0], expressions=cast[1:])
        case q.ExpressionPostAggregator(expression=expression, output_type=output_type):
            try:
                value = to_sql(expression, ref)
            except ExpressionError as e:
                raise SpecError(f"{path}.expression", str(e)) from None
            return cast_to(value, output_type.upper()) if output_type and output_type.upper() in SQL_TYPES else value
        case sk.HllSketchUnionPostAggregator(fields=operands, lg_k=lg_k, tgt_hll_type=target):
            return druid_function("HLL_SKETCH_UNION", exp.Literal.number(lg_k), exp.Literal.string(target),
                                  *fields(operands))
        case sk.ThetaSketchSetOpPostAggregator(func=func, fields=operands, size=size):
            return druid_function(f"THETA_SKETCH_{func}", exp.Literal.number(size), *fields(operands))
        case sk.SketchPostAggregator(field=field):
            return _of_sketch(spec, post_aggregate(field, refs, finalized, f"{path}.field"))
    raise SpecError(path, f"unsupported post-aggregator {spec!r}")


def _of_sketch(spec: q.PostAggregator, sketch: exp.Expr) -> exp.Expr:
    """A post-aggregator of one sketch, as the Druid SQL function of the same meaning."""
    match spec:
        case sk.HllSketchEstimatePostAggregator(round=True):
            return exp.cast(druid_function("HLL_SKETCH_ESTIMATE", sketch, exp.true()), exp.DType.BIGINT)
        case sk.HllSketchEstimatePostAggregator():
            return druid_function("HLL_SKETCH_ESTIMATE", sketch)
        case sk.HllSketchEstimateWithBoundsPostAggregator(num_std_dev=std_devs):
            return druid_function("HLL_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS", sketch, exp.Literal.number(std_devs))
        case sk.SketchSummaryPostAggregator(type=kind):
            return druid_function("HLL_SKETCH_TO_STRING" if kind == "HLLSketchToString" else "DS_QUANTILE_SUMMARY",
                                  sketch)
        case sk.ThetaSketchEstimatePostAggregator(error_bounds_std_dev=None):
            return druid_function("THETA_SKETCH_ESTIMATE", sketch)
        case sk.ThetaSketchEstimatePostAggregator(error_bounds_std_dev=std_devs):
            return druid_function("THETA_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS", sketch, exp.Literal.number(std_devs))
        case sk.QuantilePostAggregator(fraction=fraction):
            return druid_function("DS_GET_QUANTILE", sketch, exp.Literal.number(fraction))
        case sk.QuantilesPostAggregator(fractions=fractions):
            return _doubles(druid_function("DS_GET_QUANTILES", sketch, *_numbers(fractions)))
        case sk.RankPostAggregator(value=value):
            return druid_function("DS_RANK", sketch, exp.Literal.number(value))
        case sk.CdfPostAggregator(split_points=points):
            return _doubles(druid_function("DS_CDF", sketch, *_numbers(points)))
        case sk.HistogramPostAggregator(split_points=None, num_bins=bins):
            return _doubles(druid_function(HISTOGRAM_BINS, sketch, exp.Literal.number(bins or 10)))
        case sk.HistogramPostAggregator(split_points=points):
            return _doubles(druid_function("DS_HISTOGRAM", sketch, *_numbers(points)))
        case sk.TDigestQuantilesPostAggregator(fractions=fractions):
            return exp.Array(expressions=[druid_function(TDIGEST_QUANTILE, sketch.copy(), fraction)
                                          for fraction in _numbers(fractions)])
    raise SpecError("postAggregations", f"unsupported post-aggregator {spec!r}")


def _numbers(values: Sequence[float]) -> list[exp.Expr]:
    return [exp.Literal.number(value) for value in values]


def _doubles(text: exp.Expr) -> exp.Expr:
    """The array of doubles a Druid SQL quantiles function writes as text, read back: a native post-aggregator gives
    the array itself."""
    return exp.cast(text, exp.DataType.build("DOUBLE[]", dialect="duckdb"))


def _double(value: exp.Expr) -> exp.Expr:
    return exp.cast(value, exp.DType.DOUBLE)


def _arithmetic(fn: str, left: exp.Expr, right: exp.Expr) -> exp.Expr:
    if fn == "/":  # 0 when dividing by 0, null when either side is null
        zero = exp.and_(exp.EQ(this=right.copy(), expression=exp.Literal.number(0)),
                        exp.Not(this=exp.Is(this=left.copy(), expression=exp.null())))
        return exp.case().when(zero, _double(exp.Literal.number(0))).else_(exp.Div(this=left, expression=right))
    if fn == "quotient":
        return exp.Div(this=left, expression=right)
    if fn == "pow":
        return exp.Pow(this=left, expression=right)
    return {"+": exp.Add, "-": exp.Sub, "*": exp.Mul}[fn](this=left, expression=right)


def with_post_aggregations(aggregators: Sequence[q.Aggregator], posts: Sequence[q.PostAggregator],
                           columns: Columns, unfinalized: bool = False) -> list[tuple[str, exp.Expr]]:
    """Output name → SQL value of each aggregator (its answer, from a column of the aggregated rows; when
    `unfinalized`, the query's `finalize: false`, the column as it is) and each post-aggregator."""
    refs: dict[str, exp.Expr] = {a.output_name: exp.column(a.output_name, quoted=True) for a in aggregators}
    finalized = {a.output_name: finalize(a, refs[a.output_name], columns, unfinalized) for a in aggregators}
    outputs = [(name, refs[name].copy() if unfinalized else value) for name, value in finalized.items()]
    for i, post in enumerate(posts):
        path = f"postAggregations[{i}]"
        if not post.name:
            raise SpecError(f"{path}.name", "a post-aggregator of the query needs a name")
        value = post_aggregate(post, refs, finalized, path)
        refs[post.name] = finalized[post.name] = exp.paren(value)
        outputs.append((post.name, value))
    return outputs


