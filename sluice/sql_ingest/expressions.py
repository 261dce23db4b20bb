"""SQL expressions of an ingestion SELECT in Druid's expression language (what a transformSpec `expression`
transform holds), with the Druid type each one makes.

Only what `sluice.spec.expressions` compiles is produced; anything else is a 400 naming the construct, so a statement
never runs with a meaning other than the one it was written with.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from sqlglot import exp

from sluice.sql_ingest.parse import invalid

#: SQL types of EXTEND / CAST → Druid column types
SQL_TYPES = {"VARCHAR": "string", "CHAR": "string", "STRING": "string", "TEXT": "string", "BIGINT": "long",
             "INTEGER": "long", "INT": "long", "SMALLINT": "long", "TINYINT": "long", "BOOLEAN": "long",
             "DOUBLE": "double", "DECIMAL": "double", "FLOAT": "float", "REAL": "float"}
_CAST_NAMES = {"string": "STRING", "long": "LONG", "double": "DOUBLE", "float": "FLOAT"}
_ARITHMETIC = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}
_COMPARISON = {exp.EQ: "==", exp.NEQ: "!=", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
#: SQL function -> (Druid function, result type: a type, or None for the type of the first argument)
_FUNCTIONS: dict[str, tuple[str, str | None]] = {
    "UPPER": ("upper", "string"), "LOWER": ("lower", "string"), "TRIM": ("trim", "string"),
    "LTRIM": ("ltrim", "string"), "RTRIM": ("rtrim", "string"), "REVERSE": ("reverse", "string"),
    "REPLACE": ("replace", "string"), "LEFT": ("left", "string"), "RIGHT": ("right", "string"),
    "LPAD": ("lpad", "string"), "RPAD": ("rpad", "string"), "CONCAT": ("concat", "string"),
    "CHAR_LENGTH": ("strlen", "long"), "LENGTH": ("strlen", "long"), "STRLEN": ("strlen", "long"),
    "ABS": ("abs", None), "CEIL": ("ceil", "double"), "FLOOR": ("floor", "double"), "ROUND": ("round", None),
    "SQRT": ("sqrt", "double"), "EXP": ("exp", "double"), "LN": ("log", "double"), "LOG10": ("log10", "double"),
    "POWER": ("pow", "double"), "POW": ("pow", "double"), "GREATEST": ("greatest", None),
    "LEAST": ("least", None), "NVL": ("nvl", None), "IFNULL": ("nvl", None),
}
_NUMERIC_ORDER = ["long", "float", "double"]

#: the type of a source column, or None when the source has no such column
ColumnTypes = Callable[[str], "str | None"]


class DruidExpression:
    """One SQL expression as Druid expression text, its Druid type and the source columns it reads."""

    def __init__(self, text: str, type_: str, columns: set[str]) -> None:
        self.text = text
        self.type = type_
        self.columns = columns


def to_druid_expression(node: exp.Expression, types: ColumnTypes) -> DruidExpression:
    columns: set[str] = set()

    def column(name: str) -> tuple[str, str]:
        found = types(name)
        if found is None:
            raise invalid(f"Column '{name}' not found in any table")
        columns.add(name)
        return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"', found

    text, type_ = _translate(node, column)
    return DruidExpression(text, type_, columns)


def _translate(node: exp.Expression, column: Callable[[str], tuple[str, str]]) -> tuple[str, str]:
    def go(child: exp.Expression) -> tuple[str, str]:
        return _translate(child, column)

    if isinstance(node, exp.Paren):
        text, type_ = go(node.this)
        return f"({text})", type_
    if isinstance(node, exp.Column):
        if node.table:
            raise invalid(f"Qualified column [{node.sql()}] is not supported; name columns without a table")
        return column(node.name)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return string_literal(node.this), "string"
        return node.this, "double" if any(c in node.this for c in ".eE") else "long"
    if isinstance(node, exp.Null):
        return "null", "string"
    if isinstance(node, exp.Boolean):
        return ("1" if node.this else "0"), "long"
    if isinstance(node, exp.Neg):
        text, type_ = go(node.this)
        return f"-{text}", type_
    if type(node) in _ARITHMETIC:
        (left, lt), (right, rt) = go(node.this), go(node.expression)
        if "string" in (lt, rt):
            raise invalid(f"Cannot apply '{_ARITHMETIC[type(node)]}' to a VARCHAR in [{node.sql()}]")
        type_ = max(lt, rt, key=_NUMERIC_ORDER.index)
        return f"({left} {_ARITHMETIC[type(node)]} {right})", type_
    if type(node) in _COMPARISON:
        (left, _), (right, _) = go(node.this), go(node.expression)
        return f"({left} {_COMPARISON[type(node)]} {right})", "long"
    if isinstance(node, (exp.And, exp.Or)):
        (left, _), (right, _) = go(node.this), go(node.expression)
        return f"({left} {'&&' if isinstance(node, exp.And) else '||'} {right})", "long"
    if isinstance(node, exp.Not):
        return f"!({go(node.this)[0]})", "long"
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        return f"isnull({go(node.this)[0]})", "long"
    if isinstance(node, exp.Like):
        return f"like({go(node.this)[0]}, {go(node.expression)[0]})", "long"
    if isinstance(node, exp.DPipe):
        return f"concat({go(node.this)[0]}, {go(node.expression)[0]})", "string"
    if isinstance(node, exp.Substring):
        return _substring(node, go), "string"
    if isinstance(node, exp.Cast):
        target = SQL_TYPES.get(node.to.this.name if hasattr(node.to.this, "name") else str(node.to.this))
        if target is None:
            raise invalid(f"CAST to {node.to.sql()} is not supported in ingestion; cast to VARCHAR, BIGINT, DOUBLE "
                          "or FLOAT")
        return f"cast({go(node.this)[0]}, '{_CAST_NAMES[target]}')", target
    if isinstance(node, exp.Coalesce):
        args = [go(a) for a in [node.this, *node.expressions]]
        text = args[-1][0]
        for arg, _ in reversed(args[:-1]):
            text = f"nvl({arg}, {text})"
        return text, args[0][1]
    if isinstance(node, exp.Case):
        return _case(node, go)
    if isinstance(node, exp.If):
        (cond, _), (then, type_) = go(node.this), go(node.args["true"])
        other = go(node.args["false"])[0] if node.args.get("false") else "null"
        return f"if({cond}, {then}, {other})", type_
    if isinstance(node, exp.Func):
        return _function(node, go)
    raise invalid(f"[{node.sql(dialect='druid')}] is not supported in INSERT or REPLACE yet")


def _function(node: exp.Func, go: Callable[[exp.Expression], tuple[str, str]]) -> tuple[str, str]:
    name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).upper()
    if isinstance(node, exp.Anonymous):
        args = list(node.expressions)
    else:
        args = [a for key in node.arg_types for a in _as_list(node.args.get(key))]
    if isinstance(node, (exp.AggFunc, exp.Window)):
        raise invalid(f"Aggregate or window function {name} is allowed only as a metric of a GROUP BY query")
    if name not in _FUNCTIONS:
        raise invalid(f"Function {name} is not supported in INSERT or REPLACE yet; supported: "
                      f"{', '.join(sorted(_FUNCTIONS))}, SUBSTRING, CAST, COALESCE, CASE")
    druid, type_ = _FUNCTIONS[name]
    translated = [go(a) for a in args]
    result_type = type_ or (translated[0][1] if translated else "double")
    return f"{druid}({', '.join(t for t, _ in translated)})", result_type


def _as_list(value: object) -> list[exp.Expression]:
    if value is None:
        return []
    return [v for v in value if isinstance(v, exp.Expression)] if isinstance(value, list) else \
        [value] if isinstance(value, exp.Expression) else []


def _substring(node: exp.Substring, go: Callable[[exp.Expression], tuple[str, str]]) -> str:
    """SQL's SUBSTRING is 1-based; Druid's substring is 0-based, with -1 for `to the end`."""
    source = go(node.this)[0]
    start = node.args.get("start")
    if isinstance(start, exp.Literal) and not start.is_string:
        index = str(int(start.this) - 1)
    else:
        index = f"({go(start)[0]} - 1)" if start is not None else "0"
    length = go(node.args["length"])[0] if node.args.get("length") else "-1"
    return f"substring({source}, {index}, {length})"


def _case(node: exp.Case, go: Callable[[exp.Expression], tuple[str, str]]) -> tuple[str, str]:
    branches = [(go(i.this)[0], go(i.args["true"])) for i in node.args.get("ifs", [])]
    default = go(node.args["default"]) if node.args.get("default") else ("null", branches[0][1][1])
    type_ = branches[0][1][1] if branches else default[1]
    flat = [part for cond, (result, _) in branches for part in (cond, result)] + [default[0]]
    if node.this is not None:
        return f"case_simple({go(node.this)[0]}, {', '.join(flat)})", type_
    return f"case_searched({', '.join(flat)})", type_


def string_literal(value: str) -> str:
    """A Druid expression string literal (Java escapes)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def literal_value(node: exp.Expression) -> str | int | float | None:
    """The value of a SQL literal (a number keeps its type), for filters."""
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):
        value = literal_value(node.this)
        return -value if isinstance(value, (int, float)) else None
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        return json.loads(node.this) if node.this.lstrip("-").replace(".", "", 1).isdigit() else float(node.this)
    raise invalid(f"Expected a literal, found [{node.sql(dialect='druid')}]")
