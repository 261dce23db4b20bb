"""Multi-value string dimensions, read by Druid SQL and native queries as Druid reads them.

The rows are those of Druid's "Multi-value dimensions" page (https://druid.apache.org/docs/latest/querying/
multi-value-dimensions), stored as ingestion writes a multi-value dimension now, a list of strings (row4 has none:
an empty list), plus two rows of an older segment of the same data source that stored `tags` as a plain string (row0
't1', row5 null). The expected answers are the page's, with what Druid's rules make of row0 and row5 added:

- a filter matches a row when any of its values matches; NOT negates that row match (with SQL's three-valued logic a
  row with no value matches neither `tags = 'x'` nor its negation); `tags IS NULL` matches a row with no value;
- GROUP BY tags gives each value its own group and rows with no value the NULL group, after the filter kept or
  dropped whole rows;
- selected as it is, a row is null, its one value or the list of its values, which Druid SQL writes as JSON text
  (SqlResults.coerce) and a native scan as a JSON array.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.broker import Broker
from sluice.broker.errors import SqlError
from sluice.broker.native.queries import NativeQueryRunner
from sluice.broker.results import render
from sluice.realtime import RealtimeView
from sluice.segment.segment import Interval
from tests.unit.published import broker_over

SOURCE = "mvd_example"
# (day of January 2011, label, tags) — the page's four rows, as ingestion writes them now
ROWS = [(12, "row1", ["t1", "t2", "t3"]), (13, "row2", ["t3", "t4", "t5"]), (14, "row3", ["t5", "t6", "t7"]),
        (14, "row4", [])]
# an older segment, whose tags column is a plain string
OLD_ROWS = [(11, "row0", "t1"), (11, "row5", None)]
ALL_LABELS = ["row0", "row5", "row1", "row2", "row3", "row4"]  # in time order, then label


def _day(day: int) -> datetime:
    return datetime(2011, 1, day, tzinfo=UTC)


def _segment_table(rows: list[tuple], tags_type: pa.DataType) -> pa.Table:
    return pa.table({
        "__time": pa.array([_day(day) for day, _, _ in rows], pa.timestamp("ms", tz="UTC")),
        "label": [label for _, label, _ in rows],
        "tags": pa.array([tags for _, _, tags in rows], tags_type),
        "count": pa.array([1] * len(rows), pa.int64()),
    })


@pytest.fixture(scope="module")
def deep_storage(tmp_path_factory: pytest.TempPathFactory) -> Path:
    deep = tmp_path_factory.mktemp("deep")
    for name, table in (("old", _segment_table(OLD_ROWS, pa.string())),
                        ("new", _segment_table(ROWS, pa.list_(pa.string())))):
        (deep / name).mkdir()
        pq.write_table(table, deep / name / "index.parquet")
    return deep


@pytest.fixture(scope="module")
def published(deep_storage: Path, tmp_path_factory: pytest.TempPathFactory) -> Broker:
    files = [(deep_storage / "old" / "index.parquet", Interval(_day(11), _day(12))),
             (deep_storage / "new" / "index.parquet", Interval(_day(12), _day(15)))]
    return broker_over(tmp_path_factory.mktemp("broker"), deep_storage, SOURCE, files, ["label", "tags"],
                       [{"type": "count", "name": "count"}])


@pytest.fixture(scope="module", params=["published", "realtime"])
def broker(request: pytest.FixtureRequest, published: Broker, deep_storage: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Broker:
    """The page's rows published, or still in a running task's persist, which holds a row of several values as its
    JSON array text (one value as that value, none as null) until the merge at publish: the answers are the same."""
    if request.param == "published":
        return published
    persist = tmp_path_factory.mktemp("task") / "0.parquet"
    as_text = [(day, label, json.dumps(tags) if len(tags) > 1 else (tags or [None])[0]) for day, label, tags in ROWS]
    pq.write_table(_segment_table(as_text, pa.string()), persist)
    running = RealtimeView(SOURCE, f"index_kafka_{SOURCE}_0", {0: 0}, len(ROWS), (str(persist),), ("tags",))
    return broker_over(tmp_path_factory.mktemp("broker"), deep_storage, SOURCE,
                       [(deep_storage / "old" / "index.parquet", Interval(_day(11), _day(12)))], ["label", "tags"],
                       [{"type": "count", "name": "count"}], [running])


def _sql(broker: Broker, sql: str, context: dict[str, Any] | None = None) -> list[tuple]:
    return broker.sql(sql, context=context).rows


def _labels(broker: Broker, where: str) -> list[str]:
    return [label for (label,) in _sql(broker, f"SELECT label FROM {SOURCE} WHERE {where} ORDER BY __time, label")]


def _native(broker: Broker, query: dict[str, Any]) -> list[dict[str, Any]]:
    bucketed = query["queryType"] in ("groupBy", "topN", "timeseries")
    return NativeQueryRunner(broker).run({"dataSource": SOURCE, "intervals": ["2011-01-01/2011-02-01"],
                                          **({"granularity": "all"} if bucketed else {}), **query})


# ---------------------------------------------------------------------------------------------------- Druid SQL


@pytest.mark.parametrize(("where", "labels"), [
    ("tags = 't1'", ["row0", "row1"]),
    ("tags = 't1' OR tags = 't3'", ["row0", "row1", "row2"]),  # the page's "or" example, and row0
    ("tags IN ('t3', 't6')", ["row1", "row2", "row3"]),
    ("tags LIKE 't1%'", ["row0", "row1"]),
    ("tags > 't6'", ["row3"]),
    ("UPPER(tags) = 'T7'", ["row3"]),  # a scalar function reads each value
    # NOT matches the rows the filter does not match; rows with no value match neither (three-valued logic)
    ("tags <> 't3'", ["row0", "row3"]),
    ("NOT (tags = 't3')", ["row0", "row3"]),
    ("tags NOT IN ('t1')", ["row2", "row3"]),
    ("tags NOT LIKE 't%'", []),
    # the page: "Multi-value dimensions also consider an empty row as null"
    ("tags IS NULL", ["row5", "row4"]),
    ("tags IS NOT NULL", ["row0", "row1", "row2", "row3"]),
    # MV_CONTAINS of a row with no value is false
    ("MV_CONTAINS(tags, 't3')", ["row1", "row2"]),
    ("NOT MV_CONTAINS(tags, 't3')", ["row0", "row5", "row3", "row4"]),
])
def test_a_filter_matches_a_row_when_any_of_its_values_matches(broker: Broker, where: str, labels: list[str]) -> None:
    assert _labels(broker, where) == labels


def test_a_subquery_condition_is_a_join_which_refuses_a_row_of_several_values(broker: Broker) -> None:
    """Druid plans `tags IN (SELECT …)` as a join; its join matcher reads a row's one value (none: null) and fails
    the query on a row of several, with QueryUnsupportedException's 501."""
    subquery = f"(SELECT label FROM {SOURCE} WHERE label = 'row9' UNION ALL SELECT 't1')"
    assert _labels(broker, f"label IN ('row0', 'row5') AND tags IN {subquery}") == ["row0"]
    assert _labels(broker, f"label IN ('row0', 'row4', 'row5') AND tags NOT IN {subquery}") == []
    with pytest.raises(SqlError) as refused:
        _labels(broker, f"tags IN {subquery}")
    assert (refused.value.status, refused.value.to_json()["error"], refused.value.error_message,
            refused.value.error_class) == (501, "Unsupported operation",
                                           "Joining against a multi-value dimension is not supported.",
                                           "org.apache.druid.query.QueryUnsupportedException")


