"""The one Druid expression function table, read by both engines: every function it holds renders for queries
(Druid SQL, which the broker runs on DuckDB) and for ingestion (Spark SQL), so neither side can fall behind."""

from __future__ import annotations

import pytest
from sqlglot import exp

from sluice.expressions import supported_functions, to_sql
from sluice.spec.expressions import compile_expression

#: one call of each function (a new function in `sluice.expressions` needs its row here)
CALLS = {
    "abs": "abs(n)", "ceil": "ceil(n)", "floor": "floor(n)", "exp": "exp(n)", "log": "log(n)", "log10": "log10(n)",
    "sqrt": "sqrt(n)", "round": "round(n, 1)", "pow": "pow(n, 2)", "greatest": "greatest(n, 1, 2)",
    "least": "least(n, 1)", "div": "div(n, 2)", "concat": "concat(s, '-', n)", "upper": "upper(s)",
    "lower": "lower(s)", "trim": "trim(s)", "ltrim": "ltrim(s, 'x')", "rtrim": "rtrim(s)", "reverse": "reverse(s)",
    "replace": "replace(s, 'a', 'b')", "left": "left(s, 2)", "right": "right(s, 2)", "lpad": "lpad(s, 5, '*')",
    "rpad": "rpad(s, 5, '*')", "strlen": "strlen(s)", "substring": "substring(s, 0, 2)",
    "strpos": "strpos(s, 'a', 1)", "contains_string": "contains_string(s, 'a')",
    "icontains_string": "icontains_string(s, 'A')", "like": "like(s, 'a%')", "regexp_like": "regexp_like(s, '^a')",
    "regexp_extract": "regexp_extract(s, 'a(.)', 1)", "nvl": "nvl(s, 'none')", "isnull": "isnull(s)",
    "notnull": "notnull(s)", "if": "if(n > 1, 'a', 'b')", "case_searched": "case_searched(n > 1, 'a', 'b')",
    "case_simple": "case_simple(s, 'a', 1, 0)", "cast": "cast(s, 'LONG')", "timestamp": "timestamp(s)",
    "timestamp_parse": "timestamp_parse(s, 'yyyy-MM-dd', 'Asia/Tokyo')",
    "timestamp_floor": "timestamp_floor(__time, 'P1M', null, 'Europe/Paris')",
    "timestamp_ceil": "timestamp_ceil(__time, 'PT6H')", "timestamp_shift": "timestamp_shift(__time, 'P1D', n)",
    "timestamp_extract": "timestamp_extract(__time, 'DOW')", "timestamp_format": "timestamp_format(__time, 'yyyy')",
    "lookup": "lookup(s, 'names', 'none')",
}


def test_every_function_has_a_call_here() -> None:
    assert sorted(CALLS) == supported_functions()


@pytest.mark.parametrize("function", sorted(CALLS))
def test_every_function_runs_on_both_engines(function: str) -> None:
    call = CALLS[function]
    assert to_sql(call, lambda name: exp.column(name, quoted=True)).sql(dialect="druid")
    assert compile_expression(call).sql


def test_lookup_at_ingestion_writes_the_lookups_map_into_the_spark_sql() -> None:
    maps = {"names": {"a": "Alpha", "b": None}}
    assert compile_expression("lookup(s, 'names')", maps.__getitem__).sql == (
        "CAST(MAP('a', 'Alpha', 'b', NULL) AS MAP<STRING, STRING>)[CAST(`s` AS STRING)]")
    assert compile_expression("lookup(n, 'names', 'none')", maps.__getitem__).sql == (
        "COALESCE(CAST(MAP('a', 'Alpha', 'b', NULL) AS MAP<STRING, STRING>)[CAST(`n` AS STRING)], 'none')")
    with pytest.raises(ValueError, match=r"lookup \[other\], which does not exist"):
        compile_expression("lookup(s, 'other')", maps.__getitem__)
    with pytest.raises(ValueError, match="the lookup name as a string literal"):
        compile_expression("lookup(s, s)", maps.__getitem__)
