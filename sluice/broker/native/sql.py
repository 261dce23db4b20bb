"""Native queries → one Druid SQL statement each, built as sqlglot trees and handed to `Broker.sql` as text.

Going through SQL keeps one engine: a native query and its SQL twin read the same files through the same sandbox, so
their answers agree. Values from the query JSON only ever become sqlglot literals and quoted identifiers.

The statements return helper columns (named `__sluice_…`) next to the user's outputs; `results` reads them
to shape Druid's JSON. Query-type specific layouts:

- timeseries: one row per bucket that has rows in the intervals (the filter sits in each aggregate's FILTER clause,
  so a bucket whose rows all fail the filter still appears, as Druid's cursor does), plus a row computed over no rows
  at all (the values Druid fills empty buckets with) and, with `grandTotal`, a row over everything.
- topN: per bucket, the first `threshold` dimension values by the metric (ROW_NUMBER over a window).
- groupBy: grouped rows, post-aggregators, having, then ordering and limit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import reduce

from sqlglot import exp

from sluice.broker.native import query as q
from sluice.broker.native.aggregators import aggregate, unfinalized, with_post_aggregations
from sluice.broker.native.filters import (
    TIME,
    Columns,
    all_of,
    dimension_value,
    epoch_millis,
    filter_condition,
    having_condition,
    intervals_condition,
    millis_timestamp,
    search_condition,
)
from sluice.broker.native.time import QueryGranularity
from sluice.expressions import druid_function
from sluice.segment.segment import DataSegment
from sluice.spec.errors import SpecError

HIDDEN = "__sluice_"
KIND, BUCKET, FIRST, ROWS, RANK, MILLIS = (HIDDEN + n for n in ("kind", "bucket", "first", "rows", "rank", "millis"))
DIMENSION, VALUE, COUNT = HIDDEN + "dimension", HIDDEN + "value", HIDDEN + "count"
ROW_KIND, EMPTY_KIND, TOTAL_KIND = 0, 1, 2  # timeseries rows: a bucket, the empty-bucket values, the grand total


@dataclass(frozen=True)
class DataSourceView:
    """What a query can see of a data source: its visible segments, and the columns Druid SQL shows for it
    (`schema`, as INFORMATION_SCHEMA.COLUMNS lists them; it also covers rows of running tasks, which have no
    segment yet). Columns come in Druid's order: `__time`, the segments' dimensions, their metrics, then the rest."""

    name: str
    segments: Sequence[DataSegment] = ()
    schema: Sequence[tuple[str, str]] = ()  # (column, SQL type)
    #: what the statement reads for a data source other than a table (see datasources.py); None: the table `name`
    relation: exp.Expr | None = None
    columns: list[str] = field(init=False)
    dimensions: list[str] = field(init=False)

    def __post_init__(self) -> None:
        declared = {name for name, _ in self.schema}
        dimensions = list(dict.fromkeys(d for s in self.segments for d in s.dimensions))
        if self.schema:
            dimensions = [d for d in dimensions if d in declared]
        if not self.segments:
            dimensions = [name for name, kind in self.schema if kind == "VARCHAR" and name != TIME]
        metrics = [m for m in dict.fromkeys(m for s in self.segments for m in s.metrics)
                   if m not in dimensions and (not self.schema or m in declared)]
        listed = [TIME, *dimensions, *metrics]
        object.__setattr__(self, "dimensions", dimensions)
        object.__setattr__(self, "columns", listed + [name for name, _ in self.schema if name not in listed])

    @property
    def exists(self) -> bool:
        return bool(self.segments or self.schema or self.relation)


def translate(query: q.NativeQuery, source: DataSourceView) -> str | None:
    """The query as Druid SQL text, or None when the answer is known to be empty without reading anything."""
    tree = statement(query, source)
    return None if tree is None else tree.sql(dialect="druid")


def statement(query: q.NativeQuery, source: DataSourceView) -> exp.Expr | None:
    """The query's statement as a tree, which a query data source nests in another query's."""
    return _TRANSLATORS[type(query)](query, source)


# ------------------------------------------------------------------------------------------------ statement parts


def source_relation(source: DataSourceView) -> exp.Expr:
    """The data source's relation (a table, or a composite's derived table), or, for a table that does not exist, an
    empty relation with a `__time` column so that the statement still runs and aggregates over no rows (Druid
    answers such queries too)."""
    if source.relation is not None:
        return source.relation.copy()
    if source.exists:
        return exp.Table(this=exp.to_identifier(source.name, quoted=True))
    empty = exp.select(exp.alias_(exp.cast(exp.null(), exp.DType.TIMESTAMP), TIME, quoted=True)).where(exp.false())
    return empty.subquery(HIDDEN + "empty")


def _select(outputs: Sequence[tuple[str, exp.Expr]], source: exp.Expr, where: exp.Expr | None = None,
            group_by: Sequence[exp.Expr] = ()) -> exp.Select:
    statement = exp.select(*(exp.alias_(value.copy(), name, quoted=True) for name, value in outputs))
    statement = statement.from_(source.copy())
    if where is not None:
        statement = statement.where(where.copy())
    return statement.group_by(*(g.copy() for g in group_by)) if group_by else statement


def _column(name: str) -> exp.Expr:
    return exp.column(name, quoted=True)


def _passthrough(names: Sequence[str]) -> list[tuple[str, exp.Expr]]:
    return [(name, _column(name)) for name in names]


def _bucket(granularity: QueryGranularity) -> exp.Expr | None:
    """The start of the row's time bucket as a TIMESTAMP; None for `all`."""
    time = _column(TIME)
    if granularity.kind == "all":
        return None
    if granularity.kind == "none":
        return time
    if granularity.kind == "duration" and granularity.duration:
        origin, duration = granularity.origin or 0, granularity.duration
        since = exp.Sub(this=epoch_millis(time), expression=exp.Literal.number(origin))
        steps = exp.Floor(this=exp.Div(this=exp.cast(since, exp.DType.DOUBLE), expression=exp.Literal.number(duration)))
        offset = exp.Mul(this=exp.cast(steps, exp.DType.BIGINT), expression=exp.Literal.number(duration))
        start = exp.Add(this=exp.Literal.number(origin), expression=offset)
        return druid_function("MILLIS_TO_TIMESTAMP", start)
    assert granularity.period is not None
    args: list[exp.Expr] = [time, exp.Literal.string(str(granularity.period))]
    if granularity.origin is not None or granularity.zone is not None:
        args.append(exp.null() if granularity.origin is None else millis_timestamp(granularity.origin))
    if granularity.zone is not None:
        args.append(exp.Literal.string(granularity.zone.key))
    return druid_function("TIME_FLOOR", *args)


