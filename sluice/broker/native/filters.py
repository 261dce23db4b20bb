"""The names and filters of native queries as Druid SQL: which column a name means (virtual columns, `__time`,
unknown names), dimension filters, search specs and having specs, with Druid's SQL-compatible null handling.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce

from sqlglot import exp

from sluice.broker.native import query as q
from sluice.broker.sql.translate import TIME_COLUMN as TIME
from sluice.expressions import ExpressionError, druid_function, to_condition, to_sql
from sluice.spec.errors import SpecError
from sluice.timestamps import EpochInterval, format_instant, in_datetime_range

# -------------------------------------------------------------------------------------------------------- columns


class Columns:
    """Resolves the names a query uses: virtual columns, `__time`, the data source's columns, and unknown names,
    which Druid reads as a column of nulls."""

    def __init__(self, known: Sequence[str], virtual_columns: Sequence[q.ExpressionVirtualColumn] = (),
                 types: Mapping[str, str] | None = None) -> None:
        self._known = set(known)
        self._types = dict(types or {})
        self._virtual = {vc.name: vc for vc in virtual_columns}
        self._resolving: set[str] = set()

    def sql(self, name: str, null_type: str = "VARCHAR") -> exp.Expr:
        """The column's SQL value (`__time` as a TIMESTAMP)."""
        if name in self._virtual:
            return self._virtual_column(self._virtual[name])
        if name in self._known:
            return exp.column(name, quoted=True)
        return exp.cast(exp.null(), null_type)

    def sql_type(self, name: str) -> str | None:
        """The SQL type of a data source column (`DOUBLE`, `BIGINT`, `VARCHAR` …), when the view knows it."""
        return None if name in self._virtual else self._types.get(name)

    def expression_ref(self, name: str) -> exp.Expr:
        """The column as Druid's expressions see it: `__time` in epoch milliseconds."""
        if name == TIME and name not in self._virtual:
            return epoch_millis(exp.column(TIME, quoted=True))
        return self.sql(name)

    def string(self, name: str) -> exp.Expr:
        """The column as text, the form Druid's dimension filters compare (`__time` as millis)."""
        return exp.cast(self.expression_ref(name), exp.DType.VARCHAR)

    def _virtual_column(self, column: q.ExpressionVirtualColumn) -> exp.Expr:
        if column.name in self._resolving:
            raise SpecError("virtualColumns", f"virtual column '{column.name}' refers to itself")
        self._resolving.add(column.name)
        try:
            value = to_sql(column.expression, self.expression_ref)
        except ExpressionError as e:
            raise SpecError("virtualColumns", f"{column.name}: {e}") from None
        finally:
            self._resolving.discard(column.name)
        return cast_to(value, column.output_type) if column.output_type else value


SQL_TYPES = {"STRING": "VARCHAR", "LONG": "BIGINT", "FLOAT": "DOUBLE", "DOUBLE": "DOUBLE"}


def cast_to(value: exp.Expr, druid_type: str) -> exp.Expr:
    if druid_type == "STRING":
        return exp.cast(value, exp.DType.VARCHAR)
    return exp.TryCast(this=value, to=exp.DataType.build(SQL_TYPES[druid_type]))


def epoch_millis(timestamp: exp.Expr) -> exp.Expr:
    """A TIMESTAMP as epoch milliseconds."""
    return druid_function("TIMESTAMP_TO_MILLIS", timestamp)


def millis_timestamp(millis: int) -> exp.Expr:
    """Epoch milliseconds as a TIMESTAMP."""
    return druid_function("MILLIS_TO_TIMESTAMP", exp.Literal.number(millis))


def all_of(*conditions: exp.Expr | None) -> exp.Expr | None:
    present = [c for c in conditions if c is not None]
    return reduce(lambda a, b: exp.and_(a, b, copy=True), present) if present else None


def any_of(conditions: Sequence[exp.Expr]) -> exp.Expr:
    return reduce(lambda a, b: exp.or_(a, b, copy=True), conditions) if conditions else exp.false()


def _string(value: object) -> exp.Expr:
    if isinstance(value, bool):
        value = "true" if value else "false"
    return exp.Literal.string(str(value))


# -------------------------------------------------------------------------------------------------------- filters


def intervals_condition(intervals: Sequence[EpochInterval]) -> exp.Expr | None:
    """`__time` within any of the intervals; bounds beyond what a segment can hold (ETERNITY's) are left out."""
    time = exp.column(TIME, quoted=True)
    ranges = []
    for interval in intervals:
        bounds = []
        if in_datetime_range(interval.start):
            bounds.append(exp.GTE(this=time.copy(), expression=_timestamp_literal(interval.start)))
        if in_datetime_range(interval.end):
            bounds.append(exp.LT(this=time.copy(), expression=_timestamp_literal(interval.end)))
        if not bounds:
            return None
        ranges.append(all_of(*bounds))
    return exp.paren(any_of(ranges)) if len(ranges) > 1 else any_of(ranges)


def _timestamp_literal(millis: int) -> exp.Expr:
    text = format_instant(millis)[:-1].replace("T", " ")
    return exp.cast(exp.Literal.string(text), exp.DType.TIMESTAMP)


