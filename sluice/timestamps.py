"""Instants as Druid writes them: ISO-8601, UTC, milliseconds, `Z`; and as Druid keeps them, epoch millis; the
intervals between them and periods added to them.

Druid's ETERNITY (`-146136543-09-08T08:23:32.096Z/146140482-04-24T15:36:27.903Z`) reaches far beyond the years of a
Python datetime, so instants in intervals are ints, parsed and printed with the proleptic Gregorian calendar
directly; datetimes appear only where wall-clock arithmetic in a time zone is needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from sluice.periods import Period

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_timestamp(text: str) -> datetime:
    """Parse an ISO-8601 instant; a value without offset is UTC, as Druid's default time zone."""
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def format_timestamp(value: datetime) -> str:
    """Format an instant as Joda prints it in Druid: UTC, milliseconds, ``Z`` suffix.

    Lexicographic order of these strings is chronological order, which is why the metadata
    tables can compare ``start``/``end`` columns as strings (Druid does the same).
    """
    return value.astimezone(timezone.utc).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def to_millis(value: datetime) -> int:
    """Whole epoch milliseconds (floored, as Joda-Time keeps them); a datetime without a zone is UTC, as DuckDB
    and Spark return them."""
    aware = value if value.tzinfo else value.replace(tzinfo=UTC)
    delta = aware - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def to_datetime(millis: int) -> datetime:
    """Epoch milliseconds as a UTC datetime."""
    return EPOCH + timedelta(milliseconds=millis)


MIN_INSTANT = -(2**63) // 2  # Druid's JodaUtils.MIN_INSTANT / MAX_INSTANT: ETERNITY's bounds
MAX_INSTANT = (2**63 - 1) // 2
DAY_MILLIS = 86_400_000

_INSTANT = re.compile(
    r"(?P<year>[+-]?\d{4,})(?:-(?P<month>\d{2})(?:-(?P<day>\d{2}))?)?"
    r"(?:T(?P<hour>\d{2})(?::(?P<minute>\d{2})(?::(?P<second>\d{2})(?:[.,](?P<fraction>\d{1,9}))?)?)?)?"
    r"(?P<zone>Z|[+-]\d{2}(?::?\d{2})?)?"
)


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm; any year)."""
    year -= month <= 2
    era = year // 400
    year_of_era = year - era * 400
    day_of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def _civil_from_days(days: int) -> tuple[int, int, int]:
    z = days + 719468
    era = z // 146097
    day_of_era = z - era * 146097
    year_of_era = (day_of_era - day_of_era // 1460 + day_of_era // 36524 - day_of_era // 146096) // 365
    day_of_year = day_of_era - (365 * year_of_era + year_of_era // 4 - year_of_era // 100)
    mp = (5 * day_of_year + 2) // 153
    day = day_of_year - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return year_of_era + era * 400 + (month <= 2), month, day


def parse_instant(text: str) -> int:
    """An ISO-8601 instant as epoch millis; without an offset it is UTC, Druid's default time zone."""
    match = _INSTANT.fullmatch(text.strip())
    if not match:
        raise ValueError(f"'{text}' is not an ISO-8601 instant such as 2015-09-12T00:00:00.000Z")
    part = {k: int(v) if v and k not in ("fraction", "zone") else v for k, v in match.groupdict().items()}
    year = part["year"]
    month, day = (1 if part[k] is None else part[k] for k in ("month", "day"))
    hour, minute, second = (part[k] or 0 for k in ("hour", "minute", "second"))
    if not 1 <= month <= 12 or not 1 <= day <= _month_length(year, month) or hour > 23 or minute > 59 or second > 59:
        raise ValueError(f"'{text}' is not an ISO-8601 instant: a field is out of range")
    days = _days_from_civil(year, month, day)
    millis = (hour * 60 + minute) * 60_000 + second * 1000
    millis += int((part["fraction"] or "0").ljust(3, "0")[:3])
    zone = part["zone"]
    if zone and zone != "Z":
        hours, minutes = int(zone[1:3]), int(zone[-2:]) if len(zone) > 3 else 0
        millis -= (1 if zone[0] == "+" else -1) * (hours * 60 + minutes) * 60_000
    return days * DAY_MILLIS + millis


