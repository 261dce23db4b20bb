"""Druid expressions and filters in -> Spark SQL text out (no Spark needed to read them)."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from sluice.spec.expressions import compile_expression
from sluice.spec.filters import DimFilter

EXPRESSIONS = [
    # arithmetic and precedence
    ("a + b * c", "(`a` + (`b` * `c`))"),
    ("(a + b) * c", "(((`a` + `b`)) * `c`)"),
    ("a - b - c", "((`a` - `b`) - `c`)"),  # left-associative
    ("a / b / c", "((`a` / `b`) / `c`)"),
    ("a % 2", "(`a` % 2)"),
    ("a * b ^ c", "(`a` * POWER(`b`, `c`))"),  # ^ binds tighter than *
    ("a ^ b * c", "(POWER(`a`, `b`) * `c`)"),
    ("2 ^ 3 ^ 2", "POWER(2, POWER(3, 2))"),  # ^ is right-associative: 2^9, not 8^2
    ("a ^ b ^ c ^ d", "POWER(`a`, POWER(`b`, POWER(`c`, `d`)))"),
    ("-a ^ 2", "POWER(-`a`, 2)"),  # Druid's unary minus binds tighter than ^
    ("1 - -2", "(1 - -2)"),
    ("- - a", "- -`a`"),
    # comparison and logic: Druid's spelling -> Spark's, and as values they are Druid's 1/0
    ("a == 1", "CAST(`a` = 1 AS BIGINT)"),
    ("a != 'x'", "CAST(`a` <> 'x' AS BIGINT)"),
    ("a < 1 || a >= 10", "CAST((`a` < 1 OR `a` >= 10) AS BIGINT)"),
    ("a <= b && a > c", "CAST((`a` <= `b` AND `a` > `c`) AS BIGINT)"),
    ("a + 1 == b * 2", "CAST((`a` + 1) = (`b` * 2) AS BIGINT)"),  # comparison binds looser than arithmetic
    ("!a", "CAST(NOT (CAST(`a` AS DOUBLE) > 0) AS BIGINT)"),
    ("!!a", "CAST(NOT (NOT (CAST(`a` AS DOUBLE) > 0)) AS BIGINT)"),
    ("!(a == 1)", "CAST(NOT (`a` = 1) AS BIGINT)"),
    ("a == 1 && !b", "CAST((`a` = 1 AND NOT (CAST(`b` AS DOUBLE) > 0)) AS BIGINT)"),
    # literals and identifiers
    ("42", "42"),
    ("1.5e3", "1.5e3"),
    ("0.25", "0.25"),
    ("null", "NULL"),
    ("'San Serriffe'", "'San Serriffe'"),
    ("'it\\'s'", "'it\\'s'"),  # Druid 'it\'s' -> Spark 'it\'s'
    ("'say \"hi\"'", "'say \"hi\"'"),
    ("\"my col\" + 1", "(`my col` + 1)"),
    ("\"a`b\"", "`a``b`"),  # backticks inside names are doubled for Spark
    ("$x", "`$x`"),
    # __time is the row timestamp as epoch millis
    ("__time", "UNIX_MILLIS(`__time`)"),
    ("__time + 3600000", "(UNIX_MILLIS(`__time`) + 3600000)"),
    # functions
    ("upper(country)", "UPPER(`country`)"),
    ("concat(a, '-', b)", "CONCAT(`a`, '-', `b`)"),
    ("strlen(page)", "LENGTH(`page`)"),
    ("log(x)", "LN(`x`)"),
    ("contains_string(page, 'wiki')", "CAST(LOCATE('wiki', `page`) > 0 AS BIGINT)"),
    ("nvl(a, 0)", "COALESCE(`a`, 0)"),
    ("if(a > 1, 'x', 'y')", "CASE WHEN `a` > 1 THEN 'x' ELSE 'y' END"),
    ("substring(page, 0, 3)",  # Druid is 0-based, Spark 1-based; past the end is NULL (Spark's is '')
     "CASE WHEN 0 + 1 - 1 < LENGTH(`page`) THEN SUBSTRING(`page`, 0 + 1, 3) END"),
    ("substring(page, 2, -1)", "CASE WHEN 2 + 1 - 1 < LENGTH(`page`) THEN SUBSTRING(`page`, 2 + 1) END"),  # to the end
    ("strpos(page, 'a')", "LOCATE('a', `page`) - 1"),  # 0-based, -1 when absent
    ("strpos(page, 'a', 2)", "LOCATE('a', `page`, 2 + 1) - 1"),  # from a 0-based index
    ("like(page, 'Wiki%')", "CAST(`page` LIKE 'Wiki%' AS BIGINT)"),
    ("isnull(a)", "CAST(`a` IS NULL AS BIGINT)"),
    ("notnull(a)", "CAST(NOT `a` IS NULL AS BIGINT)"),
    ("UPPER(a)", "UPPER(`a`)"),  # function names are case-insensitive
    ("cast(a, 'LONG')", "CAST(`a` AS BIGINT)"),
    ("cast(a, 'double')", "CAST(`a` AS DOUBLE)"),
    ("cast(a, 'FLOAT')", "CAST(`a` AS FLOAT)"),
    ("cast(n, 'STRING')", "CAST(`n` AS STRING)"),
    ("case_searched(a > 10, 'big', a > 0, 'small', 'none')",
     "CASE WHEN `a` > 10 THEN 'big' WHEN `a` > 0 THEN 'small' ELSE 'none' END"),
    ("case_searched(a > 10, 'big')", "CASE WHEN `a` > 10 THEN 'big' END"),
    ("case_simple(code, 1, 'one', 2, 'two', 'many')",
     "CASE WHEN `code` = 1 THEN 'one' WHEN `code` = 2 THEN 'two' ELSE 'many' END"),
    ("case_simple(code, 1, 'one')", "CASE WHEN `code` = 1 THEN 'one' END"),
    ("  upper( a )  ", "UPPER(`a`)"),
]


@pytest.mark.parametrize("druid, spark", EXPRESSIONS, ids=[d for d, _ in EXPRESSIONS])
def test_expression_to_spark_sql(druid, spark):
    assert compile_expression(druid).sql == spark


@pytest.mark.parametrize("druid, columns", [
    ("a + b * c", {"a", "b", "c"}),
    ("upper(country)", {"country"}),
    ("\"my col\" + other", {"my col", "other"}),
    ("__time + 1", {"__time"}),
    ("concat('x', 'y')", set()),
    ("case_simple(code, 1, label, fallback)", {"code", "label", "fallback"}),
    ("cast(a, 'LONG')", {"a"}),
])
def test_expression_reports_the_columns_it_reads(druid, columns):
    assert compile_expression(druid).columns == columns


@pytest.mark.parametrize("druid, message", [
    ("a +", "expression 'a +' ends unexpectedly"),
    ("", "ends unexpectedly"),
    ("(a", "ends unexpectedly"),
    ("a)", "unexpected ')'"),
    ("a b", "unexpected 'b'"),
    ("#", "cannot parse expression '#' at position 0"),
    ("a ? b", "cannot parse expression 'a ? b' at position 1"),
    ("'unterminated", "cannot parse expression"),
    ("array_length(a)", "function array_length() is not supported; supported: abs,"),
    ("foo(a)", "function foo() is not supported"),
    ("cast(a, 'DATE')", "cast to DATE is not supported; expected one of LONG, DOUBLE, FLOAT, STRING"),
    ("cast(a)", "cast() takes 2 arguments, got 1"),
    ("substring(a, 1)", "substring() takes 3 arguments, got 2"),
    ("isnull(a, b)", "isnull() takes 1 arguments, got 2"),
    # a function Spark cannot run with Druid's meaning is refused naming it
    ("timestamp_floor(__time, period)", "timestamp_floor() at ingestion needs the period as a string literal, "
                                        "got \"period\""),
    ("timestamp_floor(__time, 'P1M1D')", "timestamp_floor() at ingestion: period P1M1D mixes months"),
    ("timestamp_floor(__time, 'PT1H', 0, 'Asia/Tokyo')", "takes an origin only as epoch millis, without a time zone"),
    ("timestamp_extract(__time, 'CENTURY')", "timestamp_extract() at ingestion: unit 'CENTURY' is not supported"),
    ("timestamp_format(__time, null, 'Asia/Tokyo')", "timestamp_format() with a time zone needs a format pattern"),
    ("timestamp_shift(__time, 'P1X', 1)", "timestamp_shift(): 'P1X' is not an ISO-8601 period"),
])
def test_unsupported_or_malformed_expressions_are_errors(druid, message):
    with pytest.raises(ValueError) as raised:
        compile_expression(druid)
    assert message in str(raised.value)


@pytest.mark.parametrize("druid, spark", [
    ("a > 0 || b > 0 && c > 0", "((`a` > 0 OR `b` > 0) AND `c` > 0)"),
    ("a > 0 && b > 0 || c > 0 && d > 0", "(((`a` > 0 AND `b` > 0) OR `c` > 0) AND `d` > 0)"),
])
def test_and_or_share_one_precedence_level_as_in_druid(druid, spark):
    assert compile_expression(druid).condition == spark


@pytest.mark.parametrize("druid, condition", [
    ("a", "CAST(`a` AS DOUBLE) > 0"),  # a number is true when it is greater than 0
    ("a == 1", "`a` = 1"),
    ("!isnull(a) && a > 1", "(NOT (`a` IS NULL) AND `a` > 1)"),
    ("a > 0 || b", "(`a` > 0 OR CAST(`b` AS DOUBLE) > 0)"),
])
def test_as_a_filter_the_expression_is_a_spark_condition(druid, condition):
    assert compile_expression(druid).condition == condition


TIME_FUNCTIONS = [
    ("timestamp_floor(__time, 'PT1H')",
     "UNIX_MILLIS(TIMESTAMP_MILLIS(FLOOR(UNIX_MILLIS(`__time`) / 3600000) * 3600000))"),
    ("timestamp_floor(__time, 'P1M')", "UNIX_MILLIS(DATE_TRUNC('MONTH', `__time`))"),
    ("timestamp_floor(__time, 'P1D', null, 'Asia/Tokyo')",
     "UNIX_MILLIS(TO_UTC_TIMESTAMP(TIMESTAMP_MILLIS(FLOOR(UNIX_MILLIS(FROM_UTC_TIMESTAMP(CAST(`__time` AS TIMESTAMP), "
     "'Asia/Tokyo')) / 86400000) * 86400000), 'Asia/Tokyo'))"),
    ("timestamp_floor(t, 'PT1H', 1800000)",
     "UNIX_MILLIS(TIMESTAMP_MILLIS(1800000 + FLOOR((UNIX_MILLIS(TIMESTAMP_MILLIS(CAST(`t` AS BIGINT))) - 1800000) "
     "/ 3600000) * 3600000))"),
    ("timestamp_shift(__time, 'P1M', 2)",
     "UNIX_MILLIS(`__time` + MAKE_INTERVAL(0, 1 * (2), 0, 0 * (2), 0, 0, 0 * (2)))"),
    ("timestamp_extract(__time, 'DOW')", "WEEKDAY(`__time`) + 1"),
    ("timestamp_extract(__time, 'HOUR', 'America/New_York')",
     "HOUR(FROM_UTC_TIMESTAMP(`__time`, 'America/New_York'))"),
    ("timestamp_format(__time, 'yyyy-MM')", "DATE_FORMAT(`__time`, 'yyyy-MM')"),
    ("timestamp_format(__time)", "DATE_FORMAT(`__time`, 'yyyy-MM-dd\\'T\\'HH:mm:ss.SSS\\'Z\\'')"),
    ("timestamp_parse(s, 'yyyy-MM-dd')", "UNIX_MILLIS(TRY_TO_TIMESTAMP(`s`, 'yyyy-MM-dd'))"),
    ("timestamp(s)", "UNIX_MILLIS(CAST(`s` AS TIMESTAMP))"),
    ("div(a, 2)", "`a` DIV 2"),
    ("regexp_extract(a, 'x(.)')", "CASE WHEN `a` RLIKE 'x(.)' THEN REGEXP_EXTRACT(`a`, 'x(.)', 0) END"),
    ("regexp_like(a, '^x')", "CAST(`a` RLIKE '^x' AS BIGINT)"),
    ("icontains_string(a, 'X')", "CAST(LOCATE(LOWER('X'), LOWER(`a`)) > 0 AS BIGINT)"),
]


@pytest.mark.parametrize("druid, spark", TIME_FUNCTIONS, ids=[d for d, _ in TIME_FUNCTIONS])
def test_druid_sql_functions_become_spark_sql(druid, spark):
    assert compile_expression(druid).sql == spark


@pytest.mark.parametrize("druid, spark", [
    ("'C:\\\\temp'", "'C:\\\\temp'"),  # Druid 'C:\\temp' is C:\temp; so is Spark 'C:\\temp'
    ("\"say\\\"when\"", "`say\"when`"),
])
def test_escapes_mean_what_druid_says(druid, spark):
    assert compile_expression(druid).sql == spark


@pytest.mark.parametrize("with_extra, without", [
    ("strpos(page, 'a', 2)", "strpos(page, 'a')"),
    ("like(page, 'a!%%', '!')", "like(page, 'a!%%')"),
])
def test_an_optional_argument_is_not_silently_dropped(with_extra, without):
    try:
        sql = compile_expression(with_extra).sql
    except ValueError:
        return  # rejecting it is fine too
    assert sql != compile_expression(without).sql


# ---------------------------------------------------------------------------------------------------------------
# filters

FILTER = TypeAdapter(DimFilter)

FILTERS = [
    ({"type": "selector", "dimension": "country", "value": "San Serriffe"},
     "(CAST(`country` AS STRING) IN ('San Serriffe'))"),
    ({"type": "selector", "dimension": "n", "value": 5},  # compared as a string, so it matches a long 5
     "(CAST(`n` AS STRING) IN ('5'))"),
    ({"type": "selector", "dimension": "n", "value": 1.5}, "(CAST(`n` AS STRING) IN ('1.5'))"),
    ({"type": "selector", "dimension": "c", "value": None}, "(`c` IS NULL)"),
    ({"type": "selector", "dimension": "c"}, "(`c` IS NULL)"),
    ({"type": "selector", "dimension": "c", "value": "it's"}, "(CAST(`c` AS STRING) IN ('it\\'s'))"),
    ({"type": "selector", "dimension": "odd`name", "value": "x"}, "(CAST(`odd``name` AS STRING) IN ('x'))"),
    ({"type": "in", "dimension": "c", "values": ["a", "b"]}, "(CAST(`c` AS STRING) IN ('a', 'b'))"),
    ({"type": "in", "dimension": "c", "values": ["a", None]}, "(CAST(`c` AS STRING) IN ('a') OR `c` IS NULL)"),
    ({"type": "in", "dimension": "c", "values": [None]}, "(`c` IS NULL)"),
    ({"type": "in", "dimension": "c", "values": []}, "FALSE"),
    ({"type": "bound", "dimension": "n", "lower": "10", "upper": "20", "ordering": "numeric"},
     "(CAST(`n` AS DOUBLE) >= 10.0 AND CAST(`n` AS DOUBLE) <= 20.0)"),
    ({"type": "bound", "dimension": "n", "lower": 10, "lowerStrict": True, "ordering": "numeric"},
     "(CAST(`n` AS DOUBLE) > 10.0)"),
    ({"type": "bound", "dimension": "n", "upper": "2.5", "upperStrict": True, "ordering": "numeric"},
     "(CAST(`n` AS DOUBLE) < 2.5)"),
    ({"type": "bound", "dimension": "s", "lower": "a", "upper": "m", "upperStrict": True},
     "(CAST(`s` AS STRING) >= 'a' AND CAST(`s` AS STRING) < 'm')"),
    ({"type": "and", "fields": [{"type": "selector", "dimension": "a", "value": "1"},
                                {"type": "not", "field": {"type": "selector", "dimension": "b", "value": "2"}}]},
     "((CAST(`a` AS STRING) IN ('1')) AND (NOT (CAST(`b` AS STRING) IN ('2'))))"),
    ({"type": "or", "fields": [{"type": "selector", "dimension": "a", "value": "1"},
                               {"type": "in", "dimension": "b", "values": ["x"]}]},
     "((CAST(`a` AS STRING) IN ('1')) OR (CAST(`b` AS STRING) IN ('x')))"),
    ({"type": "not", "field": {"type": "or", "fields": [{"type": "selector", "dimension": "a", "value": "1"}]}},
     "(NOT ((CAST(`a` AS STRING) IN ('1'))))"),
]


@pytest.mark.parametrize("druid, spark", FILTERS, ids=[f"{f['type']}-{i}" for i, (f, _) in enumerate(FILTERS)])
def test_filter_to_spark_sql(druid, spark):
    assert FILTER.validate_python(druid).to_spark_sql() == spark


def test_filter_reports_the_dimensions_it_reads():
    nested = {"type": "and", "fields": [
        {"type": "selector", "dimension": "a", "value": "1"},
        {"type": "or", "fields": [{"type": "in", "dimension": "b", "values": ["x"]},
                                  {"type": "not", "field": {"type": "bound", "dimension": "c", "lower": "0"}}]},
    ]}
    assert FILTER.validate_python(nested).columns() == {"a", "b", "c"}


@pytest.mark.parametrize("druid, message", [
    ({"type": "regex", "dimension": "a", "pattern": "^x"}, "'regex'"),
    ({"type": "like", "dimension": "a", "pattern": "x%"}, "'like'"),
    ({"type": "bound", "dimension": "n"}, "a bound filter needs lower, upper or both"),
    ({"type": "bound", "dimension": "n", "lower": "ten", "ordering": "numeric"}, "could not convert string to float"),
    ({"type": "bound", "dimension": "n", "lower": "1", "ordering": "alphanumeric"}, "'lexicographic' or 'numeric'"),
    ({"type": "and", "fields": []}, "at least 1 item"),
    ({"type": "selector", "dimension": "a", "value": "1", "extractionFn": {"type": "upper"}}, "Extra inputs"),
    ({"type": "in", "dimension": "a"}, "Field required"),
])
def test_unsupported_or_malformed_filters_are_errors(druid, message):
    with pytest.raises(ValidationError) as raised:
        FILTER.validate_python(druid)
    assert message in str(raised.value)
