"""Row ingestion meters (Druid's rowStats: totals and Dropwizard moving averages) and saved parse exceptions."""

from __future__ import annotations

import math

import pytest

from sluice.emitter import metrics as m
from sluice.task.meters import (
    PROCESSED_WITH_ERROR,
    ParseExceptionReport,
    RowIngestionMeters,
    SavedParseExceptions,
    ingestion_metrics,
    latest_parse_errors,
)
from sluice.task.stats import RowStats

ZERO = {"processed": 0.0, "processedWithError": 0.0, "thrownAway": 0.0, "unparseable": 0.0, "processedBytes": 0.0}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_totals_add_up_in_druids_row_stats_shape(clock) -> None:
    meters = RowIngestionMeters(clock)
    meters.add(RowStats(processed=100, processed_with_error=2, thrown_away=5, unparseable=1, processed_bytes=9000))
    meters.add(RowStats(processed=50, unparseable=3, processed_bytes=4000))
    stats = meters.row_stats()
    assert stats["totals"] == {"buildSegments": {"processed": 150, "processedWithError": 2, "thrownAway": 5,
                                                 "unparseable": 4, "processedBytes": 13000}}
    assert set(stats["movingAverages"]["buildSegments"]) == {"1m", "5m", "15m"}
    assert meters.totals == RowStats(150, 2, 5, 4, 13000)


def test_rates_appear_at_the_first_5_second_tick_then_decay_as_dropwizard_ewmas(clock) -> None:
    meters = RowIngestionMeters(clock)
    meters.add(RowStats(processed=300, processed_bytes=6000))
    clock.now += 4.9
    assert meters.moving_averages() == {"1m": ZERO, "5m": ZERO, "15m": ZERO}  # nothing until the first tick

    clock.now += 0.2  # 5.1 s: one tick; the first tick takes the rate as it is
    first = {**ZERO, "processed": 60.0, "processedBytes": 1200.0}
    assert meters.moving_averages() == {"1m": first, "5m": first, "15m": first}

    clock.now += 5  # a second tick with nothing counted: rate x e^(-5 s / window)
    averages = meters.moving_averages()
    for window, minutes in (("1m", 1), ("5m", 5), ("15m", 15)):
        assert averages[window]["processed"] == pytest.approx(60 * math.exp(-5 / (60 * minutes)))
        assert averages[window]["unparseable"] == 0.0


def test_a_long_idle_gap_decays_as_many_ticks_would(clock) -> None:
    meters = RowIngestionMeters(clock)
    meters.add(RowStats(processed=300))
    clock.now += 5.1 + 15 * 60  # one tick of data, then 180 empty ticks
    averages = meters.moving_averages()
    assert averages["1m"]["processed"] == pytest.approx(60 * math.exp(-15))
    assert averages["15m"]["processed"] == pytest.approx(60 * math.exp(-1))


def test_a_steady_stream_reads_as_its_rate_in_every_window(clock) -> None:
    meters = RowIngestionMeters(clock)
    clock.now += 2.5  # between ticks, so each tick counts exactly one batch
    for _ in range(240):  # 20 minutes of 50 events and 5000 bytes per 5 seconds
        meters.add(RowStats(processed=50, processed_bytes=5000))
        clock.now += 5
    averages = meters.moving_averages()
    for window in ("1m", "5m", "15m"):
        assert averages[window]["processed"] == pytest.approx(10.0)
        assert averages[window]["processedBytes"] == pytest.approx(1000.0)


def test_ingestion_metrics_name_each_counter_as_druid_emits_it() -> None:
    assert ingestion_metrics(RowStats(processed=7, processed_with_error=1, thrown_away=2, unparseable=3,
                                      processed_bytes=900)) == {
        m.INGEST_EVENTS_PROCESSED: 7, m.INGEST_EVENTS_PROCESSED_WITH_ERROR: 1, m.INGEST_EVENTS_THROWN_AWAY: 2,
        m.INGEST_EVENTS_UNPARSEABLE: 3, m.INGEST_INPUT_BYTES: 900}


# ---- parse exceptions ----

def test_saved_parse_exceptions_keep_the_newest_first_in_druids_json() -> None:
    times = iter([1000, 2000, 3000])
    saved = SavedParseExceptions(2, clock_millis=lambda: next(times))
    saved.add("{bad json", ["Unable to parse row [{bad json]"])
    saved.add('{"time":"x"}', ["Timestamp[x] is unparseable!"])
    saved.add('{"time":"2024-01-01","added":"abc"}', ["Unable to parse value[abc] for field[added]"],
              PROCESSED_WITH_ERROR)
    assert saved.unparseable_events() == {"buildSegments": [
        {"input": '{"time":"2024-01-01","added":"abc"}', "errorType": "processedWithError",
         "details": ["Unable to parse value[abc] for field[added]"], "timeOfExceptionMillis": 3000},
        {"input": '{"time":"x"}', "errorType": "unparseable", "details": ["Timestamp[x] is unparseable!"],
         "timeOfExceptionMillis": 2000}]}


def test_a_task_that_saves_none_reports_no_unparseable_events() -> None:
    saved = SavedParseExceptions(0)
    saved.add("{bad", ["Unable to parse row [{bad]"])
    assert saved.reports() == []
    assert saved.unparseable_events() == {}


def report(millis: int, input_: str, error_type: str = "unparseable") -> ParseExceptionReport:
    return ParseExceptionReport(input_, error_type, (f"cannot parse {input_}",), millis)


def test_supervisor_parse_errors_merge_tasks_without_duplicates_newest_first_within_the_limit() -> None:
    task_a = [report(300, "a3"), report(100, "a1")]
    task_b = [report(200, "b2"), report(300, "a3"), report(300, "b3", PROCESSED_WITH_ERROR)]
    assert [r.input for r in latest_parse_errors([*task_a, *task_b], limit=3)] == ["a3", "b3", "b2"]
    assert [r.input for r in latest_parse_errors([*task_a, *task_b], limit=10)] == ["a3", "b3", "b2", "a1"]
    assert latest_parse_errors(task_a, limit=0) == []


def test_parse_exception_reports_read_back_what_a_task_serves() -> None:
    original = report(1234, '{"x":')
    assert ParseExceptionReport.from_json(original.to_json()) == original
