"""Time in an ingestion statement: PARTITIONED BY (segmentGranularity), the `__time` column of the SELECT
(timestampSpec, queryGranularity, or an expression transform) and time ranges as Druid interval strings."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlglot import exp

from sluice.spec.granularity import ETERNITY_END, ETERNITY_START
from sluice.sql_ingest.expressions import to_druid_expression
from sluice.sql_ingest.parse import invalid
from sluice.timestamps import format_timestamp

ETERNITY = f"{format_timestamp(ETERNITY_START)}/{format_timestamp(ETERNITY_END)}"
#: the periods Druid accepts after PARTITIONED BY and in TIME_FLOOR (docs/multi-stage-query/reference.md)
PERIODS = {"PT1S": "SECOND", "PT1M": "MINUTE", "PT5M": "FIVE_MINUTE", "PT10M": "TEN_MINUTE",
           "PT15M": "FIFTEEN_MINUTE", "PT30M": "THIRTY_MINUTE", "PT1H": "HOUR", "PT6H": "SIX_HOUR", "P1D": "DAY",
           "P1W": "WEEK", "P1M": "MONTH", "P3M": "QUARTER", "P1Y": "YEAR"}
_UNITS = {"SECOND", "MINUTE", "HOUR", "DAY", "WEEK", "MONTH", "QUARTER", "YEAR"}
#: the column a timestampSpec names when the statement has no `__time`: no source has it, so every row gets the
#: timestampSpec's missingValue, the epoch (Druid: "all timestamps 1970-01-01 00:00:00")
NO_TIME_COLUMN = "__sluice_no_time"
EPOCH = "1970-01-01T00:00:00.000Z"


@dataclass
class TimeColumn:
    timestamp_spec: dict[str, Any]
    query_granularity: str = "NONE"
    transforms: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def epoch(cls) -> TimeColumn:
        return cls.constant(EPOCH)

    @classmethod
    def constant(cls, instant: str) -> TimeColumn:
        return cls({"column": NO_TIME_COLUMN, "format": "auto", "missingValue": instant})


def partition_granularity(text: str) -> str:
    """PARTITIONED BY HOUR|DAY|MONTH|YEAR|ALL [TIME]|'PT1H'|TIME_FLOOR(__time, 'P1D')|FLOOR(__time TO DAY)."""
    clause = " ".join(text.split())
    upper = clause.upper()
    if upper in ("HOUR", "DAY", "MONTH", "YEAR"):
        return upper
    if upper in ("ALL", "ALL TIME"):
        return "ALL"
    if match := re.fullmatch(r"'([^']*)'", clause):
        if match.group(1).upper() in PERIODS:
            return PERIODS[match.group(1).upper()]
    if match := re.fullmatch(r"TIME_FLOOR\s*\(\s*(\"?__time\"?)\s*,\s*'([^']*)'\s*\)", clause, re.IGNORECASE):
        if match.group(2).upper() in PERIODS:
            return PERIODS[match.group(2).upper()]
    if match := re.fullmatch(r"FLOOR\s*\(\s*\"?__time\"?\s+TO\s+([A-Za-z]+)\s*\)", clause, re.IGNORECASE):
        if match.group(1).upper() in _UNITS:
            return match.group(1).upper()
    raise invalid(f"Invalid granularity[{clause}] specified after PARTITIONED BY clause. Expected HOUR, DAY, MONTH, "
                  f"YEAR, ALL TIME, FLOOR() or TIME_FLOOR(); periods: {', '.join(PERIODS)}")


def time_column(node: exp.Expression, types: Callable[[str], str | None]) -> TimeColumn:
    """The SELECT's `__time` expression: TIME_FLOOR / FLOOR TO around TIME_PARSE(col [, pattern]),
    MILLIS_TO_TIMESTAMP(expr), a long or `__time` column, or a TIMESTAMP literal."""
    granularity = "NONE"
    if _call(node, "TIME_FLOOR"):
        args = node.expressions
        if len(args) != 2 or not (isinstance(args[1], exp.Literal) and args[1].is_string) \
                or args[1].this.upper() not in PERIODS:
            raise invalid(f"TIME_FLOOR of __time supports a period of {', '.join(PERIODS)} and no origin or time "
                          f"zone; found [{node.sql(dialect='druid')}]")
        granularity, node = PERIODS[args[1].this.upper()], args[0]
    elif isinstance(node, exp.Floor) and node.args.get("to") is not None:
        unit = node.args["to"].name.upper()
        if unit not in _UNITS:
            raise invalid(f"FLOOR(… TO {unit}) is not supported for __time; use {', '.join(sorted(_UNITS))}")
        granularity, node = unit, node.this
    spec = _timestamp(node, types)
    spec.query_granularity = granularity
    return spec


def _call(node: exp.Expression, name: str) -> bool:
    return isinstance(node, exp.Anonymous) and node.name.upper() == name


def _timestamp(node: exp.Expression, types: Callable[[str], str | None]) -> TimeColumn:
    shown = node.sql(dialect="druid")
    if _call(node, "TIME_PARSE"):
        args = node.expressions
        if not args or not isinstance(args[0], exp.Column):
            raise invalid(f"TIME_PARSE of __time must read a column; found [{shown}]")
        if len(args) == 3 and not (isinstance(args[2], exp.Literal) and args[2].this.upper() in ("UTC", "ETC/UTC")):
            raise invalid(f"TIME_PARSE with a time zone other than UTC is not supported yet: [{shown}]")
        if len(args) >= 2 and not (isinstance(args[1], exp.Literal) and args[1].is_string):
            raise invalid(f"TIME_PARSE's pattern must be a string literal: [{shown}]")
        _source_column(args[0].name, types)
        return TimeColumn({"column": args[0].name, "format": args[1].this if len(args) >= 2 else "iso"})
    if _call(node, "MILLIS_TO_TIMESTAMP") and len(node.expressions) == 1:
        arg = node.expressions[0]
        if isinstance(arg, exp.Column):
            _source_column(arg.name, types)
            return TimeColumn({"column": arg.name, "format": "millis"})
        expression = to_druid_expression(arg, types)
        return TimeColumn({"column": NO_TIME_COLUMN, "format": "auto", "missingValue": EPOCH},
                          transforms=[{"type": "expression", "name": "__time", "expression": expression.text}])
    if isinstance(node, exp.Column):
        kind = _source_column(node.name, types)
        if node.name == "__time" or kind == "long":
            return TimeColumn({"column": node.name, "format": "millis"})
        raise invalid(f"Column [{node.name}] is a {kind.upper()}; read it as __time with TIME_PARSE(\"{node.name}\")")
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.to.this == exp.DataType.Type.TIMESTAMP:
        from sluice.timestamps import parse_timestamp

        try:
            instant = parse_timestamp(node.this.this.strip().replace(" ", "T", 1))
        except ValueError:
            raise invalid(f"Cannot read [{node.this.this}] as a timestamp") from None
        return TimeColumn.constant(format_timestamp(instant))
    raise invalid(f"__time must be TIME_PARSE(column), MILLIS_TO_TIMESTAMP(…), a TIMESTAMP literal or a time column, "
                  f"optionally inside TIME_FLOOR or FLOOR(… TO unit); found [{shown}]")


def _source_column(name: str, types: Callable[[str], str | None]) -> str:
    kind = types(name)
    if kind is None:
        raise invalid(f"Column '{name}' not found in any table")
    return kind


def interval_text(start: datetime | None, end: datetime | None) -> str:
    return f"{format_timestamp(start or ETERNITY_START)}/{format_timestamp(end or ETERNITY_END)}"
