"""The dataSchema compiled to Spark SQL: spec JSON in -> the Spark SQL text a task runs out, without Spark.

What the SQL does on Spark is tested in tests/integration/test_pipeline.py; here every timestampSpec format,
every aggregator (its ingest and its combine form) and every dimension type is pinned to its text, and the
combine rule is checked on DuckDB: rolling up persists and merging them equals one rollup of every row.
"""

from __future__ import annotations

from typing import Any, get_args

import duckdb
import pytest
import sqlglot

from sluice.spec.data_schema import AggregatorType, DataSchema, TimestampSpec
from sluice.task.compact_task import combining_aggregator
from sluice.task.ingest_plan import (
    STRING_ARRAY_SQL,
    IngestPlan,
    compile_plan,
    joda_to_spark_pattern,
    multi_value_sql,
    timestamp_sql,
)


def plan(**data_schema: Any) -> IngestPlan:
    """The plan of `{dataSource: events, timestampSpec: {column: ts}, dimensions: [page]}`, these fields replaced."""
    spec = {"dataSource": "events", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": ["page"]},
            **data_schema}
    return compile_plan(DataSchema.model_validate(spec))


def parses_as_spark_sql(sql: str) -> bool:
    sqlglot.parse_one(sql, read="spark")
    return True


# ---------------------------------------------------------------------------------------------------------------
# timestampSpec: raw JSON text -> TIMESTAMP, NULL when it does not parse (an unparseable row)

AUTO = ("CASE WHEN substr(`ts`, 5, 1) != '-' AND `ts` RLIKE '^-?[0-9]+$' THEN timestamp_millis(CAST(`ts` AS BIGINT)) "
        "ELSE CAST(`ts` AS TIMESTAMP) END")

TIMESTAMPS = [
    ({"column": "ts"}, AUTO),  # Druid's default format is auto
    ({"column": "ts", "format": "auto"}, AUTO),
    ({"column": "ts", "format": "iso"}, "CAST(`ts` AS TIMESTAMP)"),
    ({"column": "ts", "format": "ISO"}, "CAST(`ts` AS TIMESTAMP)"),  # format names ignore case, as in Druid
    ({"column": "ts", "format": "posix"}, "timestamp_seconds(CAST(`ts` AS DECIMAL(20, 6)))"),
    ({"column": "ts", "format": "millis"}, "timestamp_millis(CAST(`ts` AS BIGINT))"),
    ({"column": "ts", "format": "micro"}, "timestamp_micros(CAST(`ts` AS BIGINT))"),
    ({"column": "ts", "format": "nano"}, "timestamp_micros(CAST(`ts` AS BIGINT) DIV 1000)"),
    ({"column": "ts", "format": "yyyy-MM-dd HH:mm:ss"}, "to_timestamp(`ts`, 'yyyy-MM-dd HH:mm:ss')"),
    ({"column": "ts", "format": "yyyy-MM-dd'T'HH:mm:ss.SSSZZ"},
     r"to_timestamp(`ts`, 'yyyy-MM-dd\'T\'HH:mm:ss.SSSXXX')"),
    ({"column": "ts", "format": "YYYY-MM-dd HH:mm:ss ZZZ"}, "to_timestamp(`ts`, 'yyyy-MM-dd HH:mm:ss VV')"),
    ({"column": "event time", "format": "millis"}, "timestamp_millis(CAST(`event time` AS BIGINT))"),
    ({"column": "odd`name", "format": "iso"}, "CAST(`odd``name` AS TIMESTAMP)"),
    ({"column": "ts", "format": "iso", "missingValue": "2024-01-01T00:00:00Z"},
     "CASE WHEN `ts` IS NULL THEN CAST('2024-01-01T00:00:00Z' AS TIMESTAMP) ELSE CAST(`ts` AS TIMESTAMP) END"),
    ({"column": "ts", "format": "millis", "missingValue": "2024-01-01T02:00:00.250+02:00"},
     "CASE WHEN `ts` IS NULL THEN CAST('2024-01-01T02:00:00.250000+02:00' AS TIMESTAMP) "
     "ELSE timestamp_millis(CAST(`ts` AS BIGINT)) END"),
    ({"column": "ts", "format": "auto", "missingValue": "2024-01-01"},  # no zone: UTC, as Druid reads it
     f"CASE WHEN `ts` IS NULL THEN CAST('2024-01-01T00:00:00' AS TIMESTAMP) ELSE {AUTO} END"),
]