def _query_parts(query: q.TimeseriesQuery | q.TopNQuery | q.GroupByQuery | q.SearchQuery | q.ScanQuery,
                 source: DataSourceView) -> tuple[Columns, exp.Expr | None]:
    columns = Columns(source.columns, query.virtual_columns, dict(source.schema))
    condition = None if query.filter is None else filter_condition(query.filter, columns)
    return columns, condition


def _aggregations(query: q.TimeseriesQuery | q.TopNQuery | q.GroupByQuery, columns: Columns,
                  condition: exp.Expr | None) -> list[tuple[str, exp.Expr]]:
    outputs = [(a.output_name, aggregate(a, columns, condition, unfinalized(query.context)))
               for a in query.aggregations]
    _check_unique([name for name, _ in outputs] + [p.name for p in query.post_aggregations if p.name], "aggregations")
    return outputs


def _check_unique(names: Sequence[str], path: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise SpecError(path, f"duplicate output name '{name}'")
        if name.startswith(HIDDEN):
            raise SpecError(path, f"output names starting with {HIDDEN} are reserved, got '{name}'")
        seen.add(name)


def _ordered(value: exp.Expr, descending: bool) -> exp.Ordered:
    """Druid orders nulls first ascending and last descending."""
    return exp.Ordered(this=value, desc=descending, nulls_first=not descending)


# -------------------------------------------------------------------------------------------------------- queries


def _timeseries(query: q.TimeseriesQuery, source: DataSourceView) -> exp.Expr:
    columns, condition = _query_parts(query, source)
    aggregations = _aggregations(query, columns, condition)
    rows_in_bucket = aggregate(q.CountAggregator(type="count", name=ROWS), columns, condition)
    where = intervals_condition(query.intervals)
    key = _bucket(query.granularity)

    def part(kind: int, bucket_value: exp.Expr, part_where: exp.Expr | None, grouped: bool) -> exp.Select:
        head = [(KIND, exp.Literal.number(kind)), (BUCKET, bucket_value),
                (FIRST, exp.Min(this=_column(TIME))), (ROWS, rows_in_bucket)]
        return _select(head + aggregations, source_relation(source), part_where, [key] if grouped and key else ())

    no_bucket = exp.cast(exp.null(), exp.DType.TIMESTAMP)
    parts = [part(ROW_KIND, key or no_bucket, where, grouped=True), part(EMPTY_KIND, no_bucket, exp.false(), False)]
    if query.context.get("grandTotal") in (True, "true"):
        parts.append(part(TOTAL_KIND, no_bucket, where, grouped=False))
    union = reduce(lambda a, b: exp.union(a, b, distinct=False), parts)
    outputs = _passthrough([KIND, BUCKET, FIRST, ROWS]) + with_post_aggregations(
        query.aggregations, query.post_aggregations, columns, unfinalized(query.context))
    return _select(outputs, union.subquery(HIDDEN + "aggregated"))


def _topn_order(metric: q.TopNMetricSpec, dimension: str, outputs: Sequence[str],
               inverted: bool = False) -> tuple[list[exp.Ordered], exp.Expr | None]:
    """The ORDER BY of a topN's ranking and, for a dimension metric with `previousStop`, the rows it skips to."""
    if isinstance(metric, q.InvertedMetricSpec):
        return _topn_order(metric.metric, dimension, outputs, not inverted)
    value = _column(dimension)
    if isinstance(metric, q.NumericMetricSpec):
        if metric.metric not in outputs:
            raise SpecError("metric", f"'{metric.metric}' is neither an aggregator nor a post-aggregator of the query")
        return [_ordered(_column(metric.metric), not inverted), _ordered(value, False)], None
    sort_keys = {
        "lexicographic": [value],
        "numeric": [exp.TryCast(this=value.copy(), to=exp.DataType.build("DOUBLE")), value],
        "strlen": [exp.Length(this=value.copy()), value],
    }[metric.ordering]
    skip = None
    if metric.previous_stop is not None:
        skip = (exp.LT if inverted else exp.GT)(this=value.copy(), expression=exp.Literal.string(metric.previous_stop))
    return [_ordered(k.copy(), inverted) for k in sort_keys], skip


def _topn(query: q.TopNQuery, source: DataSourceView) -> exp.Expr:
    columns, condition = _query_parts(query, source)
    aggregations = _aggregations(query, columns, None)
    name = query.dimension.name
    _check_unique([name, *(n for n, _ in aggregations), *(p.name for p in query.post_aggregations if p.name)],
                  "dimension")
    key, value = _bucket(query.granularity), dimension_value(query.dimension, columns)
    head = [(BUCKET, key or exp.cast(exp.null(), exp.DType.TIMESTAMP)), (FIRST, exp.Min(this=_column(TIME))),
            (name, value)]
    grouped = _select(head + aggregations, source_relation(source),
                      all_of(intervals_condition(query.intervals), condition),
                      [g for g in (key, value) if g is not None])
    window = exp.Window(this=exp.Min(this=_column(FIRST)), partition_by=[_column(BUCKET)])
    outputs = with_post_aggregations(query.aggregations, query.post_aggregations, columns, unfinalized(query.context))
    computed = _select([(BUCKET, _column(BUCKET)), (FIRST, window), (name, _column(name)), *outputs],
                       grouped.subquery(HIDDEN + "grouped"))
    order, skip = _topn_order(query.metric, name, [n for n, _ in outputs])
    rank = exp.Window(this=exp.RowNumber(), partition_by=[_column(BUCKET)], order=exp.Order(expressions=order))
    names = [BUCKET, FIRST, name, *(n for n, _ in outputs)]
    ranked = _select(_passthrough(names) + [(RANK, rank)], computed.subquery(HIDDEN + "computed"), skip)
    top = exp.LTE(this=_column(RANK), expression=exp.Literal.number(query.threshold))
    statement = _select(_passthrough(names), ranked.subquery(HIDDEN + "ranked"), top)
    return statement.order_by(_ordered(_column(BUCKET), False), _ordered(_column(RANK), False))


def _group_by(query: q.GroupByQuery, source: DataSourceView) -> exp.Expr:
    columns, condition = _query_parts(query, source)
    aggregations = _aggregations(query, columns, None)
    dimensions = [(d.name, dimension_value(d, columns)) for d in query.dimensions]
    outputs = with_post_aggregations(query.aggregations, query.post_aggregations, columns, unfinalized(query.context))
    _check_unique([n for n, _ in dimensions] + [n for n, _ in outputs], "dimensions")
    key = _bucket(query.granularity)
    keys = [g for g in (key, *(v for _, v in dimensions)) if g is not None]
    head = [(BUCKET, key or exp.cast(exp.null(), exp.DType.TIMESTAMP))]
    grouped = _select(head + dimensions + aggregations, source_relation(source),
                      all_of(intervals_condition(query.intervals), condition), keys)
    if not keys:  # no groups: no rows, rather than one row of empty aggregates
        grouped = grouped.having(exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(0)))
    names = [BUCKET, *(n for n, _ in dimensions), *(n for n, _ in outputs)]
    computed = _select(_passthrough([BUCKET, *(n for n, _ in dimensions)]) + outputs,
                       grouped.subquery(HIDDEN + "grouped"))
    having = None if query.having is None else having_condition(query.having, Columns(names))
    statement = _select(_passthrough(names), computed.subquery(HIDDEN + "computed"), having)
    dimension_names = [n for n, _ in dimensions]
    order = _group_by_order(query, dimension_names, names)
    if order:
        statement = statement.order_by(*order)
    limit_spec = query.limit_spec
    if limit_spec is not None and limit_spec.limit is not None:
        statement = statement.limit(limit_spec.limit)
    if limit_spec is not None and limit_spec.offset:
        statement = statement.offset(limit_spec.offset)
    return statement


