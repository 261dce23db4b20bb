"""Druid's granularities: the bucket a timestamp falls in, in Python and as a Spark SQL expression.

Segment granularity decides which segment (time chunk) a row lands in; query granularity truncates
`__time` before rollup. Both must agree exactly between the Spark pipeline and the Python code
that names segment intervals, so each granularity is defined once here. Besides the simple ones (`HOUR`,
`DAY`, …), a granularity is any period counted from an origin (Druid's PeriodGranularity: `PT3H`, `P2D`,
`P1M` from April) or a fixed duration (DurationGranularity), all in UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sluice.periods import Period
from sluice.timestamps import EPOCH, format_timestamp, parse_timestamp, to_datetime, to_millis

#: Druid's ETERNITY does not fit in a Python datetime; these bounds cover every representable row.
ETERNITY_START = datetime(1, 1, 1, tzinfo=UTC)
ETERNITY_END = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)


@dataclass(frozen=True)
class Granularity:
    """`all` (one bucket), `none` (a millisecond), a period from an origin, or a duration from an origin."""

    kind: str  # all | none | period | duration
    period: Period | None = None
    #: epoch millis the buckets are counted from; None is Druid's default, the epoch (a single week: a Monday)
    origin: int | None = None
    duration: int | None = None  # millis

    @property
    def name(self) -> str | None:
        """The simple granularity this is (`HOUR`, `MONTH`, …), if it is one."""
        return _NAMES.get(self)

    def to_json(self) -> str | dict:
        """As a spec writes it: the simple name, or Druid's `period` or `duration` object."""
        if self.name is not None:
            return self.name
        origin = {} if self.origin is None else {"origin": format_timestamp(to_datetime(self.origin))}
        if self.kind == "duration":
            return {"type": "duration", "duration": self.duration, **origin}
        return {"type": "period", "period": str(self.period), "timeZone": "UTC", **origin}

    def __str__(self) -> str:
        return self.name or (str(self.period) if self.kind == "period" else f"PT{self.duration / 1000:g}S")

    def bucket_start(self, ts: datetime) -> datetime:
        millis = to_millis(ts.astimezone(UTC))
        if self.kind == "all":
            return ETERNITY_START
        if self.kind == "none":
            return to_datetime(millis)
        months = self._months()
        if months:
            index = _month_index(to_datetime(millis)) - self._origin_month()
            return _month_start(index // months * months + self._origin_month())
        if self.period is not None and self.period.single_field == ("weeks", 1) and self.origin is None:
            day = to_datetime(millis).replace(hour=0, minute=0, second=0, microsecond=0)
            return day - timedelta(days=day.weekday())
        step, origin = self._step(), self.origin or 0
        return to_datetime(origin + (millis - origin) // step * step)

    def bucket_end(self, start: datetime) -> datetime:
        if self.kind == "all":
            return ETERNITY_END
        if self.kind == "none":
            return start + timedelta(milliseconds=1)
        months = self._months()
        if months:
            return _month_start(_month_index(start) + months)
        return start + timedelta(milliseconds=self._step())

    def spark_sql(self, column: str) -> str:
        """The Spark SQL expression truncating TIMESTAMP `column` (in a UTC session) to this granularity."""
        if self.kind == "none":
            return f"date_trunc('MILLISECOND', {column})"
        if self.kind == "all":
            return f"timestamp_millis({to_millis(ETERNITY_START)})"
        months = self._months()
        if months and self.origin is None and months in _TRUNC_MONTHS:
            return f"date_trunc('{_TRUNC_MONTHS[months]}', {column})"
        if months:
            origin = self._origin_month()
            index = f"(year({column}) * 12 + month({column}) - 1 - {origin})"
            bucket = f"(floor({index} / {months}) * {months} + {origin})"
            return f"make_timestamp(cast(floor({bucket} / 12) as int), cast(pmod({bucket}, 12) + 1 as int), 1, 0, 0, 0)"
        if self.period is not None and self.period.single_field == ("weeks", 1) and self.origin is None:
            return f"date_trunc('WEEK', {column})"
        step, origin = self._step(), self.origin or 0
        if origin:
            return f"timestamp_millis({origin} + floor((unix_millis({column}) - {origin}) / {step}) * {step})"
        return f"timestamp_millis(floor(unix_millis({column}) / {step}) * {step})"

    def _months(self) -> int:
        return self.period.total_months if self.kind == "period" and self.period is not None else 0

    def _origin_month(self) -> int:
        return _month_index(EPOCH if self.origin is None else to_datetime(self.origin))

    def _step(self) -> int:
        if self.kind == "duration" and self.duration:
            return self.duration
        assert self.period is not None
        return _millis(self.period.to_timedelta())


def _millis(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _month_index(ts: datetime) -> int:
    return ts.year * 12 + ts.month - 1


def _month_start(index: int) -> datetime:
    return datetime(index // 12, index % 12 + 1, 1, tzinfo=UTC)


_TRUNC_MONTHS = {1: "MONTH", 3: "QUARTER", 12: "YEAR"}
_SIMPLE = {
    "SECOND": "PT1S", "MINUTE": "PT1M", "FIVE_MINUTE": "PT5M", "TEN_MINUTE": "PT10M", "FIFTEEN_MINUTE": "PT15M",
    "THIRTY_MINUTE": "PT30M", "HOUR": "PT1H", "SIX_HOUR": "PT6H", "EIGHT_HOUR": "PT8H", "DAY": "P1D", "WEEK": "P1W",
    "MONTH": "P1M", "QUARTER": "P3M", "YEAR": "P1Y",
}
GRANULARITIES: dict[str, Granularity] = {
    "NONE": Granularity("none"),
    **{name: Granularity("period", Period.parse(period)) for name, period in _SIMPLE.items()},
    "ALL": Granularity("all"),
}
_NAMES = {granularity: name for name, granularity in GRANULARITIES.items()}


def parse_granularity(value: object) -> Granularity:
    """Druid accepts `"hour"`, `{"type": "hour"}`, `{"type": "period", "period": "PT1H"}` (with `origin`) and
    `{"type": "duration", "duration": 3600000}`."""
    if isinstance(value, Granularity):
        return value
    if isinstance(value, str):
        return _by_name(value)
    if isinstance(value, dict):
        kind = str(value.get("type", "")).lower()
        if kind == "period":
            return _by_period(value)
        if kind == "duration":
            return _by_duration(value)
        return _by_name(kind)
    raise ValueError(f"expected a granularity name such as HOUR or DAY, got {value!r}")


def _by_name(name: str) -> Granularity:
    try:
        return GRANULARITIES[name.strip().upper()]
    except KeyError:
        raise ValueError(f"unknown granularity {name!r}; expected one of {', '.join(GRANULARITIES)}") from None


def _by_period(value: dict) -> Granularity:
    _known_fields(value, ("type", "period", "timeZone", "origin"))
    zone = value.get("timeZone")
    if zone not in (None, "UTC", "Etc/UTC"):
        raise ValueError(f"timeZone {zone!r} is not supported: Sluice buckets time in UTC (give UTC, or leave it out)")
    period = Period.parse(str(value.get("period", "")))
    if period.total_months and period.single_field is None:
        raise ValueError(f"period {period} mixes months or years with other fields; Druid cannot bucket by it")
    if (period.total_months or _millis(period.to_timedelta())) <= 0:
        raise ValueError(f"period {period} is not positive")
    granularity = Granularity("period", period, _origin(value))
    if granularity.origin is not None and period.total_months and to_datetime(granularity.origin) != \
            _month_start(_month_index(to_datetime(granularity.origin))):
        raise ValueError(f"origin {value['origin']!r} of period {period} must be the first instant of a month")
    return granularity


def _by_duration(value: dict) -> Granularity:
    _known_fields(value, ("type", "duration", "origin"))
    duration = value.get("duration")
    if isinstance(duration, bool) or not isinstance(duration, int) or duration <= 0:
        raise ValueError(f"duration granularity needs a positive whole number of milliseconds, got {duration!r}")
    return Granularity("duration", origin=_origin(value), duration=duration)


def _known_fields(value: dict, known: tuple[str, ...]) -> None:
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ValueError(f"{value.get('type')} granularity has no field(s) {unknown}; it takes {', '.join(known)}")


def _origin(value: dict) -> int | None:
    origin = value.get("origin")
    if origin is None:
        return None
    return to_millis(parse_timestamp(str(origin)))