@pytest.mark.parametrize("timestamp_spec, sql", TIMESTAMPS, ids=[str(spec) for spec, _ in TIMESTAMPS])
def test_timestamp_spec_to_spark_sql(timestamp_spec, sql):
    assert timestamp_sql(TimestampSpec.model_validate(timestamp_spec)) == sql
    assert parses_as_spark_sql(sql)


def test_the_plan_parses_the_timestamp_spec_it_was_given():
    compiled = plan(timestampSpec={"column": "time", "format": "posix"})
    assert compiled.time_sql == "timestamp_seconds(CAST(`time` AS DECIMAL(20, 6)))"
    assert "`time` STRING" in compiled.json_schema_ddl  # the timestamp column is read from the JSON


JODA = [
    ("yyyy-MM-dd HH:mm:ss", "yyyy-MM-dd HH:mm:ss"),
    ("dd/MM/yyyy hh:mm:ss.SSS a", "dd/MM/yyyy hh:mm:ss.SSS a"),
    ("yyyyMMdd'T'HHmmss", "yyyyMMdd'T'HHmmss"),
    # Joda's zone: Z reads +0800 or Z, ZZ +08:00 or Z, ZZZ and longer a zone id such as Europe/Paris
    ("yyyy-MM-dd HH:mm:ss Z", "yyyy-MM-dd HH:mm:ss XX"),
    ("yyyy-MM-dd'T'HH:mm:ssZZ", "yyyy-MM-dd'T'HH:mm:ssXXX"),
    ("yyyy-MM-dd HH:mm:ss ZZZ", "yyyy-MM-dd HH:mm:ss VV"),
    ("yyyy-MM-dd HH:mm:ss ZZZZ", "yyyy-MM-dd HH:mm:ss VV"),
    ("YYYY-MM-dd", "yyyy-MM-dd"),  # Joda's Y is the year of era; Spark's Y is a week-based year it does not parse
    ("yyyy-MM-dd 'ZZ at' HH 'o''clock'", "yyyy-MM-dd 'ZZ at' HH 'o''clock'"),  # quoted text stays literal
]


@pytest.mark.parametrize("joda, spark", JODA, ids=[j for j, _ in JODA])
def test_joda_pattern_to_spark_pattern(joda, spark):
    assert joda_to_spark_pattern(joda) == spark


# ---------------------------------------------------------------------------------------------------------------
# metricsSpec: typed input per row, the first rollup, and the combine rule of rolled-up rows

AGGREGATORS = [
    # type, typed input of one row, first rollup (typed rows), combine (rolled-up rows of persists and segments)
    ("count", "CAST(1 AS BIGINT)", "CAST(sum(`__in_m`) AS BIGINT) AS `m`", "CAST(sum(`m`) AS BIGINT) AS `m`"),
    ("longSum", "CAST(`v` AS BIGINT)", "CAST(sum(`__in_m`) AS BIGINT) AS `m`", "CAST(sum(`m`) AS BIGINT) AS `m`"),
    ("doubleSum", "CAST(`v` AS DOUBLE)", "CAST(sum(`__in_m`) AS DOUBLE) AS `m`", "CAST(sum(`m`) AS DOUBLE) AS `m`"),
    ("floatSum", "CAST(`v` AS FLOAT)", "CAST(sum(`__in_m`) AS FLOAT) AS `m`", "CAST(sum(`m`) AS FLOAT) AS `m`"),
    ("longMin", "CAST(`v` AS BIGINT)", "CAST(min(`__in_m`) AS BIGINT) AS `m`", "CAST(min(`m`) AS BIGINT) AS `m`"),
    ("longMax", "CAST(`v` AS BIGINT)", "CAST(max(`__in_m`) AS BIGINT) AS `m`", "CAST(max(`m`) AS BIGINT) AS `m`"),
    ("doubleMin", "CAST(`v` AS DOUBLE)", "CAST(min(`__in_m`) AS DOUBLE) AS `m`", "CAST(min(`m`) AS DOUBLE) AS `m`"),
    ("doubleMax", "CAST(`v` AS DOUBLE)", "CAST(max(`__in_m`) AS DOUBLE) AS `m`", "CAST(max(`m`) AS DOUBLE) AS `m`"),
    ("floatMin", "CAST(`v` AS FLOAT)", "CAST(min(`__in_m`) AS FLOAT) AS `m`", "CAST(min(`m`) AS FLOAT) AS `m`"),
    ("floatMax", "CAST(`v` AS FLOAT)", "CAST(max(`__in_m`) AS FLOAT) AS `m`", "CAST(max(`m`) AS FLOAT) AS `m`"),
]


