"""Druid's interval strings in specs: `start/end`, `start/period` or `period/end` (ISO-8601; months and years
by the calendar), in UTC."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from dateutil.relativedelta import relativedelta

from sluice.timestamps import parse_timestamp

_PERIOD = re.compile(r"P(?:(\d+)Y)?(?:(\d+)M)?(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


def calendar_period(text: str) -> relativedelta:
    """An ISO-8601 period, months and years included (P1M is a calendar month, as Joda-Time adds it)."""
    match = _PERIOD.fullmatch(text.strip().upper())
    if not match or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise ValueError(f"expected an ISO-8601 period such as P1D, PT1H or P1M, got {text!r}")
    years, months, weeks, days, hours, minutes, seconds = (float(g) if g else 0 for g in match.groups())
    return relativedelta(years=int(years), months=int(months), weeks=int(weeks), days=int(days), hours=int(hours),
                         minutes=int(minutes), seconds=int(seconds), microseconds=int(round(seconds % 1 * 1e6)))


def parse_interval(text: str) -> tuple[datetime, datetime]:
    """`2024-01-01/2024-02-01`, `2024-01-01/P1M` or `P1D/2024-01-02` -> (start, end), tz-aware UTC."""
    if not isinstance(text, str):
        raise ValueError(f"an interval is a string such as 2024-01-01/2024-02-01, got {text!r}")
    first, sep, second = text.partition("/")
    if not sep or "/" in second:
        raise ValueError(f"interval {text!r} is not of the form start/end, start/period or period/end")
    try:
        if first.upper().startswith("P"):
            end = _utc(parse_timestamp(second))
            start = end - calendar_period(first)
        else:
            start = _utc(parse_timestamp(first))
            end = start + calendar_period(second) if second.upper().startswith("P") else _utc(parse_timestamp(second))
    except ValueError as error:
        raise ValueError(f"interval {text!r}: {error}") from None
    if end < start:
        raise ValueError(f"interval {text!r} ends before it starts")
    return start, end


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
