"""Druid expressions (transformSpec `expression` transforms) as Spark SQL, so transforms run inside the Spark job.

The language is read by `sluice.expressions`, the same parser and function table the broker uses for queries on
DuckDB; here its Druid SQL tree is rendered in Spark's dialect, with Druid SQL's own functions (TIME_FLOOR,
MILLIS_TO_TIMESTAMP, DIV…) and the few whose Spark namesakes mean something else (`regexp_extract`'s default group,
`substring` past the end) rewritten into Spark's terms. A function Spark cannot run with Druid's meaning is a
ValueError naming it, raised when the spec is submitted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp

from sluice.expressions import ExpressionError, druid_function, to_condition, to_sql
from sluice.periods import Period
from sluice.spec.granularity import Granularity

TIME = "__time"


@dataclass
class CompiledExpression:
    #: the expression's value (Druid's 1/0 for a comparison), for a transform
    sql: str
    #: the expression as a Spark condition (a number is true when > 0), for a filter
    condition: str = ""
    #: input columns the expression reads (so the JSON parser extracts them)
    columns: set[str] = field(default_factory=set)


#: a lookup's map by its name (a KeyError names a lookup that does not exist)
Lookups = Callable[[str], Mapping[str, str | None]]
#: the lookups `lookup()` reads while an expression renders; none when a spec is only checked
_LOOKUPS: ContextVar[Lookups | None] = ContextVar("lookups", default=None)


def compile_expression(text: str, lookups: Lookups | None = None) -> CompiledExpression:
    """Compile a Druid expression to Spark SQL; raises ValueError naming what is unsupported. A `lookup()` becomes
    the lookup's map written into the SQL (an empty map without `lookups`: the spec is only being checked)."""
    columns: set[str] = set()

    def resolve(name: str) -> exp.Expr:
        columns.add(name)
        column = exp.column(name, quoted=True)
        # Druid exposes the row timestamp to expressions as epoch milliseconds
        return druid_function("TIMESTAMP_TO_MILLIS", column) if name == TIME else column

    value, condition = to_sql(text, resolve), to_condition(text, resolve)
    token = _LOOKUPS.set(lookups)
    try:
        return CompiledExpression(to_spark_sql(value), to_spark_sql(condition), columns)
    finally:
        _LOOKUPS.reset(token)


def to_spark_sql(tree: exp.Expr) -> str:
    """A Druid SQL tree from `sluice.expressions` as Spark SQL text (in a UTC session, ANSI mode off)."""
    return _spark(tree).sql(dialect="spark")


