"""Druid SQL → DuckDB SQL, and the sandbox that decides which queries may run at all.

A query is parsed with sqlglot's Druid dialect, checked (one read-only statement whose tables are known data sources
or CTEs, no table functions, no functions outside Druid's), rewritten on the AST (Druid's time functions, Calcite's
output names, the `druid` schema) and generated as DuckDB SQL. The text of the query is never edited.

The generated SQL assumes the DuckDB session settings in `DUCKDB_SETTINGS`; the engine applies them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

TIME_COLUMN = "__time"
DRUID_SCHEMA = "druid"

# Druid divides BIGINT by BIGINT as integers (5/2 = 2) and works in UTC; the DuckDB session must do the same.
DUCKDB_SETTINGS: dict[str, Any] = {"integer_division": True, "TimeZone": "UTC"}

_DRUID_EXCEPTION = "org.apache.druid.error.DruidException"
_TIMEOUT_MESSAGE = (
    "Query did not complete within configured timeout period. "
    "You can increase query timeout or tune the performance of query."
)


class SqlError(Exception):
    """A query the user must fix or that failed; rendered as Druid's error JSON.

    The fields follow Druid ≥ 28: planning and validation failures are `druidException` / `invalidInput` (400),
    a timeout keeps the legacy `Query timeout` code with its `errorClass` (504).
    """

    def __init__(
        self,
        error_message: str,
        *,
        status: int = 400,
        error: str = "druidException",
        error_code: str = "invalidInput",
        persona: str = "USER",
        category: str = "INVALID_INPUT",
        error_class: str = _DRUID_EXCEPTION,
        context: dict[str, str] | None = None,
    ) -> None:
        super().__init__(error_message)
        self.status = status
        self.error = error
        self.error_code = error_code
        self.persona = persona
        self.category = category
        self.error_message = error_message
        self.error_class = error_class
        self.context = context or {}

    @classmethod
    def timeout(cls) -> SqlError:
        """The query ran past its context `timeout`."""
        return cls(
            _TIMEOUT_MESSAGE,
            status=504,
            error="Query timeout",
            error_code="legacyQueryException",
            persona="OPERATOR",
            category="TIMEOUT",
            error_class="org.apache.druid.query.QueryTimeoutException",
        )

    @classmethod
    def internal(cls, message: str) -> SqlError:
        """A failure that is not the query's fault."""
        return cls(message, status=500, error_code="general", persona="ADMIN", category="UNCATEGORIZED")

    def to_json(self) -> dict[str, Any]:
        return {
            "error": self.error,
            "errorCode": self.error_code,
            "persona": self.persona,
            "category": self.category,
            "errorMessage": self.error_message,
            "errorClass": self.error_class,
            "host": None,
            "context": self.context,
        }


@dataclass(frozen=True)
class Translation:
    """A sandbox-checked query in DuckDB SQL."""

    sql: str
    data_sources: frozenset[str]  # the data sources it reads: the engine makes views for exactly these
    parameter_count: int  # `?` placeholders, bound positionally


def translate(sql: str, tables: Collection[str]) -> str:
    """Druid SQL text → DuckDB SQL text; `tables` are the data sources that exist. Raises SqlError (400)."""
    return translate_query(sql, tables).sql


def translate_query(sql: str, tables: Collection[str]) -> Translation:
    """Like `translate`, also saying which data sources and how many parameters the query uses."""
    statement = _parse(sql)
    _check_statement(statement, sql)
    data_sources = _check_tables(statement, sql, set(tables))
    _check_functions(statement)
    _name_projections(statement)
    _rewrite_druid_functions(statement)
    return Translation(
        sql=statement.sql(dialect="duckdb"),
        data_sources=frozenset(data_sources),
        parameter_count=sum(1 for _ in statement.find_all(exp.Placeholder)),
    )


# ---------------------------------------------------------------------------------------------------------- sandbox