def _group_by_order(query: q.GroupByQuery, dimensions: Sequence[str], names: Sequence[str]) -> list[exp.Ordered]:
    """Druid's DefaultLimitSpec: time first unless granularity is all, then the limitSpec's columns, then the
    grouping order (dimensions ascending) for rows that tie."""
    order = [] if query.granularity.kind == "all" else [_ordered(_column(BUCKET), False)]
    for i, spec in enumerate(query.limit_spec.columns if query.limit_spec else []):
        if spec.dimension not in names:
            raise SpecError(f"limitSpec.columns[{i}].dimension", f"'{spec.dimension}' is not an output of the query")
        value = _column(spec.dimension)
        if spec.dimension in dimensions and spec.dimension_order == "numeric":
            value = exp.TryCast(this=value, to=exp.DataType.build("DOUBLE"))
        elif spec.dimension in dimensions and spec.dimension_order == "strlen":
            order.append(_ordered(exp.Length(this=value.copy()), spec.direction == "descending"))
        order.append(_ordered(value, spec.direction == "descending"))
    return order + [_ordered(_column(d), False) for d in dimensions]


def scan_columns(query: q.ScanQuery, source: DataSourceView) -> list[str]:
    """The scan's columns: as asked, or every column of the data source (`__time`, dimensions, metrics)."""
    return list(query.columns) or source.columns + [vc.name for vc in query.virtual_columns]


