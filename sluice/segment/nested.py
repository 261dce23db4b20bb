"""A json dimension's segment column in Druid's nested-column layout: the JSON text, and beside it one typed field
column per path that holds a string or a long in every row of the file.

Druid stores a nested column as its raw values plus a column per literal path, so that a filter on
`JSON_VALUE(payload, '$.device')` reads a small dictionary-encoded column instead of parsing every document. A
Sluice segment stores the column as a Parquet struct: its first field `json` is the text, the others are the field
columns, each named by its path in DuckDB's syntax (`$."device"`, every name quoted), so that the broker finds the
field of a query's path by writing the path the same way.
"""

from __future__ import annotations

import pyarrow as pa

#: the field holding a json dimension's JSON text, first in its struct
JSON_FIELD = "json"
#: the types a path's field column is written for (Spark's names, as schema_of_variant_agg writes them)
FIELD_TYPES = {"STRING": "string", "BIGINT": "bigint"}


def is_json_column(arrow_type: pa.DataType) -> bool:
    """Whether a segment column stored as `arrow_type` is a json dimension: a struct whose first field is its text."""
    return (pa.types.is_struct(arrow_type) and arrow_type.num_fields >= 1
            and arrow_type.field(0).name == JSON_FIELD and pa.types.is_string(arrow_type.field(0).type))


def field_columns(arrow_type: pa.DataType) -> dict[str, pa.DataType]:
    """The field columns of a json dimension's struct, by path key."""
    return {arrow_type.field(i).name: arrow_type.field(i).type for i in range(1, arrow_type.num_fields)}


def path_key(parts: list[str | int]) -> str:
    """A path (field names and array indexes) in DuckDB's syntax, every name quoted so that no character of it means
    anything there: how a query's JSON path is given to DuckDB, and the name of its field column.

    >>> path_key(["a", "b.c", 1])
    '$."a"."b.c"[1]'
    """
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else '."' + p.replace("\\", "\\\\").replace('"', '\\"') + '"'
                         for p in parts)


def typed_paths(schema: str) -> list[tuple[list[str], str]]:
    """The paths to index, with the Spark type of their field, from the schema Spark's `schema_of_variant_agg` finds
    for a json dimension's objects (`OBJECT<a: STRING, b: OBJECT<c: BIGINT>>`): every path through objects only to
    a STRING or BIGINT. Paths through arrays, and names with a quote or a backslash (which Spark's variant paths
    cannot spell unambiguously), are not indexed: queries on them parse the text.

    >>> typed_paths("OBJECT<`a.b`: STRING, n: OBJECT<x: BIGINT, y: ARRAY<BIGINT>>, v: DECIMAL(2,1)>")
    [(['a.b'], 'STRING'), (['n', 'x'], 'BIGINT')]
    """
    found: list[tuple[list[str], str]] = []
    _object_fields(schema, 0, [], found)
    return found


def _object_fields(text: str, at: int, prefix: list[str], found: list[tuple[list[str], str]]) -> int:
    """Reads the type starting at `at`, recording the indexed paths under `prefix`; returns where the type ends."""
    if not text.startswith("OBJECT<", at):
        end = _type_end(text, at)
        kind = text[at:end]
        if prefix and kind in FIELD_TYPES and not any(c in name for name in prefix for c in "'\"\\"):
            found.append((prefix, kind))
        return end
    at += len("OBJECT<")
    while text[at] != ">":
        if text[at] == "`":  # a quoted name, a backquote in it doubled
            end = at + 1
            while not (text[end] == "`" and text.startswith(": ", end + 1)):
                end += 2 if text[end] == "`" else 1
            name, at = text[at + 1:end].replace("``", "`"), end + 3
        else:
            end = text.index(": ", at)
            name, at = text[at:end], end + 2
        at = _object_fields(text, at, [*prefix, name], found)
        if text.startswith(", ", at):
            at += 2
    return at + 1


def _type_end(text: str, at: int) -> int:
    """Where a non-object type starting at `at` ends: at the `,` or `>` that closes it, past any `<…>` or `(…)`."""
    depth, quoted = 0, False
    while at < len(text):
        char = text[at]
        if char == "`":  # a name (a doubled backquote in it flips twice)
            quoted = not quoted
        elif not quoted and char in "<(":
            depth += 1
        elif not quoted and char in ">)":
            if depth == 0:
                return at
            depth -= 1
        elif not quoted and char == "," and depth == 0:
            return at
        at += 1
    return at
