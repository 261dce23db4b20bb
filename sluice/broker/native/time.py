"""Granularities of native queries, as Druid reads and writes them: over epoch millis (`sluice.timestamps`), in a
time zone where wall-clock arithmetic needs one."""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sluice.periods import Period
from sluice.spec.granularity import GRANULARITIES
from sluice.timestamps import DAY_MILLIS, add_period, parse_instant

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
            return self.period.total_days * DAY_MILLIS + self.period.time_millis
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