def _parse(sql: str) -> exp.Expr:
    try:
        statements = [s for s in sqlglot.parse(sql, read="druid") if s is not None]
    except ParseError as e:
        detail = e.errors[0] if e.errors else {}
        line, column = detail.get("line"), detail.get("col")
        raise SqlError(
            f"Incorrect syntax: {detail.get('description', e)} (line [{line}], column [{column}])",
            context={"sourceType": "sql", "line": str(line), "column": str(column)},
        ) from e
    except TokenError as e:
        raise SqlError(str(e)) from e
    if not statements:
        raise SqlError("The query is empty")
    if len(statements) > 1:
        raise SqlError(f"Only one statement per query is allowed, got {len(statements)}")
    return statements[0]


def _check_statement(statement: exp.Expr, sql: str) -> None:
    """Only reads: SELECT, WITH … SELECT and set operations, and nothing that writes or configures inside them."""
    if isinstance(statement, exp.Command) and statement.name.upper() == "EXPLAIN":
        raise SqlError("EXPLAIN PLAN FOR is not supported yet")
    if not isinstance(statement, exp.Query):
        # sqlglot parses some statements it does not know oddly (INSTALL x as an alias); the first keyword is exact.
        keyword = sqlglot.Dialect.get_or_raise("druid").tokenize(sql)[0].text.upper()
        raise SqlError(f"Only SELECT queries are allowed, not {keyword}")
    for node in statement.walk():
        if isinstance(node, (exp.DML, exp.DDL, exp.Command)):
            raise SqlError(f"Only SELECT queries are allowed, not {node.key.upper()}")


def _check_tables(statement: exp.Expr, sql: str, data_sources: set[str]) -> set[str]:
    """Every table is a known data source (optionally `druid.`) or a CTE in scope; returns the data sources."""
    used = set()
    for table in list(statement.find_all(exp.Table)):
        name = table.this
        if not isinstance(name, exp.Identifier):
            raise SqlError(f"Table functions are not allowed, only data sources: {name.sql(dialect='druid')}")
        where = _Span.of(name, sql)
        if where.text.startswith("'"):
            raise SqlError(f"A string literal is not a table, use a data source name instead of {where.text}")
        schema = table.args.get("db")
        if table.args.get("catalog") or (schema and schema.name != DRUID_SCHEMA):
            _reject_schema(table.args.get("catalog") or schema, sql)
        if not schema and table.name in _ctes_in_scope(table):
            continue
        if table.name not in data_sources:
            within = f" within '{DRUID_SCHEMA}'" if schema else ""
            raise SqlError(f"Object '{table.name}' not found{within}{where.suffix}", context=where.context)
        table.set("db", None)
        used.add(table.name)
    return used


def _reject_schema(schema: exp.Identifier, sql: str) -> None:
    where = _Span.of(schema, sql)
    if schema.name.upper() in ("INFORMATION_SCHEMA", "SYS"):
        raise SqlError(f"System tables ({schema.name}) are not supported yet{where.suffix}", context=where.context)
    raise SqlError(f"Object '{schema.name}' not found{where.suffix}", context=where.context)


def _ctes_in_scope(table: exp.Table) -> set[str]:
    """CTE names visible at `table`: those of enclosing WITHs, and in a CTE body only the CTEs defined before it."""
    names: set[str] = set()
    child, node = table, table.parent
    while node is not None:
        if isinstance(node, exp.With) and isinstance(child, exp.CTE):
            visible = child.index + (1 if node.args.get("recursive") else 0)
            names.update(cte.alias for cte in node.expressions[:visible])
        elif isinstance(node, exp.Query) and isinstance(with_ := node.args.get("with_"), exp.With):
            if child is not with_:
                names.update(cte.alias for cte in with_.expressions)
        child, node = node, node.parent
    return names


# File readers DuckDB knows under the same names as other dialects; sqlglot parses them into typed nodes.
_FILE_FUNCTIONS = (exp.ReadCSV, exp.ReadParquet)


def _check_functions(statement: exp.Expr) -> None:
    """Functions are Druid's: sqlglot's typed functions or those in `_DRUID_FUNCTIONS`, never DuckDB's extras."""
    for func in statement.find_all(exp.Func):
        if isinstance(func, _FILE_FUNCTIONS) or (
            isinstance(func, exp.Anonymous) and func.name.upper() not in _DRUID_FUNCTIONS
        ):
            name = func.name if isinstance(func, exp.Anonymous) else func.sql_name()
            raise SqlError(f"No match found for function signature {name}(...)")


