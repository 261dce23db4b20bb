"""One call of a Druid SQL function, and how a function turns its call into a DuckDB expression.

Druid's own functions reach the translator as plain (anonymous) calls; each has an entry of its name in a registry
(`functions.py` for time and aggregation functions, `scalar_functions.py` for string, numeric and IP functions) that
checks its arguments as Druid does and rewrites the call on the AST.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlglot
from sqlglot import exp

from sluice.broker.sql.complex_types import referenced_type
from sluice.broker.errors import SqlError
from sluice.broker.functions.zones import Zone

#: meta key of a DuckDB function that a rewrite ahead of the functions' own (`multi_value.py`) put in a query: it is
#: no Druid function, so the functions' rewrite leaves it as it is
ENGINE_FUNCTION = "engine_function"


def engine_function(name: str, *args: exp.Expr) -> exp.Anonymous:
    call = exp.Anonymous(this=name, expressions=list(args))
    call.meta[ENGINE_FUNCTION] = True
    return call


@dataclass(frozen=True)
class Call:
    """The arguments of one call of a Druid function, with the checks Druid makes on its literal arguments."""

    name: str
    args: list[exp.Expr]
    session_zone: Zone | None

    def arg(self, i: int) -> exp.Expr | None:
        """Argument i, or None when absent or NULL (Druid's way to skip an optional argument)."""
        if i >= len(self.args) or isinstance(self.args[i], exp.Null):
            return None
        return self.args[i]

    def literal(self, i: int, what: str) -> str | None:
        value = self.arg(i)
        if value is None:
            return None
        if not (isinstance(value, exp.Literal) and value.is_string):
            raise SqlError(f"{self.name} needs {what} as a string literal, got {value.sql(dialect='druid')}")
        return value.name

    def integer(self, i: int, what: str, low: int, high: int) -> int | None:
        """An integer literal argument within [low, high] (a negative one parses as a negation)."""
        value = self.arg(i)
        if value is None:
            return None
        signed = _signed_literal(value)
        if signed is None or not signed[0].is_int:
            raise SqlError(f"{self.name} needs {what} as an integer literal, got {value.sql(dialect='druid')}")
        result = signed[1] * int(signed[0].name)
        if not low <= result <= high:
            raise SqlError(f"{self.name} needs {what} in the range of [{low}, {high}], got {result}")
        return result

    def number(self, i: int, what: str) -> float:
        """A numeric literal argument, which must be given."""
        value = self.arg(i)
        signed = None if value is None else _signed_literal(value)
        if signed is None or not signed[0].is_number:
            shown = "nothing" if value is None else value.sql(dialect="druid")
            raise SqlError(f"{self.name} needs {what} as a numeric literal, got {shown}")
        return signed[1] * float(signed[0].name)

    def complex_type(self, i: int) -> str | None:
        """The complex type of the column argument i reads (a first/last pair, a sketch), or None."""
        return referenced_type(self.args[i]) if i < len(self.args) else None

    def zone(self, i: int) -> Zone | None:
        """The time zone argument i, the session's zone when it is left out."""
        text = self.literal(i, "the time zone")
        return self.session_zone if text is None else Zone.parse(text)


def _signed_literal(value: exp.Expr) -> tuple[exp.Literal, int] | None:
    """A literal argument and its sign (`-3` parses as the negation of 3), or None when it is not a literal."""
    number, sign = (value.this, -1) if isinstance(value, exp.Neg) else (value, 1)
    return (number, sign) if isinstance(number, exp.Literal) else None


@dataclass(frozen=True)
class DruidFunction:
    """A Druid function: how many arguments it takes, and its call as a DuckDB expression."""

    min_args: int
    max_args: int | None  # None: any number
    rewrite: Callable[[Call], exp.Expr]

    def build(self, call: Call) -> exp.Expr:
        if len(call.args) < self.min_args or self.max_args is not None and len(call.args) > self.max_args:
            if self.max_args is None:
                expected = f"at least {self.min_args}"
            elif self.min_args == self.max_args:
                expected = f"{self.min_args}"
            else:
                expected = f"{self.min_args} to {self.max_args}"
            raise SqlError(f"Function {call.name} takes {expected} arguments, got {len(call.args)}")
        return self.rewrite(call)


def template(sql: str, **values: exp.Expr) -> exp.Expr:
    """DuckDB SQL text whose bare names are replaced by expressions (built once per call, never from user text)."""
    parsed = sqlglot.parse_one(sql, read="duckdb")
    return parsed.transform(
        lambda node: values[node.name].copy() if isinstance(node, exp.Column) and node.name in values else node)
