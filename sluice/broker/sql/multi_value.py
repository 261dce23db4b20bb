"""Druid's multi-value string dimensions at query time.

Ingestion stores a multi-value string dimension as a list of strings; older segments of the same data source may hold
it as a plain string, which the views read as a one-value list (`engine.py`). A row with no value is null or an empty
list, and Druid treats both as null. Druid SQL types such a column VARCHAR, but reads it in ways no SQL type has
(https://druid.apache.org/docs/latest/querying/multi-value-dimensions and
https://druid.apache.org/docs/latest/querying/sql-data-types#multi-value-strings):

- a condition matches a row when it holds for ANY of its values (`tags = 'a'`, IN, LIKE, ranges, `UPPER(tags) = 'A'`;
  `tags IS NULL` matches a row with no value). NOT negates the row's match, and Druid plans `tags <> 'a'` as
  NOT (tags = 'a'): it keeps the rows with no value 'a' and (three-valued logic) no null value, as Druid's NOT filter
  does since SQL-compatible filters (https://github.com/apache/druid/pull/15058; why `["a","b"] <> 'b'` is false:
  https://github.com/apache/druid/pull/14942);
- GROUP BY the column groups each value on its own, a row with no value as NULL (an implicit UNNEST), after WHERE has
  kept or dropped whole rows: a row kept by `tags = 'a'` adds all its values to the groups;
- a scalar function of the column elsewhere (`SELECT UPPER(tags)`) is applied to each value, to NULL for a row with
  none, and its value is a multi-value string again;
- selected as it is, a row is null (no value), its one value, or the list of its values (DimensionSelector's
  rowToObject); Druid SQL writes that list as JSON text (SqlResults.coerce), a native scan as a JSON array;
- the MV_ and ARRAY_ functions and the aggregates read the list itself (`array_functions.py`); an empty list stays
  an empty list there (Sluice's ingestion writes null for no value, so only files written otherwise hold one).

The translator marks the column references that read such a column, from the files the query reads, as it marks
complex columns (`complex_types.py`), and rewrites one scope at a time, innermost first: a derived table that grouped
by the column hands its outer query plain values, which are then no longer marked.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from itertools import count
from typing import Any

from sqlglot import exp
from sqlglot.optimizer.scope import Scope, traverse_scope

from sluice.broker.functions.array_functions import ARRAY_FUNCTIONS
from sluice.broker.functions.calls import engine_function
from sluice.broker.sql.complex_types import mark_scope_columns, selected_sources, source_type
from sluice.broker.errors import SqlError

#: the kind a data source's column mapping gives a multi-value string column (see `sql.translate_query`)
MULTI_VALUE = "multiValueString"
#: the one field of the STRUCT a query's multi-value output comes in: DuckDB has one list type for an ARRAY result and
#: a multi-value one, which Druid types and writes differently, so the engine tells them apart by this wrapper
OUTPUT_FIELD = "__sluice_multi_value"
#: the query context key that allows grouping by a multi-value column (Druid's default: true)
UNNESTING = "groupByEnableMultiValueUnnesting"
#: Druid plans `tags IN (SELECT …)` and `tags = (SELECT …)` as a join, and its join matchers refuse a row of several
#: values (IndexedTableJoinMatcher); the engine turns this text, raised by the query, into Druid's 501
JOIN_UNSUPPORTED = "Joining against a multi-value dimension is not supported."
_MARK = "multi_value"  # meta key of a column reference that reads a multi-value column
_NAME = "__sluice_mv_"  # unnested values and lambda parameters: names no column has

# Where a condition ends: the clauses and connectives that take a boolean (a CASE's WHEN is checked apart).
_CONDITIONS = (exp.Where, exp.Having, exp.Qualify, exp.Join, exp.Connector, exp.Not)
# What passes a value through, value by value: functions, operators, casts, CASE.
_SCALAR = (exp.Func, exp.Binary, exp.Unary)
# Functions whose value is a multi-value string: grouping by one groups by each of its values.
_MULTI_VALUE_FUNCTIONS = frozenset({"MV_FILTER_ONLY", "MV_FILTER_NONE", "MV_SLICE", "MV_APPEND", "MV_PREPEND",
                                    "MV_CONCAT", "STRING_TO_MV", "ARRAY_TO_MV"})


def is_output(duckdb_type: Any) -> bool:
    """Whether a result column of this DuckDB type is a multi-value string output (see `OUTPUT_FIELD`)."""
    return duckdb_type.id == "struct" and [name for name, _ in duckdb_type.children] == [OUTPUT_FIELD]


def row_value(output: dict[str, list[str | None] | None]) -> str | list[str | None] | None:
    """A multi-value output as Druid returns it: null for no value, the value for one, the list of several."""
    values = output[OUTPUT_FIELD]
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def rewrite_multi_value(statement: exp.Query, columns: Mapping[str, Collection[str]], unnesting: bool = True) -> None:
    """Rewrites `statement` in place to read the multi-value columns (`columns`: each data source's, by name) as
    Druid does. Without `unnesting` (groupByEnableMultiValueUnnesting false) grouping by one is an error."""
    if not any(columns.values()):
        return
    kinds = {source: dict.fromkeys(names, MULTI_VALUE) for source, names in columns.items()}
    names = (f"{_NAME}{n}" for n in count())
    settled: set[int] = set()
    scopes: dict[int, Scope] = {}
    for scope in traverse_scope(statement):
        mark_scope_columns(scope, kinds, _MARK, settled)
        if isinstance(scope.expression, exp.Select):
            _unnest_groups(scope.expression, names, unnesting)
            scopes[id(scope.expression)] = scope
        for condition, references in _conditions(scope):
            _match_any_value(condition, references, names)
        _count_distinct_values(scope)
        _map_functions(scope, names)
    for select in _outputs(statement):
        if id(select) in scopes:
            _wrap_outputs(select, scopes[id(select)], kinds)


def _marked(node: exp.Expr) -> bool:
    """Whether `node` reads a multi-value column as it is, or is a function mapped over one's values."""
    return node.meta.get(_MARK) is not None


def _reads_list(node: exp.Expr) -> bool:
    """Whether `node` takes a multi-value argument as the list of its values: an MV_ or ARRAY_ function (or another
    of `array_functions.py`, SCALAR_IN_ARRAY…), an aggregate, a window, a subquery."""
    if isinstance(node, exp.Anonymous):
        return node.name.upper().startswith(("MV_", "ARRAY_")) or node.name.upper() in ARRAY_FUNCTIONS
    return isinstance(node, exp.AggFunc | exp.Window | exp.Query | exp.Subquery) or \
        type(node).__module__ == exp.Array.__module__  # sqlglot's typed array functions


def _per_value(reference: exp.Expr, root: exp.Expr) -> bool:
    """Whether `root` reads `reference` value by value: no function on the way reads it as a list."""
    node = reference
    while node is not root:
        node = node.parent
        if node is None or _reads_list(node):
            return False
    return True


# ------------------------------------------------------------------------------------------------------ conditions


def _condition(reference: exp.Column) -> exp.Expr | None:
    """The condition that reads `reference` value by value: the innermost predicate (comparison, IN, LIKE, IS…)
    around it, or the largest expression around it that is a WHERE, ON, HAVING, CASE WHEN or AND/OR/NOT operand
    (`CONTAINS_STRING(tags, 'a')`). None when it is read as a list or outside a condition (a projection)."""
    node: exp.Expr = reference
    while True:
        parent = node.parent
        if parent is None or _reads_list(parent):
            return None
        if isinstance(parent, exp.Predicate):
            return parent
        if isinstance(parent, _CONDITIONS) or isinstance(parent, exp.If) and node.arg_key == "this":
            return None if node is reference else node
        if not isinstance(parent, _SCALAR):
            return None
        node = parent


def _conditions(scope: Scope) -> list[tuple[exp.Expr, list[exp.Column]]]:
    """The conditions of a scope that read multi-value columns value by value, with the references they read so
    (a reference GROUP BY has replaced by its value is out of the tree: no parent)."""
    found: dict[int, tuple[exp.Expr, list[exp.Column]]] = {}
    for column in scope.columns:
        if _marked(column) and (condition := _condition(column)) is not None:
            found.setdefault(id(condition), (condition, []))[1].append(column)
    return list(found.values())


def _match_any_value(condition: exp.Expr, references: list[exp.Column], names: Iterator[str]) -> None:
    """Replaces `condition` by whether it holds for any value of the rows' multi-value columns it reads; a JOIN's
    condition, or one on a subquery (a join, in Druid), reads a row's one value and fails on a row of several."""
    if condition.find(exp.Query) is not None or _joins_on(condition):
        for reference in references:
            reference.replace(_single_value(reference.copy()))
        return
    negated = isinstance(condition, exp.NEQ)  # Druid plans `a <> b` as NOT (a = b)
    per_value: dict[tuple[str, str], tuple[exp.Column, str]] = {}
    for reference in references:
        key = (reference.table, reference.name)
        if key not in per_value:
            per_value[key] = (reference.copy(), next(names))
        reference.replace(exp.column(per_value[key][1]))
    matched = exp.EQ(this=condition.this.copy(), expression=condition.expression.copy()) if negated \
        else condition.copy()
    for column, name in reversed(per_value.values()):
        matched = _any(column, name, matched)
    condition.replace(exp.Not(this=matched) if negated else matched)


def _joins_on(condition: exp.Expr) -> bool:
    """Whether `condition` is (part of) the ON of a JOIN of its own query."""
    node = condition
    while node.parent is not None and not isinstance(node.parent, exp.Query):
        if isinstance(node.parent, exp.Join) and node.arg_key == "on":
            return True
        node = node.parent
    return False


def _any(column: exp.Expr, name: str, condition: exp.Expr) -> exp.Expr:
    """Three-valued ANY of `condition` over the values of `column` (bound to `name` in it): true when it holds for a
    value, unknown when it holds for none but is unknown for one (a null value, or no value at all), else false."""

    def holding(test: exp.Expr) -> exp.Expr:
        kept = exp.ArrayFilter(this=_values(column), expression=exp.Lambda(this=test, expressions=[
            exp.to_identifier(name)]))
        return exp.GT(this=exp.ArraySize(this=kept), expression=exp.Literal.number(0))

    unknown = exp.Is(this=exp.paren(condition.copy()), expression=exp.null())
    return exp.Case(ifs=[exp.If(this=holding(condition), true=exp.true()),
                         exp.If(this=holding(unknown), true=exp.null())], default=exp.false())


def _single_value(column: exp.Expr) -> exp.Expr:
    """A row's one value, null for none; Druid's JOIN_UNSUPPORTED error for a row of several."""
    several = exp.GT(this=exp.ArraySize(this=column.copy()), expression=exp.Literal.number(1))
    return exp.Case(ifs=[exp.If(this=several, true=engine_function("ERROR", exp.Literal.string(JOIN_UNSUPPORTED)))],
                    default=engine_function("LIST_EXTRACT", column.copy(), exp.Literal.number(1)))


def _values(column: exp.Expr) -> exp.Expr:
    """A row's values, a row with none (null or empty) as the one value NULL, which Druid reads it as."""
    present = exp.GT(this=exp.ArraySize(this=column.copy()), expression=exp.Literal.number(0))
    return exp.Case(ifs=[exp.If(this=present, true=column.copy())], default=exp.Array(expressions=[exp.null()]))


# -------------------------------------------------------------------------------------------------------- grouping


def _unnest_groups(select: exp.Select, names: Iterator[str], unnesting: bool) -> None:
    """GROUP BY a multi-value column (or an expression of its values, or an MV_ function's value): one row per value
    (CROSS JOIN UNNEST, after the WHERE), the grouped expressions reading the value instead of the list; SqlError
    without `unnesting`, as Druid's groupBy engine refuses it."""
    distinct = select.args.get("distinct")
    if select.args.get("group") is None and distinct is not None and not distinct.args.get("on") and any(
            _marked(projection.unalias()) for projection in select.expressions):
        # SELECT DISTINCT tags is a GROUP BY of every projection, which Druid unnests alike
        select.set("distinct", None)
        select.group_by(*(exp.Literal.number(i) for i in range(1, len(select.expressions) + 1)), copy=False)
    group = select.args.get("group")
    if group is None:
        return
    lists: dict[exp.Expr, list[exp.Expr]] = {}  # what is unnested → the references to replace by its value
    for key in (_grouped(select, key) for key in group.expressions):
        if isinstance(key, exp.Anonymous) and key.name.upper() in _MULTI_VALUE_FUNCTIONS:
            lists.setdefault(key, [])
        for column in key.find_all(exp.Column):
            if _marked(column) and _per_value(column, key):
                lists.setdefault(exp.column(column.name, column.table or None, quoted=True), [])
    if not lists:
        return
    if not unnesting:
        unnested = next(iter(lists))
        name = unnested.name if isinstance(unnested, exp.Column) else unnested.sql(dialect="druid")
        raise SqlError(f"Encountered multi-value dimension [{name}] that cannot be processed with "
                       f"'{UNNESTING}' set to false. Consider setting '{UNNESTING}' to true in your query context.")
    parts = [*select.expressions, group, select.args.get("having"), select.args.get("order")]
    for part in (p for p in parts if p is not None):
        for node in list(part.walk()):
            unnested = _unnested(node, lists)
            if unnested is not None and _per_value(node, part):
                lists[unnested].append(node)
    for unnested, references in lists.items():
        name = next(names)
        for reference in references:
            value = exp.column(name)
            named = isinstance(reference, exp.Column) and reference.parent is select  # keeps its output name
            reference.replace(exp.alias_(value, reference.name, quoted=True) if named else value)
        alias = exp.TableAlias(this=exp.to_identifier(name), columns=[exp.to_identifier(name)])
        select.join(exp.Unnest(expressions=[_values(unnested)], alias=alias), join_type="CROSS", copy=False)


def _grouped(select: exp.Select, key: exp.Expr) -> exp.Expr:
    """What a GROUP BY item groups by: a projection for an ordinal or a projection's alias, else the item."""
    if isinstance(key, exp.Literal) and key.is_int and 0 < int(key.name) <= len(select.expressions):
        return select.expressions[int(key.name) - 1].unalias()
    if isinstance(key, exp.Column) and not key.table and not _marked(key):
        for projection in select.expressions:
            if isinstance(projection, exp.Alias) and projection.alias == key.name:
                return projection.unalias()
    return key


def _unnested(node: exp.Expr, lists: Mapping[exp.Expr, list[exp.Expr]]) -> exp.Expr | None:
    """The unnested expression `node` reads (a column, by name and qualifier, or an MV_ function), if any."""
    if isinstance(node, exp.Column):
        for unnested in lists:
            if isinstance(unnested, exp.Column) and unnested.name == node.name and unnested.table in ("", node.table):
                return unnested
        return None
    return node if node in lists else None


# ------------------------------------------------------------------------------------------------------- functions


def _count_distinct_values(scope: Scope) -> None:
    """COUNT(DISTINCT tags) and the APPROX_COUNT_DISTINCT functions of a multi-value column count the distinct values
    of its rows, as Druid's cardinality does, not distinct lists; exactly, which an approximation allows."""
    for column in scope.columns:
        parent = column.parent
        if parent is None or not _marked(column):
            continue
        if isinstance(parent, exp.Distinct) and isinstance(parent.parent, exp.Count) and parent.expressions == [column]:
            aggregate: exp.Expr = parent.parent
        elif isinstance(parent, exp.ApproxDistinct) or isinstance(parent, exp.Anonymous) and \
                parent.name.upper().startswith("APPROX_COUNT_DISTINCT") and parent.expressions[0] is column:
            aggregate = parent
        else:
            continue
        lists: exp.Expr = exp.ArrayAgg(this=column.copy())
        if isinstance(aggregate.parent, exp.Filter):  # COUNT(DISTINCT tags) FILTER (WHERE …)
            aggregate = aggregate.parent
            lists = exp.Filter(this=lists, expression=aggregate.expression.copy())
        # DuckDB's LIST_DISTINCT leaves out NULL, which COUNT(DISTINCT) does not count either
        distinct = exp.ArraySize(this=exp.ArrayDistinct(this=exp.Flatten(this=lists)))
        aggregate.replace(exp.Coalesce(this=distinct, expressions=[exp.Literal.number(0)]))


def _map_functions(scope: Scope, names: Iterator[str]) -> None:
    """A scalar function of one multi-value column outside a condition or GROUP BY (`SELECT UPPER(tags)`) is applied
    to each value, NULL for a row with none (Druid: "map the function across all values in the row"); its value is a
    multi-value string again."""
    for column in scope.columns:
        if column.parent is None or not _marked(column):
            continue
        function = column
        while isinstance(function.parent, _SCALAR) and not isinstance(function.parent, (*_CONDITIONS, exp.Predicate)) \
                and not _reads_list(function.parent):
            function = function.parent
        references = [c for c in function.find_all(exp.Column) if _marked(c) and _per_value(c, function)]
        if function is column or {(c.table, c.name) for c in references} != {(column.table, column.name)}:
            continue
        name, values = next(names), column.copy()
        for reference in references:
            reference.replace(exp.column(name))
        each = exp.Transform(this=values, expression=exp.Lambda(this=function.copy(), expressions=[
            exp.to_identifier(name)]))
        of_null = function.copy().transform(  # what a row with no value gives: NULL, or one value
            lambda node: exp.cast(exp.null(), exp.DType.VARCHAR) if node == exp.column(name) else node)
        mapped = exp.Case(ifs=[
            exp.If(this=exp.GT(this=exp.ArraySize(this=values.copy()), expression=exp.Literal.number(0)), true=each),
            exp.If(this=exp.Not(this=exp.Is(this=of_null, expression=exp.null())), true=exp.array(of_null.copy()))])
        mapped.meta[_MARK] = MULTI_VALUE
        function.replace(mapped)


# --------------------------------------------------------------------------------------------------------- outputs


def _outputs(statement: exp.Expr) -> Iterator[exp.Select]:
    """The SELECTs whose projections are the query's result columns (each branch of a set operation)."""
    statement = statement.unnest()
    if isinstance(statement, exp.SetOperation):
        yield from _outputs(statement.left)
        yield from _outputs(statement.right)
    elif isinstance(statement, exp.Select):
        yield statement


def _wrap_outputs(select: exp.Select, scope: Scope, kinds: Mapping[str, Mapping[str, str]]) -> None:
    """Each result column that is a multi-value column as it is comes as the STRUCT the engine reads as Druid's row
    value; `*` replaces those it selects."""
    for projection in select.expressions:
        if isinstance(projection, exp.Star):
            sources = [source for _, source in selected_sources(scope).values()]
            derived = [p.alias_or_name for s in sources if isinstance(s, Scope) for p in s.expression.selects]
            names = dict.fromkeys([*(name for columns in kinds.values() for name in columns), *derived])
            replaced = [exp.alias_(_output(exp.column(name, quoted=True)), name, quoted=True) for name in names
                        if any(source_type(source, name, kinds, _MARK) for source in sources)]
            if replaced:
                projection.set("replace", replaced)
        elif _marked(value := projection.unalias()):
            wrapped = _output(value.copy())
            if isinstance(projection, exp.Alias | exp.Column):  # a column keeps its name; a function gets EXPR$n
                value.replace(wrapped if value is not projection else exp.alias_(wrapped, value.name, quoted=True))
            else:
                projection.replace(wrapped)


def _output(value: exp.Expr) -> exp.Expr:
    return exp.Struct(expressions=[exp.PropertyEQ(this=exp.to_identifier(OUTPUT_FIELD, quoted=True), expression=value)])