def test_a_join_on_a_multi_value_column_reads_a_rows_one_value_and_refuses_several(broker: Broker) -> None:
    """Druid's join matchers (IndexedTableJoinMatcher, LookupJoinMatcher) read a row's one value, none as null, and
    fail the query on a row of several values; a JOIN's ON does not match any value as a filter does."""
    right = "(SELECT * FROM (VALUES ('t1', 'one'), ('t3', 'three')) AS r(tag, word))"
    joined = f"SELECT l.label, r.word FROM {SOURCE} l {{}} JOIN {right} r ON l.tags = r.tag WHERE {{}} ORDER BY 1"
    assert _sql(broker, joined.format("INNER", "l.label IN ('row0', 'row4', 'row5')")) == [("row0", "one")]
    assert _sql(broker, joined.format("LEFT", "l.label IN ('row0', 'row4', 'row5')")) == [
        ("row0", "one"), ("row4", None), ("row5", None)]
    with pytest.raises(SqlError) as refused:
        _sql(broker, joined.format("INNER", "TRUE"))
    assert (refused.value.status, refused.value.error_message) == (
        501, "Joining against a multi-value dimension is not supported.")


def test_group_by_gives_each_value_its_own_group_and_rows_with_none_the_null_group(broker: Broker) -> None:
    assert _sql(broker, f"SELECT tags, COUNT(*) FROM {SOURCE} GROUP BY tags ORDER BY tags NULLS FIRST") == [
        (None, 2), ("t1", 2), ("t2", 1), ("t3", 2), ("t4", 1), ("t5", 2), ("t6", 1), ("t7", 1)]


