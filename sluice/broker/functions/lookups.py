"""Druid SQL's query-time lookups: `LOOKUP(expr, 'name'[, replaceMissingValueWith])` and the `lookup` schema, whose
tables (`lookup.name`, columns `k` and `v`) join like any other.

A lookup a query reads is registered on the query's own DuckDB cursor, as a system table is, under a name no data
source can have (`lookup/name`: Druid forbids `/` in data source names). LOOKUP becomes a scalar subquery over that
relation, which DuckDB plans as a join; the lookup's columns are renamed inside it so that a column of the query
named `k` or `v` inside `expr` still means the query's column. The names of the lookups a query reads are marked on
their table nodes (`meta`), so that the translation can say which to register.
"""

from __future__ import annotations

from sqlglot import exp

from sluice.broker.functions.calls import Call
from sluice.broker.errors import SqlError
from sluice.lookups.references import KEY, VALUE

#: Druid's schema of lookup tables
LOOKUP_SCHEMA = "lookup"
_META = "lookup"
_KEY, _VALUE = "__sluice_lookup_k", "__sluice_lookup_v"


def relation(name: str) -> str:
    """The name the query's DuckDB cursor knows the lookup by."""
    return f"{LOOKUP_SCHEMA}/{name}"


def _table(name: str) -> exp.Table:
    table = exp.Table(this=exp.to_identifier(relation(name), quoted=True))
    table.meta[_META] = name
    return table


def from_lookup_schema(table: exp.Table) -> None:
    """`lookup.name` in a FROM or JOIN as the lookup's relation, still known by its name as a qualifier."""
    name = table.name
    if not table.alias:
        table.set("alias", exp.TableAlias(this=exp.to_identifier(name, quoted=True)))
    table.set("db", None)
    table.set("this", exp.to_identifier(relation(name), quoted=True))
    table.meta[_META] = name


def lookup_call(call: Call) -> exp.Expr:
    """LOOKUP(expr, 'name'[, 'replaceMissingValueWith']): the value `expr` (as text) maps to; when `expr` is null
    or not a key, the replacement, else null."""
    name = call.literal(1, "the lookup name")
    if name is None:
        raise SqlError("LOOKUP needs the lookup name as a string literal, got NULL")
    replacement = call.literal(2, "replaceMissingValueWith")
    renamed = exp.select(exp.alias_(exp.column(KEY), _KEY, quoted=True),
                         exp.alias_(exp.column(VALUE), _VALUE, quoted=True)).from_(_table(name))
    key = exp.column(_KEY, quoted=True)
    found = exp.select(exp.column(_VALUE, quoted=True)).from_(renamed.subquery()).where(
        exp.EQ(this=key, expression=exp.cast(call.args[0].copy(), exp.DType.VARCHAR)))
    value = found.subquery()
    return value if replacement is None else exp.Coalesce(this=value, expressions=[exp.Literal.string(replacement)])


def read_lookups(statement: exp.Expr) -> frozenset[str]:
    """The lookups `statement` reads (after `lookup_call` and `from_lookup_schema` rewrote it)."""
    return frozenset(table.meta[_META] for table in statement.find_all(exp.Table) if _META in table.meta)
