"""Druid's interval strings in specs: `start/end`, `start/period` or `period/end` (ISO-8601; months and years
by the calendar), in UTC."""

from __future__ import annotations

from datetime import UTC, datetime

from sluice.periods import Period
from sluice.timestamps import parse_timestamp


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
            start = end - Period.parse(first).to_relativedelta()
        elif second.upper().startswith("P"):
            start = _utc(parse_timestamp(first))
            end = start + Period.parse(second).to_relativedelta()
        else:
            start, end = _utc(parse_timestamp(first)), _utc(parse_timestamp(second))
    except ValueError as error:
        raise ValueError(f"interval {text!r}: {error}") from None
    if end < start:
        raise ValueError(f"interval {text!r} ends before it starts")
    return start, end


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