def _scan(query: q.ScanQuery, source: DataSourceView) -> exp.Expr:
    columns, condition = _query_parts(query, source)
    names = scan_columns(query, source)
    _check_unique(names, "columns")
    outputs = [(MILLIS, epoch_millis(_column(TIME)))] + [
        (name, epoch_millis(_column(TIME)) if name == TIME else columns.sql(name)) for name in names]
    statement = _select(outputs, source_relation(source), all_of(intervals_condition(query.intervals), condition))
    if query.order_by:
        order = [_ordered(_column(MILLIS if o.column_name == TIME else o.column_name), o.order == "descending")
                 for o in query.order_by if o.order != "none"]
    else:
        order = [_ordered(_column(MILLIS), query.order == "descending")]
    if order:
        statement = statement.order_by(*order)
    if query.limit is not None:
        statement = statement.limit(query.limit)
    return statement.offset(query.offset) if query.offset else statement


def _time_boundary(query: q.TimeBoundaryQuery, source: DataSourceView) -> exp.Expr:
    condition = None if query.filter is None else filter_condition(query.filter, Columns(source.columns))
    bounds = [("minTime", exp.Min(this=_column(TIME))), ("maxTime", exp.Max(this=_column(TIME)))]
    return _select(bounds, source_relation(source), all_of(intervals_condition(query.intervals), condition))


