"""Druid SQL's JSON functions, as DuckDB JSON expressions.

Druid's COMPLEX<json> is DuckDB's JSON type: the engine reports a JSON column as COMPLEX<json> and hands its values
on parsed, so that a result writes an object as a nested JSON value, as Druid does. A VARCHAR argument is read as
JSON text.

Paths are Druid's subset of JSONPath (`$`, `.name`, `['name']`, `[index]`, a negative index counting from the end),
checked here as Druid's NestedPathFinder checks them and rewritten into DuckDB's path syntax, so that a path Druid
refuses is refused with the reason, and a path DuckDB reads otherwise (`$..a`, `$[*]`) never reaches it.
"""

from __future__ import annotations

import re

from sqlglot import exp

from sluice.broker.functions.calls import Call, DruidFunction, template
from sluice.broker.errors import SqlError
from sluice.segment.nested import path_key

# ------------------------------------------------------------------------------------------------------- JSONPath

_INDEX = re.compile(r"[+-]?[0-9]+")
_INT_RANGE = range(-(2**31), 2**31)


def parse_path(path: str, function: str) -> list[str | int]:
    """A JSONPath as Druid's NestedPathFinder.parseJsonPath reads it: field names and array indexes ('' and '$' are
    the root); SqlError naming the path where Druid refuses it.

    >>> parse_path("$.a['b.c'][1]", "JSON_VALUE")
    ['a', 'b.c', 1]
    """

    def refuse(reason: str) -> SqlError:
        return SqlError(f"Cannot use [{function}]: [Bad format, '{path}' is not a valid JSONPath path: {reason}]")

    def part(start: int, end: int) -> str:
        if end - start < 1:
            raise refuse("path parts separated by '.' must not be empty")
        return path[start:end]

    if not path or path == "$":
        return []
    if not path.startswith("$"):
        raise refuse("must start with '$'")
    parts: list[str | int] = []
    # Where the next part starts, and where the last '.', the open '[' and the open quote are (-1: none).
    part_mark = dot_mark = array_mark = quote_mark = -1
    i = 1
    while i < len(path):
        current = path[i]
        if current == "." and array_mark < 0 and quote_mark < 0:
            if dot_mark >= 0:
                parts.append(part(part_mark, i))
            dot_mark, part_mark = i, i + 1
        elif current == "[" and array_mark < 0 and quote_mark < 0:
            if dot_mark == i - 1 and dot_mark != 0:
                raise refuse(f"invalid position {i} for '[', must not follow '.' or must be contained with '")
            if dot_mark >= 0 and i > 1:
                parts.append(part(part_mark, i))
                dot_mark = -1
            array_mark, part_mark = i, i + 1
        elif current == "]" and array_mark >= 0 and quote_mark < 0:
            text = part(part_mark, i)
            if not _INDEX.fullmatch(text) or int(text) not in _INT_RANGE:
                raise refuse(f"expected number for array specifier got {text} instead. Use ' if this value was meant "
                             "to be a field name")
            parts.append(int(text))
            dot_mark = array_mark = -1
            part_mark = i + 1
        elif dot_mark == -1 and array_mark == -1:
            raise refuse("path parts must be separated with '.'")
        elif current == "'" and quote_mark < 0:
            if array_mark != i - 1:
                raise refuse("' must be immediately after '['")
            quote_mark, part_mark = i, i + 1
        elif current == "'" and quote_mark >= 0 and path[i - 1] != "\\":
            parts.append(part(part_mark, i))
            dot_mark = quote_mark = -1
            i += 1  # the closing ']'
            if i == len(path):
                break
            if path[i] != "]":
                raise refuse("closing ' must immediately precede ']'")
            part_mark, array_mark = i + 1, -1
        i += 1
    if part_mark < len(path):
        if quote_mark != -1:
            raise refuse("unterminated '")
        if array_mark != -1:
            raise refuse("unterminated '['")
        parts.append(path[part_mark:])
    return parts


