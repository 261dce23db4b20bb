"""Time zones of Druid SQL (`sqlTimeZone`, the zone arguments of the time functions) as DuckDB expressions.

The DuckDB session always stays in UTC: a zone shows up only as explicit `AT TIME ZONE` conversions, so that a query
in UTC (nearly all of them) pays nothing for zones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlglot import exp

from sluice.broker.errors import SqlError


@dataclass(frozen=True)
class Zone:
    """A Druid time zone (`America/Los_Angeles`, or an offset such as `-08:00`), named as DuckDB's ICU knows it."""

    name: str
    tzinfo: tzinfo

    @classmethod
    def parse(cls, text: str) -> Zone | None:
        """None for UTC, which needs no conversion anywhere."""
        if text.upper() in _UTC_NAMES:
            return None
        offset = re.fullmatch(r"([+-])(\d{2}):?(\d{2})", text)
        if offset:
            sign, hours, minutes = offset.groups()
            delta = timedelta(hours=int(hours), minutes=int(minutes))
            return cls(f"GMT{sign}{hours}:{minutes}", timezone(-delta if sign == "-" else delta))
        try:
            return cls(text, ZoneInfo(text))
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise SqlError(f"Invalid time zone [{text}]: expected a zone name such as America/Los_Angeles "
                           "or an offset such as -08:00") from e


_UTC_NAMES = {"UTC", "Z", "ETC/UTC", "+00:00", "-00:00", "+0000", "-0000"}


@dataclass(frozen=True)
class Session:
    """What the query context changes in a translation (the part of Druid's PlannerContext that Sluice uses)."""

    time_zone: Zone | None = None  # sqlTimeZone; None is UTC
    approximate_count_distinct: bool = True  # useApproximateCountDistinct


def to_local(ts: exp.Expr, zone: Zone | None) -> exp.Expr:
    """A UTC TIMESTAMP as wall-clock time in `zone`."""
    if zone is None:
        return ts.copy()
    at_utc = exp.AtTimeZone(this=ts.copy(), zone=exp.Literal.string("UTC"))
    return exp.AtTimeZone(this=at_utc, zone=exp.Literal.string(zone.name))


def from_local(ts: exp.Expr, zone: Zone | None) -> exp.Expr:
    """Wall-clock time in `zone` back to a UTC TIMESTAMP."""
    if zone is None:
        return ts
    return exp.cast(exp.AtTimeZone(this=ts, zone=exp.Literal.string(zone.name)), exp.DType.TIMESTAMP)