def test_group_by_label_and_tags_unnests_each_row(broker: Broker) -> None:
    """The page's "SQL grouping query with no filtering", with the older segment's rows."""
    assert _sql(broker, f"SELECT label, tags FROM {SOURCE} GROUP BY 1, 2 ORDER BY 1, 2") == [
        ("row0", "t1"),
        ("row1", "t1"), ("row1", "t2"), ("row1", "t3"),
        ("row2", "t3"), ("row2", "t4"), ("row2", "t5"),
        ("row3", "t5"), ("row3", "t6"), ("row3", "t7"),
        ("row4", None), ("row5", None)]


def test_grouping_by_the_column_is_an_error_without_unnesting(broker: Broker) -> None:
    """groupByEnableMultiValueUnnesting false: Druid's groupBy refuses to group by a multi-value column, in SQL and
    in a native query; MV_TO_ARRAY groups by the list instead."""
    context = {"groupByEnableMultiValueUnnesting": False}
    with pytest.raises(SqlError, match=r"multi-value dimension \[tags\] .* 'groupByEnableMultiValueUnnesting' set "
                                       "to false") as raised:
        broker.sql(f"SELECT tags, COUNT(*) FROM {SOURCE} GROUP BY tags", context=context)
    assert raised.value.status == 400
    with pytest.raises(SqlError, match="groupByEnableMultiValueUnnesting"):
        _native(broker, {"queryType": "groupBy", "dimensions": ["tags"], "context": context,
                         "aggregations": [{"type": "count", "name": "count"}]})
    assert _sql(broker, f"SELECT MV_TO_ARRAY(tags) AS t, COUNT(*) FROM {SOURCE} WHERE label IN ('row1', 'row0') "
                        "GROUP BY 1 ORDER BY 1", context) == [(["t1"], 1), (["t1", "t2", "t3"], 1)]
    assert _sql(broker, f"SELECT label, COUNT(*) FROM {SOURCE} WHERE tags = 't3' GROUP BY label ORDER BY label",
                context) == [("row1", 1), ("row2", 1)]


def test_the_filter_keeps_whole_rows_before_they_are_unnested(broker: Broker) -> None:
    """The page's "SQL grouping query with a filter": row1 and row2 have t3, and give all their values."""
    assert _sql(broker, f"SELECT label, tags FROM {SOURCE} WHERE tags = 't3' GROUP BY 1, 2 ORDER BY 1, 2") == [
        ("row1", "t1"), ("row1", "t2"), ("row1", "t3"), ("row2", "t3"), ("row2", "t4"), ("row2", "t5")]
    assert _sql(broker, f"SELECT tags, COUNT(*) FROM {SOURCE} WHERE tags = 't3' GROUP BY tags ORDER BY tags") == [
        ("t1", 1), ("t2", 1), ("t3", 2), ("t4", 1), ("t5", 1)]


def test_filtering_the_values_of_a_group_and_distinct_values(broker: Broker) -> None:
    # MV_FILTER_ONLY keeps only the values that matched: the page's remedy for the groups above
    assert _sql(broker, f"SELECT MV_FILTER_ONLY(tags, ARRAY['t3']), COUNT(*) FROM {SOURCE} WHERE tags = 't3' "
                        "GROUP BY 1") == [("t3", 2)]
    assert _sql(broker, f"SELECT tags, COUNT(*) FROM {SOURCE} GROUP BY tags HAVING tags <> 't1' AND COUNT(*) > 1 "
                        "ORDER BY tags") == [("t3", 2), ("t5", 2)]
    assert _sql(broker, f"SELECT DISTINCT tags FROM {SOURCE} WHERE label IN ('row0', 'row2') ORDER BY tags") == [
        ("t1",), ("t3",), ("t4",), ("t5",)]


