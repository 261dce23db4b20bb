"""Druid's expression language, read once for both engines: a sqlglot tree of Druid SQL.

Ingestion (transformSpec `expression` transforms, run by Spark) and queries (virtual columns, expression filters and
post-aggregators, run by DuckDB) read the same language, so it has one tokenizer, one parser and one function table;
each side renders the tree for its engine (`sluice.spec.expressions` for Spark, the broker's SQL layer for DuckDB).
What differs from SQL: `==`, `&&`, `||` and `!` are logical and yield 1/0, a number is true when it is greater than
0, `substring` and `strpos` count from 0, and `__time` is epoch milliseconds (the caller's `resolve` decides what an
identifier means). Druid's own time functions stay calls of Druid SQL's (TIME_FLOOR, MILLIS_TO_TIMESTAMP…), which
each engine's renderer knows.

    >>> to_sql("concat(upper(page), '!')", lambda name: exp.column(name)).sql(dialect="druid")
    "CONCAT(UPPER(page), '!')"
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from sqlglot import exp

Resolve = Callable[[str], exp.Expr]

_TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+\.\d*(?:[eE][-+]?\d+)?|\d*\.\d+(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?)"
    r"|(?P<string>'(?:[^'\\]|\\.)*')"
    r"|(?P<quoted>\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<name>[A-Za-z_$][A-Za-z0-9_$.]*)"
    r"|(?P<op>==|!=|<=|>=|&&|\|\||[-+*/%^<>!(),]))"
)
# Binary operators by precedence, lowest first. `&&` and `||` share one level in Druid's grammar (unlike SQL); `^`,
# above them all, is right-associative and binds looser than unary minus (`-a ^ 2` is `(-a) ^ 2`).
_LEVELS: list[tuple[str, ...]] = [("||", "&&"), ("==", "!=", "<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%")]
_COMPARISONS: dict[str, type[exp.Expr]] = {
    "==": exp.EQ, "!=": exp.NEQ, "<": exp.LT, "<=": exp.LTE, ">": exp.GT, ">=": exp.GTE,
}
_ARITHMETIC: dict[str, type[exp.Expr]] = {"+": exp.Add, "-": exp.Sub, "*": exp.Mul, "/": exp.Div, "%": exp.Mod}
_JAVA_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}
#: cast()'s Druid types and the SQL type each becomes
CASTS = {"LONG": "BIGINT", "DOUBLE": "DOUBLE", "FLOAT": "FLOAT", "STRING": "VARCHAR"}


class ExpressionError(ValueError):
    """A Druid expression Sluice cannot read; the message names what is wrong."""


@dataclass(frozen=True)
class _Value:
    """A translated sub-expression, remembering whether it is a SQL condition (Druid's 1/0 result)."""

    sql: exp.Expr
    condition: bool = False

    def number(self) -> exp.Expr:
        """As a value: a condition becomes 1 or 0 (NULL stays NULL)."""
        return exp.cast(self.sql, exp.DType.BIGINT) if self.condition else self.sql

    def truth(self) -> exp.Expr:
        """As a condition: Druid reads a number as true when it is greater than 0."""
        if self.condition:
            return self.sql
        value = self.sql
        if not isinstance(value, exp.Literal):
            value = exp.TryCast(this=value, to=exp.DataType.build("DOUBLE"))
        return exp.GT(this=value, expression=exp.Literal.number(0))


def to_sql(text: str, resolve: Resolve) -> exp.Expr:
    """The expression's value as a Druid SQL tree (conditions as 1/0)."""
    return _parse(text, resolve).number()


def to_condition(text: str, resolve: Resolve) -> exp.Expr:
    """The expression as a SQL condition, as Druid's expression filter reads it."""
    return _parse(text, resolve).truth()


def druid_function(name: str, *args: exp.Expr) -> exp.Expr:
    """A call of one of Druid SQL's own functions (TIME_FLOOR, MILLIS_TO_TIMESTAMP…)."""
    return exp.Anonymous(this=name, expressions=list(args))


def supported_functions() -> list[str]:
    """The expression functions Sluice reads, for error messages and documentation."""
    return sorted(_FUNCTIONS)


def _parse(text: str, resolve: Resolve) -> _Value:
    parser = _Parser(text, resolve)
    value = parser.expression()
    if parser.peek() is not None:
        raise ExpressionError(f"unexpected '{parser.peek()[1]}' in expression '{text}'")
    return value


class _Parser:
    def __init__(self, text: str, resolve: Resolve) -> None:
        self.text = text
        self.resolve = resolve
        self.tokens = self._tokenize(text)
        self.pos = 0

    def _tokenize(self, text: str) -> list[tuple[str, str]]:
        tokens, pos = [], 0
        while text[pos:].strip():
            match = _TOKEN.match(text, pos)
            if not match or match.lastgroup is None:
                raise ExpressionError(f"cannot parse expression '{text}' at position {pos}")
            tokens.append((match.lastgroup, match.group(match.lastgroup)))
            pos = match.end()
        return tokens

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise ExpressionError(f"expression '{self.text}' ends unexpectedly")
        self.pos += 1
        return token

    def expect(self, op: str) -> None:
        kind, value = self.take()
        if (kind, value) != ("op", op):
            raise ExpressionError(f"expected '{op}' in expression '{self.text}', found '{value}'")

    def expression(self, level: int = 0) -> _Value:
        if level == len(_LEVELS):
            return self.power()
        left = self.expression(level + 1)
        while (token := self.peek()) and token[0] == "op" and token[1] in _LEVELS[level]:
            op = self.take()[1]
            left = _binary(op, left, self.expression(level + 1))
        return left

    def power(self) -> _Value:
        base = self.unary()
        if self.peek() == ("op", "^"):  # right-associative
            self.take()
            return _Value(exp.Pow(this=base.number(), expression=self.power().number()))
        return base

    def unary(self) -> _Value:
        token = self.peek()
        if token == ("op", "-"):
            self.take()
            return _Value(exp.Neg(this=self.unary().number()))
        if token == ("op", "!"):
            self.take()
            operand = self.unary().truth()
            return _Value(exp.Not(this=operand if isinstance(operand, exp.Paren) else exp.paren(operand)), True)
        return self.primary()

    def primary(self) -> _Value:
        kind, value = self.take()
        if kind == "number":
            return _Value(exp.Literal.number(value))
        if kind == "string":
            return _Value(exp.Literal.string(_unescape(value[1:-1])))
        if kind == "quoted":
            return _Value(self.resolve(_unescape(value[1:-1])))
        if kind == "op" and value == "(":
            inner = self.expression()
            self.expect(")")
            return _Value(exp.paren(inner.sql), inner.condition)
        if kind == "name":
            if self.peek() == ("op", "("):
                return self.call(value.lower())
            return _Value(exp.null()) if value.lower() == "null" else _Value(self.resolve(value))
        raise ExpressionError(f"unexpected '{value}' in expression '{self.text}'")

    def call(self, name: str) -> _Value:
        self.expect("(")
        args: list[_Value] = []
        if self.peek() != ("op", ")"):
            args.append(self.expression())
            while self.peek() == ("op", ","):
                self.take()
                args.append(self.expression())
        self.expect(")")
        function = _FUNCTIONS.get(name)
        if function is None:
            raise ExpressionError(f"function {name}() is not supported; supported: {', '.join(supported_functions())}")
        low, high, build = function
        if not low <= len(args) <= high:
            expected = str(low) if low == high else f"{low} to {high}"
            raise ExpressionError(f"function {name}() takes {expected} arguments, got {len(args)}")
        return build(args)


def _binary(op: str, left: _Value, right: _Value) -> _Value:
    if op in ("&&", "||"):
        node = exp.And if op == "&&" else exp.Or
        return _Value(exp.paren(node(this=left.truth(), expression=right.truth())), condition=True)
    if op in _COMPARISONS:
        return _Value(_COMPARISONS[op](this=left.number(), expression=right.number()), condition=True)
    return _Value(exp.paren(_ARITHMETIC[op](this=left.number(), expression=right.number())))


def _unescape(text: str) -> str:
    """Druid reads literals with Java's escape rules (StringEscapeUtils.unescapeJava)."""
    return re.sub(
        r"\\(u[0-9a-fA-F]{4}|.)",
        lambda m: chr(int(m.group(1)[1:], 16)) if len(m.group(1)) == 5 else _JAVA_ESCAPES.get(m.group(1), m.group(1)),
        text,
    )


# ------------------------------------------------------------------------------------------------------ functions

_Build = Callable[[list[_Value]], _Value]


def _sql_function(sql_name: str) -> _Build:
    """A Druid expression function that has a SQL function of the same meaning."""
    return lambda args: _Value(exp.func(sql_name, *(a.number() for a in args), dialect="druid"))


def _druid_call(sql_name: str) -> _Build:
    """A Druid expression function that is Druid SQL's function of that name, with the same arguments."""
    return lambda args: _Value(druid_function(sql_name, *(a.number() for a in args)))


def _literal(arg: _Value, what: str) -> str:
    if not (isinstance(arg.sql, exp.Literal) and arg.sql.is_string):
        raise ExpressionError(f"{what} must be a string literal, got {arg.sql.sql(dialect='druid')}")
    return arg.sql.name


def _timestamp(millis: _Value) -> exp.Expr:
    """Epoch millis as a TIMESTAMP; `TIMESTAMP_TO_MILLIS(t)` gives back `t` itself."""
    value = millis.number()
    if isinstance(value, exp.Anonymous) and value.name.upper() == "TIMESTAMP_TO_MILLIS":
        return value.expressions[0]
    return druid_function("MILLIS_TO_TIMESTAMP", value)


def _millis(timestamp: exp.Expr) -> _Value:
    return _Value(druid_function("TIMESTAMP_TO_MILLIS", timestamp))


def _optional(args: list[_Value], i: int) -> list[exp.Expr]:
    return [a.number() for a in args[i:]]


def _time_floor(name: str) -> _Build:
    def build(args: list[_Value]) -> _Value:
        origin = [] if len(args) < 3 else [exp.null() if isinstance(args[2].sql, exp.Null) else _timestamp(args[2])]
        return _millis(druid_function(name, _timestamp(args[0]), args[1].number(), *origin, *_optional(args, 3)))

    return build


def _time_parse(args: list[_Value]) -> _Value:
    return _millis(druid_function("TIME_PARSE", args[0].number(), *_optional(args, 1)))


def _substring(args: list[_Value]) -> _Value:
    start = exp.Add(this=args[1].number(), expression=exp.Literal.number(1))
    length = args[2].number()
    if isinstance(length, exp.Neg) or (isinstance(length, exp.Literal) and length.name.startswith("-")):
        return _Value(exp.Substring(this=args[0].number(), start=start))
    return _Value(exp.Substring(this=args[0].number(), start=start, length=length))


def _strpos(args: list[_Value]) -> _Value:
    """0-based, -1 when absent; the third argument is the 0-based index the search starts from."""
    position = exp.StrPosition(this=args[0].number(), substr=args[1].number())
    if len(args) == 3:
        position.set("position", exp.Add(this=args[2].number(), expression=exp.Literal.number(1)))
    return _Value(exp.Sub(this=position, expression=exp.Literal.number(1)))


def _contains(insensitive: bool) -> _Build:
    def build(args: list[_Value]) -> _Value:
        text, part = args[0].number(), args[1].number()
        if insensitive:
            text, part = exp.Lower(this=text), exp.Lower(this=part)
        return _Value(exp.GT(this=exp.StrPosition(this=text, substr=part), expression=exp.Literal.number(0)), True)

    return build


def _like(args: list[_Value]) -> _Value:
    like: exp.Expr = exp.Like(this=args[0].number(), expression=args[1].number())
    if len(args) == 3:
        like = exp.Escape(this=like, expression=args[2].number())
    return _Value(like, condition=True)


def _is_null(negate: bool) -> _Build:
    def build(args: list[_Value]) -> _Value:
        test: exp.Expr = exp.Is(this=args[0].number(), expression=exp.null())
        return _Value(exp.Not(this=test) if negate else test, condition=True)

    return build


def _if(args: list[_Value]) -> _Value:
    return _Value(exp.case().when(args[0].truth(), args[1].number()).else_(args[2].number()))


def _case_searched(args: list[_Value]) -> _Value:
    pairs, default = (args[:-1], args[-1]) if len(args) % 2 else (args, None)
    case = exp.case()
    for condition, result in zip(pairs[0::2], pairs[1::2]):
        case = case.when(condition.truth(), result.number())
    return _Value(case if default is None else case.else_(default.number()))


def _case_simple(args: list[_Value]) -> _Value:
    subject, rest = args[0].number(), args[1:]
    pairs, default = (rest[:-1], rest[-1]) if len(rest) % 2 else (rest, None)
    case = exp.case()
    for value, result in zip(pairs[0::2], pairs[1::2]):
        case = case.when(exp.EQ(this=subject.copy(), expression=value.number()), result.number())
    return _Value(case if default is None else case.else_(default.number()))


def _cast(args: list[_Value]) -> _Value:
    target = _literal(args[1], "cast's type").upper()
    if target not in CASTS:
        raise ExpressionError(f"cast to {target} is not supported; expected one of {', '.join(CASTS)}")
    return _Value(exp.TryCast(this=args[0].number(), to=exp.DataType.build(CASTS[target])))


_ANY = 1_000
#: every Druid expression function Sluice reads: (fewest arguments, most arguments, its Druid SQL tree)
_FUNCTIONS: dict[str, tuple[int, int, _Build]] = {
    **{
        name: (1, 1, _sql_function(name.upper()))
        for name in ("upper", "lower", "abs", "sqrt", "exp", "log10", "reverse", "ceil", "floor")
    },
    **{name: (1, 2, _sql_function(name.upper())) for name in ("trim", "ltrim", "rtrim", "round")},
    **{name: (1, _ANY, _sql_function(name.upper())) for name in ("concat", "greatest", "least")},
    **{name: (2, 2, _sql_function(name.upper())) for name in ("left", "right", "pow")},
    **{name: (3, 3, _sql_function(name.upper())) for name in ("replace", "lpad", "rpad")},
    "strlen": (1, 1, _sql_function("LENGTH")),
    "log": (1, 1, _sql_function("LN")),
    "nvl": (2, 2, _sql_function("COALESCE")),
    # Druid SQL's REGEXP_EXTRACT takes a capture group where sqlglot would read a start position: keep it a call
    "regexp_extract": (2, 3, _druid_call("REGEXP_EXTRACT")),
    "regexp_like": (2, 2, lambda a: _Value(exp.RegexpLike(this=a[0].number(), expression=a[1].number()), True)),
    "substring": (3, 3, _substring),
    "strpos": (2, 3, _strpos),
    "contains_string": (2, 2, _contains(insensitive=False)),
    "icontains_string": (2, 2, _contains(insensitive=True)),
    "like": (2, 3, _like),
    "isnull": (1, 1, _is_null(negate=False)),
    "notnull": (1, 1, _is_null(negate=True)),
    "if": (3, 3, _if),
    "case_searched": (2, _ANY, _case_searched),
    "case_simple": (3, _ANY, _case_simple),
    "cast": (2, 2, _cast),
    "div": (2, 2, _druid_call("DIV")),
    "lookup": (2, 3, _druid_call("LOOKUP")),
    "timestamp": (1, 2, _time_parse),
    "timestamp_parse": (1, 3, _time_parse),
    "timestamp_floor": (2, 4, _time_floor("TIME_FLOOR")),
    "timestamp_ceil": (2, 4, _time_floor("TIME_CEIL")),
    "timestamp_shift": (3, 4, lambda a: _millis(druid_function("TIME_SHIFT", _timestamp(a[0]), *_optional(a, 1)))),
    "timestamp_extract": (2, 3, lambda a: _Value(druid_function("TIME_EXTRACT", _timestamp(a[0]), *_optional(a, 1)))),
    "timestamp_format": (1, 3, lambda a: _Value(druid_function("TIME_FORMAT", _timestamp(a[0]), *_optional(a, 1)))),
}
