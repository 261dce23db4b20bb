"""Instants, intervals, periods and granularities of native queries, as Druid reads and writes them.

Druid keeps instants as epoch milliseconds, and its ETERNITY
(`-146136543-09-08T08:23:32.096Z/146140482-04-24T15:36:27.903Z`) reaches far beyond the years of a Python datetime.
So instants are ints here, parsed and printed with the proleptic Gregorian calendar directly; datetimes appear only
where wall-clock arithmetic in a time zone is needed, and that only happens for bucket starts of real data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sluice.periods import Period
from sluice.spec.granularity import GRANULARITIES
from sluice.timestamps import to_datetime, to_millis

MIN_INSTANT = -(2**63) // 2  # Druid's JodaUtils.MIN_INSTANT / MAX_INSTANT: ETERNITY's bounds
MAX_INSTANT = (2**63 - 1) // 2
_DAY = 86_400_000

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
    days = _days_from_civil(part["year"], part["month"] or 1, part["day"] or 1)
    millis = ((part["hour"] or 0) * 60 + (part["minute"] or 0)) * 60_000 + (part["second"] or 0) * 1000
    millis += int((part["fraction"] or "0").ljust(3, "0")[:3])
    zone = part["zone"]
    if zone and zone != "Z":
        hours, minutes = int(zone[1:3]), int(zone[-2:]) if len(zone) > 3 else 0
        millis -= (1 if zone[0] == "+" else -1) * (hours * 60 + minutes) * 60_000
    return days * _DAY + millis


def format_instant(millis: int, zone: ZoneInfo | None = None) -> str:
    """Joda's ISO form: `2015-09-12T00:00:00.000Z`, or with the zone's offset (`…-07:00`) when one is given."""
    offset_ms = 0
    if zone is not None and in_datetime_range(millis):
        offset = to_datetime(millis).astimezone(zone).utcoffset() or timedelta()
        offset_ms = int(offset.total_seconds() * 1000)
    local = millis + offset_ms
    year, month, day = _civil_from_days(local // _DAY)
    rest = local % _DAY
    hour, minute, second, milli = rest // 3_600_000, rest // 60_000 % 60, rest // 1000 % 60, rest % 1000
    year_text = f"-{-year:04d}" if year < 0 else f"{year:04d}"
    text = f"{year_text}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{milli:03d}"
    if zone is None or offset_ms == 0 and zone.key in ("UTC", "Etc/UTC"):
        return text + "Z"
    sign, minutes = ("+" if offset_ms >= 0 else "-"), abs(offset_ms) // 60_000
    return f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


_DATETIME_MIN = _days_from_civil(1, 1, 2) * _DAY  # a day of margin for time-zone offsets
_DATETIME_MAX = _days_from_civil(9999, 12, 30) * _DAY


def in_datetime_range(millis: int) -> bool:
    return _DATETIME_MIN <= millis <= _DATETIME_MAX


# ------------------------------------------------------------------------------------------------------ intervals


@dataclass(frozen=True)
class QueryInterval:
    """A half-open interval of epoch millis, `[start, end)`."""

    start: int
    end: int

    def overlaps(self, start: int, end: int) -> bool:
        return self.start < end and start < self.end


def parse_interval(text: str) -> QueryInterval:
    """Druid's `start/end`, `start/period` or `period/end`."""
    first, sep, second = text.partition("/")
    if not sep:
        raise ValueError(f"'{text}' is not an interval of the form start/end")
    if first.upper().startswith("P"):
        end = parse_instant(second)
        return _checked(QueryInterval(add_period(end, Period.parse(first), None, -1), end), text)
    start = parse_instant(first)
    if second.upper().startswith("P"):
        return _checked(QueryInterval(start, add_period(start, Period.parse(second), None)), text)
    return _checked(QueryInterval(start, parse_instant(second)), text)


def _checked(interval: QueryInterval, text: str) -> QueryInterval:
    if interval.end < interval.start:
        raise ValueError(f"interval '{text}' ends before it starts")
    return interval


def format_interval(interval: QueryInterval) -> str:
    return f"{format_instant(interval.start)}/{format_instant(interval.end)}"


def condense(intervals: list[QueryInterval]) -> list[QueryInterval]:
    """Sorted, with overlapping and abutting intervals merged (Druid's JodaUtils.condenseIntervals)."""
    merged: list[QueryInterval] = []
    for interval in sorted(intervals, key=lambda i: (i.start, i.end)):
        if merged and interval.start <= merged[-1].end:
            merged[-1] = QueryInterval(merged[-1].start, max(merged[-1].end, interval.end))
        else:
            merged.append(interval)
    return merged


# -------------------------------------------------------------------------------------------------------- periods


def add_period(millis: int, period: Period, zone: ZoneInfo | None, times: int = 1) -> int:
    """`millis` plus `times` periods; months and days count on the wall clock of `zone` (Joda's Period arithmetic)."""
    if period.total_months == 0 and (period.total_days == 0 or zone is None):
        return millis + times * (period.total_days * _DAY + period.time_millis)
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


# ---------------------------------------------------------------------------------------------------- granularity


@dataclass(frozen=True)
class QueryGranularity:
    """How a query buckets time: `all` (one bucket), `none` (every millisecond), a period or a fixed duration."""

    kind: str  # all | none | period | duration
    period: Period | None = None
    zone: ZoneInfo | None = None
    origin: int | None = None  # epoch millis
    duration: int | None = None  # millis

    @classmethod
    def simple(cls, name: str) -> QueryGranularity:
        """Druid's simple granularities, the same for queries as for ingestion specs."""
        granularity = GRANULARITIES.get(name.upper())
        if granularity is None:
            known = ", ".join(["all", "none", *(n.lower() for n, g in GRANULARITIES.items() if g.kind == "period")])
            raise ValueError(f"unknown granularity '{name}', expected one of {known}")
        return cls(granularity.kind, granularity.period)

    @classmethod
    def of_period(cls, period: str, time_zone: str | None, origin: str | None) -> QueryGranularity:
        start = None if origin is None else parse_instant(origin)
        return cls("period", Period.parse(period), zone_of(time_zone), start)

    @property
    def fixed_step(self) -> int | None:
        """The bucket length in millis when every bucket has the same length (no months, no days in a time zone)."""
        if self.kind == "duration":
            return self.duration
        if self.kind == "period" and self.period and self.period.total_months == 0 \
                and not (self.zone and self.period.total_days):
            return self.period.total_days * _DAY + self.period.time_millis
        return None

    def next_bucket(self, start: int) -> int:
        """The start of the bucket after the one starting at `start`."""
        if self.kind == "duration" and self.duration:
            return start + self.duration
        if self.kind == "period" and self.period:
            return add_period(start, self.period, self.zone)
        raise ValueError(f"granularity {self.kind} has no next bucket")


def zone_of(name: str | None) -> ZoneInfo | None:
    """A Joda time zone id as a ZoneInfo; UTC is None, so that timestamps keep Druid's `Z`."""
    if name is None or name.upper() in ("UTC", "ETC/UTC", "Z"):
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone '{name}'") from None