def test_distinct_counts_count_values_not_rows(broker: Broker) -> None:
    """Druid's cardinality over each value: t1…t7, null not counted, whatever the approximation."""
    for function in ("COUNT(DISTINCT tags)", "APPROX_COUNT_DISTINCT(tags)", "APPROX_COUNT_DISTINCT_DS_HLL(tags)"):
        assert _sql(broker, f"SELECT {function} FROM {SOURCE}") == [(7,)], function
    assert _sql(broker, f"SELECT COUNT(DISTINCT tags) FROM {SOURCE}", {"useApproximateCountDistinct": False}) == [(7,)]
    assert _sql(broker, f"SELECT COUNT(DISTINCT tags) FROM {SOURCE} WHERE tags = 't3'") == [(5,)]
    assert _sql(broker, f"SELECT COUNT(DISTINCT tags) FILTER (WHERE label <> 'row1') FROM {SOURCE}") == [(6,)]
    assert _sql(broker, f"SELECT label, COUNT(DISTINCT tags) FROM {SOURCE} WHERE label IN ('row1', 'row4', 'row5') "
                        "GROUP BY label ORDER BY label") == [("row1", 3), ("row4", 0), ("row5", 0)]


def test_aggregate_filters_and_conditions_match_rows(broker: Broker) -> None:
    assert _sql(broker, f"SELECT COUNT(*) FILTER (WHERE tags = 't5'), SUM(CASE WHEN tags LIKE 't1%' THEN 1 ELSE 0 END) "
                        f"FROM {SOURCE}") == [(2, 2)]


def test_a_scan_returns_null_the_value_or_the_list_of_values(broker: Broker) -> None:
    result = broker.sql(f"SELECT label, tags FROM {SOURCE} ORDER BY __time, label")
    assert result.druid_types == ["STRING", "STRING"] and result.sql_types == ["VARCHAR", "VARCHAR"]
    assert result.rows == [("row0", "t1"), ("row5", None), ("row1", ["t1", "t2", "t3"]), ("row2", ["t3", "t4", "t5"]),
                           ("row3", ["t5", "t6", "t7"]), ("row4", None)]


@pytest.mark.parametrize("context", [None, {"sqlStringifyArrays": False}])
def test_druid_sql_writes_the_values_as_json_text(broker: Broker, context: dict[str, Any] | None) -> None:
    """The page's `SELECT * … WHERE tags = 't1' OR tags = 't3'` answer; VARCHAR values are always text."""
    result = broker.sql(f"SELECT * FROM {SOURCE} WHERE tags = 't1' OR tags = 't3' ORDER BY __time", context=context)
    body, _ = render(result, "object", False, False, False, stringify_arrays=context is None)
    assert json.loads(body) == [
        {"__time": "2011-01-11T00:00:00.000Z", "label": "row0", "tags": "t1", "count": 1},
        {"__time": "2011-01-12T00:00:00.000Z", "label": "row1", "tags": '["t1","t2","t3"]', "count": 1},
        {"__time": "2011-01-13T00:00:00.000Z", "label": "row2", "tags": '["t3","t4","t5"]', "count": 1}]


def test_information_schema_types_a_multi_value_column_varchar(broker: Broker) -> None:
    rows = _sql(broker, "SELECT COLUMN_NAME, DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS "
                        f"WHERE TABLE_NAME = '{SOURCE}'")
    assert dict(rows) == {"__time": "TIMESTAMP", "label": "VARCHAR", "tags": "VARCHAR", "count": "BIGINT"}