def quote_identifier(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def string_literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


# ------------------------------------------------------------------------------------------------------ rewriting


def _spark(tree: exp.Expr) -> exp.Expr:
    """`tree` with Spark's spelling of what the Druid SQL tree says; each rewrite converts the arguments it keeps."""
    return tree.copy().transform(_rewrite, copy=False)


def _rewrite(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Anonymous):
        rewrite = _DRUID_FUNCTIONS.get(node.name.upper())
        if rewrite is None:
            raise ExpressionError(f"function {node.name}() cannot run at ingestion")
        return rewrite(node.expressions)
    if isinstance(node, exp.Substring):
        # Druid's substring() is NULL when the index is past the end (Spark's is '')
        text, start, length = (_spark(node.this), _spark(node.args["start"]),
                               node.args.get("length") and _spark(node.args["length"]))
        inside = exp.LT(this=exp.Sub(this=start.copy(), expression=exp.Literal.number(1)),
                        expression=exp.Length(this=text.copy()))
        return exp.case().when(inside, exp.Substring(this=text, start=start, length=length))
    return node


def _call(name: str, *args: exp.Expr) -> exp.Expr:
    return exp.Anonymous(this=name, expressions=list(args))


def _string(arg: exp.Expr | None, function: str, what: str) -> str | None:
    """A literal argument of a time function (None when absent or null): Spark needs it when the job is planned."""
    if arg is None or isinstance(arg, exp.Null):
        return None
    if isinstance(arg, exp.Literal) and arg.is_string:
        return arg.name
    raise ExpressionError(f"{function}() at ingestion needs {what} as a string literal, "
                          f"got {arg.sql(dialect='druid')}")


def _period(args: list[exp.Expr], function: str) -> Period:
    text = _string(args[1], function, "the period") or ""
    try:
        return Period.parse(text)
    except ValueError as e:
        raise ExpressionError(f"{function}(): {e}") from None


def _arg(args: list[exp.Expr], i: int) -> exp.Expr | None:
    return args[i] if i < len(args) else None


def _to_local(ts: exp.Expr, zone: str | None) -> exp.Expr:
    """Wall-clock time in `zone` (the session is in UTC)."""
    return ts if zone is None else _call("from_utc_timestamp", ts, exp.Literal.string(zone))


def _from_local(ts: exp.Expr, zone: str | None) -> exp.Expr:
    return ts if zone is None else _call("to_utc_timestamp", ts, exp.Literal.string(zone))


def _plus(ts: exp.Expr, period: Period, times: exp.Expr | None = None) -> exp.Expr:
    """`ts` moved by `period` (`times` times): months by the calendar, the rest by their length."""
    def scaled(amount: int) -> exp.Expr:
        number = exp.Literal.number(amount)
        return number if times is None else exp.Mul(this=number, expression=exp.paren(times.copy()))

    seconds = exp.Literal.number(f"{period.time_millis / 1000:g}")
    interval = _call("make_interval", exp.Literal.number(0), scaled(period.total_months), exp.Literal.number(0),
                     scaled(period.total_days), exp.Literal.number(0), exp.Literal.number(0),
                     seconds if times is None else exp.Mul(this=seconds, expression=exp.paren(times.copy())))
    return exp.Add(this=ts, expression=interval)


def _floor(args: list[exp.Expr], function: str) -> tuple[exp.Expr, exp.Expr, str | None]:
    """(the time in the zone, its bucket start in the zone, the zone) of TIME_FLOOR / TIME_CEIL."""
    period, origin, zone = _period(args, function), _arg(args, 2), _string(_arg(args, 3), function, "the time zone")
    origin_millis: int | None = None
    if origin is not None and not isinstance(origin, exp.Null):
        millis = origin.expressions[0] if isinstance(origin, exp.Anonymous) and origin.expressions else None
        if not (isinstance(millis, exp.Literal) and millis.is_number) or zone is not None:
            raise ExpressionError(f"{function}() at ingestion takes an origin only as epoch millis, without a "
                                  "time zone")
        origin_millis = int(float(millis.name))
    if period.total_months and (period.total_days or period.time_millis):
        raise ExpressionError(f"{function}() at ingestion: period {period} mixes months with shorter fields")
    local = _to_local(_spark(args[0]), zone)
    granularity = Granularity("period", period, origin=origin_millis)
    bucket = sqlglot.parse_one(granularity.spark_sql(local.sql(dialect="spark")), read="spark")
    return local, bucket, zone


def _time_floor(args: list[exp.Expr]) -> exp.Expr:
    _, bucket, zone = _floor(args, "timestamp_floor")
    return _from_local(bucket, zone)


def _time_ceil(args: list[exp.Expr]) -> exp.Expr:
    """Druid's ceiling: the time itself when it is on a boundary, else the next boundary."""
    local, bucket, zone = _floor(args, "timestamp_ceil")
    on_boundary = exp.EQ(this=bucket.copy(), expression=local.copy())
    ceil = exp.case().when(on_boundary, local).else_(_plus(bucket, _period(args, "timestamp_ceil")))
    return _from_local(ceil, zone)


def _time_shift(args: list[exp.Expr]) -> exp.Expr:
    zone = _string(_arg(args, 3), "timestamp_shift", "the time zone")
    moved = _plus(_to_local(_spark(args[0]), zone), _period(args, "timestamp_shift"), _spark(args[2]))
    return _from_local(moved, zone)


#: TIME_EXTRACT's units as Spark functions of the wall-clock time; Druid's DOW is Monday = 1 … Sunday = 7
def _field(function: str) -> Callable[[exp.Expr], exp.Expr]:
    return lambda ts: _call(function, ts)


_EXTRACT: dict[str, Callable[[exp.Expr], exp.Expr]] = {
    **{unit: _field(function) for unit, function in {
        "SECOND": "second", "MINUTE": "minute", "HOUR": "hour", "DAY": "dayofmonth", "DOY": "dayofyear",
        "WEEK": "weekofyear", "MONTH": "month", "QUARTER": "quarter", "YEAR": "year"}.items()},
    "DOW": lambda ts: exp.Add(this=_call("weekday", ts), expression=exp.Literal.number(1)),
    "ISODOW": lambda ts: exp.Add(this=_call("weekday", ts), expression=exp.Literal.number(1)),
    "MILLISECOND": lambda ts: exp.Mod(this=_call("unix_millis", ts), expression=exp.Literal.number(1000)),
    "EPOCH": lambda ts: _call("unix_seconds", ts),
}


def _time_extract(args: list[exp.Expr]) -> exp.Expr:
    unit = (_string(args[1], "timestamp_extract", "the unit") or "").upper()
    if unit not in _EXTRACT:
        raise ExpressionError(f"timestamp_extract() at ingestion: unit '{unit}' is not supported; expected one of "
                              f"{', '.join(_EXTRACT)}")
    ts = _spark(args[0])
    return _EXTRACT[unit](ts if unit == "EPOCH" else _to_local(ts, _string(_arg(args, 2), "timestamp_extract",
                                                                           "the time zone")))


def _time_format(args: list[exp.Expr]) -> exp.Expr:
    """Joda's patterns are Java's DateTimeFormatter's, which Spark reads, for all the usual letters."""
    pattern = _string(_arg(args, 1), "timestamp_format", "the format")
    zone = _string(_arg(args, 2), "timestamp_format", "the time zone")
    if pattern is None and zone is not None:
        raise ExpressionError("timestamp_format() with a time zone needs a format pattern")
    return _call("date_format", _to_local(_spark(args[0]), zone),
                 exp.Literal.string(pattern or "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"))


def _time_parse(args: list[exp.Expr]) -> exp.Expr:
    """NULL when the text does not parse, as in Druid. Without a pattern, ISO-8601 with an optional offset."""
    text = _spark(args[0])
    pattern = _string(_arg(args, 1), "timestamp_parse", "the format")
    zone = _string(_arg(args, 2), "timestamp_parse", "the time zone")
    if pattern is not None:
        return _from_local(_call("try_to_timestamp", text, exp.Literal.string(pattern)), zone)
    parsed = exp.TryCast(this=text, to=exp.DataType.build("TIMESTAMP"))
    if zone is None:
        return parsed
    # Text with an offset is an instant whatever the zone; text without one is wall-clock time in the zone.
    has_offset = exp.RegexpLike(this=text.copy(), expression=exp.Literal.string(r"(Z|[+-]\d\d(:?\d\d)?)$"))
    return exp.case().when(has_offset, parsed).else_(_from_local(parsed.copy(), zone))


def _regexp_extract(args: list[exp.Expr]) -> exp.Expr:
    """Druid's group defaults to 0 (the whole match; Spark's to 1), and no match is NULL (Spark's is '')."""
    text, pattern = _spark(args[0]), _spark(args[1])
    group = _spark(args[2]) if len(args) == 3 else exp.Literal.number(0)
    matches = exp.RegexpLike(this=text.copy(), expression=pattern.copy())
    return exp.case().when(matches, _call("regexp_extract", text, pattern, group))


def _lookup(args: list[exp.Expr]) -> exp.Expr:
    """lookup(expr, 'name'[, 'replaceMissingValueWith']): the map's value of the key's text, else the replacement
    (null by default), as Druid's lookup expression."""
    name = _string(args[1], "lookup", "the lookup name") or ""
    lookups = _LOOKUPS.get()
    try:
        entries = lookups(name) if lookups is not None else {}
    except KeyError:
        raise ExpressionError(f"lookup() reads lookup [{name}], which does not exist in the default tier") from None
    pairs = [exp.Literal.string(part) if part is not None else exp.null()
             for key, value in sorted(entries.items()) for part in (key, value)]
    text_map = exp.cast(exp.VarMap(keys=exp.Array(expressions=pairs[0::2]), values=exp.Array(expressions=pairs[1::2])),
                        exp.DataType.build("MAP<STRING, STRING>", dialect="spark"))
    value = exp.Bracket(this=text_map, expressions=[exp.cast(_spark(args[0]), exp.DType.VARCHAR)])
    replacement = _string(_arg(args, 2), "lookup", "the replacement")
    return value if replacement is None else exp.Coalesce(this=value, expressions=[exp.Literal.string(replacement)])


_DRUID_FUNCTIONS: dict[str, Callable[[list[exp.Expr]], exp.Expr]] = {
    "LOOKUP": _lookup,
    "TIMESTAMP_TO_MILLIS": lambda a: _call("unix_millis", _spark(a[0])),
    "MILLIS_TO_TIMESTAMP": lambda a: _call("timestamp_millis", exp.cast(_spark(a[0]), exp.DType.BIGINT)),
    "DIV": lambda a: exp.IntDiv(this=_spark(a[0]), expression=_spark(a[1])),
    "REGEXP_EXTRACT": _regexp_extract,
    "TIME_FLOOR": _time_floor,
    "TIME_CEIL": _time_ceil,
    "TIME_SHIFT": _time_shift,
    "TIME_EXTRACT": _time_extract,
    "TIME_FORMAT": _time_format,
    "TIME_PARSE": _time_parse,
}
