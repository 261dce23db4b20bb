"""The relation a native query's SQL statement reads for each of Druid's data sources (datasources.py).

Each data source becomes one relation inside the query's single statement — a table, a UNION ALL of tables, VALUES,
the `lookup.name` table, a subquery's own statement, or a JOIN of two such — so the statement still goes through the
SQL layer as a whole: its sandbox, its READ checks, and its interval pruning of every table it reads.

Every relation has a `__time` column, as Druid's rows do: rows that lack one (a lookup's, inline rows without it) are
at epoch 0, the time Druid gives them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from sluice.broker.native import query as q
from sluice.broker.native import sql as native_sql
from sluice.broker.native.datasources import (
    DataSource,
    InlineDataSource,
    JoinDataSource,
    LookupDataSource,
    QueryDataSource,
    TableDataSource,
    UnionDataSource,
)
from sluice.broker.native.filters import SQL_TYPES, TIME, epoch_millis, millis_timestamp
from sluice.broker.native.sql import (
    BUCKET,
    FIRST,
    HIDDEN,
    KIND,
    MILLIS,
    ROW_KIND,
    ROWS,
    DataSourceView,
)
from sluice.expressions import ExpressionError, druid_function, to_condition
from sluice.segment.segment import DataSegment
from sluice.spec.errors import SpecError


@dataclass(frozen=True)
class Catalog:
    """What relations are built from: the view of a table, and the columns (name, SQL type) a statement returns."""

    table: Callable[[str], DataSourceView]
    describe: Callable[[exp.Query], list[tuple[str, str]]]


def view(source: DataSource, catalog: Catalog, path: str = "dataSource") -> DataSourceView:
    """What a query sees of the data source; errors (SpecError) name the field under `path`."""
    if isinstance(source, TableDataSource):
        return catalog.table(source.name)
    if isinstance(source, UnionDataSource):
        return _union([catalog.table(t.name) for t in source.data_sources])
    if isinstance(source, InlineDataSource):
        return _inline(source)
    if isinstance(source, LookupDataSource):
        return _lookup(source)
    if isinstance(source, QueryDataSource):
        return _query(source.query, catalog, f"{path}.query")
    return _join(source, catalog, path)


def _composite(name: str, select: exp.Select, schema: Sequence[tuple[str, str]],
               segments: Sequence[DataSegment] = ()) -> DataSourceView:
    return DataSourceView(name, tuple(segments), list(schema), relation=select.subquery(HIDDEN + name))


def _column(name: str, table: str | None = None) -> exp.Column:
    return exp.column(name, table=table, quoted=True)


def _epoch() -> exp.Expr:
    return druid_function("MILLIS_TO_TIMESTAMP", exp.Literal.number(0))


def _types(source: DataSourceView) -> dict[str, str]:
    return {TIME: "TIMESTAMP", **dict(source.schema)}


def _union(sources: Sequence[DataSourceView]) -> DataSourceView:
    names = list(dict.fromkeys(name for s in sources for name in s.columns))
    types: dict[str, str] = {}
    for source in sources:
        types = _types(source) | types
    parts = []
    for source in sources:
        have = set(source.columns)
        values = [_column(n) if n in have else exp.cast(exp.null(), types.get(n, "VARCHAR")) for n in names]
        parts.append(exp.select(*(exp.alias_(v, n, quoted=True) for v, n in zip(values, names)))
                     .from_(native_sql.source_relation(source)))
    union = parts[0]
    for part in parts[1:]:
        union = exp.union(union, part, distinct=False)
    select = exp.select(exp.Star()).from_(union.subquery(HIDDEN + "tables"))
    return _composite("union", select, [(n, types.get(n, "VARCHAR")) for n in names],
                      [segment for s in sources for segment in s.segments])


def _inline_types(source: InlineDataSource) -> list[str]:
    """The SQL type of each column: as declared, else read from the values (LONG when all are whole numbers, DOUBLE
    when all are numbers, else STRING)."""
    declared = source.column_types or [None] * len(source.column_names)
    return [SQL_TYPES[kind] if kind else _inferred([row[i] for row in source.rows]) for i, kind in enumerate(declared)]


def _inferred(values: Sequence[Any]) -> str:
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "BIGINT"
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return "DOUBLE"
    return "VARCHAR"


def _literal(value: str | float | None) -> exp.Expr:
    if value is None:
        return exp.null()
    return exp.Literal.string(value) if isinstance(value, str) else exp.Literal.number(value)


def _inline(source: InlineDataSource) -> DataSourceView:
    slots = [f"{HIDDEN}{i}" for i in range(len(source.column_names))]
    schema = list(zip(source.column_names, _inline_types(source)))
    outputs = [] if TIME in source.column_names else [(TIME, _epoch())]
    for slot, (name, kind) in zip(slots, schema):
        value = exp.cast(_column(slot), "BIGINT" if name == TIME else kind)
        outputs.append((name, druid_function("MILLIS_TO_TIMESTAMP", value) if name == TIME else value))
    if source.rows:
        rows = exp.Values(expressions=[exp.Tuple(expressions=[_literal(v) for v in row]) for row in source.rows],
                          alias=exp.TableAlias(this=exp.to_identifier(HIDDEN + "rows"),
                                               columns=[exp.to_identifier(s, quoted=True) for s in slots]))
        select = exp.select(*(exp.alias_(v, n, quoted=True) for n, v in outputs)).from_(rows)
    else:
        nulls = exp.select(*(exp.alias_(exp.null(), s, quoted=True) for s in slots)).where(exp.false())
        select = exp.select(*(exp.alias_(v, n, quoted=True) for n, v in outputs)).from_(nulls.subquery(HIDDEN + "rows"))
    return _composite("inline", select, [(TIME, "TIMESTAMP"), *((n, t) for n, t in schema if n != TIME)])


def _lookup(source: LookupDataSource) -> DataSourceView:
    table = exp.Table(this=exp.to_identifier(source.lookup, quoted=True), db=exp.to_identifier("lookup"))
    select = exp.select(exp.alias_(_epoch(), TIME, quoted=True), _column("k"), _column("v")).from_(table)
    return _composite("lookup", select, [(TIME, "TIMESTAMP"), ("k", "VARCHAR"), ("v", "VARCHAR")])


def _query(query: q.SubQuery, catalog: Catalog, path: str) -> DataSourceView:
    inner = view(query.data_source, catalog, f"{path}.dataSource")
    try:
        statement = native_sql.statement(query, inner)
    except SpecError as error:
        raise SpecError(f"{path}.{error.path}" if error.path else path, error.message) from None
    assert isinstance(statement, exp.Query)  # only search queries can be known empty
    outputs = [n for n in statement.named_selects if not n.startswith(HIDDEN) and n != TIME]
    rows = statement.subquery(HIDDEN + "results")
    select = exp.select(exp.alias_(_subquery_time(query), TIME, quoted=True),
                        *(_column(n) for n in outputs)).from_(rows)
    if query.query_type == "timeseries":
        select = select.where(exp.EQ(this=_column(KIND), expression=exp.Literal.number(ROW_KIND)))
        if query.context.get("skipEmptyBuckets") in (True, "true"):
            select = select.where(exp.GT(this=_column(ROWS), expression=exp.Literal.number(0)))
        if query.limit is not None:
            select = select.order_by(exp.Ordered(this=_column(BUCKET), desc=query.descending)).limit(query.limit)
    return _composite("query", select, catalog.describe(select))


def _subquery_time(query: q.SubQuery) -> exp.Expr:
    """A result row's time as Druid gives it: the row's bucket, or for granularity all, the query's first instant
    (groupBy), or the later of that and the data's first row (timeseries, topN); a scan row's own time."""
    if query.query_type == "scan":
        return druid_function("MILLIS_TO_TIMESTAMP", _column(MILLIS))
    if query.granularity.kind != "all":
        return _column(BUCKET)
    start = millis_timestamp(query.intervals[0].start if query.intervals else 0)
    if query.query_type == "groupBy":
        return start
    return exp.Coalesce(this=exp.Greatest(this=start, expressions=[_column(FIRST)]), expressions=[start.copy()])


_LEFT, _RIGHT = HIDDEN + "left", HIDDEN + "right"


def _join(source: JoinDataSource, catalog: Catalog, path: str) -> DataSourceView:
    left = view(source.left, catalog, f"{path}.left")
    right = view(source.right, catalog, f"{path}.right")
    prefix = source.right_prefix
    left_names = [n for n in left.columns if not n.startswith(prefix)]
    condition = _join_condition(source.condition, prefix, left_names, right.columns, f"{path}.condition")
    outputs = [exp.alias_(_column(n, _LEFT), n, quoted=True) for n in left_names]
    outputs += [exp.alias_(_column(n, _RIGHT), prefix + n, quoted=True) for n in right.columns]
    joined = exp.select(*outputs).from_(_aliased(left, _LEFT)).join(
        _aliased(right, _RIGHT), on=condition, join_type=source.join_type)
    left_types, right_types = _types(left), _types(right)
    schema = [(n, left_types.get(n, "VARCHAR")) for n in left_names]
    schema += [(prefix + n, right_types.get(n, "VARCHAR")) for n in right.columns]
    return _composite("join", joined, schema, left.segments)


def _aliased(source: DataSourceView, alias: str) -> exp.Expr:
    relation = native_sql.source_relation(source)
    relation.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    return relation


def _join_condition(text: str, prefix: str, left: Sequence[str], right: Sequence[str], path: str) -> exp.Expr:
    """The condition over the two sides; it must read a right column, else it is no join condition Druid can run."""
    read_right: list[str] = []

    def resolve(name: str) -> exp.Expr:
        side, column = (_RIGHT, name[len(prefix):]) if name.startswith(prefix) else (_LEFT, name)
        if column not in (right if side == _RIGHT else left):
            if side == _RIGHT:
                raise SpecError(path, f"'{name}' is not a column of the right data source, whose columns are "
                                      f"{', '.join(prefix + n for n in right)}")
            return exp.null()
        if side == _RIGHT:
            read_right.append(name)
        value = _column(column, side)
        return epoch_millis(value) if column == TIME else value

    try:
        condition = to_condition(text, resolve)
    except ExpressionError as error:
        raise SpecError(path, str(error)) from None
    if not read_right:
        raise SpecError(path, f"'{text}' reads no right column: a join condition compares left values with right "
                              f"columns, named with the rightPrefix '{prefix}'")
    return condition
