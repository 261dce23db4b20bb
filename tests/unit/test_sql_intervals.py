"""WHERE clause in → the intervals of `__time` a query can read out: the broker reads only the segments overlapping
them, so every row the query can return must lie inside, and a condition not understood must mean "any time"."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sluice.broker.sql.translate import translate_query
from sluice.segment.segment import ETERNITY, Interval

NOW = datetime(2015, 9, 20, 12, 0, tzinfo=UTC)
START, END = ETERNITY.start, ETERNITY.end


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def _intervals(where: str, context: dict | None = None, source: str = "wiki") -> list[Interval]:
    sql = f"SELECT COUNT(*) FROM wiki WHERE {where}"
    return translate_query(sql, ["wiki", "other"], context, now=NOW).intervals[source]


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("__time >= TIMESTAMP '2015-09-12 00:00:00' AND __time < TIMESTAMP '2015-09-13 00:00:00'",
         [("2015-09-12", "2015-09-13")]),
        ("__time > '2015-09-12' AND __time <= '2015-09-13 06:00:00'",
         [("2015-09-12", "2015-09-13 06:00:00.001")]),
        ("TIMESTAMP '2015-09-12 00:00:00' <= __time", [("2015-09-12", None)]),
        ("__time BETWEEN TIMESTAMP '2015-09-12 00:00:00' AND TIMESTAMP '2015-09-12 01:00:00'",
         [("2015-09-12", "2015-09-12 01:00:00.001")]),
        ("__time = TIMESTAMP '2015-09-12 00:47:53.259'", [("2015-09-12 00:47:53.259", "2015-09-12 00:47:53.260")]),
        ("__time IN (TIMESTAMP '2015-09-14 00:00:00', TIMESTAMP '2015-09-12 00:00:00')",
         [("2015-09-12", "2015-09-12 00:00:00.001"), ("2015-09-14", "2015-09-14 00:00:00.001")]),
        ("(__time < '2015-09-12' OR __time >= '2015-09-14') AND page = 'Cat'",
         [(None, "2015-09-12"), ("2015-09-14", None)]),
        ("__time >= '2015-09-12' AND (__time < '2015-09-13' OR __time >= '2015-09-14' AND __time < '2015-09-15')",
         [("2015-09-12", "2015-09-13"), ("2015-09-14", "2015-09-15")]),
        ("TIME_IN_INTERVAL(__time, '2015-09-12T00:00:00Z/2015-09-13T00:00:00Z')", [("2015-09-12", "2015-09-13")]),
        ("TIME_IN_INTERVAL(__time, '2015-09-12T00:00:00Z/PT6H')", [("2015-09-12", "2015-09-12 06:00:00")]),
        ("TIME_IN_INTERVAL(__time, 'P1D/2015-09-13')", [("2015-09-12", "2015-09-13")]),
        ("__time >= MILLIS_TO_TIMESTAMP(1442016000000)", [("2015-09-12", None)]),
        ("__time >= TIME_PARSE('2015-09-12T02:00:00+02:00')", [("2015-09-12", None)]),
        ("__time >= CURRENT_TIMESTAMP - INTERVAL '1' DAY", [("2015-09-19 12:00:00", None)]),
        ("__time >= TIMESTAMP '2015-09-13 00:00:00' AND __time < TIMESTAMP '2015-09-12 00:00:00'", []),
    ],
)
def test_bounds_from_where(where: str, expected: list[tuple[str | None, str | None]]) -> None:
    assert _intervals(where) == [
        Interval(START if start is None else _at(start), END if end is None else _at(end)) for start, end in expected
    ]


@pytest.mark.parametrize(
    "where",
    [
        "page = 'Cat'",
        "__time < CURRENT_TIMESTAMP",  # the clock moves on between planning and reading
        "NOT __time < '2015-09-12'",
        "TIME_FLOOR(__time, 'P1D') = TIMESTAMP '2015-09-12 00:00:00'",
        "__time >= ?",
        "__time >= '2015-09-12' OR page = 'Cat'",
        "__time >= TIMESTAMP '2015-09-12 00:00:00' + INTERVAL '1' MONTH",
        "__time IN (SELECT __time FROM other)",
        "__time >= 'yesterday'",
    ],
)
def test_conditions_not_understood_read_all_time(where: str) -> None:
    assert _intervals(where) == [ETERNITY]


def test_literals_are_in_the_session_time_zone() -> None:
    where = "__time >= TIMESTAMP '2015-09-12 00:00:00' AND __time < '2015-09-13'"
    assert _intervals(where, {"sqlTimeZone": "America/Los_Angeles"}) == [
        Interval(_at("2015-09-12 07:00"), _at("2015-09-13 07:00"))
    ]
    assert _intervals(where, {"sqlTimeZone": "+05:30"}) == [Interval(_at("2015-09-11 18:30"), _at("2015-09-12 18:30"))]


def test_each_reference_to_a_data_source_adds_its_own_bounds() -> None:
    sql = """SELECT a.page FROM wiki a JOIN wiki b ON a.page = b.page
             WHERE a.__time >= '2015-09-14' AND b.__time < '2015-09-12'"""
    assert translate_query(sql, ["wiki"], now=NOW).intervals["wiki"] == [
        Interval(START, _at("2015-09-12")), Interval(_at("2015-09-14"), END)
    ]


def test_unqualified_time_in_a_join_could_be_either_table() -> None:
    sql = "SELECT * FROM wiki a JOIN other b ON a.page = b.page WHERE __time >= '2015-09-14'"
    assert translate_query(sql, ["wiki", "other"], now=NOW).intervals == {"wiki": [ETERNITY], "other": [ETERNITY]}


def test_bounds_inside_subqueries_and_ctes_count_for_their_own_table_only() -> None:
    sql = """WITH recent AS (SELECT page FROM wiki WHERE __time >= '2015-09-14')
             SELECT page FROM recent UNION ALL SELECT page FROM other"""
    assert translate_query(sql, ["wiki", "other"], now=NOW).intervals == {
        "wiki": [Interval(_at("2015-09-14"), END)], "other": [ETERNITY]
    }
    outer_filter = "SELECT * FROM (SELECT * FROM wiki) WHERE __time >= '2015-09-14'"
    assert translate_query(outer_filter, ["wiki"], now=NOW).intervals == {"wiki": [ETERNITY]}
