"""Druid's DataSketches SQL functions over a small table, where every sketch is exact (DataSketches' exact modes), so
the expected values are plain counts, sums and ranks of the rows below."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import datasketches as ds
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.engine import QueryResult, SqlEngine
from sluice.broker.errors import SqlError

# s: three distinct values and a null; n: 1…6
ROWS = {"s": ["a", "b", "c", "a", "b", None], "n": [1, 2, 3, 4, 5, 6]}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path: Path = tmp_path_factory.mktemp("sketches") / "t.parquet"
    pq.write_table(pa.table(ROWS), path)
    engine = SqlEngine(threads=1)
    return lambda sql: engine.execute(sql, {"t": [str(path)]})


def _rows(result: QueryResult) -> list[tuple]:
    return result.rows


@pytest.mark.parametrize(("sql", "expected"), [
    # nulls are not values of a sketch
    ("SELECT HLL_SKETCH_ESTIMATE(DS_HLL(s)) FROM t", 3.0),
    ("SELECT THETA_SKETCH_ESTIMATE(DS_THETA(s)) FROM t", 3.0),
    ("SELECT HLL_SKETCH_ESTIMATE(DS_HLL(n)) FROM t", 6.0),  # numbers
    # no rows: the empty sketch
    ("SELECT HLL_SKETCH_ESTIMATE(DS_HLL(s)) FROM t WHERE n > 100", 0.0),
    ("SELECT THETA_SKETCH_ESTIMATE(DS_THETA(s, 1024)) FROM t WHERE n > 100", 0.0),
    # a column of sketches (a subquery's) is merged, as Druid merges a sketch column
    ("SELECT HLL_SKETCH_ESTIMATE(DS_HLL(sk)) FROM (SELECT n, DS_HLL(s) AS sk FROM t GROUP BY n)", 3.0),
    ("SELECT THETA_SKETCH_ESTIMATE(DS_THETA(sk)) FROM (SELECT n, DS_THETA(s) AS sk FROM t GROUP BY n)", 3.0),
    ("SELECT DS_GET_QUANTILE(DS_QUANTILES_SKETCH(sk), 0.5) FROM "
     "(SELECT s, DS_QUANTILES_SKETCH(n) AS sk FROM t GROUP BY s)", 4.0),  # the 4th of 1…6
    ("SELECT DS_TUPLE_DOUBLES_METRICS_SUM_ESTIMATE(DS_TUPLE_DOUBLES(sk)) FROM "
     "(SELECT n, DS_TUPLE_DOUBLES(s, n) AS sk FROM t GROUP BY n)", [15.0]),  # the null key's 6 is left out
    ("SELECT HLL_SKETCH_ESTIMATE(HLL_SKETCH_UNION(12, 'HLL_8', DS_HLL(s) FILTER(WHERE n = 1), "
     "DS_HLL(s) FILTER(WHERE n = 2))) FROM t", 2.0),
    # two value columns, a nominalEntries override
    ("SELECT DS_TUPLE_DOUBLES_METRICS_SUM_ESTIMATE(DS_TUPLE_DOUBLES(s, n, n * 10, 1024)) FROM t", [15.0, 150.0]),
    ("SELECT DS_RANK(DS_QUANTILES_SKETCH(n, 64), 4) FROM t", 0.5),  # 1, 2, 3 of six below 4
    ("SELECT DS_GET_QUANTILE(DS_QUANTILES_SKETCH(n), 0.5) FROM t WHERE n > 100", float("nan")),
])
def test_sketch_answers(run: Any, sql: str, expected: Any) -> None:
    [(value,)] = _rows(run(sql))
    if isinstance(expected, float) and expected != expected:
        assert value != value
    else:
        assert value == pytest.approx(expected)


def test_sketches_per_group_with_filter(run: Any) -> None:
    result = run("SELECT s, THETA_SKETCH_ESTIMATE(DS_THETA(n) FILTER(WHERE n > 1)) FROM t WHERE s IS NOT NULL "
                 "GROUP BY s ORDER BY s")
    assert result.rows == [("a", 1.0), ("b", 2.0), ("c", 1.0)]


def test_a_sketch_in_a_result_is_base64_of_its_bytes(run: Any) -> None:
    result = run("SELECT DS_HLL(s), DS_THETA(s), DS_QUANTILES_SKETCH(n), DS_TUPLE_DOUBLES(s, n) FROM t")
    assert result.druid_types == ["COMPLEX<HLLSketch>", "COMPLEX<thetaSketch>", "COMPLEX<quantilesDoublesSketch>",
                                  "COMPLEX<arrayOfDoublesSketch>"]
    assert result.sql_types == ["OTHER"] * 4
    hll, theta, quantiles, _ = (base64.b64decode(value) for value in result.rows[0])
    assert ds.hll_sketch.deserialize(hll).get_estimate() == pytest.approx(3)
    assert ds.compact_theta_sketch.deserialize(theta).get_estimate() == 3
    assert ds.quantiles_doubles_sketch.deserialize(quantiles).n == 6


def test_an_empty_result_still_says_the_sketch_type(run: Any) -> None:
    result = run("SELECT s, DS_HLL(n) FROM t WHERE n > 100 GROUP BY s")
    assert result.rows == [] and result.druid_types == ["STRING", "COMPLEX<HLLSketch>"]


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT DS_HLL(s, 30) FROM t", "DS_HLL needs lgK in the range of [4, 21], got 30"),
    ("SELECT DS_HLL(s, 12, 'HLL_5') FROM t", "DS_HLL needs tgtHllType as one of HLL_4, HLL_6, HLL_8"),
    ("SELECT DS_THETA(s, 1000) FROM t", "DS_THETA needs the size as a power of 2, got 1000"),
    ("SELECT DS_QUANTILES_SKETCH(n, 'big') FROM t", "DS_QUANTILES_SKETCH needs k as an integer literal"),
    ("SELECT DS_GET_QUANTILE(DS_QUANTILES_SKETCH(n), MAX(n)) FROM t", "DS_GET_QUANTILE needs the fraction as a "
                                                                       "numeric literal"),
    ("SELECT HLL_SKETCH_ESTIMATE(DS_HLL(s), 'yes') FROM t", "HLL_SKETCH_ESTIMATE needs round as a boolean literal"),
    ("SELECT THETA_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS(DS_THETA(s), 4) FROM t", "numStdDev in the range of [1, 3]"),
    ("SELECT HLL_SKETCH_ESTIMATE(DS_THETA(s)) FROM t", "HLL_SKETCH_ESTIMATE"),  # a Theta sketch is no HLL sketch
    ("SELECT THETA_SKETCH_ESTIMATE(s) FROM t", "THETA_SKETCH_ESTIMATE"),  # nor is text
    ("SELECT DS_HLL() FROM t", "Function DS_HLL takes 1 to 3 arguments, got 0"),
    ("SELECT DS_KLL_DOUBLES_SKETCH(n) FROM t", "Function DS_KLL_DOUBLES_SKETCH is not supported"),
])
def test_wrong_calls_are_refused_naming_the_function(run: Any, sql: str, message: str) -> None:
    with pytest.raises(SqlError) as caught:
        run(sql)
    assert caught.value.status == 400
    assert message in caught.value.error_message


def test_a_sketch_read_back_from_its_base64_text_is_the_same_sketch(run: Any) -> None:
    """DECODE_BASE64_COMPLEX: what a result shows of a sketch is the sketch (the value a client stores and sends back)."""
    [(text,)] = _rows(run("SELECT DS_HLL(s) FROM t"))
    assert _rows(run(f"SELECT HLL_SKETCH_ESTIMATE(DECODE_BASE64_COMPLEX('HLLSketch', '{text}'), true)")) == \
        _rows(run("SELECT HLL_SKETCH_ESTIMATE(DS_HLL(s), true) FROM t"))
    with pytest.raises(SqlError) as caught:
        run(f"SELECT DECODE_BASE64_COMPLEX('KllDoublesSketch', '{text}')")
    assert caught.value.error_message.startswith("DECODE_BASE64_COMPLEX knows the complex types HLLSketch")