def test_multi_value_functions_read_the_values(broker: Broker) -> None:
    # (row4's empty list is left out: the functions read it as an empty list, where Druid reads null)
    assert _sql(broker, f"SELECT label, MV_LENGTH(tags), MV_TO_STRING(tags, ','), MV_OFFSET(tags, 1) FROM {SOURCE} "
                        "WHERE label <> 'row4' ORDER BY __time, label") == [
        ("row0", 1, "t1", None), ("row5", None, None, None), ("row1", 3, "t1,t2,t3", "t2"),
        ("row2", 3, "t3,t4,t5", "t4"), ("row3", 3, "t5,t6,t7", "t6")]
    result = broker.sql(f"SELECT MV_TO_ARRAY(tags) FROM {SOURCE} WHERE label = 'row0'")
    assert (result.druid_types, result.rows) == (["ARRAY<STRING>"], [(["t1"],)])


def test_a_string_function_is_applied_to_each_value(broker: Broker) -> None:
    """sql-data-types: "Druid will map the function across all values in the row. If the row is null or empty, the
    function receives NULL as its input"; the result is a multi-value string again."""
    assert _sql(broker, f"SELECT label, UPPER(tags), MV_LENGTH(CONCAT(tags, '!')) FROM {SOURCE} "
                        "WHERE label IN ('row0', 'row1', 'row4', 'row5') ORDER BY __time, label") == [
        ("row0", "T1", 1), ("row5", None, None), ("row1", ["T1", "T2", "T3"], 3), ("row4", None, None)]
    assert _sql(broker, f"SELECT u, COUNT(*) FROM (SELECT UPPER(tags) AS u FROM {SOURCE} WHERE label <> 'row0') "
                        "WHERE u = 'T2' GROUP BY u ORDER BY u") == [("T1", 1), ("T2", 1), ("T3", 1)]


def test_unnest_of_the_values(broker: Broker) -> None:
    assert _sql(broker, f"SELECT t, COUNT(*) FROM {SOURCE} CROSS JOIN UNNEST(MV_TO_ARRAY(tags)) AS u(t) "
                        "GROUP BY t ORDER BY t") == [
        ("t1", 2), ("t2", 1), ("t3", 2), ("t4", 1), ("t5", 2), ("t6", 1), ("t7", 1)]


def test_a_derived_table_passes_the_column_on(broker: Broker) -> None:
    assert _sql(broker, f"SELECT t, COUNT(*) FROM (SELECT tags AS t FROM {SOURCE} WHERE label <> 'row1') "
                        "WHERE t = 't5' GROUP BY t ORDER BY t") == [("t3", 1), ("t4", 1), ("t5", 2), ("t6", 1),
                                                                    ("t7", 1)]
    # grouped inside, the outer query reads plain values
    assert _sql(broker, f"SELECT COUNT(*) FROM (SELECT tags FROM {SOURCE} GROUP BY tags) WHERE tags LIKE 't%'") == [
        (7,)]


# ---------------------------------------------------------------------------------------------- native queries


def _counts(rows: list[dict[str, Any]]) -> dict[str | None, int]:
    return {row["event"]["tags"]: row["event"]["count"] for row in rows}


def test_native_group_by_explodes_the_rows(broker: Broker) -> None:
    """The page's native groupBy with no filter, with the older segment's rows and the NULL group."""
    rows = _native(broker, {"queryType": "groupBy", "dimensions": [{"type": "default", "dimension": "tags",
                                                                    "outputName": "tags"}],
                            "aggregations": [{"type": "count", "name": "count"}]})
    assert _counts(rows) == {None: 2, "t1": 2, "t2": 1, "t3": 2, "t4": 1, "t5": 2, "t6": 1, "t7": 1}


def test_native_group_by_with_a_selector_filter_explodes_the_matching_rows(broker: Broker) -> None:
    """The page's native groupBy with a selector filter for t3."""
    rows = _native(broker, {"queryType": "groupBy", "dimensions": ["tags"],
                            "filter": {"type": "selector", "dimension": "tags", "value": "t3"},
                            "aggregations": [{"type": "count", "name": "count"}]})
    assert _counts(rows) == {"t1": 1, "t2": 1, "t3": 2, "t4": 1, "t5": 1}


