"""SQL-based ingestion statements in → index_parallel payloads (or Druid's 400 message) out; no Spark."""

from __future__ import annotations

import json

import pytest

from sluice.broker.errors import SqlError
from sluice.spec.batch import parse_batch_task
from sluice.sql_ingest.translate import translate

SOURCE = '{"type":"inline","data":"2024-01-01T00:00:00Z,a,1\\n"}'
CSV = '{"type":"csv","columns":["ts","page","added"]}'
SIGNATURE = '[{"name":"ts","type":"string"},{"name":"page","type":"string"},{"name":"added","type":"long"}]'
EXTERN = f"TABLE(EXTERN('{SOURCE}', '{CSV}', '{SIGNATURE}'))"
ETERNITY = "0001-01-01T00:00:00.000Z/9999-12-31T23:59:59.999Z"


def spec(sql: str, context: dict | None = None, catalog=lambda _: None) -> dict:
    payload = translate(sql, context, catalog)
    parse_batch_task(payload)  # every payload is a valid index_parallel task
    return payload


def schema(sql: str, **kwargs) -> dict:
    return spec(sql, **kwargs)["spec"]["dataSchema"]


def error(sql: str, catalog=lambda _: None) -> str:
    with pytest.raises(SqlError) as raised:
        translate(sql, {}, catalog)
    assert raised.value.to_json()["errorCode"] == "invalidInput"
    return raised.value.error_message


def test_insert_from_extern_is_an_append_with_typed_dimensions():
    payload = spec(f"INSERT INTO wiki SELECT TIME_PARSE(ts) AS __time, page, added FROM {EXTERN} PARTITIONED BY DAY")
    assert payload == {"type": "index_parallel", "spec": {
        "dataSchema": {"dataSource": "wiki", "timestampSpec": {"column": "ts", "format": "iso"},
                       "dimensionsSpec": {"dimensions": [{"type": "string", "name": "page"},
                                                         {"type": "long", "name": "added"}]},
                       "metricsSpec": [],
                       "granularitySpec": {"type": "uniform", "segmentGranularity": "DAY", "queryGranularity": "NONE",
                                           "rollup": False, "intervals": None},
                       "transformSpec": {"transforms": [], "filter": None}},
        "ioConfig": {"type": "index_parallel", "inputSource": json.loads(SOURCE), "inputFormat": json.loads(CSV),
                     "appendToExisting": True, "dropExisting": False},
        "tuningConfig": {"type": "index_parallel", "maxNumConcurrentSubTasks": 1, "maxParseExceptions": 0,
                         "maxRowsInMemory": 100000,
                         "partitionsSpec": {"type": "dynamic", "maxRowsPerSegment": 3000000}}},
        "context": {"finalizeAggregations": True}}


def test_extern_with_named_arguments_and_extend():
    payload = spec(f"INSERT INTO w SELECT MILLIS_TO_TIMESTAMP(t) AS __time, x FROM TABLE(EXTERN(inputSource => "
                   f"'{SOURCE}', inputFormat => '{{\"type\":\"json\"}}')) EXTEND (t BIGINT, x DOUBLE) "
                   "PARTITIONED BY 'PT1H'")
    data_schema = payload["spec"]["dataSchema"]
    assert data_schema["timestampSpec"] == {"column": "t", "format": "millis"}
    assert data_schema["dimensionsSpec"]["dimensions"] == [{"type": "double", "name": "x"}]
    assert data_schema["granularitySpec"]["segmentGranularity"] == "HOUR"
    assert payload["spec"]["ioConfig"]["inputFormat"] == {"type": "json"}


