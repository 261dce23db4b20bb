"""Druid's dimension discovery on Spark: `dimensions: []` (schemaless, strings), `includeAllDimensions` and
`useSchemaDiscovery` (typed at publish); persists that found different fields merge into one segment of all of them,
and a batch task publishes them as its segments' dimensions, queryable in Druid SQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from sluice.spec.data_schema import DataSchema
from sluice.spec.granularity import parse_granularity
from sluice.task.ingest_plan import compile_plan
from sluice.task.pipeline import RowPipeline
from tests.integration.harness import sql
from tests.integration.test_batch_ingestion import ndjson, run, task

pytestmark = pytest.mark.spark

RAW_SCHEMA = "partition INT, offset BIGINT, timestamp TIMESTAMP, value BINARY"
FIRST = [
    {"ts": "2024-01-01T00:10:00Z", "page": "a", "country": "fr", "n": 1, "size": 3, "ratio": 1.5, "code": 7},
    {"ts": "2024-01-01T00:20:00Z", "page": "a", "country": "fr", "n": 2, "size": 3, "ratio": 2, "code": 8},
    {"ts": "2024-01-01T00:30:00Z", "page": "b", "n": 4, "secret": "s", "nested": {"x": 1}},
]
SECOND = [
    {"ts": "2024-01-01T00:40:00Z", "page": "a", "country": "fr", "n": 8, "size": 3, "ratio": 1.5, "code": "x9"},
    {"ts": "2024-01-01T00:50:00Z", "page": "b", "device": "phone", "n": 16, "size": None},
]


def merged(spark: SparkSession, tmp_path: Path, dimensions_spec: dict[str, Any],
           transforms: list[dict[str, Any]] = (), batches: tuple[list[dict[str, Any]], ...] = (FIRST, SECOND),
           ) -> pq.ParquetFile:
    """The batches (FIRST and SECOND) persisted apart (rolled up at HOUR), merged into one segment."""
    spec = {"dataSource": "d", "timestampSpec": {"column": "ts"}, "dimensionsSpec": dimensions_spec,
            "metricsSpec": [{"type": "count", "name": "rows"}, {"type": "longSum", "name": "n", "fieldName": "n"}],
            "granularitySpec": {"queryGranularity": "HOUR"}, "transformSpec": {"transforms": list(transforms)}}
    p = RowPipeline(spark, compile_plan(DataSchema.model_validate(spec)))
    persists = []
    for i, events in enumerate(batches):
        persists.append(tmp_path / f"persist-{i}")
        records = spark.createDataFrame([(0, o, None, json.dumps(e).encode()) for o, e in enumerate(events)],
                                        RAW_SCHEMA)
        p.persist(records, persists[-1])
    [segment] = p.merge(persists, parse_granularity("DAY"), 1000, tmp_path / "segment")
    return pq.ParquetFile(segment.path)


def rows_of(file: pq.ParquetFile) -> list[dict[str, Any]]:
    return sorted(file.read().to_pylist(), key=lambda r: json.dumps(r, default=str, sort_keys=True))


def test_schemaless_ingestion_makes_every_other_field_a_string_dimension_across_persists(spark, tmp_path):
    file = merged(spark, tmp_path, {"dimensions": [], "dimensionExclusions": ["secret"]})
    # the timestamp column and the metric's input are not dimensions; neither is an excluded field
    assert file.schema_arrow.names == ["__time", "code", "country", "device", "nested", "page", "ratio", "size",
                                       "rows", "n"]
    assert all(str(file.schema_arrow.field(c).type) == "string" for c in ("code", "size", "ratio", "nested"))
    rows = rows_of(file)
    # a: the two fr rows with the same size, ratio 1.5, differ in code; b's two rows differ in device and nested
    assert sorted(((r["page"], r["country"], r["code"], r["device"], r["nested"], r["rows"], r["n"]) for r in rows),
                  key=str) == sorted([
        ("a", "fr", "7", None, None, 1, 1), ("a", "fr", "8", None, None, 1, 2), ("a", "fr", "x9", None, None, 1, 8),
        ("b", None, None, None, '{"x":1}', 1, 4), ("b", None, None, "phone", None, 1, 16)], key=str)


def test_schemaless_ingestion_makes_an_array_a_multi_value_dimension_and_schema_discovery_json(spark, tmp_path):
    """Druid's string discovery ingests an array as a multi-value string in SORTED_ARRAY order (no value is null,
    one a plain value); a persist notes the column and the merge stores it as a list. Schema discovery types it."""
    batches = ([{"ts": "2024-01-01T00:10:00Z", "page": "a", "tags": ["z", "y"], "n": 1},
                {"ts": "2024-01-01T00:20:00Z", "page": "a", "tags": ["y", "z"], "n": 2}],
               [{"ts": "2024-01-01T00:40:00Z", "page": "b", "tags": "solo", "n": 4},
                {"ts": "2024-01-01T00:50:00Z", "page": "c", "tags": [], "n": 8}])
    file = merged(spark, tmp_path / "strings", {"dimensions": []}, batches=batches)
    assert str(file.schema_arrow.field("tags").type) == "list<element: string>"
    assert {(r["page"], tuple(r["tags"] or ()), r["rows"], r["n"]) for r in rows_of(file)} == {
        ("a", ("y", "z"), 2, 3), ("b", ("solo",), 1, 4), ("c", (), 1, 8)}
    # schema discovery makes it Druid's ARRAY<STRING> (a value that is not an array an array of one), held in a struct
    typed = merged(spark, tmp_path / "typed", {"dimensions": [], "useSchemaDiscovery": True}, batches=batches)
    assert str(typed.schema_arrow.field("tags").type) == "struct<array: list<element: string>>"
    assert {(r["page"], tuple(r["tags"]["array"]), r["rows"]) for r in rows_of(typed)} == {
        ("a", ("z", "y"), 1), ("a", ("y", "z"), 1), ("b", ("solo",), 1), ("c", (), 1)}


def test_schema_discovery_types_a_column_long_or_double_when_every_value_is_one(spark, tmp_path):
    file = merged(spark, tmp_path, {"dimensions": ["page"], "useSchemaDiscovery": True})
    types = {f.name: str(f.type) for f in file.schema_arrow}
    assert types["size"] == "int64" and types["ratio"] == "double"
    assert types["code"] == "string"  # x9 is not a number
    assert types["device"] == "string" and types["page"] == "string"
    # a json column, as Druid's auto indexer makes one: its text, and a field column for the long at $.x
    assert types["nested"] == 'struct<json: string, $."x": int64>'
    assert sum(r["rows"] for r in rows_of(file)) == 5


def test_an_auto_dimension_is_typed_by_its_values_at_publish(spark, tmp_path):
    auto = [{"name": name, "type": "auto"} for name in ("size", "ratio", "code", "nested", "device")]
    file = merged(spark, tmp_path, {"dimensions": ["page", *auto]})
    types = {f.name: str(f.type) for f in file.schema_arrow}
    assert (types["size"], types["ratio"], types["code"], types["nested"], types["device"]) == (
        "int64", "double", "string", 'struct<json: string, $."x": int64>', "string")
    assert [r["nested"] for r in rows_of(file) if r["nested"]] == [{"json": '{"x":1}', '$."x"': 1}]


def test_include_all_dimensions_keeps_the_listed_ones_first_and_a_transform_changes_a_discovered_value(
        spark, tmp_path):
    file = merged(spark, tmp_path, {"dimensions": [{"name": "size", "type": "long"}], "includeAllDimensions": True},
                  [{"type": "expression", "name": "country", "expression": "upper(country)"},
                   {"type": "expression", "name": "made", "expression": "concat(page, '!')"}])
    names = file.schema_arrow.names
    assert names[:2] == ["__time", "size"] and str(file.schema_arrow.field("size").type) == "int64"
    assert "made" not in names  # a field a transform makes is not discovered, as in Druid
    assert {r["country"] for r in rows_of(file)} == {"FR", None}


def test_a_batch_task_publishes_the_discovered_dimensions_and_sql_reads_them(http):
    events = [{"ts": f"2024-05-01T0{i % 3}:00:00Z", "channel": f"#c{i % 2}", "user": f"u{i % 5}", "added": i,
               "size": i % 4} for i in range(40)]
    payload = task("discovered", {"type": "inline", "data": ndjson(events)}, {"type": "json"})
    payload["spec"]["dataSchema"]["dimensionsSpec"] = {"dimensions": [], "useSchemaDiscovery": True,
                                                       "dimensionExclusions": ["deleted"]}
    run(http, payload)
    answer = sql(http, "SELECT channel, COUNT(DISTINCT \"user\") AS users, SUM(\"count\") AS n, SUM(size) AS s "
                       "FROM discovered GROUP BY channel ORDER BY channel")
    assert answer == [{"channel": f"#c{c}", "users": len({e["user"] for e in events if e["channel"] == f"#c{c}"}),
                       "n": 20, "s": sum(e["size"] for e in events if e["channel"] == f"#c{c}")} for c in (0, 1)]
    types = sql(http, "SELECT COLUMN_NAME, DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_NAME = 'discovered' "
                      "ORDER BY ORDINAL_POSITION")
    assert [(t["COLUMN_NAME"], t["DATA_TYPE"]) for t in types] == [
        ("__time", "TIMESTAMP"), ("channel", "VARCHAR"), ("size", "BIGINT"), ("user", "VARCHAR"), ("count", "BIGINT"),
        ("added", "BIGINT"), ("deleted", "BIGINT")]
    [segment] = sql(http, "SELECT \"dimensions\" FROM sys.segments WHERE datasource = 'discovered'")
    assert json.loads(segment["dimensions"]) == ["channel", "size", "user"]


def test_a_json_dimension_is_queried_with_druids_json_functions(http):
    """Druid's nested column (`"type": "json"`): objects, arrays, numbers and strings kept as JSON, grouped on, and
    read by JSON_VALUE / JSON_QUERY in SQL; a compaction keeps the column json, and its field columns."""
    events = [{"ts": "2024-05-02T01:00:00Z", "channel": "#a", "payload": {"user": {"name": "ann", "age": 31}}},
              {"ts": "2024-05-02T02:00:00Z", "channel": "#a", "payload": {"user": {"name": "bob"}, "tags": [1, 2]}},
              {"ts": "2024-05-02T03:00:00Z", "channel": "#b", "payload": "plain"},
              {"ts": "2024-05-02T04:00:00Z", "channel": "#b", "payload": 7},
              {"ts": "2024-05-02T05:00:00Z", "channel": "#b"}]
    payload = task("nested", {"type": "inline", "data": ndjson(events)}, {"type": "json"})
    payload["spec"]["dataSchema"]["dimensionsSpec"] = {"dimensions": ["channel", {"name": "payload", "type": "json"}]}
    run(http, payload)
    query = ("SELECT JSON_VALUE(payload, '$.user.name') AS name, JSON_VALUE(payload, '$.user.age' RETURNING BIGINT) "
             "AS age, JSON_QUERY(payload, '$.tags') AS tags, SUM(\"count\") AS n FROM nested GROUP BY 1, 2, 3 "
             "ORDER BY 1 NULLS FIRST")
    expected = [{"name": None, "age": None, "tags": None, "n": 3}, {"name": "ann", "age": 31, "tags": None, "n": 1},
                {"name": "bob", "age": None, "tags": [1, 2], "n": 1}]
    assert sql(http, query) == expected
    assert sql(http, "SELECT TO_JSON_STRING(payload) AS p FROM nested WHERE channel = '#b' ORDER BY __time") == [
        {"p": '"plain"'}, {"p": "7"}, {"p": None}]
    types = sql(http, "SELECT DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_NAME = 'nested' AND "
                      "COLUMN_NAME = 'payload'")
    assert types == [{"DATA_TYPE": "COMPLEX<json>"}]
    # the segment holds a field column per string or long path (nested_fields.py): filters read it, `*` hides it
    bob = "SELECT channel, SUM(\"count\") AS n FROM nested WHERE JSON_VALUE(payload, '$.user.name') = 'bob' GROUP BY 1"
    assert sql(http, bob) == [{"channel": "#a", "n": 1}]
    assert list(sql(http, "SELECT * FROM nested ORDER BY __time LIMIT 1")[0]) == ["__time", "channel", "payload",
                                                                                    "count", "added", "deleted"]
    run(http, {"type": "compact", "dataSource": "nested", "interval": "2024-05-02/2024-05-03"})
    assert sql(http, query) == expected and sql(http, bob) == [{"channel": "#a", "n": 1}]


def test_schema_discovery_makes_arrays_of_primitives_array_columns_that_sql_reads(http):
    """Druid's auto type of a field holding arrays of primitives: ARRAY<STRING>, ARRAY<LONG> or ARRAY<DOUBLE> (not a
    multi-value string), a value that is not an array an array of one. SQL types them as arrays, groups whole arrays
    and reads them with the ARRAY functions; a compaction keeps them."""
    events = [{"ts": "2024-05-03T01:00:00Z", "tags": ["z", "y"], "sizes": [1, 2], "ratios": [0.5, 2]},
              {"ts": "2024-05-03T02:00:00Z", "tags": ["y", "z"], "sizes": [3], "ratios": [1]},
              {"ts": "2024-05-03T03:00:00Z", "tags": "solo", "sizes": [], "ratios": 1.5},
              {"ts": "2024-05-03T04:00:00Z", "tags": ["z", "y"], "sizes": [1, 2]}]
    payload = task("arrays", {"type": "inline", "data": ndjson(events)}, {"type": "json"})
    payload["spec"]["dataSchema"]["dimensionsSpec"] = {"dimensions": [], "useSchemaDiscovery": True}
    run(http, payload)

    def check() -> None:
        types = sql(http, "SELECT COLUMN_NAME, DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_NAME = 'arrays' "
                          "AND COLUMN_NAME IN ('tags', 'sizes', 'ratios') ORDER BY 1")
        assert [(t["COLUMN_NAME"], t["DATA_TYPE"]) for t in types] == [
            ("ratios", "DOUBLE ARRAY"), ("sizes", "BIGINT ARRAY"), ("tags", "VARCHAR ARRAY")]
        grouped = sql(http, 'SELECT tags, SUM("count") AS n FROM arrays GROUP BY tags')  # sqlStringifyArrays
        assert sorted((r["tags"], r["n"]) for r in grouped) == [('["solo"]', 1), ('["y","z"]', 1), ('["z","y"]', 2)]
        assert sql(http, "SELECT COUNT(*) AS z, SUM(ARRAY_LENGTH(sizes)) AS sizes FROM arrays "
                         "WHERE ARRAY_CONTAINS(tags, 'z')") == [{"z": 3, "sizes": 5}]
        ratios = http.post("/druid/v2/sql", json={"query": "SELECT ratios FROM arrays ORDER BY __time",
                                                  "context": {"sqlStringifyArrays": False}})
        assert ratios.json() == [{"ratios": [0.5, 2.0]}, {"ratios": [1.0]}, {"ratios": [1.5]}, {"ratios": None}]

    check()
    run(http, {"type": "compact", "dataSource": "arrays", "interval": "2024-05-03/2024-05-04"})
    check()