def test_every_aggregator_type_of_the_spec_is_in_the_table():
    assert {kind for kind, *_ in AGGREGATORS} == set(get_args(AggregatorType))


@pytest.mark.parametrize("kind, typed, first, combine", AGGREGATORS, ids=[a[0] for a in AGGREGATORS])
def test_aggregator_to_spark_sql(kind, typed, first, combine):
    metric = {"type": kind, "name": "m"} if kind == "count" else {"type": kind, "name": "m", "fieldName": "v"}
    compiled = plan(metricsSpec=[metric])
    assert compiled.typed_columns["__in_m"] == typed
    assert compiled.rollup_aggregations(False) == [first]
    assert compiled.rollup_aggregations(True) == [combine]
    assert compiled.metrics == ["m"]
    # a value that does not fit the metric's type is a processedWithError row; count reads no field
    assert compiled.parse_checks == (() if kind == "count" else (("v", typed),))
    assert all(parses_as_spark_sql(sql) for sql in (typed, first, combine))


def test_aggregators_keep_the_spec_order_and_quote_their_names():
    compiled = plan(metricsSpec=[{"type": "count", "name": "rows"},
                                 {"type": "longSum", "name": "bytes.in", "fieldName": "in"},
                                 {"type": "doubleMax", "name": "peak", "fieldName": "in"}])
    assert compiled.rollup_aggregations(True) == [
        "CAST(sum(`rows`) AS BIGINT) AS `rows`",
        "CAST(sum(`bytes.in`) AS BIGINT) AS `bytes.in`",  # a dot is part of a Druid name, not struct access
        "CAST(max(`peak`) AS DOUBLE) AS `peak`",
    ]
    assert "`in` STRING" in compiled.json_schema_ddl and "`bytes.in` STRING" not in compiled.json_schema_ddl


EVERY_AGGREGATOR = [{"type": "count", "name": "count"}] + [
    {"type": kind, "name": kind, "fieldName": "v"} for kind, *_ in AGGREGATORS if kind != "count"]

#: raw (page, v) rows; nulls and values that are not numbers are ignored by every aggregator but count
ROWS = [("a", "1"), ("a", None), ("b", "5"), ("a", "-3"), ("b", "x"), ("a", "7"), ("c", None)]
#: per page: count, sum, min, max of the numeric values
EXPECTED = {"a": (4, 5, -3, 7), "b": (2, 5, 5, 5), "c": (1, None, None, None)}


def rollup(compiled: IngestPlan, table: str, combining: bool) -> str:
    """The plan's aggregations, transpiled from Spark SQL to DuckDB, as a query over `table`."""
    aggregations = ", ".join(sqlglot.transpile(a, read="spark", write="duckdb")[0]
                             for a in compiled.rollup_aggregations(combining))
    return f"SELECT page, {aggregations} FROM {table} GROUP BY page"


def typed(con: duckdb.DuckDBPyConnection, compiled: IngestPlan, rows: list[tuple[str, str | None]]) -> str:
    """Raw rows loaded into `raw`, and the plan's typed columns over them as a subquery."""
    con.execute("CREATE OR REPLACE TEMP TABLE raw (page VARCHAR, v VARCHAR)")
    con.executemany("INSERT INTO raw VALUES (?, ?)", rows)
    # a string dimension as it is: its multi-value parse is Spark's from_json (tests/integration/test_multi_value.py)
    columns = ", ".join(f'"{name}"' if name in compiled.string_dimensions else
                        f"{sqlglot.transpile(sql, read='spark', write='duckdb')[0]} AS \"{name}\""
                        for name, sql in compiled.typed_columns.items())
    return f"(SELECT {columns} FROM raw)"


