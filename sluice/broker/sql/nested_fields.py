"""Queries over the field columns of json dimensions (Druid's nested-column layout, segment/nested.py).

A data source's view shows each field column as a column of its own, named `field_column(dimension, path)`, which
`*` leaves out. It holds what JSON_VALUE(dimension, path) returns as VARCHAR, in every file: the field itself where
a file has one, else the value parsed from the file's JSON text. A query's JSON_VALUE(dimension, 'path') returning
VARCHAR then reads that column: a dictionary-encoded string column instead of every document parsed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

import pyarrow as pa
from sqlglot import exp
from sqlglot.optimizer.scope import traverse_scope

from sluice.broker.sql.complex_types import selected_sources, struct_field
from sluice.broker.errors import SqlError
from sluice.broker.functions.json_functions import json_value_text, parse_path
from sluice.segment.nested import JSON_FIELD, field_columns, is_json_column, path_key

#: the kind `complex_columns` gives a field column of a data source's view
NESTED_FIELD = "nested field"
_PREFIX = "__sluice_field:"
_VARCHAR = exp.DataType.build("VARCHAR")


def field_column(dimension: str, key: str) -> str:
    """The view's column of a json dimension's field at the path `key` (segment.nested.path_key)."""
    return f"{_PREFIX}{dimension}:{key}"


def indexed_fields(schemas: Iterable[pa.Schema]) -> dict[str, list[str]]:
    """The path keys of the field columns any of these files holds, by json dimension."""
    found: dict[str, dict[str, None]] = {}
    for schema in schemas:
        for column in schema:
            if is_json_column(column.type) and (keys := field_columns(column.type)):
                found.setdefault(column.name, {}).update(dict.fromkeys(keys))
    return {dimension: list(keys) for dimension, keys in found.items()}


def view_fields(schema: pa.Schema, fields: Mapping[str, Collection[str]]) -> list[exp.Expr]:
    """The field columns of the view, for a scan of files with `schema`."""
    return [exp.alias_(_field_text(schema.field(dimension).type if dimension in schema.names else None,
                                   exp.column(dimension, quoted=True), key), field_column(dimension, key), quoted=True)
            for dimension, keys in fields.items() for key in keys]


def _field_text(stored: pa.DataType | None, column: exp.Column, key: str) -> exp.Expr:
    """JSON_VALUE(column, key) as VARCHAR, in files that store the column as `stored` (None: not at all): the field
    where they hold it (a long as its text), else the value parsed from the text."""
    if stored is not None and is_json_column(stored):
        held = field_columns(stored)
        if key in held:
            field = struct_field(column, key)
            return field if pa.types.is_string(held[key]) else exp.cast(field, _VARCHAR)
        return json_value_text(json_document(column), exp.Literal.string(key))
    if stored is not None and pa.types.is_string(stored):  # a string dimension in older files: its text as JSON
        return json_value_text(column, exp.Literal.string(key))
    return exp.cast(exp.null(), _VARCHAR)


def json_document(column: exp.Column) -> exp.Expr:
    """A json dimension's stored value (its struct) as the JSON document a query reads."""
    return exp.cast(struct_field(column, JSON_FIELD), exp.DataType.build("JSON", dialect="duckdb"))


def read_field_columns(statement: exp.Expr, fields: Mapping[str, Collection[str]]) -> None:
    """Rewrites each JSON_VALUE(dimension, 'path') returning VARCHAR over a data source's json dimension whose view
    has the path's field column (`fields`: the field columns by data source) into a read of that column, and makes
    every `*` over a data source leave its field columns out."""
    if not any(fields.values()):
        return
    for scope in traverse_scope(statement):
        sources = selected_sources(scope)
        for column in scope.columns:
            call = column.parent
            if not (isinstance(call, exp.JSONValue) and call.this is column and _returns_text(call)) or (
                    column.table and column.table not in sources):  # a correlated reference: its own scope's
                continue
            name = _field_name(column, call.args.get("path"))
            read = [sources[column.table]] if column.table else sources.values()
            if name is not None and len(_tables_holding(read, fields, name)) == 1:
                call.replace(exp.column(name, table=column.table or None, quoted=True))
        for projection in scope.expression.selects if isinstance(scope.expression, exp.Select) else ():
            qualified = isinstance(projection, exp.Column)  # `t.*`
            star = projection.this if qualified else projection
            if not isinstance(star, exp.Star) or qualified and projection.table not in sources:
                continue
            read = [sources[projection.table]] if qualified else sources.values()
            hidden = dict.fromkeys(name for table in _tables_holding(read, fields) for name in fields[table.name])
            if hidden:
                star.set("except_", [exp.column(name, quoted=True) for name in hidden])


def _tables_holding(read: Iterable[tuple[exp.Expr, exp.Table | object]], fields: Mapping[str, Collection[str]],
                    name: str | None = None) -> list[exp.Table]:
    """The data sources among a scope's sources that have field columns (`name` among them, when given)."""
    return [source for _, source in read if isinstance(source, exp.Table) and fields.get(source.name)
            and (name is None or name in fields[source.name])]


def _returns_text(call: exp.JSONValue) -> bool:
    returning = call.args.get("returning")
    return not returning or returning.is_type(exp.DType.VARCHAR)


def _field_name(column: exp.Column, path: exp.Expr | None) -> str | None:
    """The view's field column for `column` at a literal path; None for a path Druid refuses (refused later, with
    the reason)."""
    if not (isinstance(path, exp.Literal) and path.is_string):
        return None
    try:
        return field_column(column.name, path_key(parse_path(path.name, "JSON_VALUE")))
    except SqlError:
        return None
