"""The metric columns Druid keeps as complex values, as ingestion writes them into segment files, and which column
references of a query read one.

A first/last aggregator's column holds Druid's serializable pair as STRUCT<lhs: the row's time in epoch millis, rhs:
the value>, named `serializablePairLong<Long|Double|Float|String>` after the value's type; an HLLSketch, thetaSketch or
quantilesDoublesSketch column holds the one-field STRUCT of `sketches.py`. Druid's planner types a column from the
segments' schema; here the Parquet schema of the files a query reads says it, and the translator marks each column
reference that reads such a column (`mark_complex_columns`) so that EARLIEST reads the pair's value by the pair's
time and APPROX_COUNT_DISTINCT merges the sketches, instead of taking the struct for a plain value. Multi-value
string columns are marked the same way, under another mark (`multi_value.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from sqlglot import exp
from sqlglot.errors import OptimizeError
from sqlglot.optimizer.scope import Scope, traverse_scope

from sluice.broker.functions.bloom import BLOOM
from sluice.broker.functions.sketches import KINDS
from sluice.tdigest import TDIGEST

#: the complex types held as a one-field STRUCT of their bytes, written as Base64 in a result: sketches, Bloom filters
COMPLEX_KINDS = (*KINDS, BLOOM, TDIGEST)

#: a pair's complex type by the DuckDB type id of its value
PAIRS = {"bigint": "serializablePairLongLong", "double": "serializablePairLongDouble",
         "float": "serializablePairLongFloat", "varchar": "serializablePairLongString"}
_ARROW_PAIR_VALUES = {pa.int64(): "bigint", pa.float64(): "double", pa.float32(): "float", pa.string(): "varchar",
                      pa.large_string(): "varchar"}
_MARK = "complex_type"  # meta key of a column reference that reads a complex column


def arrow_complex_type(arrow_type: pa.DataType) -> str | None:
    """The complex type of a segment column stored as `arrow_type`, or None for a plain column."""
    if not pa.types.is_struct(arrow_type):
        return None
    fields = {arrow_type.field(i).name: arrow_type.field(i).type for i in range(arrow_type.num_fields)}
    if len(fields) == 1:
        [(name, kind)] = fields.items()
        return name if name in COMPLEX_KINDS and pa.types.is_binary(kind) else None
    if fields.keys() == {"lhs", "rhs"} and fields["lhs"] == pa.int64():
        return PAIRS.get(_ARROW_PAIR_VALUES.get(fields["rhs"], ""))
    return None


def complex_type(duckdb_type: Any) -> str | None:
    """The complex type of a DuckDB value type (a column read from a segment, or a sketch a function made)."""
    if duckdb_type.id != "struct":
        return None
    children = dict(duckdb_type.children)
    if len(children) == 1:
        name = next(iter(children))
        return name if name in COMPLEX_KINDS else None
    if children.keys() == {"lhs", "rhs"} and children["lhs"].id == "bigint":
        return PAIRS.get(children["rhs"].id)
    return None


def is_pair(kind: str | None) -> bool:
    return kind in PAIRS.values()


def struct_field(value: exp.Expr, name: str) -> exp.Expr:
    """A field of a struct value, as DuckDB reads one."""
    return exp.Anonymous(this="STRUCT_EXTRACT", expressions=[value.copy(), exp.Literal.string(name)])


def pair_part(pair: exp.Expr, part: str) -> exp.Expr:
    """A pair's time (`lhs`) or value (`rhs`)."""
    return struct_field(pair, part)


# ------------------------------------------------------------------------------------------------ column references


def referenced_type(node: exp.Expr) -> str | None:
    """The complex type of the column `node` reads, when it is a column reference marked as reading one."""
    return node.meta.get(_MARK) if isinstance(node, exp.Column) else None


def mark_complex_columns(statement: exp.Expr, columns: Mapping[str, Mapping[str, str]]) -> None:
    """Marks every column reference of `statement` that reads a complex column: of a data source (`columns` gives
    each data source's complex columns by name), or a derived table's or CTE's output that is such a reference."""
    if not any(columns.values()):
        return
    settled: set[int] = set()
    for scope in traverse_scope(statement):
        mark_scope_columns(scope, columns, _MARK, settled)


def mark_scope_columns(scope: Scope, columns: Mapping[str, Mapping[str, str]], mark: str, settled: set[int]) -> None:
    """Marks (meta key `mark`) the column references of one scope that read a column of `columns` (by data source,
    the kind of each column by name), directly or through a derived table's or CTE's output; `settled` holds the
    references already settled by the scopes before.

    Scopes come innermost first (`traverse_scope`), so a derived table's outputs are marked before the query reading
    them. A reference is settled by the innermost scope that can say what it reads: the one holding its table
    qualifier (the outer query, for a subquery's correlated reference), or, when it has none, the one it appears in."""
    sources = selected_sources(scope)
    for column in scope.columns:
        qualifier = column.table
        if id(column) in settled or (qualifier and qualifier not in sources):
            continue
        settled.add(id(column))
        candidates = [sources[qualifier]] if qualifier else list(sources.values())
        for _, source in candidates:
            kind = source_type(source, column.name, columns, mark)
            if kind is not None:
                column.meta[mark] = kind
                break


def source_type(source: exp.Table | Scope | Any, name: str, columns: Mapping[str, Mapping[str, str]],
                mark: str = _MARK) -> str | None:
    """The kind of output `name` of a FROM source: a data source's column, or a derived table's or CTE's output that
    is marked with `mark` (through `*` as well)."""
    if isinstance(source, exp.Table):
        return columns.get(source.name, {}).get(name)
    if not isinstance(source, Scope):  # UNNEST and other table functions hold no segment columns
        return None
    for projection in source.expression.selects:
        if projection.is_star:
            for _, inner in selected_sources(source).values():
                if (kind := source_type(inner, name, columns, mark)) is not None:
                    return kind
        elif projection.alias_or_name == name:
            return projection.unalias().meta.get(mark)
    return None


def selected_sources(scope: Scope) -> dict[str, tuple[exp.Expr, exp.Table | Scope]]:
    """The tables and derived tables a scope's FROM and JOINs read, by name (none when a name is used twice: DuckDB
    then refuses the query with its own message)."""
    try:
        return scope.selected_sources
    except OptimizeError:
        return {}