@pytest.mark.parametrize("split", [1, 3, 5], ids=lambda n: f"persists-of-{n}-and-{len(ROWS) - n}-rows")
def test_merging_rolled_up_persists_equals_one_rollup_of_every_row(split):
    """The combine rule is what makes persists and segments mergeable: count combines by sum, not by count."""
    compiled = plan(metricsSpec=EVERY_AGGREGATOR)
    con = duckdb.connect()
    con.execute(f"CREATE TEMP TABLE first_persist AS {rollup(compiled, typed(con, compiled, ROWS[:split]), False)}")
    con.execute(f"CREATE TEMP TABLE second_persist AS {rollup(compiled, typed(con, compiled, ROWS[split:]), False)}")
    merged = con.execute(rollup(compiled, "(SELECT * FROM first_persist UNION ALL SELECT * FROM second_persist)",
                                True) + " ORDER BY page").fetchall()
    at_once = con.execute(rollup(compiled, typed(con, compiled, ROWS), False) + " ORDER BY page").fetchall()
    assert merged == at_once
    names = ["page"] + compiled.metrics
    for row in merged:
        values = dict(zip(names, row))
        count, total, low, high = EXPECTED[values["page"]]
        assert values["count"] == count
        assert [values[k] for k in ("longSum", "doubleSum", "floatSum")] == [total] * 3
        assert [values[k] for k in ("longMin", "doubleMin", "floatMin")] == [low] * 3
        assert [values[k] for k in ("longMax", "doubleMax", "floatMax")] == [high] * 3


# ---------------------------------------------------------------------------------------------------------------
# dimensionsSpec: typed columns, and which raw values are checked for parse errors

def test_typed_dimension_columns():
    compiled = plan(dimensionsSpec={"dimensions": ["page", {"name": "views", "type": "long"},
                                                   {"name": "ratio", "type": "float"},
                                                   {"name": "score", "type": "double"},
                                                   {"name": "user", "type": "string"}]})
    assert compiled.typed_columns == {
        "page": multi_value_sql("`page`", "SORTED_ARRAY", "`__values_page`"),
        "views": "CAST(`views` AS BIGINT)",
        "ratio": "CAST(`ratio` AS FLOAT)",
        "score": "CAST(`score` AS DOUBLE)",
        "user": multi_value_sql("`user`", "SORTED_ARRAY", "`__values_user`"),
    }
    # a string's JSON array is parsed once, into a column of its own, and only when the text starts with `[`
    assert compiled.value_arrays == {
        f"__values_{name}": f"CASE WHEN startswith(`{name}`, '[') THEN {STRING_ARRAY_SQL.format(c=f'`{name}`')} END"
        for name in ("page", "user")}
    assert compiled.string_dimensions == ("page", "user")
    # a string takes any value; a number that does not parse is ingested as null and counted processedWithError
    assert compiled.parse_checks == (("views", "CAST(`views` AS BIGINT)"), ("ratio", "CAST(`ratio` AS FLOAT)"),
                                     ("score", "CAST(`score` AS DOUBLE)"))
    assert compiled.dimensions == ["page", "views", "ratio", "score", "user"]
    assert compiled.json_schema_ddl == ("`page` STRING, `ratio` STRING, `score` STRING, `ts` STRING, `user` STRING, "
                                        "`views` STRING")
    assert compiled.corrupt_column is None  # malformed JSON parses to no timestamp: unparseable without it


def test_a_missing_value_for_the_timestamp_needs_the_corrupt_record_column():
    """With timestampSpec.missingValue a record with none of the fields makes a row, so malformed JSON must be told
    apart by Spark's corrupt-record column."""
    compiled = plan(timestampSpec={"column": "ts", "missingValue": "2024-01-01T00:00:00Z"})
    assert compiled.corrupt_column == "__corrupt" and compiled.json_schema_ddl.endswith(", `__corrupt` STRING")


def test_dimension_exclusions_change_nothing_next_to_an_explicit_dimension_list():
    """Excluding the timestamp column or a metric's input must not stop either from being read."""
    metrics = [{"type": "count", "name": "count"}, {"type": "longSum", "name": "added", "fieldName": "added"}]
    without = plan(metricsSpec=metrics)
    excluded = plan(metricsSpec=metrics,
                    dimensionsSpec={"dimensions": ["page"], "dimensionExclusions": ["ts", "added", "count", "ip"]})
    assert excluded == without
    assert "`ts` STRING" in excluded.json_schema_ddl and "`added` STRING" in excluded.json_schema_ddl