@pytest.mark.parametrize("call, source, fmt", [
    ("http(userName => 'bob', password => 's', uris => ARRAY['http://h/a.csv'], format => 'csv')",
     {"type": "http", "uris": ["http://h/a.csv"], "httpAuthenticationUsername": "bob",
      "httpAuthenticationPassword": {"type": "default", "password": "s"}}, "csv"),
    ("inline(data => ARRAY['a,1', 'b,2'], format => 'csv')", {"type": "inline", "data": "a,1\nb,2\n"}, "csv"),
    ("localfiles(baseDir => '/data', filter => '*.json', format => 'json')",
     {"type": "local", "baseDir": "/data", "filter": "*.json"}, "json"),
    ("localfiles(baseDir => '/data', files => ARRAY['a.csv'], format => 'tsv')",
     {"type": "local", "files": ["/data/a.csv"]}, "tsv"),
    ("s3(uris => ARRAY['s3://b/k.csv'], format => 'csv')", {"type": "s3", "uris": ["s3://b/k.csv"]}, "csv"),
])
def test_table_functions(call, source, fmt):
    io = translate(f"INSERT INTO w SELECT x, n FROM TABLE({call}) EXTEND (x VARCHAR, n BIGINT) PARTITIONED BY ALL",
                   {})["spec"]["ioConfig"]
    assert io["inputSource"] == source
    expected = {"type": "json"} if fmt == "json" else {"type": fmt, "columns": ["x", "n"],
                                                      "findColumnsFromHeader": False, "skipHeaderRows": 0}
    assert io["inputFormat"] == expected


def test_without_time_every_row_gets_the_epoch_and_needs_partitioned_by_all():
    data_schema = schema(f"INSERT INTO w SELECT page FROM {EXTERN} PARTITIONED BY ALL TIME")
    assert data_schema["timestampSpec"]["missingValue"] == "1970-01-01T00:00:00.000Z"
    assert data_schema["granularitySpec"]["segmentGranularity"] == "ALL"
    assert "PARTITIONED BY ALL" in error(f"INSERT INTO w SELECT page FROM {EXTERN} PARTITIONED BY DAY")


def test_expressions_become_transforms_in_druid_expression_language():
    data_schema = schema(
        "INSERT INTO w SELECT TIME_PARSE(ts, 'yyyy-MM-dd') AS __time, UPPER(page) AS up, "
        "CONCAT(page, '-', LOWER(page)) AS c, SUBSTRING(page, 2, 3) AS s, added * 2 + 1 AS a, "
        "CAST(added AS DOUBLE) AS d, COALESCE(page, 'none') AS p, "
        f"CASE WHEN added > 5 THEN 'big' ELSE 'small' END AS size FROM {EXTERN} PARTITIONED BY DAY")
    assert data_schema["timestampSpec"] == {"column": "ts", "format": "yyyy-MM-dd"}
    assert {t["name"]: t["expression"] for t in data_schema["transformSpec"]["transforms"]} == {
        "up": 'upper("page")', "c": "concat(\"page\", '-', lower(\"page\"))", "s": 'substring("page", 1, 3)',
        "a": '(("added" * 2) + 1)', "d": "cast(\"added\", 'DOUBLE')", "p": "nvl(\"page\", 'none')",
        "size": "case_searched((\"added\" > 5), 'big', 'small')"}
    assert [(d["name"], d["type"]) for d in data_schema["dimensionsSpec"]["dimensions"]] == [
        ("up", "string"), ("c", "string"), ("s", "string"), ("a", "long"), ("d", "double"), ("p", "string"),
        ("size", "string")]


