"""Druid's simple granularities: the bucket a timestamp falls in, in Python and as a Spark SQL expression.

Segment granularity decides which segment (time chunk) a row lands in; query granularity truncates
`__time` before rollup. Both must agree exactly between the Spark pipeline and the Python code
that names segment intervals, so each granularity is defined once here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sluice.spec.periods import parse_period

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Druid's ETERNITY does not fit in a Python datetime; these bounds cover every representable row.
ETERNITY_START = datetime(1, 1, 1, tzinfo=UTC)
ETERNITY_END = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)


@dataclass(frozen=True)
class Granularity:
    name: str
    #: fixed bucket length, for the granularities that have one (SECOND … DAY, WEEK)
    length: timedelta | None = None
    #: months per bucket for the calendar granularities (MONTH, QUARTER, YEAR)
    months: int | None = None

    def bucket_start(self, ts: datetime) -> datetime:
        ts = ts.astimezone(UTC)
        if self.name == "ALL":
            return ETERNITY_START
        if self.months:
            month_index = (ts.year * 12 + ts.month - 1) // self.months * self.months
            return datetime(month_index // 12, month_index % 12 + 1, 1, tzinfo=UTC)
        if self.name == "WEEK":
            day = ts.replace(hour=0, minute=0, second=0, microsecond=0)
            return day - timedelta(days=day.weekday())
        step = _millis(self.length) if self.length else 1
        return EPOCH + timedelta(milliseconds=_millis(ts - EPOCH) // step * step)

    def bucket_end(self, start: datetime) -> datetime:
        if self.name == "ALL":
            return ETERNITY_END
        if self.months:
            month_index = start.year * 12 + start.month - 1 + self.months
            return datetime(month_index // 12, month_index % 12 + 1, 1, tzinfo=UTC)
        return start + (self.length or timedelta(milliseconds=1))

    def spark_sql(self, column: str) -> str:
        """The Spark SQL expression truncating TIMESTAMP `column` to this granularity."""
        if self.name == "NONE":
            return f"date_trunc('MILLISECOND', {column})"
        if self.name == "ALL":
            return f"timestamp_millis({_millis(ETERNITY_START - EPOCH)})"
        if self.months or self.name == "WEEK":
            unit = {1: "MONTH", 3: "QUARTER", 12: "YEAR"}.get(self.months or 0, "WEEK")
            return f"date_trunc('{unit}', {column})"
        step = _millis(self.length)
        return f"timestamp_millis(floor(unix_millis({column}) / {step}) * {step})"


def _millis(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


_FIXED = {
    "SECOND": timedelta(seconds=1),
    "MINUTE": timedelta(minutes=1),
    "FIVE_MINUTE": timedelta(minutes=5),
    "TEN_MINUTE": timedelta(minutes=10),
    "FIFTEEN_MINUTE": timedelta(minutes=15),
    "THIRTY_MINUTE": timedelta(minutes=30),
    "HOUR": timedelta(hours=1),
    "SIX_HOUR": timedelta(hours=6),
    "EIGHT_HOUR": timedelta(hours=8),
    "DAY": timedelta(days=1),
    "WEEK": timedelta(weeks=1),
}
GRANULARITIES: dict[str, Granularity] = {
    "NONE": Granularity("NONE"),
    **{name: Granularity(name, length=length) for name, length in _FIXED.items()},
    "MONTH": Granularity("MONTH", months=1),
    "QUARTER": Granularity("QUARTER", months=3),
    "YEAR": Granularity("YEAR", months=12),
    "ALL": Granularity("ALL"),
}
_BY_PERIOD = {"PT1S": "SECOND", "P1D": "DAY", "P1W": "WEEK", "P1M": "MONTH", "P3M": "QUARTER", "P1Y": "YEAR"}


def parse_granularity(value: object) -> Granularity:
    """Druid accepts `"hour"`, `{"type": "hour"}` and `{"type": "period", "period": "PT1H"}`."""
    if isinstance(value, Granularity):
        return value
    if isinstance(value, str):
        return _by_name(value)
    if isinstance(value, dict):
        kind = str(value.get("type", "")).lower()
        if kind == "period":
            return _by_period(value)
        if kind == "duration":
            raise ValueError("duration granularities are not supported yet; use a simple granularity such as HOUR")
        return _by_name(kind)
    raise ValueError(f"expected a granularity name such as HOUR or DAY, got {value!r}")


def _by_name(name: str) -> Granularity:
    try:
        return GRANULARITIES[name.strip().upper()]
    except KeyError:
        raise ValueError(f"unknown granularity {name!r}; expected one of {', '.join(GRANULARITIES)}") from None


def _by_period(value: dict) -> Granularity:
    unsupported = {k for k, v in value.items() if k not in ("type", "period") and v not in (None, "UTC", "Etc/UTC")}
    if unsupported:
        raise ValueError(f"period granularity fields {sorted(unsupported)} are not supported yet (UTC, no origin)")
    period = str(value.get("period", "")).upper()
    if period in _BY_PERIOD:
        return GRANULARITIES[_BY_PERIOD[period]]
    length = parse_period(period)
    for granularity in GRANULARITIES.values():
        if granularity.length == length:
            return granularity
    raise ValueError(f"period {period} does not match a simple granularity; periods such as PT3H are not supported yet")
