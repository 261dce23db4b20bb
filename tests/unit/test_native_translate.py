"""Native query JSON in → Druid SQL text (or the 400 a user gets) out; plus the pure time and shaping rules.

No DuckDB and no server: the statements are checked as text, and against the SQL layer's own sandbox.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlglot import exp

from sluice.broker.errors import SqlError
from sluice.broker.native.queries import parse_query
from sluice.broker.native.filters import Columns, filter_condition
from sluice.broker.native.results import fill_empty_buckets
from sluice.broker.native.sql import DataSourceView, translate
from sluice.broker.native.time import QueryGranularity, zone_of
from sluice.broker.sql.translate import translate as sql_translate
from sluice.expressions import ExpressionError, to_condition, to_sql
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.spec.errors import SpecError
from sluice.timestamps import (
    MAX_INSTANT,
    MIN_INSTANT,
    EpochInterval,
    format_instant,
    parse_instant,
    parse_interval,
)

DAY = datetime(2015, 9, 12, tzinfo=UTC)


def _segment(hour: int, partition: int = 0) -> DataSegment:
    start = DAY + timedelta(hours=hour)
    return DataSegment(
        id=SegmentId("wiki", Interval(start, start + timedelta(hours=1)), "v1", partition),
        dimensions=["channel", "page"], metrics=["added", "delta"], aggregators=[],
        shard_spec=numbered_shard_spec(partition), num_rows=10, size=100,
    )


WIKI = DataSourceView("wiki", [_segment(0), _segment(1), _segment(1, 1)])
COLUMNS = Columns(WIKI.columns)
BASE = {"dataSource": "wiki", "intervals": ["2015-09-12/2015-09-13"]}
IN_DAY = ("\"__time\" >= CAST('2015-09-12 00:00:00.000' AS TIMESTAMP) "
          "AND \"__time\" < CAST('2015-09-13 00:00:00.000' AS TIMESTAMP)")


def _sql(query: dict[str, Any], source: DataSourceView = WIKI) -> str:
    return translate(parse_query(query), source) or ""


def _filter(spec: dict[str, Any]) -> str:
    parsed = parse_query({**BASE, "queryType": "scan", "filter": spec}).filter
    return filter_condition(parsed, COLUMNS).sql(dialect="druid")


# ------------------------------------------------------------------------------------------------------- filters


@pytest.mark.parametrize(
    ("spec", "sql"),
    [
        ({"type": "selector", "dimension": "channel", "value": "#en"}, "CAST(\"channel\" AS VARCHAR) = '#en'"),
        ({"type": "selector", "dimension": "channel", "value": None}, "\"channel\" IS NULL"),
        ({"type": "selector", "dimension": "added", "value": 5}, "CAST(\"added\" AS VARCHAR) = '5'"),
        ({"type": "selector", "dimension": "__time", "value": 1442016000000},
         "CAST(TIMESTAMP_TO_MILLIS(\"__time\") AS VARCHAR) = '1442016000000'"),
        ({"type": "selector", "dimension": "missing", "value": "x"}, "CAST(NULL AS VARCHAR) = 'x'"),
        ({"type": "equals", "column": "added", "matchValueType": "LONG", "matchValue": 5},
         "TRY_CAST(\"added\" AS DOUBLE) = 5.0"),
        ({"type": "in", "dimension": "page", "values": ["a", None]},
         "(CAST(\"page\" AS VARCHAR) IN ('a') OR \"page\" IS NULL)"),
        ({"type": "in", "dimension": "page", "values": []}, "FALSE"),
        ({"type": "bound", "dimension": "added", "lower": "10", "upper": "20", "upperStrict": True,
          "ordering": "numeric"},
         "TRY_CAST(CAST(\"added\" AS VARCHAR) AS DOUBLE) >= 10.0 "
         "AND TRY_CAST(CAST(\"added\" AS VARCHAR) AS DOUBLE) < 20.0"),
        ({"type": "bound", "dimension": "page", "lower": "b", "lowerStrict": True}, "CAST(\"page\" AS VARCHAR) > 'b'"),
        ({"type": "range", "column": "page", "matchValueType": "STRING", "upper": "m", "upperOpen": True},
         "CAST(\"page\" AS VARCHAR) < 'm'"),
        ({"type": "like", "dimension": "page", "pattern": "a\\_%", "escape": "\\"},
         "CAST(\"page\" AS VARCHAR) LIKE 'a\\_%' ESCAPE '\\'"),
        ({"type": "regex", "dimension": "page", "pattern": "^p[0-3]"},
         "REGEXP_LIKE(CAST(\"page\" AS VARCHAR), '^p[0-3]')"),
        ({"type": "null", "column": "channel"}, "\"channel\" IS NULL"),
        ({"type": "not", "field": {"type": "selector", "dimension": "channel", "value": "#en"}},
         "NOT (CAST(\"channel\" AS VARCHAR) = '#en')"),
        ({"type": "or", "fields": [{"type": "true"}, {"type": "false"}]}, "(TRUE OR FALSE)"),
        ({"type": "interval", "dimension": "__time", "intervals": ["2015-09-12T01:00/2015-09-12T02:00"]},
         "\"__time\" >= CAST('2015-09-12 01:00:00.000' AS TIMESTAMP) "
         "AND \"__time\" < CAST('2015-09-12 02:00:00.000' AS TIMESTAMP)"),
        ({"type": "expression", "expression": "added * 2 > delta && strlen(page) == 2"},
         "((\"added\" * 2) > \"delta\" AND LENGTH(\"page\") = 2)"),
        ({"type": "search", "dimension": "page", "query": {"type": "insensitive_contains", "value": "P1"}},
         "STR_POSITION(LOWER(CAST(\"page\" AS VARCHAR)), 'p1') > 0"),
        ({"type": "columnComparison", "dimensions": ["page", "channel"]},
         "CAST(\"page\" AS VARCHAR) = CAST(\"channel\" AS VARCHAR)"),
    ],
)
def test_filters_become_sql_conditions(spec: dict[str, Any], sql: str) -> None:
    assert _filter(spec) == sql


# ---------------------------------------------------------------------------------------------------- statements


def test_timeseries_keeps_the_filter_in_each_aggregate_and_adds_the_empty_bucket_row() -> None:
    sql = _sql({**BASE, "queryType": "timeseries", "granularity": "hour",
                "filter": {"type": "selector", "dimension": "channel", "value": "#en"},
                "aggregations": [{"type": "longSum", "name": "added", "fieldName": "added"}]})
    only_en = "FILTER(WHERE CAST(\"channel\" AS VARCHAR) = '#en')"
    head = ("SELECT {kind} AS \"__sluice_kind\", {bucket} AS \"__sluice_bucket\", "
            "MIN(\"__time\") AS \"__sluice_first\", "
            f"COUNT(*) {only_en} AS \"__sluice_rows\", SUM(\"added\") {only_en} AS \"added\" FROM \"wiki\"")
    hour = "TIME_FLOOR(\"__time\", 'PT1H')"
    assert sql == (
        "SELECT \"__sluice_kind\" AS \"__sluice_kind\", \"__sluice_bucket\" AS \"__sluice_bucket\", "
        "\"__sluice_first\" AS \"__sluice_first\", \"__sluice_rows\" AS \"__sluice_rows\", "
        "\"added\" AS \"added\" FROM ("
        + head.format(kind=0, bucket=hour) + f" WHERE {IN_DAY} GROUP BY {hour} UNION ALL "
        + head.format(kind=1, bucket="CAST(NULL AS TIMESTAMP)") + " WHERE FALSE) AS __sluice_aggregated"
    )


def test_a_data_source_without_segments_is_read_as_an_empty_relation() -> None:
    query = {**BASE, "queryType": "timeseries", "aggregations": [{"type": "longSum", "name": "s", "fieldName": "x"}]}
    sql = _sql(query, DataSourceView("nothing"))
    assert "FROM (SELECT CAST(NULL AS TIMESTAMP) AS \"__time\" WHERE FALSE) AS __sluice_empty" in sql
    assert "SUM(CAST(NULL AS DOUBLE)) AS \"s\"" in sql


def test_topn_ranks_by_the_metric_within_each_bucket_and_keeps_threshold_rows() -> None:
    sql = _sql({**BASE, "queryType": "topN", "dimension": "page", "threshold": 3, "granularity": "day",
                "metric": {"type": "inverted", "metric": "edits"},
                "aggregations": [{"type": "count", "name": "edits"}]})
    assert ("ROW_NUMBER() OVER (PARTITION BY \"__sluice_bucket\" ORDER BY \"edits\" ASC, \"page\" ASC) "
            "AS \"__sluice_rank\"") in sql
    assert "WHERE \"__sluice_rank\" <= 3 ORDER BY \"__sluice_bucket\" ASC, \"__sluice_rank\" ASC" in sql
    assert "GROUP BY TIME_FLOOR(\"__time\", 'P1D'), CAST(\"page\" AS VARCHAR)" in sql


def test_topn_dimension_metric_resumes_after_previous_stop() -> None:
    sql = _sql({**BASE, "queryType": "topN", "dimension": "page", "threshold": 2,
                "metric": {"type": "dimension", "ordering": "strlen", "previousStop": "p1"},
                "aggregations": [{"type": "count", "name": "edits"}]})
    assert "ORDER BY LENGTH(\"page\") ASC, \"page\" ASC) AS \"__sluice_rank\"" in sql
    assert "AS __sluice_computed WHERE \"page\" > 'p1'" in sql


def test_group_by_orders_by_time_then_the_limit_spec_then_the_dimensions() -> None:
    sql = _sql({**BASE, "queryType": "groupBy", "granularity": "hour", "dimensions": ["channel", "page"],
                "aggregations": [{"type": "count", "name": "edits"}],
                "postAggregations": [{"type": "arithmetic", "name": "half", "fn": "/",
                                      "fields": [{"type": "fieldAccess", "fieldName": "edits"},
                                                 {"type": "constant", "name": "two", "value": 2}]}],
                "having": {"type": "greaterThan", "aggregation": "half", "value": 1},
                "limitSpec": {"type": "default", "limit": 5, "offset": 2,
                              "columns": [{"dimension": "page", "direction": "descending",
                                           "dimensionOrder": "numeric"}]}})
    assert sql.endswith(
        "AS __sluice_computed WHERE \"half\" > 1 ORDER BY \"__sluice_bucket\" ASC, TRY_CAST(\"page\" AS DOUBLE) DESC, "
        "\"channel\" ASC, \"page\" ASC LIMIT 5 OFFSET 2"
    )
    assert ("(CASE WHEN CAST(2 AS DOUBLE) = 0 AND NOT CAST(\"edits\" AS DOUBLE) IS NULL THEN CAST(0 AS DOUBLE) "
            "ELSE CAST(\"edits\" AS DOUBLE) / CAST(2 AS DOUBLE) END) AS \"half\"") in sql


def test_group_by_without_dimensions_has_no_row_when_nothing_matches() -> None:
    sql = _sql({**BASE, "queryType": "groupBy", "aggregations": [{"type": "count", "name": "edits"}]})
    assert "HAVING COUNT(*) > 0" in sql


def test_scan_returns_time_as_millis_and_virtual_columns_inline() -> None:
    sql = _sql({**BASE, "queryType": "scan", "columns": ["__time", "v"], "limit": 10, "order": "descending",
                "virtualColumns": [{"type": "expression", "name": "v", "expression": "added + 1",
                                    "outputType": "LONG"}]})
    assert sql == (
        "SELECT TIMESTAMP_TO_MILLIS(\"__time\") AS \"__sluice_millis\", TIMESTAMP_TO_MILLIS(\"__time\") AS \"__time\", "
        "TRY_CAST((\"added\" + 1) AS BIGINT) AS \"v\" FROM \"wiki\" WHERE " + IN_DAY
        + " ORDER BY \"__sluice_millis\" DESC LIMIT 10"
    )


def test_granularities_become_time_floor_calls() -> None:
    def bucket(granularity: Any) -> str:
        sql = _sql({**BASE, "queryType": "groupBy", "granularity": granularity, "dimensions": ["page"]})
        return sql.split("SELECT ")[3].split(" AS \"__sluice_bucket\"")[0]

    assert bucket("fifteen_minute") == "TIME_FLOOR(\"__time\", 'PT15M')"
    assert bucket({"type": "period", "period": "P1M", "timeZone": "America/Los_Angeles"}) == (
        "TIME_FLOOR(\"__time\", 'P1M', NULL, 'America/Los_Angeles')")
    assert bucket({"type": "period", "period": "PT1H", "origin": "2015-09-12T00:30:00Z"}) == (
        "TIME_FLOOR(\"__time\", 'PT1H', MILLIS_TO_TIMESTAMP(1442017800000))")
    assert bucket({"type": "duration", "duration": 7200000}) == (
        "MILLIS_TO_TIMESTAMP(0 + CAST(FLOOR(CAST(TIMESTAMP_TO_MILLIS(\"__time\") - 0 AS DOUBLE) / 7200000) AS BIGINT) "
        "* 7200000)")
    assert bucket("none") == "\"__time\""


QUERIES = [
    {**BASE, "queryType": "timeseries", "granularity": "day", "context": {"grandTotal": True},
     "aggregations": [{"type": "count", "name": "rows"}, {"type": "doubleMax", "name": "m", "fieldName": "delta"},
                      {"type": "cardinality", "name": "u", "fields": ["page", "channel"], "byRow": True},
                      {"type": "hyperUnique", "name": "h", "fieldName": "page", "round": True},
                      {"type": "longFirst", "name": "f", "fieldName": "added"},
                      {"type": "filtered", "filter": {"type": "true"},
                       "aggregator": {"type": "doubleSum", "name": "d", "expression": "delta * 2"}}],
     "postAggregations": [{"type": "expression", "name": "e", "expression": "rows + m"},
                          {"type": "doubleGreatest", "name": "g", "fields": [{"type": "fieldAccess", "fieldName": "e"},
                                                                              {"type": "constant", "value": 1}]}]},
    {**BASE, "queryType": "topN", "dimension": "page", "threshold": 5, "metric": "rows",
     "aggregations": [{"type": "count", "name": "rows"}]},
    {**BASE, "queryType": "groupBy", "dimensions": [{"type": "default", "dimension": "added", "outputType": "LONG"}],
     "having": {"type": "or", "havingSpecs": [{"type": "dimSelector", "dimension": "added", "value": "3"},
                                              {"type": "not", "havingSpec": {"type": "always"}}]},
     "aggregations": [{"type": "stringLast", "name": "last", "fieldName": "page"}]},
    {**BASE, "queryType": "scan", "filter": {"type": "range", "column": "added", "matchValueType": "LONG", "lower": 1}},
    {**BASE, "queryType": "timeBoundary", "bound": "maxTime"},
    {"queryType": "dataSourceMetadata", "dataSource": "wiki"},
    {**BASE, "queryType": "search", "granularity": "hour", "query": {"type": "fragment", "values": ["a", "b"]}},
]


@pytest.mark.parametrize("query", QUERIES, ids=[query["queryType"] for query in QUERIES])
def test_every_statement_passes_the_sql_layers_sandbox(query: dict[str, Any]) -> None:
    assert sql_translate(_sql(query), ["wiki"]).startswith("SELECT")


# ---------------------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"dataSource": "wiki"}, "queryType: unknown query type None, expected one of timeseries, topN, groupBy, "
                                 "scan, timeBoundary, segmentMetadata, dataSourceMetadata, search"),
        ({**BASE, "queryType": "topN", "dimension": "page", "metric": "x"}, "threshold: Field required"),
        ({**BASE, "queryType": "timeseries", "intervals": ["2015-09-13/2015-09-12"]},
         "intervals: interval '2015-09-13/2015-09-12' ends before it starts"),
        ({**BASE, "queryType": "timeseries", "granularity": "fortnight"},
         "granularity: unknown granularity 'fortnight', expected one of all, none, second, minute, five_minute, "
         "ten_minute, fifteen_minute, thirty_minute, hour, six_hour, eight_hour, day, week, month, quarter, year"),
        ({**BASE, "queryType": "timeseries", "aggregations": [{"type": "longSum", "name": "s"}]},
         "aggregations[0].fieldName: longSum needs fieldName or expression"),
        ({**BASE, "queryType": "groupBy", "dimensions": [{"type": "default", "dimension": "page",
                                                          "extractionFn": {"type": "upper"}}]},
         "dimensions[0].extractionFn: Sluice does not support this field"),
        ({**BASE, "queryType": "timeseries", "filter": {"type": "and", "fields": [{"type": "javascript"}]}},
         "filter.fields[0]: Input tag 'javascript' found using 'type' does not match any of the expected tags: "
         "'selector', 'equals', 'in', 'bound', 'range', 'like', 'regex', 'null', 'and', 'or', 'not', 'interval', "
         "'columnComparison', 'expression', 'true', 'false', 'search'"),
        ({**BASE, "queryType": "scan", "dataSource": {"type": "join", "left": "a"}},
         "dataSource.right: Field required"),
    ],
)
def test_invalid_queries_are_rejected_naming_the_field(query: dict[str, Any], message: str) -> None:
    with pytest.raises(SqlError) as caught:
        parse_query(query)
    assert caught.value.status == 400
    assert caught.value.to_json()["error"] == "Json parse failed"
    assert caught.value.error_message == f"Invalid native query: {message}"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({**BASE, "queryType": "topN", "dimension": "page", "threshold": 3, "metric": "nope",
          "aggregations": [{"type": "count", "name": "rows"}]},
         "metric: 'nope' is neither an aggregator nor a post-aggregator of the query"),
        ({**BASE, "queryType": "timeseries", "aggregations": [{"type": "count", "name": "rows"}],
          "postAggregations": [{"type": "fieldAccess", "name": "p", "fieldName": "rowz"}]},
         "postAggregations[0]: 'rowz' is neither an aggregator nor an earlier post-aggregator"),
        ({**BASE, "queryType": "groupBy", "dimensions": ["page"], "aggregations": [{"type": "count", "name": "page"}]},
         "dimensions: duplicate output name 'page'"),
        ({**BASE, "queryType": "groupBy", "dimensions": ["page"],
          "limitSpec": {"type": "default", "columns": ["edits"]}},
         "limitSpec.columns[0].dimension: 'edits' is not an output of the query"),
        ({**BASE, "queryType": "scan", "filter": {"type": "expression", "expression": "nope(page)"}},
         "filter.expression: function nope() is not supported; supported: "),
        ({**BASE, "queryType": "scan", "columns": ["v"],
          "virtualColumns": [{"type": "expression", "name": "v", "expression": "v + 1"}]},
         "virtualColumns: virtual column 'v' refers to itself"),
    ],
)
def test_queries_that_cannot_be_planned_name_the_field(query: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        _sql(query)
    assert str(caught.value).startswith(message)


# --------------------------------------------------------------------------------------------------- expressions


@pytest.mark.parametrize(
    ("expression", "sql"),
    [
        ("concat(upper(page), '-', added)", "CONCAT(UPPER(\"page\"), '-', \"added\")"),
        ("substring(page, 1, 2)", "SUBSTRING(\"page\", 1 + 1, 2)"),
        ("strpos(page, 'x')", "STR_POSITION(\"page\", 'x') - 1"),
        ("2 ^ 3 ^ 2", "POWER(2, POWER(3, 2))"),
        ("added > 1 || !(delta < 2)", "CAST((\"added\" > 1 OR NOT (\"delta\" < 2)) AS BIGINT)"),
        ("if(added, 'y', 'n')", "CASE WHEN TRY_CAST(\"added\" AS DOUBLE) > 0 THEN 'y' ELSE 'n' END"),
        ("timestamp_floor(__time, 'P1D', null, 'Asia/Tokyo')",
         "TIMESTAMP_TO_MILLIS(TIME_FLOOR(\"__time\", 'P1D', NULL, 'Asia/Tokyo'))"),
        ("timestamp_format(__time, 'yyyy')", "TIME_FORMAT(\"__time\", 'yyyy')"),
        ("'it\\'s' == \"page\"", "CAST('it''s' = \"page\" AS BIGINT)"),
        ("nvl(channel, 'none')", "COALESCE(\"channel\", 'none')"),
        ("div(added, 2)", "DIV(\"added\", 2)"),
    ],
)
def test_druid_expressions_become_druid_sql(expression: str, sql: str) -> None:
    assert to_sql(expression, COLUMNS.expression_ref).sql(dialect="druid") == sql


def test_a_number_is_true_when_greater_than_zero() -> None:
    assert to_condition("added", COLUMNS.expression_ref).sql(dialect="druid") == "TRY_CAST(\"added\" AS DOUBLE) > 0"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("concat(page", "expression 'concat(page' ends unexpectedly"),
        ("page @", "cannot parse expression 'page @' at position 4"),
        ("substring(page)", "function substring() takes 3 arguments, got 1"),
        ("cast(page, 'DATE')", "cast to DATE is not supported; expected one of LONG, DOUBLE, FLOAT, STRING"),
    ],
)
def test_unreadable_expressions_say_why(expression: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=f"^{message.replace('(', '[(]').replace(')', '[)]')}$"):
        to_sql(expression, lambda name: exp.column(name))


# ---------------------------------------------------------------------------------------------------------- time


def test_eternity_reads_and_prints_as_druid_writes_it() -> None:
    eternity = parse_interval("-146136543-09-08T08:23:32.096Z/146140482-04-24T15:36:27.903Z")
    assert eternity == EpochInterval(MIN_INSTANT, MAX_INSTANT)
    assert format_instant(MIN_INSTANT) == "-146136543-09-08T08:23:32.096Z"


@pytest.mark.parametrize(
    ("text", "interval"),
    [
        ("2015-09-12/2015-09-13", ("2015-09-12T00:00:00.000Z", "2015-09-13T00:00:00.000Z")),
        ("2015-09-12T10:00:00+02:00/PT1H", ("2015-09-12T08:00:00.000Z", "2015-09-12T09:00:00.000Z")),
        ("P1M/2015-03-31", ("2015-02-28T00:00:00.000Z", "2015-03-31T00:00:00.000Z")),
    ],
)
def test_interval_forms(text: str, interval: tuple[str, str]) -> None:
    parsed = parse_interval(text)
    assert (format_instant(parsed.start), format_instant(parsed.end)) == interval


def test_bucket_timestamps_in_a_time_zone_carry_its_offset() -> None:
    zone = zone_of("America/Los_Angeles")
    month = QueryGranularity.of_period("P1M", "America/Los_Angeles", None)
    november = month.next_bucket(parse_instant("2015-10-01T07:00:00Z"))  # DST ends within October
    assert format_instant(november, zone) == "2015-11-01T00:00:00.000-07:00"
    assert format_instant(month.next_bucket(november), zone) == "2015-12-01T00:00:00.000-08:00"


def test_empty_buckets_are_filled_only_between_buckets_and_where_segments_are() -> None:
    hour = QueryGranularity.simple("hour")
    h = [parse_instant(f"2015-09-12T{i:02d}:00:00Z") for i in range(10)]
    spans = [EpochInterval(h[0], h[3]), EpochInterval(h[6], h[9])]  # no segments for hours 3-5
    assert fill_empty_buckets([h[1], h[8]], hour, spans) == [h[2], h[6], h[7]]
    assert fill_empty_buckets([h[1], h[8]], QueryGranularity.simple("all"), spans) == []


def test_columns_come_in_druid_order_and_include_rows_without_segments() -> None:
    schema = [("__time", "TIMESTAMP"), ("delta", "DOUBLE"), ("page", "VARCHAR"), ("added", "BIGINT"),
              ("channel", "VARCHAR"), ("extra", "VARCHAR")]
    assert DataSourceView("wiki", WIKI.segments, schema).columns == [
        "__time", "channel", "page", "added", "delta", "extra"]
    realtime_only = DataSourceView("wiki", (), schema)  # a running task's rows, nothing published yet
    assert (realtime_only.exists, realtime_only.dimensions) == (True, ["page", "channel", "extra"])
    assert not DataSourceView("nothing").exists