@dataclass(frozen=True)
class _Span:
    """Where a node sits in the query text, as Druid reports it: 1-based line and column."""

    text: str
    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def of(cls, node: exp.Expr, sql: str) -> _Span:
        start, end = node.meta.get("start", 0), node.meta.get("end", 0)
        line, column = _line_column(sql, start)
        end_line, end_column = _line_column(sql, end)
        return cls(sql[start : end + 1], line, column, end_line, end_column)

    @property
    def suffix(self) -> str:
        return f" (line [{self.line}], column [{self.column}])"

    @property
    def context(self) -> dict[str, str]:
        return {
            "sourceType": "sql",
            "line": str(self.line),
            "column": str(self.column),
            "endLine": str(self.end_line),
            "endColumn": str(self.end_column),
        }


def _line_column(sql: str, offset: int) -> tuple[int, int]:
    line_start = sql.rfind("\n", 0, offset) + 1
    return sql.count("\n", 0, offset) + 1, offset - line_start + 1


# ------------------------------------------------------------------------------------------------------ rewriting


def _name_projections(statement: exp.Expr) -> None:
    """Calcite's output names: an unaliased expression is `EXPR$<position>`, a plain column keeps its name."""
    for select in statement.find_all(exp.Select):
        for position, projection in enumerate(select.expressions):
            if not isinstance(projection, (exp.Alias, exp.Column, exp.Star)):
                projection.replace(exp.alias_(projection.copy(), f"EXPR${position}", quoted=True))


def _rewrite_druid_functions(statement: exp.Expr) -> None:
    # Children first, so that a Druid function nested in another one's arguments is rewritten too.
    for node in reversed(list(statement.dfs())):
        rewritten = _rewrite(node)
        if rewritten is not node:
            node.replace(rewritten)


def _rewrite(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Anonymous):
        return _DRUID_FUNCTIONS[node.name.upper()].build(_Call(node.name.upper(), list(node.expressions)))
    if isinstance(node, exp.Floor) and node.args.get("to"):
        return _floor_to(node.this, _unit(node.args["to"].name))
    if isinstance(node, exp.Ceil) and node.args.get("to"):
        unit = _unit(node.args["to"].name)
        step = exp.Interval(this=exp.Literal.string("1"), unit=exp.var(unit))
        return _ceil(node.this, _floor_to(node.this, unit), step)
    if isinstance(node, exp.Extract):
        return _extract(node.name.upper(), node.expression)
    if isinstance(node, exp.CurrentTimestamp):
        # DuckDB's is TIMESTAMPTZ; Druid's is a TIMESTAMP in UTC, comparable with __time as it is.
        return exp.cast(exp.CurrentTimestamp(), exp.DType.TIMESTAMP)
    return node


_FLOOR_UNITS = ("SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR")


def _unit(unit: str) -> str:
    if unit.upper() not in _FLOOR_UNITS:
        raise SqlError(f"Unsupported time unit {unit}, expected one of {', '.join(_FLOOR_UNITS)}")
    return unit.upper()


def _floor_to(ts: exp.Expr, unit: str) -> exp.Expr:
    return exp.TimestampTrunc(this=ts.copy(), unit=exp.var(unit))


def _ceil(ts: exp.Expr, floored: exp.Expr, step: exp.Expr) -> exp.Expr:
    """Druid's ceiling: the time itself when it is on a boundary, else the next boundary."""
    on_boundary = exp.EQ(this=floored.copy(), expression=ts.copy())
    return exp.case().when(on_boundary, ts.copy()).else_(exp.Add(this=floored, expression=step))


def _extract(unit: str, ts: exp.Expr) -> exp.Expr:
    if unit == "EPOCH":  # whole seconds, as a LONG
        return exp.Div(this=exp.UnixMillis(this=ts.copy()), expression=exp.Literal.number(1000))
    # Druid's DOW is Joda's day of week, Monday = 1 … Sunday = 7.
    return exp.Extract(this=exp.var("ISODOW" if unit == "DOW" else unit), expression=ts.copy())


# ------------------------------------------------------------------------------------------ Druid's own functions


