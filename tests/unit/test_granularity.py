"""Granularities: an instant in -> the bucket [start, end) it falls in; spec forms in -> a granularity."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from sluice.periods import Period
from sluice.spec.granularity import ETERNITY_END, ETERNITY_START, GRANULARITIES, Granularity, parse_granularity


def t(text: str) -> datetime:
    """`2024-02-29T13:47:31.123` as an aware UTC datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


LEAP_DAY = "2024-02-29T13:47:31.123456"

BUCKETS = [
    # granularity, instant, bucket start, bucket end
    ("NONE", LEAP_DAY, "2024-02-29T13:47:31.123", "2024-02-29T13:47:31.124"),  # truncated to Druid's millis
    ("SECOND", LEAP_DAY, "2024-02-29T13:47:31", "2024-02-29T13:47:32"),
    ("MINUTE", LEAP_DAY, "2024-02-29T13:47:00", "2024-02-29T13:48:00"),
    ("FIVE_MINUTE", LEAP_DAY, "2024-02-29T13:45:00", "2024-02-29T13:50:00"),
    ("TEN_MINUTE", LEAP_DAY, "2024-02-29T13:40:00", "2024-02-29T13:50:00"),
    ("FIFTEEN_MINUTE", LEAP_DAY, "2024-02-29T13:45:00", "2024-02-29T14:00:00"),
    ("FIFTEEN_MINUTE", "2024-02-29T13:44:59.999", "2024-02-29T13:30:00", "2024-02-29T13:45:00"),
    ("FIFTEEN_MINUTE", "2024-02-29T23:59:59.999", "2024-02-29T23:45:00", "2024-03-01T00:00:00"),
    ("THIRTY_MINUTE", LEAP_DAY, "2024-02-29T13:30:00", "2024-02-29T14:00:00"),
    ("HOUR", LEAP_DAY, "2024-02-29T13:00:00", "2024-02-29T14:00:00"),
    ("HOUR", "2024-02-29T13:00:00", "2024-02-29T13:00:00", "2024-02-29T14:00:00"),  # a start is its own bucket
    ("SIX_HOUR", LEAP_DAY, "2024-02-29T12:00:00", "2024-02-29T18:00:00"),
    ("EIGHT_HOUR", LEAP_DAY, "2024-02-29T08:00:00", "2024-02-29T16:00:00"),
    ("DAY", LEAP_DAY, "2024-02-29T00:00:00", "2024-03-01T00:00:00"),
    ("DAY", "2023-12-31T23:59:59.999", "2023-12-31T00:00:00", "2024-01-01T00:00:00"),
    ("WEEK", LEAP_DAY, "2024-02-26T00:00:00", "2024-03-04T00:00:00"),  # a Thursday: back to Monday
    ("WEEK", "2024-03-03T23:59:59.999", "2024-02-26T00:00:00", "2024-03-04T00:00:00"),  # Sunday ends the week
    ("WEEK", "2024-03-04T00:00:00", "2024-03-04T00:00:00", "2024-03-11T00:00:00"),  # Monday starts one
    ("WEEK", "2025-01-01T12:00:00", "2024-12-30T00:00:00", "2025-01-06T00:00:00"),  # weeks cross years
    ("MONTH", LEAP_DAY, "2024-02-01T00:00:00", "2024-03-01T00:00:00"),  # leap February has 29 days
    ("MONTH", "2023-02-28T23:59:59", "2023-02-01T00:00:00", "2023-03-01T00:00:00"),
    ("MONTH", "2024-12-31T23:59:59.999", "2024-12-01T00:00:00", "2025-01-01T00:00:00"),
    ("QUARTER", LEAP_DAY, "2024-01-01T00:00:00", "2024-04-01T00:00:00"),
    ("QUARTER", "2024-05-15T00:00:00", "2024-04-01T00:00:00", "2024-07-01T00:00:00"),
    ("QUARTER", "2024-09-30T23:59:59", "2024-07-01T00:00:00", "2024-10-01T00:00:00"),
    ("QUARTER", "2024-11-02T08:00:00", "2024-10-01T00:00:00", "2025-01-01T00:00:00"),
    ("YEAR", LEAP_DAY, "2024-01-01T00:00:00", "2025-01-01T00:00:00"),
    ("YEAR", "2023-12-31T23:59:59.999", "2023-01-01T00:00:00", "2024-01-01T00:00:00"),
    # before the epoch, buckets still floor towards the past
    ("HOUR", "1969-12-31T23:30:00", "1969-12-31T23:00:00", "1970-01-01T00:00:00"),
    ("DAY", "1969-12-31T23:30:00", "1969-12-31T00:00:00", "1970-01-01T00:00:00"),
    ("WEEK", "1970-01-01T00:00:00", "1969-12-29T00:00:00", "1970-01-05T00:00:00"),
]


