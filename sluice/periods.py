"""ISO-8601 periods as Druid reads them everywhere (Joda-Time's `ISOPeriodFormat.standard()`): `PT1H`, `P1D`,
`P1W`, `P1M`, `P1Y2M3DT4H5M6.789S`.

One grammar for specs (taskDuration, windows, granularities, intervals) and queries (TIME_FLOOR, native
granularities and intervals), so that a period one of them accepts, the others read the same way. A period keeps
its fields as written, as Joda's does: `P1W` and `P7D` are the same length but not the same granularity (a single
week starts on Monday).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from datetime import timedelta

from dateutil.relativedelta import relativedelta

__all__ = ["Period", "format_duration", "parse_duration"]

_FIELD = r"(?:(?P<{0}>[-+]?\d+){1})?"
_GRAMMAR = re.compile(
    "P" + "".join(_FIELD.format(name, unit) for name, unit in (("years", "Y"), ("months", "M"), ("weeks", "W"),
                                                                ("days", "D")))
    + "(?P<time>T" + _FIELD.format("hours", "H") + _FIELD.format("minutes", "M")
    + r"(?:(?P<seconds>[-+]?\d+)(?:[.,](?P<fraction>\d{1,9}))?S)?)?",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Period:
    """A period's fields as written; months and years have no fixed length."""

    years: int = 0
    months: int = 0
    weeks: int = 0
    days: int = 0
    hours: int = 0
    minutes: int = 0
    seconds: int = 0
    millis: int = 0

    @classmethod
    def parse(cls, text: str) -> Period:
        """Raises ValueError for anything Joda would not read: `P`, `PT`, `P1DT`, `1H`, `P1.5D`."""
        match = _GRAMMAR.fullmatch(text.strip()) if isinstance(text, str) else None
        values = match.groupdict() if match else {}
        numbers = {k: v for k, v in values.items() if v is not None and k not in ("time", "fraction")}
        if not numbers or values["time"] == "T":
            raise ValueError(f"'{text}' is not an ISO-8601 period such as PT1H, P1D or P1M")
        millis = int((values["fraction"] or "0").ljust(3, "0")[:3])
        if numbers.get("seconds", "").startswith("-"):
            millis = -millis
        return cls(**{k: int(v) for k, v in numbers.items()}, millis=millis)

    @property
    def total_months(self) -> int:
        return self.years * 12 + self.months

    @property
    def total_days(self) -> int:
        return self.weeks * 7 + self.days

    @property
    def time_millis(self) -> int:
        """The hours, minutes, seconds and millis: the part whose length never varies."""
        return ((self.hours * 60 + self.minutes) * 60 + self.seconds) * 1000 + self.millis

    @property
    def single_field(self) -> tuple[str, int] | None:
        """(field, amount) when the period has exactly one field that is not zero."""
        present = [(f.name, getattr(self, f.name)) for f in fields(self) if getattr(self, f.name)]
        return present[0] if len(present) == 1 else None

    def to_timedelta(self) -> timedelta:
        """The period's length with 24-hour days (Joda's toStandardDuration); months and years have none."""
        if self.total_months:
            raise ValueError(f"period {self} contains months or years, which vary in length; use weeks, days, "
                             "hours, minutes or seconds")
        try:
            return timedelta(days=self.total_days, milliseconds=self.time_millis)
        except OverflowError:  # Druid's "forever", P2147483647D, is longer than any timedelta
            return timedelta.max if self.total_days > 0 else -timedelta.max

    def to_relativedelta(self) -> relativedelta:
        """For calendar arithmetic: months and years by the calendar, as Joda adds them."""
        return relativedelta(years=self.years, months=self.months, weeks=self.weeks, days=self.days,
                             hours=self.hours, minutes=self.minutes, seconds=self.seconds,
                             microseconds=self.millis * 1000)

    def __str__(self) -> str:
        """Joda's toString: `PT1H`, `P1M`, `PT1.500S`; `PT0S` for nothing."""
        date = "".join(f"{n}{unit}" for n, unit in ((self.years, "Y"), (self.months, "M"), (self.weeks, "W"),
                                                     (self.days, "D")) if n)
        time = "".join(f"{n}{unit}" for n, unit in ((self.hours, "H"), (self.minutes, "M")) if n)
        if self.seconds or self.millis:
            total = self.seconds * 1000 + self.millis
            sign = "-" if total < 0 else ""
            whole, milli = divmod(abs(total), 1000)
            time += f"{sign}{whole}.{milli:03d}S" if milli else f"{sign}{whole}S"
        if not date and not time:
            return "PT0S"
        return f"P{date}" + (f"T{time}" if time else "")


def parse_duration(text: str) -> timedelta:
    """A period where Druid wants a fixed length (taskDuration, a window's size): `PT1H`, `P1D`; not `P1M`, and
    not less than nothing."""
    length = Period.parse(text).to_timedelta()
    if length < timedelta(0):
        raise ValueError(f"period '{text}' is negative")
    return length


def format_duration(value: timedelta) -> str:
    """Druid's serialized form of such a period: whole seconds, e.g. `PT3600S`."""
    seconds = value.total_seconds()
    return f"PT{int(seconds)}S" if seconds == int(seconds) else f"PT{seconds}S"