@dataclass(frozen=True)
class _Call:
    """The arguments of one call of a Druid function, with the checks Druid makes on its literal arguments."""

    name: str
    args: list[exp.Expr]

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


@dataclass(frozen=True)
class _DruidFunction:
    min_args: int
    max_args: int
    rewrite: Callable[[_Call], exp.Expr]

    def build(self, call: _Call) -> exp.Expr:
        if not self.min_args <= len(call.args) <= self.max_args:
            expected = f"{self.min_args}" if self.min_args == self.max_args else f"{self.min_args} to {self.max_args}"
            raise SqlError(f"Function {call.name} takes {expected} arguments, got {len(call.args)}")
        return self.rewrite(call)


def _to_local(ts: exp.Expr, zone: str | None) -> exp.Expr:
    """A UTC TIMESTAMP as wall-clock time in `zone` (Druid's timezone argument)."""
    if zone is None:
        return ts.copy()
    at_utc = exp.AtTimeZone(this=ts.copy(), zone=exp.Literal.string("UTC"))
    return exp.AtTimeZone(this=at_utc, zone=exp.Literal.string(zone))


def _from_local(ts: exp.Expr, zone: str | None) -> exp.Expr:
    """Wall-clock time in `zone` back to a UTC TIMESTAMP."""
    if zone is None:
        return ts
    return exp.cast(exp.AtTimeZone(this=ts, zone=exp.Literal.string(zone)), exp.DType.TIMESTAMP)


_PERIOD = re.compile(
    r"P(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?"
)


@dataclass(frozen=True)
class _Period:
    """An ISO-8601 period such as PT15M or P1W, as Druid's granularities use them."""

    parts: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> _Period:
        match = _PERIOD.fullmatch(text.upper())
        parts = {unit: n for unit, n in match.groupdict().items() if n} if match else {}
        if not parts:
            raise SqlError(f"Invalid period '{text}', expected an ISO-8601 period such as PT1H, P1D or P1M")
        return cls(parts)

    def interval(self) -> exp.Expr:
        return exp.Interval(this=exp.Literal.string(" ".join(f"{n} {unit}" for unit, n in self.parts.items())))

    def default_origin(self) -> exp.Expr:
        """Druid counts periods from the epoch, except that a single week starts on Monday."""
        origin = "1970-01-05" if self.parts == {"weeks": "1"} else "1970-01-01"
        return exp.cast(exp.Literal.string(origin), exp.DType.TIMESTAMP)


def _period(call: _Call) -> _Period:
    """The period of TIME_FLOOR, TIME_CEIL and TIME_SHIFT: always their second argument."""
    return _Period.parse(call.literal(1, "the period") or "")


def _time_floor_local(call: _Call) -> exp.Expr:
    """TIME_FLOOR's bucket start in the call's time zone (wall-clock time)."""
    period = _period(call)
    zone = call.literal(3, "the time zone")
    origin = call.arg(2)
    origin = _to_local(origin, zone) if origin is not None else period.default_origin()
    return exp.Anonymous(this="TIME_BUCKET", expressions=[period.interval(), _to_local(call.args[0], zone), origin])


def _time_floor(call: _Call) -> exp.Expr:
    return _from_local(_time_floor_local(call), call.literal(3, "the time zone"))


def _time_ceil(call: _Call) -> exp.Expr:
    zone = call.literal(3, "the time zone")
    step = _period(call).interval()
    return _from_local(_ceil(_to_local(call.args[0], zone), _time_floor_local(call), step), zone)


def _time_shift(call: _Call) -> exp.Expr:
    zone = call.literal(3, "the time zone")
    shift = exp.Mul(this=_period(call).interval(), expression=call.args[2].copy())
    return _from_local(exp.Add(this=_to_local(call.args[0], zone), expression=shift), zone)


def _time_extract(call: _Call) -> exp.Expr:
    unit = (call.literal(1, "the unit") or "").upper()
    return _extract(unit, _to_local(call.args[0], call.literal(2, "the time zone")))


_ISO_FORMAT = "%Y-%m-%dT%H:%M:%S.%gZ"