def _data_source_metadata(query: q.DataSourceMetadataQuery, source: DataSourceView) -> exp.Expr:
    outputs = [("maxIngestedEventTime", exp.Max(this=_column(TIME)))]
    return _select(outputs, source_relation(source), intervals_condition(query.intervals))


def _search_dimensions(query: q.SearchQuery, source: DataSourceView) -> list[q.DefaultDimensionSpec]:
    """The dimensions a search looks in: as asked, or every dimension of the data source."""
    return query.search_dimensions or [q.DefaultDimensionSpec(dimension=d) for d in source.dimensions]


def _search(query: q.SearchQuery, source: DataSourceView) -> exp.Expr | None:
    dimensions = _search_dimensions(query, source)
    if not dimensions:
        return None
    columns, condition = _query_parts(query, source)
    key = _bucket(query.granularity)
    where = all_of(intervals_condition(query.intervals), condition)
    parts = []
    for spec in dimensions:
        value = columns.string(spec.dimension)
        outputs = [(BUCKET, key or exp.cast(exp.null(), exp.DType.TIMESTAMP)), (FIRST, exp.Min(this=_column(TIME))),
                   (DIMENSION, exp.Literal.string(spec.name)), (VALUE, value), (COUNT, exp.Count(this=exp.Star()))]
        grouped = _select(outputs, source_relation(source), all_of(where, search_condition(value, query.query)),
                          [g for g in (key, value) if g is not None])
        # a row of a multi-value dimension matches when one of its values does; only those values are answers
        parts.append(grouped.having(search_condition(value.copy(), query.query), copy=False))
    return reduce(lambda a, b: exp.union(a, b, distinct=False), parts)


_TRANSLATORS: dict[type, Callable[..., exp.Expr | None]] = {
    q.TimeseriesQuery: _timeseries,
    q.TopNQuery: _topn,
    q.GroupByQuery: _group_by,
    q.ScanQuery: _scan,
    q.TimeBoundaryQuery: _time_boundary,
    q.DataSourceMetadataQuery: _data_source_metadata,
    q.SearchQuery: _search,
}