# ---------------------------------------------------------------------------------------------------------------
# first/last pairs and sketches: Spark-only functions, so pinned as text here and run in test_ingested_metrics.py

def test_first_last_rolls_up_pairs_of_time_and_value_and_reads_a_pair_given_as_json():
    compiled = plan(metricsSpec=[{"type": "doubleLast", "name": "m", "fieldName": "v"},
                                 {"type": "stringFirst", "name": "s", "fieldName": "u", "maxStringBytes": 8}])
    assert compiled.typed_columns["__in_m"] == (
        "CASE WHEN startswith(`v`, '{\"lhs\":') THEN from_json(`v`, 'lhs BIGINT, rhs DOUBLE') "
        "ELSE named_struct('lhs', unix_millis(`__time`), 'rhs', CAST(`v` AS DOUBLE)) END")
    assert "left(CAST(`u` AS STRING), 8)" in compiled.typed_columns["__in_s"]
    assert compiled.rollup_aggregations(False) == ["max_by(`__in_m`, `__in_m`.lhs) AS `m`",
                                                   "min_by(`__in_s`, `__in_s`.lhs) AS `s`"]
    assert compiled.rollup_aggregations(True)[0] == "max_by(`m`, `m`.lhs) AS `m`"
    # a number that does not parse is processedWithError; a string always parses
    assert [raw for raw, _ in compiled.parse_checks] == ["v"]
    assert compiled.row_values() == ["`__in_m` AS `m`", "`__in_s` AS `s`"]


def test_a_time_column_other_than_the_row_time_is_read_as_epoch_millis():
    compiled = plan(metricsSpec=[{"type": "longFirst", "name": "m", "fieldName": "v", "timeColumn": "seen"}])
    assert "named_struct('lhs', CAST(`seen` AS BIGINT), 'rhs', CAST(`v` AS BIGINT))" in compiled.typed_columns["__in_m"]
    assert "`seen` STRING" in compiled.json_schema_ddl


@pytest.mark.parametrize("metric, first, combine", [
    ({"type": "HLLSketchBuild", "lgK": 14}, "named_struct('HLLSketch', hll_sketch_agg(`__in_m`, 14)) AS `m`",
     "named_struct('HLLSketch', hll_union_agg(`m`.HLLSketch, true)) AS `m`"),
    ({"type": "hyperUnique"}, "named_struct('HLLSketch', hll_sketch_agg(`__in_m`, 11)) AS `m`",
     "named_struct('HLLSketch', hll_union_agg(`m`.HLLSketch, true)) AS `m`"),
    ({"type": "HLLSketchMerge"}, "named_struct('HLLSketch', hll_union_agg(`__in_m`, true)) AS `m`",
     "named_struct('HLLSketch', hll_union_agg(`m`.HLLSketch, true)) AS `m`"),
    ({"type": "thetaSketch", "size": 1024}, "named_struct('thetaSketch', theta_sketch_agg(`__in_m`, 10)) AS `m`",
     "named_struct('thetaSketch', theta_union_agg(`m`.thetaSketch, 10)) AS `m`"),
    ({"type": "quantilesDoublesSketch", "k": 32},
     "named_struct('quantilesDoublesSketch', sluice_quantiles_sketch(collect_list(`__in_m`.value), "
     "collect_list(`__in_m`.sketch), 32)) AS `m`",
     "named_struct('quantilesDoublesSketch', sluice_quantiles_sketch(array(), collect_list(`m`.quantilesDoublesSketch), "
     "32)) AS `m`"),
], ids=lambda v: v["type"] if isinstance(v, dict) else "")
def test_sketch_aggregators_store_a_struct_named_after_the_sketch(metric, first, combine):
    compiled = plan(metricsSpec=[{**metric, "name": "m", "fieldName": "v"}])
    assert compiled.rollup_aggregations(False) == [first]
    assert compiled.rollup_aggregations(True) == [combine]
    assert compiled.row_values() is None  # one row's sketch is still an aggregation
    assert all(parses_as_spark_sql(sql) for sql in (first, combine, compiled.typed_columns["__in_m"]))


