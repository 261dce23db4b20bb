"""Druid's interval strings in specs: `start/end`, `start/period` or `period/end` (ISO-8601 as Joda reads it, so
`2020/2021` is a year; months and years by the calendar), in UTC, as datetimes."""

from __future__ import annotations

from datetime import datetime

from sluice.timestamps import parse_interval as parse_epoch_interval
from sluice.timestamps import to_datetime


def parse_interval(text: str) -> tuple[datetime, datetime]:
    """`2024-01-01/2024-02-01`, `2024-01-01/P1M` or `P1D/2024-01-02` -> (start, end), tz-aware UTC."""
    if not isinstance(text, str):
        raise ValueError(f"an interval is a string such as 2024-01-01/2024-02-01, got {text!r}")
    interval = parse_epoch_interval(text)
    try:
        return to_datetime(interval.start), to_datetime(interval.end)
    except OverflowError:
        raise ValueError(f"interval '{text}' reaches beyond the years 1-9999") from None