def test_native_top_n_with_an_and_filter(broker: Broker) -> None:
    """The page: a topN on tags with filter t1 AND t3 matches only row1, and gives the groups t1, t2 and t3."""
    [result] = _native(broker, {
        "queryType": "topN", "dimension": "tags", "threshold": 10, "metric": {"type": "dimension"},
        "filter": {"type": "and", "fields": [{"type": "selector", "dimension": "tags", "value": "t1"},
                                             {"type": "selector", "dimension": "tags", "value": "t3"}]},
        "aggregations": [{"type": "count", "name": "count"}]})
    assert result["result"] == [{"tags": "t1", "count": 1}, {"tags": "t2", "count": 1}, {"tags": "t3", "count": 1}]


@pytest.mark.parametrize(("native_filter", "rows"), [
    ({"type": "selector", "dimension": "tags", "value": "t5"}, 2),
    ({"type": "selector", "dimension": "tags", "value": None}, 2),  # the page: matches the empty row (and row5)
    ({"type": "null", "column": "tags"}, 2),
    ({"type": "equals", "column": "tags", "matchValueType": "STRING", "matchValue": "t1"}, 2),
    ({"type": "in", "dimension": "tags", "values": ["t2", "t7"]}, 2),
    ({"type": "in", "dimension": "tags", "values": ["t7", None]}, 3),
    ({"type": "like", "dimension": "tags", "pattern": "t1%"}, 2),
    ({"type": "bound", "dimension": "tags", "lower": "t6", "lowerStrict": True}, 1),
    ({"type": "not", "field": {"type": "selector", "dimension": "tags", "value": "t1"}}, 2),
    ({"type": "or", "fields": [{"type": "selector", "dimension": "tags", "value": "t1"},
                               {"type": "selector", "dimension": "tags", "value": "t3"}]}, 3),
])
def test_native_filters_match_a_row_when_any_value_matches(broker: Broker, native_filter: dict[str, Any],
                                                           rows: int) -> None:
    [result] = _native(broker, {"queryType": "timeseries", "filter": native_filter,
                                "aggregations": [{"type": "count", "name": "rows"}]})
    assert result["result"] == {"rows": rows}


def test_native_search_answers_the_matching_values_only(broker: Broker) -> None:
    [result] = _native(broker, {"queryType": "search", "granularity": "all", "searchDimensions": ["tags"],
                                "query": {"type": "contains", "value": "5"}})
    assert result["result"] == [{"dimension": "tags", "value": "t5", "count": 2}]


def test_native_scan_returns_the_values_as_a_json_array(broker: Broker) -> None:
    batches = _native(broker, {"queryType": "scan", "columns": ["label", "tags"], "order": "ascending",
                               "filter": {"type": "in", "dimension": "label", "values": ["row0", "row1", "row4"]}})
    assert [event for batch in batches for event in batch["events"]] == [
        {"label": "row0", "tags": "t1"}, {"label": "row1", "tags": ["t1", "t2", "t3"]}, {"label": "row4", "tags": None}]
    assert batches[0]["rowSignature"] == [{"name": "label", "type": "STRING"}, {"name": "tags", "type": "STRING"}]


def test_segment_metadata_reports_a_string_with_multiple_values(published: Broker) -> None:
    """Of published segments (segmentMetadata analyses those), also when only the older segment is in its intervals."""
    broker = published
    [merged] = _native(broker, {"queryType": "segmentMetadata", "merge": True,
                                "analysisTypes": ["cardinality", "minmax"]})
    tags = merged["columns"]["tags"]
    assert (tags["type"], tags["typeSignature"], tags["hasMultipleValues"], tags["hasNulls"]) == (
        "STRING", "STRING", True, True)
    assert (tags["cardinality"], tags["minValue"], tags["maxValue"]) == (8, "t1", "t7")  # 7 values and null
    analyses = _native(broker, {"queryType": "segmentMetadata"})
    # the older segment holds one value per row: Druid's column capabilities say it has no multiple values
    assert [a["columns"]["tags"]["hasMultipleValues"] for a in analyses] == [False, True]
    assert merged["columns"]["label"]["hasMultipleValues"] is False
    [older] = NativeQueryRunner(broker).run({"queryType": "segmentMetadata", "dataSource": SOURCE,
                                             "intervals": ["2011-01-11/2011-01-12"]})
    assert (older["columns"]["tags"]["hasMultipleValues"], older["numRows"]) == (False, 2)