def test_sketch_inputs_are_base64_sketches_of_their_kind_or_a_processed_with_error_row():
    merge = plan(metricsSpec=[{"type": "HLLSketchMerge", "name": "m", "fieldName": "v"}])
    decoded = "try_to_binary(`v`, 'base64')"
    assert merge.typed_columns["__in_m"] == f"CASE WHEN substring({decoded}, 3, 1) = X'07' THEN {decoded} END"
    assert merge.parse_checks == (("v", merge.typed_columns["__in_m"]),)
    build = plan(metricsSpec=[{"type": "thetaSketch", "name": "m", "fieldName": "v"}])
    assert build.typed_columns["__in_m"] == "CAST(`v` AS STRING)" and build.parse_checks == ()


@pytest.mark.parametrize("written, combining", [
    ({"type": "count", "name": "n"}, {"type": "longSum", "name": "n", "fieldName": "n"}),
    ({"type": "longSum", "name": "s", "fieldName": "x"}, {"type": "longSum", "name": "s", "fieldName": "s"}),
    ({"type": "stringLast", "name": "l", "fieldName": "x", "timeColumn": "t", "maxStringBytes": 9},
     {"type": "stringLast", "name": "l", "fieldName": "l", "maxStringBytes": 9}),
    ({"type": "HLLSketchBuild", "name": "h", "fieldName": "x", "lgK": 14},
     {"type": "HLLSketchMerge", "name": "h", "fieldName": "h", "lgK": 14}),
    ({"type": "thetaSketch", "name": "t", "fieldName": "x", "size": 64},
     {"type": "thetaSketch", "name": "t", "fieldName": "t", "size": 64, "isInputThetaSketch": True}),
    ({"type": "hyperUnique", "name": "u", "fieldName": "x"},
     {"type": "hyperUnique", "name": "u", "fieldName": "u", "isInputHyperUnique": True}),
    ({"type": "quantilesDoublesSketch", "name": "q", "fieldName": "x", "k": 32},
     {"type": "quantilesDoublesSketch", "name": "q", "fieldName": "q", "k": 32}),
], ids=lambda v: v["type"] if "fieldName" not in v or v.get("fieldName") == "x" or v["type"] == "count" else "")
def test_the_combining_aggregator_reads_the_column_the_aggregator_wrote(written, combining):
    assert combining_aggregator(written) == combining
    # and it is a spec the ingestion accepts
    plan(metricsSpec=[combining])


def test_a_json_dimension_keeps_json_text_in_a_struct_the_broker_reads_as_json():
    compiled = plan(dimensionsSpec={"dimensions": ["page", {"name": "payload", "type": "json"}]})
    assert compiled.typed_columns["payload"] == (
        "CASE WHEN `payload` IS NOT NULL THEN named_struct('json', "
        "to_json(coalesce(try_parse_json(`payload`), CAST(`payload` AS VARIANT)))) END")
    assert compiled.parse_checks == ()  # any text is a JSON value: a string, when nothing else


def test_an_auto_dimension_is_text_until_its_values_type_it_at_publish():
    compiled = plan(dimensionsSpec={"dimensions": ["page", {"name": "size", "type": "auto"}]})
    assert compiled.typed_columns["size"] == "CAST(`size` AS STRING)"
    assert compiled.auto_dimensions == ("size",) and compiled.parse_checks == ()



def test_a_numeric_aggregator_reads_an_expression_instead_of_a_field():
    """The row's value is the expression's, cast to the aggregator's type (summed on Spark in test_pipeline.py)."""
    compiled = plan(metricsSpec=[{"type": "longSum", "name": "total", "expression": "added + deleted"}])
    assert {"added", "deleted"} <= set(compiled.fields) and compiled.parse_checks == ()
    assert compiled.typed_columns["__in_total"].startswith("CAST((") and "`added`" in compiled.typed_columns[
        "__in_total"]


@pytest.mark.parametrize(("metric", "error"), [
    ({"type": "longSum", "name": "t"}, "longSum needs fieldName or expression"),
    ({"type": "longSum", "name": "t", "fieldName": "a", "expression": "a * 2"}, "not both"),
    ({"type": "doubleMax", "name": "t", "expression": "a +"}, "ends unexpectedly"),
])
def test_a_numeric_aggregator_takes_a_field_or_an_expression(metric, error):
    with pytest.raises(ValueError, match=error):
        plan(metricsSpec=[metric])
