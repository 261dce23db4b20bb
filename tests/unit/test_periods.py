"""One ISO-8601 period grammar (Joda-Time's ISOPeriodFormat.standard) for specs and queries alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.timestamps import parse_instant, parse_interval as parse_query_interval
from sluice.periods import Period
from sluice.spec.granularity import parse_granularity
from sluice.spec.intervals import parse_interval
from sluice.spec.supervisor import parse_supervisor_spec


@pytest.mark.parametrize("text, period", [
    ("PT1H", Period(hours=1)),
    ("P1D", Period(days=1)),
    ("P1W", Period(weeks=1)),
    ("P7D", Period(days=7)),
    ("P1M", Period(months=1)),
    ("P1Y", Period(years=1)),
    ("P3M", Period(months=3)),
    ("P1Y2M3W4DT5H6M7.089S", Period(1, 2, 3, 4, 5, 6, 7, 89)),
    ("PT0.5S", Period(millis=500)),
    ("PT1,25S", Period(seconds=1, millis=250)),  # Joda takes a comma as the decimal mark too
    ("pt15m", Period(minutes=15)),
    ("P-1D", Period(days=-1)),
    ("PT-1.5S", Period(seconds=-1, millis=-500)),
])
def test_druid_periods_parse_field_by_field(text, period):
    assert Period.parse(text) == period


@pytest.mark.parametrize("text", ["P", "PT", "P1DT", "1H", "P1H", "PT1D", "P1.5D", "PT1X", "P1M1Y", "", " ", "PT1HM"])
def test_what_joda_cannot_read_is_refused(text):
    with pytest.raises(ValueError, match="is not an ISO-8601 period such as PT1H, P1D or P1M"):
        Period.parse(text)


@pytest.mark.parametrize("text, printed", [
    ("PT1H", "PT1H"), ("p1m", "P1M"), ("P1W", "P1W"), ("P1Y2M3W4DT5H6M7.089S", "P1Y2M3W4DT5H6M7.089S"),
    ("PT0.5S", "PT0.500S"), ("PT-1.5S", "PT-1.500S"), ("P2DT12H", "P2DT12H"), ("PT0S", "PT0S"),
])
def test_a_period_prints_as_joda_writes_it(text, printed):
    assert str(Period.parse(text)) == printed


@given(st.builds(Period, *(st.integers(0, 500) for _ in range(7)), st.integers(0, 999)))
def test_printing_then_parsing_a_period_gives_it_back(period):
    assert Period.parse(str(period)) == period


def test_a_week_is_not_seven_days_as_a_granularity_but_is_as_a_length():
    week, days = Period.parse("P1W"), Period.parse("P7D")
    assert week != days and week.to_timedelta() == days.to_timedelta() == timedelta(days=7)
    assert week.single_field == ("weeks", 1) and days.single_field == ("days", 7)


def test_months_and_years_have_no_fixed_length():
    with pytest.raises(ValueError, match="P1M contains months or years, which vary in length"):
        Period.parse("P1M").to_timedelta()


def test_months_in_a_spec_interval_count_by_the_calendar():
    assert parse_interval("P1M/2026-03-31") == (datetime(2026, 2, 28, tzinfo=UTC), datetime(2026, 3, 31, tzinfo=UTC))
    assert parse_interval("2024-01-31/P1M")[1] == datetime(2024, 2, 29, tzinfo=UTC)
    assert parse_interval("2026-01-01/P1Y2M")[1] == datetime(2027, 3, 1, tzinfo=UTC)


@pytest.mark.parametrize(("text", "start", "end"), [
    ("2020/2021", datetime(2020, 1, 1, tzinfo=UTC), datetime(2021, 1, 1, tzinfo=UTC)),
    ("2020-03/2020-04", datetime(2020, 3, 1, tzinfo=UTC), datetime(2020, 4, 1, tzinfo=UTC)),
    ("2020-03-01T12/PT1H", datetime(2020, 3, 1, 12, tzinfo=UTC), datetime(2020, 3, 1, 13, tzinfo=UTC)),
    ("2024-01-01T00:00:00+02:00/P1D", datetime(2023, 12, 31, 22, tzinfo=UTC), datetime(2024, 1, 1, 22, tzinfo=UTC)),
])
def test_a_spec_interval_reads_instants_as_joda_does(text, start, end):
    assert parse_interval(text) == (start, end)


@pytest.mark.parametrize(("text", "message"), [
    ("2024-03-01/x", "interval '2024-03-01/x': 'x' is not an ISO-8601 instant"),
    ("2024-03-01/P1DT", "interval '2024-03-01/P1DT': "),
    ("2021/2020", "interval '2021/2020' ends before it starts"),
    ("2024-13-01/P1D", "interval '2024-13-01/P1D': '2024-13-01' is not an ISO-8601 instant: a field is out of range"),
    ("2023-02-29/P1D", "interval '2023-02-29/P1D': '2023-02-29' is not an ISO-8601 instant: a field is out of range"),
    ("2024-01-01T24:00/P1D", "interval '2024-01-01T24:00/P1D': '2024-01-01T24:00' is not an ISO-8601 instant"),
    ("2024-03-01", "'2024-03-01' is not an interval of the form start/end"),
    ("-146136543-09-08T08:23:32.096Z/2020", "interval '-146136543-09-08T08:23:32.096Z/2020' reaches beyond the years"),
])
def test_a_bad_spec_interval_is_refused_naming_it(text, message):
    with pytest.raises(ValueError) as raised:
        parse_interval(text)
    assert str(raised.value).startswith(message)


def test_a_query_interval_reads_the_same_periods():
    interval = parse_query_interval("2026-01-01/P1Y2M")
    assert interval.end == parse_instant("2027-03-01")
    with pytest.raises(ValueError, match="P1DT"):
        parse_query_interval("2026-01-01/P1DT")


@pytest.mark.parametrize("period, name", [("P1M", "MONTH"), ("P3M", "QUARTER"), ("P1Y", "YEAR"), ("PT1H", "HOUR"),
                                          ("P1W", "WEEK"), ("P1D", "DAY"), ("PT15M", "FIFTEEN_MINUTE")])
def test_period_segment_granularities(period, name):
    assert parse_granularity({"type": "period", "period": period}).name == name


def _spec(**io_config):
    return {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "d", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": ["a"]},
                       "granularitySpec": {"segmentGranularity": "HOUR"}},
        "ioConfig": {"topic": "t", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "localhost:9092"}, **io_config}}}


def test_a_task_duration_in_months_is_refused_as_druid_refuses_it():
    with pytest.raises(ValueError, match=r"spec\.ioConfig\.taskDuration.*P1M contains months or years"):
        parse_supervisor_spec(_spec(taskDuration="P1M"))


def test_a_task_duration_in_days_and_hours():
    spec = parse_supervisor_spec(_spec(taskDuration="P1DT12H"))
    assert spec.spec.io_config.task_duration == timedelta(days=1, hours=12)


def test_druids_forever_is_the_longest_duration():
    assert Period.parse("P2147483647D").to_timedelta() == timedelta.max