def test_group_by_is_rollup_with_time_floor_as_query_granularity():
    payload = spec(f"REPLACE INTO w OVERWRITE ALL SELECT TIME_FLOOR(TIME_PARSE(ts), 'PT1H') AS __time, page, "
                   f"COUNT(*) AS cnt, SUM(added) AS added, MIN(added * 1.5) AS lo FROM {EXTERN} GROUP BY 1, page "
                   "PARTITIONED BY DAY CLUSTERED BY page", {"rowsPerSegment": 1000, "maxNumTasks": 4})
    data_schema, tuning = payload["spec"]["dataSchema"], payload["spec"]["tuningConfig"]
    assert data_schema["granularitySpec"] == {"type": "uniform", "segmentGranularity": "DAY",
                                              "queryGranularity": "HOUR", "rollup": True, "intervals": None}
    assert data_schema["metricsSpec"] == [{"type": "count", "name": "cnt"},
                                          {"type": "longSum", "name": "added", "fieldName": "added"},
                                          {"type": "doubleMin", "name": "lo", "fieldName": "__lo_input"}]
    assert tuning["partitionsSpec"] == {"type": "range", "partitionDimensions": ["page"],
                                        "targetRowsPerSegment": 1000}
    assert tuning["forceGuaranteedRollup"] is True and tuning["maxNumConcurrentSubTasks"] == 3
    assert payload["context"]["sqlReplaceTimeChunks"] == "all"
    assert payload["spec"]["ioConfig"]["appendToExisting"] is False
    assert schema(f"INSERT INTO w SELECT FLOOR(TIME_PARSE(ts) TO DAY) AS __time, page FROM {EXTERN} GROUP BY 1, 2 "
                  "PARTITIONED BY MONTH")["granularitySpec"]["queryGranularity"] == "DAY"


def test_replace_overwrite_where_drops_existing_in_the_range():
    payload = spec(f"REPLACE INTO w OVERWRITE WHERE __time >= TIMESTAMP '2024-01-01' AND __time < TIMESTAMP "
                   f"'2024-01-03' SELECT TIME_PARSE(ts) AS __time, page FROM {EXTERN} "
                   "PARTITIONED BY TIME_FLOOR(__time, 'P1D')")
    interval = "2024-01-01T00:00:00.000Z/2024-01-03T00:00:00.000Z"
    assert payload["spec"]["dataSchema"]["granularitySpec"]["intervals"] == [interval]
    assert payload["spec"]["ioConfig"]["dropExisting"] is True
    assert payload["context"]["sqlReplaceTimeChunks"] == interval
    assert "not aligned" in error(f"REPLACE INTO w OVERWRITE WHERE __time >= TIMESTAMP '2024-01-01 06:00:00' AND "
                                  f"__time < TIMESTAMP '2024-01-03' SELECT TIME_PARSE(ts) AS __time, page FROM "
                                  f"{EXTERN} PARTITIONED BY DAY")


def test_where_becomes_the_transform_filter():
    data_schema = schema(f"INSERT INTO w SELECT TIME_PARSE(ts) AS __time, page FROM {EXTERN} WHERE page <> 'x' AND "
                         "(added BETWEEN 1 AND 5 OR page IN ('a', 'b')) AND page IS NOT NULL PARTITIONED BY DAY")
    assert data_schema["transformSpec"]["filter"] == {"type": "and", "fields": [
        {"type": "not", "field": {"type": "selector", "dimension": "page", "value": "x"}},
        {"type": "or", "fields": [
            {"type": "bound", "dimension": "added", "ordering": "numeric", "lower": "1", "lowerStrict": False,
             "upper": "5", "upperStrict": False},
            {"type": "in", "dimension": "page", "values": ["a", "b"]}]},
        {"type": "not", "field": {"type": "selector", "dimension": "page", "value": None}}]}


def test_insert_select_from_a_druid_table_reads_the_druid_input_source():
    catalog = {"wiki": {"__time": "long", "page": "string", "added": "long"}}.get
    payload = spec("INSERT INTO copy SELECT __time, page, added FROM wiki WHERE __time >= TIMESTAMP '2024-01-01' "
                   "AND __time < TIMESTAMP '2024-01-02' AND page = 'a' PARTITIONED BY DAY", catalog=catalog)
    assert payload["spec"]["ioConfig"]["inputSource"] == {
        "type": "druid", "dataSource": "wiki", "interval": "2024-01-01T00:00:00.000Z/2024-01-02T00:00:00.000Z"}
    assert "inputFormat" not in payload["spec"]["ioConfig"]
    data_schema = payload["spec"]["dataSchema"]
    assert data_schema["timestampSpec"] == {"column": "__time", "format": "millis"}
    assert data_schema["transformSpec"]["filter"] == {"type": "selector", "dimension": "page", "value": "a"}
    star = spec("INSERT INTO copy SELECT * FROM wiki PARTITIONED BY DAY", catalog=catalog)
    assert star["spec"]["ioConfig"]["inputSource"]["interval"] == ETERNITY
    assert error("INSERT INTO copy SELECT * FROM nowhere PARTITIONED BY DAY", catalog) == "Object 'nowhere' not found"