def _path_argument(value: exp.Expr | None, function: str) -> exp.Expr:
    """A path argument (a string literal, as Druid requires) as a DuckDB path literal."""
    if not (isinstance(value, exp.Literal) and value.is_string):
        shown = "nothing" if value is None else value.sql(dialect="druid")
        raise SqlError(f"{function} needs the path as a string literal, got {shown}")
    return exp.Literal.string(path_key(parse_path(value.name, function)))


def _at_path(call: Call) -> exp.Expr:
    """The JSON value at the call's path (argument 2) in its document (argument 1); NULL where there is none."""
    return template("JSON_EXTRACT(d, p)", d=call.args[0], p=_path_argument(call.arg(1), call.name))


# ------------------------------------------------------------------------------------------------------ JSON_VALUE

# A JSON value `v` as Druid casts a primitive: a boolean is 1 or 0, text is read as a number, a fraction is truncated
# (DuckDB's cast rounds it; going through DOUBLE only where needed keeps the digits of a long); an object or an
# array is NULL.
_AS_BIGINT = ("CASE WHEN JSON_TYPE(v) IN ('BIGINT', 'UBIGINT') THEN TRY_CAST(v AS BIGINT)"
              " ELSE TRY_CAST(TRUNC(TRY_CAST(v AS DOUBLE)) AS BIGINT) END")
_AS_DOUBLE = "TRY_CAST(v AS DOUBLE)"
_AS_VARCHAR = "CASE WHEN JSON_TYPE(v) NOT IN ('OBJECT', 'ARRAY') THEN JSON_EXTRACT_STRING(v, '$') END"
#: of a value known to be a primitive or NULL (DuckDB's JSON_VALUE), without the JSON_TYPE test: the filter
#: JSON_VALUE(payload, '$.device') = 'phone' parses each document once instead of twice (about 2x faster)
_SCALAR_AS_VARCHAR = "JSON_EXTRACT_STRING(v, '$')"

_VARCHAR = exp.DataType.build("VARCHAR")
_INTEGERS = {exp.DType.BIGINT, exp.DType.INT, exp.DType.SMALLINT, exp.DType.TINYINT}
_REALS = {exp.DType.DOUBLE, exp.DType.DECIMAL, exp.DType.FLOAT}
_TEXTS = {exp.DType.VARCHAR, exp.DType.CHAR, exp.DType.TEXT, exp.DType.NVARCHAR, exp.DType.NCHAR}


def _primitive(value: exp.Expr, kind: exp.DataType, scalar: bool = False) -> exp.Expr:
    """A JSON primitive as a value of `kind`, as Druid's JSON_VALUE_BIGINT / _DOUBLE / _VARCHAR (which it plans a
    RETURNING type as) make it; a FLOAT is made a DOUBLE first, as Druid's cast of JSON_VALUE_DOUBLE does. `scalar`:
    `value` is never an object or an array."""
    if kind.this in _INTEGERS:
        return template(_AS_BIGINT, v=value)
    if kind.this in _TEXTS:
        return template(_SCALAR_AS_VARCHAR if scalar else _AS_VARCHAR, v=value)
    if kind.this in _REALS:
        double = template(_AS_DOUBLE, v=value)
        return double if kind.this == exp.DType.DOUBLE else exp.cast(double, kind)
    raise SqlError(f"JSON_VALUE cannot return {kind.sql(dialect='druid')}, only BIGINT, DOUBLE, VARCHAR (or a type "
                   "of theirs) or an ARRAY of them")


def _primitive_array(value: exp.Expr) -> exp.Expr:
    """Whether a JSON value is an array of primitives only (an empty one too), which JSON_VALUE returns as an ARRAY
    and JSON_PATHS lists as one path."""
    return template("JSON_TYPE(v) = 'ARRAY' AND LEN(LIST_FILTER(TRY_CAST(v AS JSON[]),"
                    " LAMBDA e: JSON_TYPE(e) IN ('OBJECT', 'ARRAY'))) = 0", v=value)


