"""Aggregators and post-aggregators of native queries as Druid SQL expressions."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import reduce

from sqlglot import exp

from sluice.broker import native_query as q
from sluice.broker.native_filters import (
    SQL_TYPES,
    Columns,
    all_of,
    cast_to,
    dimension_value,
    filter_condition,
)
from sluice.broker.scalar_functions import as_long
from sluice.expressions import ExpressionError, to_sql
from sluice.spec.errors import SpecError

# ---------------------------------------------------------------------------------------------------- aggregators


_NUMERIC = {"longSum": exp.Sum, "doubleSum": exp.Sum, "floatSum": exp.Sum, "longMin": exp.Min, "doubleMin": exp.Min,
            "floatMin": exp.Min, "longMax": exp.Max, "doubleMax": exp.Max, "floatMax": exp.Max, "doubleMean": exp.Avg,
            "longAny": exp.AnyValue, "doubleAny": exp.AnyValue, "floatAny": exp.AnyValue}
_MAX_STRING_BYTES = 1024  # stringFirst / stringLast keep this much of a value unless told otherwise


def aggregate(spec: q.Aggregator, columns: Columns, condition: exp.Expr | None) -> exp.Expr:
    """One aggregator over the rows that pass `condition`. Over no rows, count and cardinality give 0 and the others
    null, as Druid's SQL-compatible mode fills empty buckets."""
    if isinstance(spec, q.FilteredAggregator):
        return aggregate(spec.aggregator, columns, all_of(condition, filter_condition(spec.filter, columns)))
    function, finish = _aggregate_function(spec, columns)
    if condition is not None:
        function = exp.Filter(this=function, expression=exp.Where(this=condition.copy()))
    return finish(function)


def _aggregate_function(spec: q.Aggregator, columns: Columns) -> tuple[exp.Expr, Callable[[exp.Expr], exp.Expr]]:
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
        if not spec.type.startswith("long"):
            source = exp.TryCast(this=source, to=exp.DataType.build("DOUBLE"))
        elif spec.expression is None and columns.sql_type(spec.field_name or "") in ("DOUBLE", "FLOAT", "REAL"):
            source = as_long(source)  # Druid's long aggregators read each value as a long
        return _NUMERIC[spec.type](this=source), unchanged
    if isinstance(spec, q.FirstLastAggregator):
        string = spec.type.startswith("string")
        source = columns.sql(spec.field_name, null_type="VARCHAR" if string else "DOUBLE")
        if spec.type == "stringAny":
            function: exp.Expr = exp.AnyValue(this=source)
        else:
            by = exp.ArgMin if spec.type.endswith("First") else exp.ArgMax
            function = by(this=source, expression=columns.sql(spec.time_column, null_type="TIMESTAMP"))
        if not string:
            return function, unchanged
        length = exp.Literal.number(spec.max_string_bytes or _MAX_STRING_BYTES)
        return function, lambda value: exp.Substring(this=value, start=exp.Literal.number(1), length=length)
    if isinstance(spec, q.CardinalityAggregator | q.HyperUniqueAggregator):
        estimate = exp.DType.BIGINT if spec.round else exp.DType.DOUBLE
        return exp.ApproxDistinct(this=_distinct_input(spec, columns)), lambda value: exp.cast(value, estimate)
    raise SpecError("aggregations", f"unsupported aggregator {spec!r}")


def _distinct_input(spec: q.CardinalityAggregator | q.HyperUniqueAggregator, columns: Columns) -> exp.Expr:
    if isinstance(spec, q.HyperUniqueAggregator):
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


def post_aggregate(spec: q.PostAggregator, refs: Mapping[str, exp.Expr], path: str) -> exp.Expr:
    """A post-aggregator over `refs` (aggregator and earlier post-aggregator names → their values). Arithmetic is in
    doubles, and `/` gives 0 when dividing by 0 (`quotient` does not), as in Druid."""

    def ref(name: str) -> exp.Expr:
        if name not in refs:
            raise SpecError(path, f"'{name}' is neither an aggregator nor an earlier post-aggregator")
        return refs[name].copy()

    match spec:
        case q.FieldAccessPostAggregator(field_name=name):
            return ref(name)
        case q.ConstantPostAggregator(value=value):
            return exp.Literal.number(value)
        case q.ArithmeticPostAggregator(fn=fn, fields=fields):
            operands = [_double(post_aggregate(f, refs, f"{path}.fields[{i}]")) for i, f in enumerate(fields)]
            return exp.paren(reduce(lambda a, b: _arithmetic(fn, a, b), operands))
        case q.GreatestLeastPostAggregator(type=kind, fields=fields):
            operands = [post_aggregate(f, refs, f"{path}.fields[{i}]") for i, f in enumerate(fields)]
            cast = [_double(o) if kind.startswith("double") else exp.cast(o, exp.DType.BIGINT) for o in operands]
            node = exp.Greatest if kind.endswith("Greatest") else exp.Least
            return node(this=cast[0], expressions=cast[1:])
        case q.ExpressionPostAggregator(expression=expression, output_type=output_type):
            try:
                value = to_sql(expression, ref)
            except ExpressionError as e:
                raise SpecError(f"{path}.expression", str(e)) from None
            return cast_to(value, output_type.upper()) if output_type and output_type.upper() in SQL_TYPES else value
    raise SpecError(path, f"unsupported post-aggregator {spec!r}")


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


def with_post_aggregations(names: Sequence[str], posts: Sequence[q.PostAggregator]) -> list[tuple[str, exp.Expr]]:
    """Output name → SQL value of each aggregator (a column of the aggregated rows) and each post-aggregator."""
    refs: dict[str, exp.Expr] = {name: exp.column(name, quoted=True) for name in names}
    outputs = [(name, refs[name]) for name in names]
    for i, post in enumerate(posts):
        path = f"postAggregations[{i}]"
        if not post.name:
            raise SpecError(f"{path}.name", "a post-aggregator of the query needs a name")
        value = post_aggregate(post, refs, path)
        refs[post.name] = exp.paren(value)
        outputs.append((post.name, value))
    return outputs


