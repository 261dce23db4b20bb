"""Druid's expression language (transformSpec `expression` transforms) compiled to Spark SQL.

Druid expressions look like SQL but differ where it matters: `==`, `&&`, `||` are logical, strings
are single-quoted, identifiers may be double-quoted, `substring` is 0-based and `__time` is epoch
millis. A small precedence-climbing parser maps the supported subset onto Spark SQL, so transforms
run inside the Spark job; anything outside the subset is a spec error that names it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+\.\d*(?:[eE][-+]?\d+)?|\d*\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)"
    r"|(?P<string>'(?:[^'\\]|\\.)*')"
    r"|(?P<quoted>\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<name>[A-Za-z_$][A-Za-z0-9_$.]*)"
    r"|(?P<op>==|!=|<=|>=|&&|\|\||[-+*/%^<>!(),]))"
)

#: binary operators by precedence, lowest first; `&&` and `||` share one left-associative level in
#: Druid's grammar (unlike SQL), and `^` is the only right-associative operator
_BINARY = [("||", "&&"), ("==", "!=", "<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%"), ("^",)]
_SPARK_OP = {"||": "OR", "&&": "AND", "==": "=", "!=": "<>", "^": None}

_SAME_NAME = {
    "concat", "upper", "lower", "trim", "ltrim", "rtrim", "reverse", "replace", "left", "right", "lpad",
    "rpad", "abs", "ceil", "floor", "round", "sqrt", "exp", "log10", "pow", "greatest", "least", "nvl", "if",
    "regexp_extract",
}
_RENAMED = {"strlen": "char_length", "log": "ln", "contains_string": "contains"}
_CASTS = {"LONG": "BIGINT", "DOUBLE": "DOUBLE", "FLOAT": "FLOAT", "STRING": "STRING"}
SUPPORTED_FUNCTIONS = sorted(
    _SAME_NAME | set(_RENAMED) | {"substring", "strpos", "like", "isnull", "notnull", "cast", "case_searched", "case_simple"}
)


@dataclass
class CompiledExpression:
    sql: str
    #: input columns the expression reads (so the JSON parser extracts them)
    columns: set[str] = field(default_factory=set)


def compile_expression(text: str) -> CompiledExpression:
    """Compile a Druid expression to Spark SQL; raises ValueError naming what is unsupported."""
    parser = _Parser(text)
    sql = parser.expression()
    parser.expect_end()
    return CompiledExpression(sql, parser.columns)


def quote_identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def string_literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = self._tokenize(text)
        self.pos = 0
        self.columns: set[str] = set()

    def _tokenize(self, text: str) -> list[tuple[str, str]]:
        tokens, pos = [], 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = _TOKEN.match(text, pos)
            if not match:
                raise ValueError(f"cannot parse expression {text!r} at position {pos}")
            kind = match.lastgroup
            tokens.append((kind, match.group(kind)))
            pos = match.end()
        return tokens

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise ValueError(f"expression {self.text!r} ends unexpectedly")
        self.pos += 1
        return token

    def expect(self, op: str) -> None:
        token = self.take()
        if token != ("op", op):
            raise ValueError(f"expected {op!r} in expression {self.text!r}, found {token[1]!r}")

    def expect_end(self) -> None:
        if self.peek() is not None:
            raise ValueError(f"unexpected {self.peek()[1]!r} in expression {self.text!r}")

    def expression(self, level: int = 0) -> str:
        if level == len(_BINARY):
            return self.unary()
        left = self.expression(level + 1)
        while (token := self.peek()) and token[0] == "op" and token[1] in _BINARY[level]:
            op = self.take()[1]
            right = self.expression(level if op == "^" else level + 1)
            left = f"pow({left}, {right})" if op == "^" else f"({left} {_SPARK_OP.get(op, op)} {right})"
            if op == "^":
                break
        return left

    def unary(self) -> str:
        token = self.peek()
        if token == ("op", "-"):
            self.take()
            return f"(- {self.unary()})"
        if token == ("op", "!"):
            self.take()
            return f"(NOT {self.unary()})"
        return self.primary()

    def primary(self) -> str:
        kind, value = self.take()
        if kind == "number":
            return value
        if kind == "string":
            return string_literal(_unescape(value[1:-1]))
        if kind == "op" and value == "(":
            inner = self.expression()
            self.expect(")")
            return f"({inner})"
        if kind == "quoted":
            return self.column(_unescape(value[1:-1]))
        if kind == "name":
            if self.peek() == ("op", "("):
                return self.call(value)
            if value.lower() == "null":
                return "NULL"
            return self.column(value)
        raise ValueError(f"unexpected {value!r} in expression {self.text!r}")

    def column(self, name: str) -> str:
        self.columns.add(name)
        # Druid exposes the row timestamp to expressions as epoch milliseconds
        return "unix_millis(`__time`)" if name == "__time" else quote_identifier(name)

    def call(self, name: str) -> str:
        self.expect("(")
        args: list[str] = []
        if self.peek() != ("op", ")"):
            args.append(self.expression())
            while self.peek() == ("op", ","):
                self.take()
                args.append(self.expression())
        self.expect(")")
        return _call(name.lower(), args)


def _call(name: str, args: list[str]) -> str:
    if name in _SAME_NAME or name in _RENAMED:
        return f"{_RENAMED.get(name, name)}({', '.join(args)})"
    if name == "substring":
        _arity(name, args, 3)
        source, index, length = args
        return f"substring({source}, ({index}) + 1)" if length in ("-1", "(- 1)") else f"substring({source}, ({index}) + 1, {length})"
    if name == "strpos":  # Druid: 0-based index (from fromIndex), -1 when absent; Spark's locate is 1-based
        _arity(name, args, 3 if len(args) == 3 else 2)
        start = f"({args[2]}) + 1" if len(args) == 3 else "1"
        return f"(locate({args[1]}, {args[0]}, {start}) - 1)"
    if name == "like":
        _arity(name, args, 3 if len(args) == 3 else 2)
        return f"({args[0]} LIKE {args[1]}{f' ESCAPE {args[2]}' if len(args) == 3 else ''})"
    if name in ("isnull", "notnull"):
        _arity(name, args, 1)
        return f"({args[0]} IS {'NOT ' if name == 'notnull' else ''}NULL)"
    if name == "cast":
        _arity(name, args, 2)
        target = args[1].strip("'").upper()
        if target not in _CASTS:
            raise ValueError(f"cast to {target} is not supported; expected one of {', '.join(_CASTS)}")
        return f"CAST({args[0]} AS {_CASTS[target]})"
    if name == "case_searched":
        pairs, default = _pairs(args)
        return "CASE " + " ".join(f"WHEN {c} THEN {r}" for c, r in pairs) + f" ELSE {default} END"
    if name == "case_simple":
        pairs, default = _pairs(args[1:])
        return f"CASE {args[0]} " + " ".join(f"WHEN {v} THEN {r}" for v, r in pairs) + f" ELSE {default} END"
    raise ValueError(f"function {name}() is not supported in expressions; supported: {', '.join(SUPPORTED_FUNCTIONS)}")


_JAVA_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


def _unescape(text: str) -> str:
    """Druid reads literals with Java's escape rules (StringEscapeUtils.unescapeJava)."""
    return re.sub(r"\\(u[0-9a-fA-F]{4}|.)", lambda m: chr(int(m.group(1)[1:], 16)) if len(m.group(1)) == 5
                  else _JAVA_ESCAPES.get(m.group(1), m.group(1)), text)


def _arity(name: str, args: list[str], count: int) -> None:
    if len(args) != count:
        raise ValueError(f"{name}() takes {count} arguments, got {len(args)}")


def _pairs(args: list[str]) -> tuple[list[tuple[str, str]], str]:
    default = args[-1] if len(args) % 2 else "NULL"
    return list(zip(args[0::2], args[1::2])), default