def filter_condition(spec: q.DimFilter, columns: Columns) -> exp.Expr:
    """A Druid dimension filter as a SQL condition with Druid's SQL-compatible null handling (null matches only
    `null`-filters, and NOT of an unknown drops the row)."""
    match spec:
        case q.SelectorFilter(dimension=dimension, value=None) | q.NullFilter(column=dimension):
            return exp.Is(this=columns.sql(dimension), expression=exp.null())
        case q.SelectorFilter(dimension=dimension, value=value):
            return exp.EQ(this=columns.string(dimension), expression=_string(value))
        case q.EqualityFilter():
            return _typed_compare(exp.EQ, columns, spec.column, spec.match_value_type, spec.match_value)
        case q.InFilter(dimension=dimension, values=values):
            present = [_string(v) for v in values if v is not None]
            terms: list[exp.Expr] = [exp.In(this=columns.string(dimension), expressions=present)] if present else []
            if len(present) < len(values):
                terms.append(exp.Is(this=columns.sql(dimension), expression=exp.null()))
            return exp.paren(any_of(terms)) if len(terms) > 1 else any_of(terms)
        case q.BoundFilter():
            return _bound(spec, columns)
        case q.RangeFilter():
            lower = spec.lower is not None and _typed_compare(
                exp.GT if spec.lower_open else exp.GTE, columns, spec.column, spec.match_value_type, spec.lower)
            upper = spec.upper is not None and _typed_compare(
                exp.LT if spec.upper_open else exp.LTE, columns, spec.column, spec.match_value_type, spec.upper)
            return all_of(lower or None, upper or None) or exp.Not(
                this=exp.Is(this=columns.sql(spec.column), expression=exp.null()))
        case q.LikeFilter(dimension=dimension, pattern=pattern, escape=escape):
            like: exp.Expr = exp.Like(this=columns.string(dimension), expression=exp.Literal.string(pattern))
            return exp.Escape(this=like, expression=exp.Literal.string(escape)) if escape else like
        case q.RegexFilter(dimension=dimension, pattern=pattern):
            return exp.RegexpLike(this=columns.string(dimension), expression=exp.Literal.string(pattern))
        case q.AndFilter(fields=fields) | q.OrFilter(fields=fields):
            parts = [filter_condition(f, columns) for f in fields]
            if not parts:
                return exp.true() if spec.type == "and" else exp.false()
            return exp.paren((all_of(*parts) if spec.type == "and" else any_of(parts)))
        case q.NotFilter(field=inner):
            return exp.Not(this=exp.paren(filter_condition(inner, columns)))
        case q.IntervalFilter(dimension=dimension, intervals=intervals):
            if dimension == TIME:
                return intervals_condition(intervals) or exp.true()
            millis = exp.TryCast(this=columns.expression_ref(dimension), to=exp.DataType.build("BIGINT"))
            ranges = [all_of(exp.GTE(this=millis.copy(), expression=exp.Literal.number(i.start)),
                           exp.LT(this=millis.copy(), expression=exp.Literal.number(i.end))) for i in intervals]
            return exp.paren(any_of(ranges))
        case q.ColumnComparisonFilter(dimensions=dimensions):
            values = [dimension_value(d, columns) for d in dimensions]
            equal = [exp.EQ(this=values[0].copy(), expression=v) for v in values[1:]]
            return all_of(*equal)  # type: ignore[return-value]
        case q.ExpressionFilter(expression=expression):
            try:
                return to_condition(expression, columns.expression_ref)
            except ExpressionError as e:
                raise SpecError("filter.expression", str(e)) from None
        case q.TrueFilter():
            return exp.true()
        case q.FalseFilter():
            return exp.false()
        case q.SearchFilter(dimension=dimension, query=search):
            return search_condition(columns.string(dimension), search)
    raise SpecError("filter", f"unsupported filter {spec!r}")


def _typed_compare(op: type[exp.Expr], columns: Columns, column: str, value_type: str, value: object) -> exp.Expr:
    kind = value_type.upper()
    if kind == "STRING":
        return op(this=columns.string(column), expression=_string(value))
    if kind in ("LONG", "DOUBLE", "FLOAT"):
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise SpecError("filter", f"the match value {value!r} is not a {kind}")
        try:
            number = float(value)
        except ValueError:
            raise SpecError("filter", f"the match value {value!r} is not a {kind}") from None
        as_double = exp.TryCast(this=columns.expression_ref(column), to=exp.DataType.build("DOUBLE"))
        return op(this=as_double, expression=exp.Literal.number(repr(number)))
    raise SpecError("filter", f"matchValueType {value_type} is not supported; expected STRING, LONG, DOUBLE or FLOAT")