def _time_format(call: _Call) -> exp.Expr:
    pattern, zone = call.literal(1, "the format"), call.literal(2, "the time zone")
    if pattern is None and zone is not None:
        raise SqlError("TIME_FORMAT with a time zone needs a format pattern")
    duckdb_format = _ISO_FORMAT if pattern is None else joda_to_strftime(pattern)
    return exp.Anonymous(
        this="STRFTIME", expressions=[_to_local(call.args[0], zone), exp.Literal.string(duckdb_format)]
    )


def _time_parse(call: _Call) -> exp.Expr:
    """NULL when the text does not parse, as in Druid. Without a pattern, ISO-8601 with an optional offset."""
    text, pattern, zone = call.args[0].copy(), call.literal(1, "the format"), call.literal(2, "the time zone")
    if pattern is not None:
        parsed = exp.Anonymous(this="TRY_STRPTIME", expressions=[text, exp.Literal.string(joda_to_strftime(pattern))])
        return _from_local(parsed, zone)
    if zone is not None:
        return _from_local(exp.TryCast(this=text, to=exp.DataType.build("TIMESTAMP")), zone)
    return exp.cast(exp.TryCast(this=text, to=exp.DataType.build("TIMESTAMPTZ")), exp.DType.TIMESTAMP)


_DRUID_FUNCTIONS: dict[str, _DruidFunction] = {
    "TIME_FLOOR": _DruidFunction(2, 4, _time_floor),
    "TIME_CEIL": _DruidFunction(2, 4, _time_ceil),
    "TIME_SHIFT": _DruidFunction(3, 4, _time_shift),
    "TIME_EXTRACT": _DruidFunction(2, 3, _time_extract),
    "TIME_FORMAT": _DruidFunction(1, 3, _time_format),
    "TIME_PARSE": _DruidFunction(1, 3, _time_parse),
    "MILLIS_TO_TIMESTAMP": _DruidFunction(
        1, 1, lambda call: exp.UnixToTime(this=call.args[0].copy(), scale=exp.UnixToTime.MILLIS)
    ),
    "TIMESTAMP_TO_MILLIS": _DruidFunction(1, 1, lambda call: exp.UnixMillis(this=call.args[0].copy())),
    "STRLEN": _DruidFunction(1, 1, lambda call: exp.Length(this=call.args[0].copy())),
}


# Joda pattern letter → DuckDB strftime code by run length (the last entry serves longer runs); None: unsupported.
_JODA_FIELDS: dict[str, tuple[str | None, ...]] = {
    "y": ("%Y", "%y", "%Y"),
    "Y": ("%Y", "%y", "%Y"),
    "M": ("%-m", "%m", "%b", "%B"),
    "d": ("%-d", "%d"),
    "D": ("%-j", "%j", "%j"),
    "H": ("%-H", "%H"),
    "h": ("%-I", "%I"),
    "m": ("%-M", "%M"),
    "s": ("%-S", "%S"),
    "S": (None, None, "%g", None, None, "%f", None),
    "a": ("%p",),
    "E": ("%a", "%a", "%a", "%A"),
}
_JODA_TOKEN = re.compile(r"'((?:[^']|'')*)'|([A-Za-z])\2*|[^A-Za-z']+|'")


def joda_to_strftime(pattern: str) -> str:
    """A Joda-Time pattern (Druid's TIME_FORMAT / TIME_PARSE) as a DuckDB strftime format.

    >>> joda_to_strftime("yyyy-MM-dd'T'HH:mm")
    '%Y-%m-%dT%H:%M'
    """
    out = []
    for token in _JODA_TOKEN.finditer(pattern):
        quoted, letter, text = token.group(1), token.group(2), token.group(0)
        if quoted is not None:
            # '' alone is a literal quote; inside quotes it is an escaped one.
            out.append((quoted.replace("''", "'") or "'").replace("%", "%%"))
        elif letter is not None:
            codes = _JODA_FIELDS.get(letter, (None,))
            code = codes[min(len(text), len(codes)) - 1]
            if code is None:
                raise SqlError(f"Unsupported Joda pattern field '{text}' in '{pattern}'")
            out.append(code)
        elif text == "'":
            raise SqlError(f"Unterminated quote in Joda pattern '{pattern}'")
        else:
            out.append(text.replace("%", "%%"))
    return "".join(out)