def test_clause_words_inside_literals_are_not_clauses():
    data_schema = schema(f"INSERT INTO w SELECT TIME_PARSE(ts) AS __time, 'PARTITIONED BY HOUR' AS note, page "
                         f"FROM {EXTERN} WHERE page = 'CLUSTERED BY x' PARTITIONED BY DAY")
    assert data_schema["granularitySpec"]["segmentGranularity"] == "DAY"
    assert data_schema["transformSpec"]["filter"]["value"] == "CLUSTERED BY x"


def test_context_keys():
    payload = spec(f"INSERT INTO w SELECT TIME_PARSE(ts) AS __time, page FROM {EXTERN} PARTITIONED BY DAY",
                   {"maxNumTasks": 5, "maxParseExceptions": -1, "rowsPerSegment": 10, "custom": "kept"})
    tuning = payload["spec"]["tuningConfig"]
    assert tuning["maxNumConcurrentSubTasks"] == 4 and tuning["maxParseExceptions"] == -1
    assert tuning["partitionsSpec"] == {"type": "dynamic", "maxRowsPerSegment": 10}
    assert payload["context"]["custom"] == "kept"


@pytest.mark.parametrize("sql, message", [
    (f"INSERT INTO w SELECT page FROM {EXTERN}", "Operation [INSERT] requires a PARTITIONED BY"),
    (f"REPLACE INTO w SELECT page FROM {EXTERN} PARTITIONED BY ALL", "Missing time chunk information in OVERWRITE"),
    (f"INSERT INTO w SELECT page FROM {EXTERN} PARTITIONED BY WEEKLY", "Invalid granularity[WEEKLY]"),
    (f"INSERT INTO w SELECT page FROM {EXTERN} PARTITIONED BY ALL CLUSTERED BY page DESC", "DESCENDING"),
    (f"INSERT INTO w SELECT page FROM {EXTERN} ORDER BY page PARTITIONED BY ALL", "use CLUSTERED BY instead"),
    (f"INSERT INTO w SELECT page FROM {EXTERN} LIMIT 10 PARTITIONED BY ALL", "LIMIT"),
    ("INSERT INTO w SELECT a.x FROM a JOIN b ON a.x = b.x PARTITIONED BY ALL", "JOIN"),
    (f"INSERT INTO w SELECT page, ROW_NUMBER() OVER (ORDER BY page) AS r FROM {EXTERN} PARTITIONED BY ALL", "Window"),
    (f"INSERT INTO w SELECT page FROM {EXTERN} WHERE page IN (SELECT 'a') PARTITIONED BY ALL", "Subqueries"),
    (f"INSERT INTO w SELECT page, AVG(added) AS a FROM {EXTERN} GROUP BY page PARTITIONED BY ALL", "AVG"),
    (f"INSERT INTO w SELECT nope FROM {EXTERN} PARTITIONED BY ALL", "Column 'nope' not found"),
    (f"INSERT INTO w SELECT MD5(page) AS m FROM {EXTERN} PARTITIONED BY ALL", "Function MD5 is not supported"),
    (f"INSERT INTO w SELECT page AS __time FROM {EXTERN} PARTITIONED BY ALL", "TIME_PARSE"),
    ("SELECT 1", "/druid/v2/sql"),
])
def test_bad_statements(sql, message):
    assert message in error(sql)


