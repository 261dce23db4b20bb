"""Druid's window frames (its documented known issues, `sluice/broker/sql/windows.py`), translated and run on DuckDB."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from sluice.broker.sql.translate import translate_query

# a running total where two rows tie on the order: the standard's RANGE frame would sum both peers on each
T = pa.table({"k": ["a", "a", "a", "a", "b"], "o": [1, 2, 2, 10, 1], "n": [1, 10, 10, 100, 5]})


def run(sql: str) -> list[tuple]:
    connection = duckdb.connect()
    connection.register("t", T)
    return connection.execute(translate_query(sql, ["t"]).sql).fetchall()


@pytest.mark.parametrize(("window", "sums"), [
    # an ordered window without a frame: ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW, so a tie counts once
    ("PARTITION BY k ORDER BY o", [1, 11, 21, 121, 5]),
    ("w", [1, 11, 21, 121, 5]),
    # RANGE BETWEEN 1 PRECEDING is one row back, not the rows whose o is at least o - 1
    ("PARTITION BY k ORDER BY o RANGE BETWEEN 1 PRECEDING AND CURRENT ROW", [1, 11, 20, 110, 5]),
    # no order: the whole partition, as everywhere
    ("PARTITION BY k", [121, 121, 121, 121, 5]),
])
def test_an_aggregate_over_an_ordered_window_runs_over_rows_up_to_the_current_one(window: str, sums: list[int]) -> None:
    over = window if window == "w" else f"({window})"
    rows = run(f"SELECT k, o, n, SUM(n) OVER {over} AS s FROM t WINDOW w AS (PARTITION BY k ORDER BY o) "
               "ORDER BY k, o, n")
    assert [s for *_, s in rows] == sums


def test_lag_and_lead_ignore_their_default_and_last_value_is_the_windows_last() -> None:
    rows = run("SELECT k, o, LAG(o, 1, 0) OVER w, LEAD(o, 1, 0) OVER w, LAST_VALUE(o) OVER w FROM t "
               "WHERE n <> 10 WINDOW w AS (PARTITION BY k ORDER BY o) ORDER BY k, o")
    assert rows == [("a", 1, None, 10, 10), ("a", 10, 1, None, 10), ("b", 1, None, None, 1)]