@pytest.mark.parametrize("name, instant, start, end", BUCKETS, ids=[f"{g}-{i}" for g, i, _, _ in BUCKETS])
def test_bucket(name, instant, start, end):
    granularity = GRANULARITIES[name]
    assert granularity.bucket_start(t(instant)) == t(start)
    assert granularity.bucket_end(t(start)) == t(end)


def test_all_is_one_bucket_for_every_instant():
    granularity = GRANULARITIES["ALL"]
    for instant in ("1969-12-31T23:30:00", LEAP_DAY, "2999-01-01T00:00:00"):
        assert granularity.bucket_start(t(instant)) == ETERNITY_START
    assert granularity.bucket_end(ETERNITY_START) == ETERNITY_END


def test_every_instant_is_inside_its_bucket():
    for granularity in GRANULARITIES.values():
        for instant in (t(LEAP_DAY), t("2024-03-03T23:59:59.999"), t("1969-12-31T23:30:00")):
            start = granularity.bucket_start(instant)
            millis = instant.replace(microsecond=instant.microsecond // 1000 * 1000)  # Druid's precision
            assert start <= millis < granularity.bucket_end(start)


def test_an_offset_instant_is_bucketed_by_its_utc_day_and_week():
    five_east = timezone(timedelta(hours=5))
    sunday_evening_utc = datetime(2024, 3, 4, 1, 0, tzinfo=five_east)  # 2024-03-03T20:00Z
    assert GRANULARITIES["DAY"].bucket_start(sunday_evening_utc) == t("2024-03-03T00:00:00")
    assert GRANULARITIES["WEEK"].bucket_start(sunday_evening_utc) == t("2024-02-26T00:00:00")


@pytest.mark.parametrize("name, local, start", [
    ("MONTH", datetime(2024, 3, 1, 1, 0), "2024-02-01T00:00:00"),    # = 2024-02-29T20:00Z
    ("QUARTER", datetime(2024, 4, 1, 1, 0), "2024-01-01T00:00:00"),  # = 2024-03-31T20:00Z
    ("YEAR", datetime(2025, 1, 1, 1, 0), "2024-01-01T00:00:00"),     # = 2024-12-31T20:00Z
])
def test_an_offset_instant_is_bucketed_by_its_utc_month(name, local, start):
    five_east = local.replace(tzinfo=timezone(timedelta(hours=5)))
    assert GRANULARITIES[name].bucket_start(five_east) == t(start)


@pytest.mark.parametrize("value, name", [
    ("hour", "HOUR"),
    ("HOUR", "HOUR"),
    (" Day ", "DAY"),
    ("fifteen_minute", "FIFTEEN_MINUTE"),
    ("none", "NONE"),
    ("all", "ALL"),
    ({"type": "hour"}, "HOUR"),
    ({"type": "none"}, "NONE"),
    ({"type": "ALL"}, "ALL"),
    ({"type": "period", "period": "PT1S"}, "SECOND"),
    ({"type": "period", "period": "PT1M"}, "MINUTE"),
    ({"type": "period", "period": "PT5M"}, "FIVE_MINUTE"),
    ({"type": "period", "period": "PT15M"}, "FIFTEEN_MINUTE"),
    ({"type": "period", "period": "PT1H"}, "HOUR"),
    ({"type": "period", "period": "PT6H"}, "SIX_HOUR"),
    ({"type": "period", "period": "P1D"}, "DAY"),
    ({"type": "period", "period": "P1W"}, "WEEK"),
    ({"type": "period", "period": "P1M"}, "MONTH"),
    ({"type": "period", "period": "P3M"}, "QUARTER"),
    ({"type": "period", "period": "P1Y"}, "YEAR"),
    ({"type": "period", "period": "PT1H", "timeZone": "UTC"}, "HOUR"),
    ({"type": "period", "period": "P1D", "timeZone": "Etc/UTC", "origin": None}, "DAY"),
    (GRANULARITIES["MONTH"], "MONTH"),
])
def test_parse_granularity(value, name):
    assert parse_granularity(value) == GRANULARITIES[name]
    assert parse_granularity(value).name == name


@pytest.mark.parametrize("value, message", [
    ("fortnight", "unknown granularity 'fortnight'; expected one of NONE, SECOND"),
    ({"type": "fortnight"}, "unknown granularity 'fortnight'"),
    ({}, "unknown granularity ''"),
    (5, "expected a granularity name such as HOUR or DAY, got 5"),
    (None, "expected a granularity name"),
    ({"type": "duration", "duration": 0}, "needs a positive whole number of milliseconds, got 0"),
    ({"type": "duration", "duration": "PT1H"}, "needs a positive whole number of milliseconds"),
    ({"type": "duration", "duration": 60_000, "period": "PT1H"}, "duration granularity has no field(s) ['period']"),
    ({"type": "period", "period": "P1D", "timeZone": "America/Los_Angeles"},
     "timeZone 'America/Los_Angeles' is not supported: Sluice buckets time in UTC"),
    ({"type": "period", "period": "P1D", "zone": "UTC"}, "period granularity has no field(s) ['zone']"),
    ({"type": "period", "period": "P1M", "origin": "2024-01-15T00:00:00Z"}, "must be the first instant of a month"),
    ({"type": "period", "period": "P1M1D"}, "period P1M1D mixes months or years with other fields"),
    ({"type": "period", "period": "PT-1H"}, "period PT-1H is not positive"),
    ({"type": "period", "period": "P1DT"}, "'P1DT' is not an ISO-8601 period"),
    ({"type": "period"}, "'' is not an ISO-8601 period"),
])
def test_parse_granularity_errors(value, message):
    with pytest.raises(ValueError) as raised:
        parse_granularity(value)
    assert message in str(raised.value)


@pytest.mark.parametrize("name, sql", [
    ("NONE", "date_trunc('MILLISECOND', `__time`)"),
    ("MINUTE", "timestamp_millis(floor(unix_millis(`__time`) / 60000) * 60000)"),
    ("FIFTEEN_MINUTE", "timestamp_millis(floor(unix_millis(`__time`) / 900000) * 900000)"),
    ("DAY", "timestamp_millis(floor(unix_millis(`__time`) / 86400000) * 86400000)"),
    ("WEEK", "date_trunc('WEEK', `__time`)"),
    ("MONTH", "date_trunc('MONTH', `__time`)"),
    ("QUARTER", "date_trunc('QUARTER', `__time`)"),
    ("YEAR", "date_trunc('YEAR', `__time`)"),
    ("ALL", "timestamp_millis(-62135596800000)"),
])
def test_spark_sql_truncation(name, sql):
    assert GRANULARITIES[name].spark_sql("`__time`") == sql


def test_granularities_are_values():
    assert Granularity("period", Period(hours=1)) == GRANULARITIES["HOUR"]
    assert len({*GRANULARITIES.values()}) == len(GRANULARITIES)


# Druid's PeriodGranularity: a single field of 1 floors by the calendar (a week to Monday); more than 1, or an
# origin, counts whole periods from the origin, by default the epoch (1970-01-01, a Thursday); a compound period
# counts its length in millis from the origin. DurationGranularity counts its millis from the origin.
PERIOD_BUCKETS = [
    ({"type": "period", "period": "PT3H"}, LEAP_DAY, "2024-02-29T12:00:00", "2024-02-29T15:00:00"),
    ({"type": "period", "period": "PT60M"}, LEAP_DAY, "2024-02-29T13:00:00", "2024-02-29T14:00:00"),
    ({"type": "period", "period": "P2D"}, LEAP_DAY, "2024-02-29T00:00:00", "2024-03-02T00:00:00"),  # day 19782
    ({"type": "period", "period": "P2D"}, "2024-02-28T10:00:00", "2024-02-27T00:00:00", "2024-02-29T00:00:00"),
    ({"type": "period", "period": "P7D"}, LEAP_DAY, "2024-02-29T00:00:00", "2024-03-07T00:00:00"),  # a Thursday
    ({"type": "period", "period": "P2W"}, LEAP_DAY, "2024-02-29T00:00:00", "2024-03-14T00:00:00"),  # 19782 = 1413 * 14
    ({"type": "period", "period": "P2M"}, LEAP_DAY, "2024-01-01T00:00:00", "2024-03-01T00:00:00"),
    ({"type": "period", "period": "P7M"}, LEAP_DAY, "2023-09-01T00:00:00", "2024-04-01T00:00:00"),  # 649 = 92 * 7 + 5
    ({"type": "period", "period": "P2Y"}, LEAP_DAY, "2024-01-01T00:00:00", "2026-01-01T00:00:00"),
    ({"type": "period", "period": "P1Y", "origin": "2020-04-01T00:00:00Z"}, LEAP_DAY, "2023-04-01T00:00:00",
     "2024-04-01T00:00:00"),  # a fiscal year from April
    ({"type": "period", "period": "P1D", "origin": "1970-01-01T06:00:00Z"}, LEAP_DAY, "2024-02-29T06:00:00",
     "2024-03-01T06:00:00"),
    ({"type": "period", "period": "P1D", "origin": "1970-01-01T06:00:00Z"}, "2024-02-29T05:59:59", "2024-02-28T06:00:00",
     "2024-02-29T06:00:00"),
    ({"type": "period", "period": "P1W", "origin": "2024-01-03T00:00:00Z"}, LEAP_DAY, "2024-02-28T00:00:00",
     "2024-03-06T00:00:00"),  # weeks from a Wednesday
    ({"type": "period", "period": "P1DT12H"}, LEAP_DAY, "2024-02-29T00:00:00", "2024-03-01T12:00:00"),  # h 474768
    ({"type": "duration", "duration": 5_400_000}, LEAP_DAY, "2024-02-29T13:30:00", "2024-02-29T15:00:00"),
    ({"type": "duration", "duration": 3_600_000, "origin": "2024-01-01T00:30:00Z"}, LEAP_DAY, "2024-02-29T13:30:00",
     "2024-02-29T14:30:00"),
    ({"type": "period", "period": "PT3H"}, "1969-12-31T22:00:00", "1969-12-31T21:00:00", "1970-01-01T00:00:00"),
]


@pytest.mark.parametrize("spec, instant, start, end", PERIOD_BUCKETS)
def test_period_and_duration_buckets(spec, instant, start, end):
    granularity = parse_granularity(spec)
    assert granularity.name is None
    assert granularity.bucket_start(t(instant)) == t(start)
    assert granularity.bucket_end(t(start)) == t(end)


@pytest.mark.parametrize("spec", [spec for spec, *_ in PERIOD_BUCKETS])
def test_a_granularity_is_written_as_its_spec_reads_it(spec):
    granularity = parse_granularity(spec)
    assert parse_granularity(granularity.to_json()) == granularity


def test_a_simple_granularity_is_written_by_its_name():
    assert parse_granularity({"type": "period", "period": "PT1H", "timeZone": "UTC"}).to_json() == "HOUR"
    assert parse_granularity({"type": "period", "period": "PT3H"}).to_json() == \
        {"type": "period", "period": "PT3H", "timeZone": "UTC"}
    assert parse_granularity({"type": "duration", "duration": 60_000, "origin": "2024-01-01T00:00:30Z"}).to_json() == \
        {"type": "duration", "duration": 60_000, "origin": "2024-01-01T00:00:30.000Z"}