def test_earliest_latest_and_sketches_at_ingestion_are_first_last_and_sketch_aggregators():
    """Druid stores the combinable form of these (pairs, sketches) under finalizeAggregations: false."""
    metrics = schema(
        "INSERT INTO w SELECT TIME_FLOOR(TIME_PARSE(ts), 'PT1H') AS __time, page AS p, COUNT(*) AS cnt, "
        "EARLIEST(added) AS first_added, LATEST(page, 64) AS last_page, DS_HLL(page, 14, 'HLL_8') AS pages, "
        "APPROX_COUNT_DISTINCT_DS_HLL(page) AS pages2, APPROX_COUNT_DISTINCT(page) AS pages3, "
        "DS_THETA(page, 1024) AS pages4, APPROX_COUNT_DISTINCT_DS_THETA(UPPER(page)) AS pages5, "
        "DS_QUANTILES_SKETCH(added * 2, 64) AS q, TDIGEST_GENERATE_SKETCH(added, 50) AS t, "
        f"TDIGEST_GENERATE_SKETCH(added) AS t2 FROM {EXTERN} GROUP BY 1, 2 PARTITIONED BY DAY",
        context={"finalizeAggregations": False})["metricsSpec"]
    assert metrics == [
        {"type": "count", "name": "cnt"},
        {"type": "longFirst", "name": "first_added", "fieldName": "added"},
        {"type": "stringLast", "name": "last_page", "fieldName": "page", "maxStringBytes": 64},
        {"type": "HLLSketchBuild", "name": "pages", "fieldName": "page", "lgK": 14, "tgtHllType": "HLL_8"},
        {"type": "HLLSketchBuild", "name": "pages2", "fieldName": "page"},
        {"type": "HLLSketchBuild", "name": "pages3", "fieldName": "page"},
        {"type": "thetaSketch", "name": "pages4", "fieldName": "page", "size": 1024},
        {"type": "thetaSketch", "name": "pages5", "fieldName": "__pages5_input"},
        {"type": "quantilesDoublesSketch", "name": "q", "fieldName": "__q_input", "k": 64},
        {"type": "tDigestSketch", "name": "t", "fieldName": "added", "compression": 50},
        {"type": "tDigestSketch", "name": "t2", "fieldName": "added"},
    ]


@pytest.mark.parametrize("aggregate", ["EARLIEST(added)", "LATEST(page)", "APPROX_COUNT_DISTINCT(page)",
                                       "APPROX_COUNT_DISTINCT_DS_HLL(page)", "APPROX_COUNT_DISTINCT_DS_THETA(page)"])
def test_finalized_aggregates_are_refused_unless_finalize_aggregations_is_false(aggregate):
    message = error(f"INSERT INTO w SELECT TIME_PARSE(ts) AS __time, page, {aggregate} AS m FROM {EXTERN} "
                    "GROUP BY 1, 2 PARTITIONED BY DAY")
    assert "finalizeAggregations: false" in message
    # sketch functions store the sketch whatever finalizeAggregations says
    schema(f"INSERT INTO w SELECT TIME_PARSE(ts) AS __time, page, DS_HLL(page) AS m FROM {EXTERN} GROUP BY 1, 2 "
           "PARTITIONED BY DAY")


def test_finalize_aggregations_is_read_as_druid_reads_a_context_boolean():
    sql = (f"INSERT INTO w SELECT TIME_PARSE(ts) AS __time, page, EARLIEST(added) AS m FROM {EXTERN} GROUP BY 1, 2 "
           "PARTITIONED BY DAY")
    assert spec(sql, {"finalizeAggregations": "false"})["context"]["finalizeAggregations"] is False
    with pytest.raises(SqlError) as raised:
        translate(sql, {"finalizeAggregations": 0})
    assert raised.value.error_message == "Query context parameter [finalizeAggregations] must be a boolean, got 0"


def test_a_query_without_dimensions_is_refused_rather_than_discovering_every_field():
    assert "needs a column besides __time" in error(
        f"INSERT INTO w SELECT TIME_PARSE(ts) AS __time, SUM(added) AS a FROM {EXTERN} GROUP BY 1 PARTITIONED BY DAY")