def _bound(spec: q.BoundFilter, columns: Columns) -> exp.Expr:
    if spec.lower is None and spec.upper is None:
        return exp.Not(this=exp.Is(this=columns.sql(spec.dimension), expression=exp.null()))
    value = columns.string(spec.dimension)
    if spec.ordering == "numeric":
        value = exp.TryCast(this=value, to=exp.DataType.build("DOUBLE"))

    def literal(bound: object) -> exp.Expr:
        if spec.ordering != "numeric":
            return _string(bound)
        try:
            return exp.Literal.number(repr(float(bound)))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise SpecError("filter", f"bound {bound!r} is not a number, as numeric ordering needs") from None

    def compare(bound: object, strict: bool, lower: bool) -> exp.Expr:
        op = (exp.GT if strict else exp.GTE) if lower else (exp.LT if strict else exp.LTE)
        if spec.ordering != "strlen":
            return op(this=value.copy(), expression=literal(bound))
        # Druid's strlen ordering: shorter strings first, equal lengths lexicographically
        length, bound_length = exp.Length(this=value.copy()), exp.Literal.number(len(str(bound)))
        longer = (exp.GT if lower else exp.LT)(this=length, expression=bound_length)
        same = exp.and_(exp.EQ(this=length.copy(), expression=bound_length.copy()),
                        op(this=value.copy(), expression=_string(bound)))
        return exp.paren(exp.or_(longer, same))

    return all_of(
        None if spec.lower is None else compare(spec.lower, spec.lower_strict, lower=True),
        None if spec.upper is None else compare(spec.upper, spec.upper_strict, lower=False),
    )  # type: ignore[return-value]


def search_condition(value: exp.Expr, spec: q.SearchQuerySpec) -> exp.Expr:
    """Druid's search query specs: contains (optionally case-sensitive), fragment (all of), regex."""
    if isinstance(spec, q.RegexSearch):
        return exp.RegexpLike(this=value, expression=exp.Literal.string(spec.pattern))
    sensitive = spec.case_sensitive and spec.type != "insensitive_contains"
    parts = [spec.value] if isinstance(spec, q.ContainsSearch) else spec.values
    subject = value if sensitive else exp.Lower(this=value)
    terms = [
        exp.GT(this=exp.StrPosition(this=subject.copy(), substr=exp.Literal.string(p if sensitive else p.lower())),
               expression=exp.Literal.number(0))
        for p in parts
    ]
    return all_of(*terms) or exp.true()


def dimension_value(spec: q.DefaultDimensionSpec | q.ExtractionDimensionSpec | q.LookupDimensionSpec,
                    columns: Columns) -> exp.Expr:
    """A dimension's grouping value in its outputType (STRING by default, so long columns group as text); through
    its lookup, for a spec that has one."""
    if isinstance(spec, q.DefaultDimensionSpec):
        return cast_to(columns.expression_ref(spec.dimension), spec.output_type)
    extraction = spec.extraction_fn if isinstance(spec, q.ExtractionDimensionSpec) else spec
    key = columns.string(spec.dimension)
    if isinstance(extraction, q.RegisteredLookupExtractionFn):
        value: exp.Expr = exp.Anonymous(this="LOOKUP", expressions=[key, exp.Literal.string(extraction.lookup)])
    elif isinstance(extraction, q.LookupDimensionSpec) and extraction.lookup_name is not None:
        value = exp.Anonymous(this="LOOKUP", expressions=[key, exp.Literal.string(extraction.lookup_name)])
    else:
        lookup = extraction.lookup
        assert lookup is not None  # LookupDimensionSpec has a map when it has no name
        value = exp.Case(this=key.copy(), ifs=[
            exp.If(this=exp.Literal.string(k), true=exp.cast(exp.null(), exp.DType.VARCHAR) if v is None
                   else exp.Literal.string(v)) for k, v in lookup.map.items()],
            default=exp.cast(exp.null(), exp.DType.VARCHAR))
    if extraction.retain_missing_value:
        return exp.Coalesce(this=value, expressions=[key.copy()])
    if extraction.replace_missing_value_with is not None:
        return exp.Coalesce(this=value, expressions=[exp.Literal.string(extraction.replace_missing_value_with)])
    return value



def having_condition(spec: q.HavingSpec, columns: Columns) -> exp.Expr:
    """A having spec over the groupBy's output rows (columns are output names)."""
    match spec:
        case q.ComparisonHaving(type=kind, aggregation=name, value=value):
            op = {"greaterThan": exp.GT, "lessThan": exp.LT, "equalTo": exp.EQ}[kind]
            return op(this=columns.sql(name, null_type="DOUBLE"), expression=exp.Literal.number(value))
        case q.DimSelectorHaving(dimension=dimension, value=value):
            return filter_condition(q.SelectorFilter(type="selector", dimension=dimension, value=value), columns)
        case q.FilterHaving(filter=inner):
            return filter_condition(inner, columns)
        case q.JunctionHaving(type=kind, having_specs=specs):
            parts = [having_condition(s, columns) for s in specs]
            return exp.paren(all_of(*parts) if kind == "and" else any_of(parts)) if parts else exp.true()
        case q.NotHaving(having_spec=inner):
            return exp.Not(this=exp.paren(having_condition(inner, columns)))
        case q.ConstantHaving(type=kind):
            return exp.true() if kind == "always" else exp.false()
    raise SpecError("having", f"unsupported having spec {spec!r}")


