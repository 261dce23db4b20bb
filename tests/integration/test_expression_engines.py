"""One Druid expression, two engines: the value Spark computes at ingestion (`sluice.spec.expressions`) is the
value DuckDB computes at query time (the broker's path), row by row, for the same rows.

Both sides read the expression with `sluice.expressions`; this checks the two renderings of its tree keep Druid's
meaning: nulls in arithmetic, logical operators as 1/0, 0-based substring and strpos, casts, and the time functions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from sqlglot import exp

from sluice.broker.engine import SqlEngine
from sluice.broker.results import render
from sluice.expressions import druid_function, to_sql
from sluice.spec.expressions import compile_expression

ROWS = {
    "id": pa.array([1, 2, 3, 4], pa.int64()),
    "__time": pa.array([datetime(2015, 9, 12, 0, 46, 58, 771000, tzinfo=UTC), datetime(2015, 9, 13, 23, 0, tzinfo=UTC),
                        datetime(2016, 2, 29, 12, 30, tzinfo=UTC), datetime(2015, 12, 31, 23, 59, 59, tzinfo=UTC)],
                       pa.timestamp("ms", tz="UTC")),
    "a": pa.array([1, 3, None, 0], pa.int64()),
    "b": pa.array([2.5, None, -1.25, 7.0], pa.float64()),
    "s": pa.array(["abcabc", "Bob", None, ""], pa.string()),
    "d": pa.array(["2015-09-12", "2016-02-29T10:00:00Z", "not a date", None], pa.string()),
}

EXPRESSIONS = [
    # arithmetic: NULL in, NULL out
    "a + b", "a * 2 - b", "a % 2", "-a ^ 2", "2 ^ 3 ^ 2", "abs(b)", "greatest(a, 2)", "div(a, 2)",
    # logical operators yield 1/0; a number is true when > 0
    "a > 1 && s == 'Bob'", "a > 1 || b > 0", "!a", "a == 3", "!(b < 0)", "if(a, 'yes', 'no')",
    "isnull(s)", "notnull(b)",
    # strings: 0-based substring and strpos, past the end is NULL
    "substring(s, 1, 2)", "substring(s, 2, -1)", "substring(s, 10, 1)", "strpos(s, 'b')", "strpos(s, 'b', 2)",
    "concat(s, '-', a)", "upper(s)", "lower(s)", "strlen(s)", "lpad(s, 4, '*')", "replace(s, 'b', 'x')",
    "like(s, 'a%')", "contains_string(s, 'B')", "icontains_string(s, 'B')", "regexp_extract(s, 'b+c?')",
    "regexp_like(s, '^a')", "reverse(s)", "left(s, 2)", "trim(concat(' ', s, ' '))",
    # casts and null handling
    "cast(a, 'STRING')", "cast(a, 'DOUBLE') / 2", "cast('12', 'LONG') + a", "nvl(a, -1)", "nvl(s, 'none')",
    "case_searched(a > 2, 'big', a > 0, 'small', 'none')", "case_searched(a > 2, 'big')",
    "case_simple(s, 'Bob', 1, '', 2, 0)",
    # time: __time is epoch millis
    "__time", "__time + 1000", "timestamp_floor(__time, 'PT1H')", "timestamp_floor(__time, 'PT15M')",
    "timestamp_floor(__time, 'P1D')", "timestamp_floor(__time, 'P1W')", "timestamp_floor(__time, 'P1M')",
    "timestamp_floor(__time, 'P3M')", "timestamp_floor(__time, 'P1Y')", "timestamp_floor(__time, 'PT1H', 1800000)",
    "timestamp_floor(__time, 'P1D', null, 'Asia/Tokyo')", "timestamp_ceil(__time, 'PT1H')",
    "timestamp_ceil(__time, 'P1M')", "timestamp_shift(__time, 'P1M', 1)", "timestamp_shift(__time, 'PT1H', -2)",
    "timestamp_extract(__time, 'DOW')", "timestamp_extract(__time, 'DOY')", "timestamp_extract(__time, 'WEEK')",
    "timestamp_extract(__time, 'HOUR', 'America/New_York')", "timestamp_extract(__time, 'EPOCH')",
    "timestamp_extract(__time, 'QUARTER')", "timestamp_extract(__time, 'MILLISECOND')",
    "timestamp_shift(__time, 'P1D', 1, 'America/New_York')",
    "timestamp_format(__time, 'yyyy-MM-dd HH:mm')", "timestamp_format(__time)",
    "timestamp_format(__time, 'HH:mm', 'Asia/Kolkata')",
    "timestamp_parse(d, 'yyyy-MM-dd')", "timestamp(d)", "timestamp_parse(d, null, 'Asia/Tokyo')",
]
#: where the engines still disagree: strict, so a fix turns the suite red until its entry is removed
KNOWN_DIFFERENCES = {
    # Druid divides two longs as longs (DuckDB does, 1 / 4 = 0); the rows Spark ingests are untyped text, so the
    # Spark rendering cannot tell a long from a double and divides as doubles
    "a / 4": "long division at ingestion",
}


@pytest.fixture(scope="module")
def on_spark(spark: SparkSession) -> Callable[[str], list[Any]]:
    table = pa.table(ROWS)
    rows = spark.createDataFrame(table.to_pylist(), "id BIGINT, `__time` TIMESTAMP, a BIGINT, b DOUBLE, s STRING, "
                                                    "d STRING").orderBy("id").cache()

    def evaluate(expression: str) -> list[Any]:
        return [row[0] for row in rows.select(F.expr(compile_expression(expression).sql)).collect()]

    return evaluate


@pytest.fixture(scope="module")
def on_duckdb(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[Any]]:
    path: Path = tmp_path_factory.mktemp("expressions") / "t.parquet"
    pq.write_table(pa.table(ROWS), path)
    engine = SqlEngine(threads=1)

    def resolve(name: str) -> exp.Expr:
        column = exp.column(name, quoted=True)
        return druid_function("TIMESTAMP_TO_MILLIS", column) if name == "__time" else column

    def evaluate(expression: str) -> list[Any]:
        sql = f"SELECT {to_sql(expression, resolve).sql(dialect='druid')} FROM t ORDER BY id"
        body, _ = render(engine.execute(sql, {"t": [str(path)]}), "array", header=False, types_header=False,
                         sql_types_header=False)
        return [row[0] for row in json.loads(body)]

    return evaluate


def _same(spark: Any, duckdb: Any) -> bool:
    if isinstance(spark, int | float) and isinstance(duckdb, int | float):
        return math.isclose(spark, duckdb, rel_tol=1e-12, abs_tol=1e-12)
    return spark == duckdb


@pytest.mark.parametrize("expression", EXPRESSIONS + [
    pytest.param(e, marks=pytest.mark.xfail(reason=reason, strict=True)) for e, reason in KNOWN_DIFFERENCES.items()])
def test_spark_and_duckdb_compute_the_same_values(expression: str, on_spark: Callable[[str], list[Any]],
                                                  on_duckdb: Callable[[str], list[Any]]) -> None:
    spark, duckdb = on_spark(expression), on_duckdb(expression)
    assert all(_same(s, d) for s, d in zip(spark, duckdb, strict=True)), f"Spark {spark} != DuckDB {duckdb}"