def json_value_text(document: exp.Expr, path: exp.Expr) -> exp.Expr:
    """JSON_VALUE(document, path) RETURNING VARCHAR, `path` in DuckDB's syntax."""
    return _primitive(template("CAST(JSON_VALUE(d, p) AS JSON)", d=document, p=path), _VARCHAR, scalar=True)


def _json_value(node: exp.JSONValue) -> exp.Expr:
    """JSON_VALUE(expr, path [RETURNING type]): the primitive at the path, VARCHAR without RETURNING; NULL where the
    path holds an object, an array or nothing. RETURNING an ARRAY type returns an array of primitives as one, and a
    lone primitive as an array of one."""
    document, path = node.this, _path_argument(node.args.get("path"), "JSON_VALUE")
    returning = node.args.get("returning") or _VARCHAR
    if not returning.is_type(exp.DType.ARRAY):  # DuckDB's JSON_VALUE: the primitive's JSON text, NULL for an object
        return _primitive(template("CAST(JSON_VALUE(d, p) AS JSON)", d=document, p=path), returning, scalar=True)
    at = template("JSON_EXTRACT(d, p)", d=document, p=path)
    element_type = returning.expressions[0]
    return template("CASE WHEN primitive_array THEN LIST_TRANSFORM(TRY_CAST(v AS JSON[]), LAMBDA e: element)"
                    " WHEN JSON_TYPE(v) NOT IN ('OBJECT', 'ARRAY', 'NULL') THEN [one] END",
                    v=at, primitive_array=_primitive_array(at),
                    element=_primitive(exp.to_identifier("e"), element_type), one=_primitive(at, element_type))


# ------------------------------------------------------------------------------------------------------ JSON_PATHS

# DuckDB writes a path `$."a.b"[0].c`, quoting every name that is not a plain word; Druid writes `$.['a.b'][0].c`,
# bracketing only the names with `.`, `'`, `"`, `[` or `]`, and the root alone as `$.`.
_DUCKDB_STEPS = r"""REGEXP_EXTRACT_ALL(SUBSTRING(path, 2), '\[-?[0-9]+\]|\."(?:[^"\\]|\\.)*"|\.[^."\[]+')"""
_DUCKDB_NAME = r"""CASE WHEN s[2] = '"' THEN REGEXP_REPLACE(s[3:-2], '\\(.)', '\1', 'g') ELSE s[2:] END"""
_DRUID_NAME = r"""CASE WHEN REGEXP_MATCHES(n, '[.''"\[\]]') THEN '[''' || n || ''']' ELSE n END"""


def _druid_path(duckdb_path: exp.Expr) -> exp.Expr:
    """A path as DuckDB's JSON_TREE writes it, in Druid's normalized JSONPath."""
    step = template("CASE WHEN s[1] = '[' THEN s ELSE '.' || name END",
                    name=template(_DRUID_NAME, n=template(_DUCKDB_NAME)))
    return template("CASE WHEN path = '$' THEN '$.' ELSE '$' || ARRAY_TO_STRING(LIST_TRANSFORM(steps,"
                    " LAMBDA s: step), '') END",
                    path=duckdb_path, steps=template(_DUCKDB_STEPS, path=duckdb_path), step=step)


def _json_paths(call: Call) -> exp.Expr:
    """JSON_PATHS(expr): the JSONPath of every primitive value not inside an array of primitives, and of every such
    array, as Druid's StructuredDataProcessor lists them."""
    listed = template("CASE node.type WHEN 'OBJECT' THEN FALSE WHEN 'ARRAY' THEN own"
                      " ELSE node.parent IS NULL OR NOT parents END",
                      own=_primitive_array(exp.column("value", "node")),
                      parents=exp.paren(_primitive_array(template("JSON_EXTRACT(d.document, node.path)"))))
    paths = template("(SELECT ARRAY_AGG(p ORDER BY node.id) FROM (SELECT x AS document) AS d,"
                     " JSON_TREE(d.document) AS node WHERE listed)",
                     p=_druid_path(exp.column("fullkey", "node")), x=call.args[0], listed=listed)
    return template("CASE WHEN x IS NOT NULL THEN COALESCE(paths, CAST([] AS VARCHAR[])) END",
                    x=call.args[0], paths=paths)