def format_instant(millis: int, zone: ZoneInfo | None = None) -> str:
    """Joda's ISO form: `2015-09-12T00:00:00.000Z`, or with the zone's offset (`…-07:00`) when one is given."""
    offset_ms = 0
    if zone is not None and in_datetime_range(millis):
        offset = to_datetime(millis).astimezone(zone).utcoffset() or timedelta()
        offset_ms = int(offset.total_seconds() * 1000)
    local = millis + offset_ms
    year, month, day = _civil_from_days(local // DAY_MILLIS)
    rest = local % DAY_MILLIS
    hour, minute, second, milli = rest // 3_600_000, rest // 60_000 % 60, rest // 1000 % 60, rest % 1000
    year_text = f"-{-year:04d}" if year < 0 else f"{year:04d}"
    text = f"{year_text}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{milli:03d}"
    if zone is None or offset_ms == 0 and zone.key in ("UTC", "Etc/UTC"):
        return text + "Z"
    sign, minutes = ("+" if offset_ms >= 0 else "-"), abs(offset_ms) // 60_000
    return f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


_DATETIME_MIN = _days_from_civil(1, 1, 2) * DAY_MILLIS  # a day of margin for time-zone offsets
_DATETIME_MAX = _days_from_civil(9999, 12, 30) * DAY_MILLIS


def in_datetime_range(millis: int) -> bool:
    return _DATETIME_MIN <= millis <= _DATETIME_MAX


# ------------------------------------------------------------------------------------------------------ intervals


@dataclass(frozen=True)
class EpochInterval:
    """A half-open interval of epoch millis, `[start, end)`."""

    start: int
    end: int

    def overlaps(self, start: int, end: int) -> bool:
        return self.start < end and start < self.end


def parse_interval(text: str) -> EpochInterval:
    """Druid's `start/end`, `start/period` or `period/end`; a ValueError names the interval."""
    first, sep, second = text.partition("/")
    if not sep:
        raise ValueError(f"'{text}' is not an interval of the form start/end")
    try:
        if first.upper().startswith("P"):
            end = parse_instant(second)
            interval = EpochInterval(add_period(end, Period.parse(first), None, -1), end)
        else:
            start = parse_instant(first)
            end = add_period(start, Period.parse(second), None) if second.upper().startswith("P") else parse_instant(second)
            interval = EpochInterval(start, end)
    except ValueError as error:
        raise ValueError(f"interval '{text}': {error}") from None
    if interval.end < interval.start:
        raise ValueError(f"interval '{text}' ends before it starts")
    return interval


def format_interval(interval: EpochInterval) -> str:
    return f"{format_instant(interval.start)}/{format_instant(interval.end)}"


def condense(intervals: list[EpochInterval]) -> list[EpochInterval]:
    """Sorted, with overlapping and abutting intervals merged (Druid's JodaUtils.condenseIntervals)."""
    merged: list[EpochInterval] = []
    for interval in sorted(intervals, key=lambda i: (i.start, i.end)):
        if merged and interval.start <= merged[-1].end:
            merged[-1] = EpochInterval(merged[-1].start, max(merged[-1].end, interval.end))
        else:
            merged.append(interval)
    return merged


# -------------------------------------------------------------------------------------------------------- periods


def add_period(millis: int, period: Period, zone: ZoneInfo | None, times: int = 1) -> int:
    """`millis` plus `times` periods; months and days count on the wall clock of `zone` (Joda's Period arithmetic)."""
    if period.total_months == 0 and (period.total_days == 0 or zone is None):
        return millis + times * (period.total_days * DAY_MILLIS + period.time_millis)
    if not in_datetime_range(millis):
        raise ValueError(f"cannot add {period} to {format_instant(millis)}")
    local = to_datetime(millis).astimezone(zone or UTC).replace(tzinfo=None)
    month_index = local.year * 12 + local.month - 1 + times * period.total_months
    year, month = divmod(month_index, 12)
    day = min(local.day, _month_length(year, month + 1))
    local = local.replace(year=year, month=month + 1, day=day) + timedelta(days=times * period.total_days)
    return to_millis(local.replace(tzinfo=zone or UTC)) + times * period.time_millis


def _month_length(year: int, month: int) -> int:
    return _days_from_civil(year + month // 12, month % 12 + 1, 1) - _days_from_civil(year, month, 1)
