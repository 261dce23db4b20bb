"""Multi-value string dimensions at ingestion, as Druid keeps them: a string dimension whose value is an array holds
its values in the dimension's multiValueHandling (SORTED_ARRAY, SORTED_SET, ARRAY), an empty array is null and one
value a plain value; rows roll up on the whole array; segments store the dimension as a list of strings once a row
had several values, and as plain strings otherwise. Druid SQL then groups them value by value and filters them row by
row (the broker's side is tested in tests/unit/test_multi_value_queries.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from sluice.spec.data_schema import DataSchema
from sluice.spec.granularity import parse_granularity
from sluice.task.ingest_plan import compile_plan
from sluice.task.pipeline import RowPipeline
from sluice.dev.sample_data import SampleRecord, produce
from tests.integration.harness import committed_offsets, sql, supervisor_spec, wait_for
from tests.integration.test_batch_ingestion import ndjson, run, task

pytestmark = pytest.mark.spark

RAW_SCHEMA = "partition INT, offset BIGINT, timestamp TIMESTAMP, value BINARY"
WITH_ARRAYS = [
    {"ts": "2024-01-01T00:10:00Z", "page": "a", "tags": ["b", "a", "b"], "n": 1},
    {"ts": "2024-01-01T00:20:00Z", "page": "a", "tags": ["a", "b", "b"], "n": 2},
    {"ts": "2024-01-01T00:30:00Z", "page": "b", "tags": "solo", "n": 4},
    {"ts": "2024-01-01T00:40:00Z", "page": "c", "tags": [], "n": 8},
    {"ts": "2024-01-01T00:50:00Z", "page": "d", "tags": ["x"], "n": 16},
    {"ts": "2024-01-01T00:55:00Z", "page": "e", "tags": "[draft]", "n": 32},
]
WITHOUT = [
    {"ts": "2024-01-01T00:15:00Z", "page": "a", "tags": "solo", "n": 64},
    {"ts": "2024-01-01T00:25:00Z", "page": "f", "n": 128},
]


def pipeline_of(spark: SparkSession, handling: str) -> RowPipeline:
    spec = {"dataSource": "d", "timestampSpec": {"column": "ts"},
            "dimensionsSpec": {"dimensions": ["page", {"name": "tags", "multiValueHandling": handling}]},
            "metricsSpec": [{"type": "count", "name": "rows"}, {"type": "longSum", "name": "n", "fieldName": "n"}],
            "granularitySpec": {"queryGranularity": "HOUR"}}
    return RowPipeline(spark, compile_plan(DataSchema.model_validate(spec)))


def records(spark: SparkSession, events: list[dict[str, Any]]) -> DataFrame:
    return spark.createDataFrame([(0, o, None, json.dumps(e).encode()) for o, e in enumerate(events)], RAW_SCHEMA)


def segment(spark: SparkSession, tmp_path: Path, handling: str, *persisted: list[dict[str, Any]]) -> pq.ParquetFile:
    """Each list of events persisted apart (rolled up at HOUR), then merged into one segment."""
    pipeline = pipeline_of(spark, handling)
    persists = [tmp_path / f"persist-{i}" for i in range(len(persisted))]
    for events, persist in zip(persisted, persists):
        pipeline.persist(records(spark, events), persist)
    [file] = pipeline.merge(persists, parse_granularity("DAY"), 1000, tmp_path / "segment")
    return pq.ParquetFile(file.path)


def rows_of(file: pq.ParquetFile) -> set[tuple[Any, ...]]:
    return {(r["page"], None if r["tags"] is None else tuple(r["tags"]) if isinstance(r["tags"], list) else r["tags"],
             r["rows"], r["n"]) for r in file.read().to_pylist()}


@pytest.mark.parametrize(("handling", "a_rows"), [
    ("SORTED_ARRAY", {("a", ("a", "b", "b"), 2, 3)}),
    ("sorted_set", {("a", ("a", "b"), 2, 3)}),  # any case, as Druid reads it
    ("ARRAY", {("a", ("b", "a", "b"), 1, 1), ("a", ("a", "b", "b"), 1, 2)}),  # the order kept: two rows
])
def test_a_multi_value_dimension_is_stored_as_a_list_in_its_multi_value_handling(spark, tmp_path, handling, a_rows):
    file = segment(spark, tmp_path, handling, WITH_ARRAYS, WITHOUT)
    assert str(file.schema_arrow.field("tags").type) == "list<element: string>"
    assert rows_of(file) == a_rows | {
        ("b", ("solo",), 1, 4), ("c", None, 1, 8),  # an empty array is null
        ("d", ("x",), 1, 16),  # one value is a plain value, as a list of one in this column
        ("e", ("[draft]",), 1, 32),  # text that is no JSON array is a plain value
        ("a", ("solo",), 1, 64), ("f", None, 1, 128),  # the persist without arrays
    }


@pytest.mark.parametrize(("handling", "stored"), [
    ("SORTED_ARRAY", (None, "a", "b", "b")), ("SORTED_SET", (None, "a", "b")), ("ARRAY", ("b", None, "a", "b"))])
def test_a_null_among_several_values_sorts_first_as_druid_sorts_them(spark, tmp_path, handling, stored):
    event = {"ts": "2024-01-01T00:10:00Z", "page": "g", "tags": ["b", None, "a", "b"], "n": 1}
    assert rows_of(segment(spark, tmp_path, handling, [event])) == {("g", stored, 1, 1)}


def test_text_in_single_quotes_is_no_json_array_as_druids_parser_reads_it(spark, tmp_path):
    """Spark's from_json would take `['b', 'a']` for an array; Druid's JSON parser (Jackson's defaults) does not."""
    event = {"ts": "2024-01-01T00:10:00Z", "page": "h", "tags": "['b', 'a']", "n": 1}
    file = segment(spark, tmp_path, "SORTED_ARRAY", [event])
    assert str(file.schema_arrow.field("tags").type) == "string"
    assert rows_of(file) == {("h", "['b', 'a']", 1, 1)}


def test_a_string_dimension_without_several_values_stays_a_string_column(spark, tmp_path):
    file = segment(spark, tmp_path, "SORTED_ARRAY", WITHOUT, [WITH_ARRAYS[4]])  # ["x"] is one value
    assert str(file.schema_arrow.field("tags").type) == "string"
    assert rows_of(file) == {("a", "solo", 1, 64), ("f", None, 1, 128), ("d", "x", 1, 16)}


def test_a_batch_task_writes_its_segment_again_once_it_knows_a_dimension_is_multi_valued(spark, tmp_path):
    """A batch task's rows go to segment files in one job; the dimension is known to be multi-valued only then."""
    pipeline = pipeline_of(spark, "SORTED_SET")
    result, [file] = pipeline.write_segments([records(spark, WITH_ARRAYS + WITHOUT)], parse_granularity("DAY"), 1000,
                                             tmp_path / "segment")
    assert result.multi_values == ("tags",) and result.stats.processed == 8
    assert str(pq.ParquetFile(file.path).schema_arrow.field("tags").type) == "list<element: string>"
    assert rows_of(pq.ParquetFile(file.path)) == {
        ("a", ("a", "b"), 2, 3), ("b", ("solo",), 1, 4), ("c", None, 1, 8), ("d", ("x",), 1, 16),
        ("e", ("[draft]",), 1, 32), ("a", ("solo",), 1, 64), ("f", None, 1, 128)}
    assert file.num_rows == 7


def test_a_dimension_multi_valued_in_one_subtasks_rows_is_a_list_in_every_subtasks_segment(spark, tmp_path):
    """Each subtask writes its own segment; a segment's columns must not depend on which rows a subtask read."""
    pipeline = pipeline_of(spark, "SORTED_SET")
    result, files = pipeline.write_segments([records(spark, WITH_ARRAYS), records(spark, WITHOUT)],
                                            parse_granularity("DAY"), 1000, tmp_path / "segment")
    assert result.multi_values == ("tags",) and len(files) == 2
    assert {str(pq.ParquetFile(f.path).schema_arrow.field("tags").type) for f in files} == {"list<element: string>"}
    assert set().union(*(rows_of(pq.ParquetFile(f.path)) for f in files)) == {
        ("a", ("a", "b"), 2, 3), ("b", ("solo",), 1, 4), ("c", None, 1, 8), ("d", ("x",), 1, 16),
        ("e", ("[draft]",), 1, 32), ("a", ("solo",), 1, 64), ("f", None, 1, 128)}


TAGGED = [{"ts": "2024-06-01T01:00:00Z", "page": "a", "tags": ["t2", "t1"], "n": 1},
          {"ts": "2024-06-01T02:00:00Z", "page": "b", "tags": ["t3", "t2"], "n": 2},
          {"ts": "2024-06-01T03:00:00Z", "page": "c", "tags": "t1", "n": 4},
          {"ts": "2024-06-01T04:00:00Z", "page": "d", "tags": [], "n": 8}]
# the values as they came (ARRAY), which compaction keeps
TAGGED_SCHEMA = {"timestampSpec": {"column": "ts", "format": "iso"},
                 "dimensionsSpec": {"dimensions": ["page", {"name": "tags", "multiValueHandling": "ARRAY"}]},
                 "metricsSpec": [{"type": "count", "name": "count"},
                                 {"type": "longSum", "name": "n", "fieldName": "n"}]}


def _assert_tagged_reads_value_by_value(http, ds: str) -> None:
    """Druid's answers over TAGGED: grouping gives each value its group, a row with none the null group."""
    assert sql(http, f"SELECT tags, SUM(n) AS n FROM {ds} GROUP BY tags ORDER BY tags NULLS FIRST") == [
        {"tags": None, "n": 8}, {"tags": "t1", "n": 5}, {"tags": "t2", "n": 3}, {"tags": "t3", "n": 2}]
    # the filter keeps whole rows, and grouping then adds every value of the row that has t3
    assert sql(http, f"SELECT tags, SUM(n) AS n FROM {ds} WHERE tags = 't3' GROUP BY tags ORDER BY tags") == [
        {"tags": "t2", "n": 2}, {"tags": "t3", "n": 2}]
    assert sql(http, f"SELECT page, tags FROM {ds} ORDER BY page") == [
        {"page": "a", "tags": '["t2","t1"]'}, {"page": "b", "tags": '["t3","t2"]'}, {"page": "c", "tags": "t1"},
        {"page": "d", "tags": None}]
    assert sql(http, f"SELECT DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_NAME = '{ds}' AND "
                     "COLUMN_NAME = 'tags'") == [{"DATA_TYPE": "VARCHAR"}]


def test_druid_sql_groups_a_batch_tasks_multi_value_dimension_value_by_value_also_after_compaction(http):
    payload = task("tagged", {"type": "inline", "data": ndjson(TAGGED)}, {"type": "json"})
    payload["spec"]["dataSchema"].update(TAGGED_SCHEMA)
    run(http, payload)
    _assert_tagged_reads_value_by_value(http, "tagged")
    run(http, {"type": "compact", "dataSource": "tagged", "interval": "2024-06-01/2024-06-02"})
    _assert_tagged_reads_value_by_value(http, "tagged")


def test_a_streaming_tasks_multi_value_rows_read_the_same_before_and_after_their_publish(node, http, kafka_broker):
    """Before its publish a task's persists hold a row of several values as its JSON array text; the broker reads
    them as the published segment's lists."""
    topic, ds = "tagged-stream", "tagged_stream"
    kafka_broker.create_topic(topic, 1)
    end = produce(kafka_broker.bootstrap_servers, topic,
                  [SampleRecord(json.dumps(e).encode(), None, "valid") for e in TAGGED], 1)
    spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT1H")
    spec["spec"]["dataSchema"].update(TAGGED_SCHEMA)
    assert http.post("/druid/indexer/v1/supervisor", json=spec).status_code == 200
    read = {"query": f"SELECT SUM(n) AS n FROM {ds}"}  # a 400 until the first persist: no such table yet
    wait_for(lambda: http.post("/druid/v2/sql", json=read).json() == [{"n": 15}], 120, "the rows read")
    assert committed_offsets(node, ds) == {0: 0}  # where the task group started: nothing published yet
    _assert_tagged_reads_value_by_value(http, ds)
    assert http.post(f"/druid/indexer/v1/supervisor/{ds}/terminate").status_code == 200
    wait_for(lambda: committed_offsets(node, ds) == end, 120, "the rows published")
    _assert_tagged_reads_value_by_value(http, ds)