# ------------------------------------------------------------------------------------------------ other functions


def _parse_json(node: exp.ParseJSON) -> exp.Expr:
    """PARSE_JSON(expr): text that is not JSON fails the query, as in Druid (DuckDB's message quotes the text);
    NULL stays NULL. DuckDB's JSON() also writes the value compactly, as Druid's TO_JSON_STRING does."""
    return exp.Anonymous(this="JSON", expressions=[node.this.copy()])


def _json_keys(node: exp.JSONKeys) -> exp.Expr:
    """JSON_KEYS(expr, path): an object's field names, an array's indexes (as text), NULL for anything else."""
    at = template("JSON_EXTRACT(d, p)", d=node.this, p=_path_argument(node.expression, "JSON_KEYS"))
    return template("CASE JSON_TYPE(v) WHEN 'OBJECT' THEN JSON_KEYS(v)"
                    " WHEN 'ARRAY' THEN LIST_TRANSFORM(RANGE(CAST(JSON_ARRAY_LENGTH(v) AS BIGINT)),"
                    " LAMBDA i: CAST(i AS VARCHAR)) END", v=at)


def _json_object(node: exp.JSONObject) -> exp.Expr:
    """JSON_OBJECT(KEY k VALUE v, …) or (k: v, …): Druid ignores the NULL/ABSENT ON NULL clause, keeping nulls."""
    node.set("null_handling", None)
    return node


def rewrite_json(node: exp.Expr) -> exp.Expr:
    """A typed JSON function with Druid's meaning where DuckDB's differs; else `node`."""
    if isinstance(node, exp.JSONValue):
        return _json_value(node)
    if isinstance(node, exp.ParseJSON):
        return _parse_json(node)
    if isinstance(node, exp.JSONKeys):
        return _json_keys(node)
    if isinstance(node, exp.JSONObject):
        return _json_object(node)
    return node


def _json_query_array(call: Call) -> exp.Expr:
    """JSON_QUERY_ARRAY(expr, path): an array's elements as JSON values; any other value as an array of one."""
    return template("CASE WHEN JSON_TYPE(v) = 'ARRAY' THEN TRY_CAST(v AS JSON[])"
                    " WHEN JSON_TYPE(v) <> 'NULL' THEN [v] END", v=_at_path(call))


def _json_merge(call: Call) -> exp.Expr:
    """JSON_MERGE(expr1, expr2, …): objects merged left to right, the rightmost value of a key kept; NULL if any
    argument is NULL."""
    any_null = exp.or_(*(exp.Is(this=arg.copy(), expression=exp.Null()) for arg in call.args))
    merged = exp.Anonymous(this="JSON_MERGE_PATCH", expressions=[arg.copy() for arg in call.args])
    return exp.case().when(any_null, exp.null()).else_(merged)


JSON_FUNCTIONS: dict[str, DruidFunction] = {
    "JSON_QUERY": DruidFunction(2, 2, _at_path),
    "JSON_QUERY_ARRAY": DruidFunction(2, 2, _json_query_array),
    "JSON_PATHS": DruidFunction(1, 1, _json_paths),
    "JSON_MERGE": DruidFunction(2, None, _json_merge),
    "TO_JSON_STRING": DruidFunction(1, 1, lambda call: template("CAST(TO_JSON(x) AS VARCHAR)", x=call.args[0])),
    "TRY_PARSE_JSON": DruidFunction(1, 1, lambda call: template("TRY(JSON(x))", x=call.args[0])),
}
