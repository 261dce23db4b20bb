"""The Spark side of a task: Kafka records in -> row counters and rolled-up rows out; persists in -> segment files out.

Records are built in memory (the pipeline's `read` is replaced), so no broker is needed; every expected
value below is worked out by hand from the records of its test.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from sluice.spec.errors import SpecError
from sluice.spec.data_schema import DataSchema
from sluice.spec.granularity import parse_granularity
from sluice.spec.supervisor import KafkaIOConfig, parse_supervisor_spec
from sluice.task.ingest_plan import compile_plan
from sluice.task.kafka_index_task import message_window
from sluice.task.pipeline import PersistResult, RowPipeline
from sluice.task.stats import RowStats

pytestmark = pytest.mark.spark

RAW_SCHEMA = "partition INT, offset BIGINT, timestamp TIMESTAMP, value BINARY"
KAFKA_TIMESTAMP = datetime(2030, 1, 1, tzinfo=UTC)  # the record's own timestamp: never the row's __time


def ms(iso: str) -> int:
    """Epoch millis of an ISO instant; `2024-01-01T00:01` is read as UTC."""
    instant = datetime.fromisoformat(iso)
    return int((instant if instant.tzinfo else instant.replace(tzinfo=UTC)).timestamp() * 1000)


def event(ts: Any = None, **fields: Any) -> str:
    """One JSON record value; `ts` goes in the `ts` field unless it is None."""
    return json.dumps({**({"ts": ts} if ts is not None else {}), **fields})


def records(spark: SparkSession, values: list[str | None]) -> DataFrame:
    """Kafka records of partition 0 at offsets 0, 1, 2, ... with the given values."""
    rows = [(0, offset, KAFKA_TIMESTAMP, None if v is None else v.encode()) for offset, v in enumerate(values)]
    return spark.createDataFrame(rows, RAW_SCHEMA)


def pipeline(spark: SparkSession, **data_schema: Any) -> RowPipeline:
    """A pipeline for the dataSchema `{dataSource: events, timestampSpec: {column: ts}, dimensions: [page]}`
    with the given fields replaced."""
    spec = {"dataSource": "events", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": ["page"]},
            **data_schema}
    return RowPipeline(spark, compile_plan(DataSchema.model_validate(spec)))


def table(df: DataFrame) -> list[dict]:
    """Rows as dicts with `__time` in epoch millis, in a stable order."""
    out = [row.asDict() for row in df.withColumn("__time", F.expr("unix_millis(`__time`)")).collect()]
    return sorted(out, key=lambda r: [(v is None, str(v)) for v in r.values()])


def ingest(p: RowPipeline, values: list[str | None]) -> list[dict]:
    return table(p.rolled_up(p.typed_rows(records(p.spark, values))))


def persist(p: RowPipeline, values: list[str | None], directory: Path, rollup: bool = True) -> PersistResult:
    return p.persist(records(p.spark, values), directory, rollup)


def byte_length(values: list[str | None]) -> int:
    return sum(len(v.encode()) for v in values if v is not None)


# ---------------------------------------------------------------------------------------------------------------
# timestampSpec

TIMESTAMPS = [
    # format, the JSON value of the timestamp field, __time (epoch millis)
    ("auto", "2024-01-01T00:00:01.456Z", ms("2024-01-01T00:00:01.456")),
    ("auto", "2024-01-01T00:00:01.456", ms("2024-01-01T00:00:01.456")),  # no zone: UTC
    ("auto", "2024-01-01 00:00:01.456", ms("2024-01-01T00:00:01.456")),  # a space instead of the 'T'
    ("auto", "2024-01-01T02:00:01.456+02:00", ms("2024-01-01T00:00:01.456")),
    ("auto", "1704067201456", 1704067201456),  # digits are millis
    ("auto", 1704067201456, 1704067201456),
    ("auto", "-1000", -1000),
    ("auto", "2024", 2024),  # digits, however few, are millis, not a year
    ("iso", "2024-01-01T00:00:01.456", ms("2024-01-01T00:00:01.456")),
    ("iso", "2024-01-01T00:00:01Z", ms("2024-01-01T00:00:01")),
    ("iso", "2024-01-01", ms("2024-01-01T00:00:00")),
    ("millis", 1704067201456, 1704067201456),
    ("millis", "1704067201456", 1704067201456),
    ("posix", 1704067201, 1704067201000),
    ("posix", "1704067201", 1704067201000),
    ("micro", 1704067201456789, 1704067201456),  # Druid keeps millis
    ("nano", 1704067201456789123, 1704067201456),
    ("yyyy-MM-dd HH:mm:ss", "2024-01-01 00:00:01", ms("2024-01-01T00:00:01")),
    ("dd/MM/yyyy HH:mm:ss.SSS ZZ", "01/01/2024 02:00:01.456 +02:00", ms("2024-01-01T00:00:01.456")),
    ("yyyyMMdd'T'HHmmss", "20240101T000001", ms("2024-01-01T00:00:01")),
]


@pytest.mark.parametrize("fmt, value, millis", TIMESTAMPS, ids=[f"{f}:{v}" for f, v, _ in TIMESTAMPS])
def test_timestamp_format(spark, fmt, value, millis):
    p = pipeline(spark, timestampSpec={"column": "ts", "format": fmt}, granularitySpec={"rollup": False})
    assert ingest(p, [event(value, page="a")]) == [{"__time": millis, "page": "a"}]


@pytest.mark.parametrize("fmt, good, bad", [
    ("auto", "2024-01-01T00:00:01Z", "yesterday"),
    ("auto", "2024-01-01T00:00:01Z", "01/02/2024"),
    ("iso", "2024-01-01T00:00:01", "2024-13-45T00:00:00"),
    ("millis", "1704067201000", "abc"),
    ("posix", "1704067201", "noon"),
    ("micro", "1704067201000000", "1.5e3"),
    ("yyyy-MM-dd HH:mm:ss", "2024-01-01 00:00:01", "2024-01-01T00:00:01"),  # the pattern has a space, not a 'T'
])
def test_a_timestamp_that_does_not_parse_is_not_ingested(spark, fmt, good, bad):
    p = pipeline(spark, timestampSpec={"column": "ts", "format": fmt}, granularitySpec={"rollup": False})
    assert ingest(p, [event(good, page="good"), event(bad, page="bad")]) == [
        {"__time": ms("2024-01-01T00:00:01"), "page": "good"}]


def test_missing_value_is_used_only_when_the_timestamp_is_absent(spark, tmp_path):
    p = pipeline(spark, timestampSpec={"column": "ts", "format": "iso", "missingValue": "2020-05-05T05:05:05.555Z"},
                 granularitySpec={"rollup": False})
    values = [
        event(page="absent"),
        json.dumps({"ts": None, "page": "null"}),
        event("not a time", page="unparseable"),
        event("2024-01-01T00:00:00Z", page="present"),
        '{"page": "truncated", ',  # malformed JSON: no row, though a record without the timestamp makes one
    ]
    result = persist(p, values, tmp_path / "persist")
    assert result.stats == RowStats(processed=3, unparseable=2, processed_bytes=byte_length(values))
    assert table(p.spark.read.parquet(str(tmp_path / "persist"))) == [
        {"__time": ms("2020-05-05T05:05:05.555"), "page": "absent"},
        {"__time": ms("2020-05-05T05:05:05.555"), "page": "null"},
        {"__time": ms("2024-01-01T00:00:00"), "page": "present"},
    ]


# ---------------------------------------------------------------------------------------------------------------
# row counters: unparseable, processedWithError, thrownAway, processedBytes


def test_unparseable_records_are_counted_and_not_ingested(spark, tmp_path):
    p = pipeline(spark, granularitySpec={"rollup": False})
    values = [
        event("2024-01-01T00:00:00Z", page="Zürich"),  # the only good one; ü is two bytes
        "not json",
        "[1, 2]",
        '"a string"',
        "42",
        "null",
        event(page="no timestamp"),
        event("the day before yesterday", page="bad timestamp"),
        '{"ts": "2024-01-01T00:00:00Z", "page": ',
    ]
    result = persist(p, values, tmp_path / "persist")
    assert result.stats == RowStats(processed=1, unparseable=8, processed_bytes=byte_length(values))
    assert result.parse_error_sample == "partition=0 offset=1: not json"
    assert table(spark.read.parquet(str(tmp_path / "persist"))) == [{"__time": ms("2024-01-01"), "page": "Zürich"}]


def test_a_bad_number_is_a_processed_with_error_row_ingested_with_null_there(spark, tmp_path):
    p = pipeline(spark, dimensionsSpec={"dimensions": ["page", {"name": "n", "type": "long"},
                                                       {"name": "d", "type": "double"}]},
                 metricsSpec=[{"type": "count", "name": "count"}, {"type": "longSum", "name": "added",
                                                                   "fieldName": "added"}],
                 granularitySpec={"rollup": False})
    t = "2024-01-01T00:00:00Z"
    values = [
        event(t, page="ok", n="7", d=0.5, added=3),
        event(t, page="bad long dimension", n="seven", added=4),
        event(t, page="bad double dimension", n=1, d="half", added=5),
        event(t, page="bad longSum input", n=2, added="lots"),
        event(t, page="absent is not an error"),
    ]
    result = persist(p, values, tmp_path / "persist")
    assert result.stats == RowStats(processed=2, processed_with_error=3, processed_bytes=byte_length(values))
    assert table(spark.read.parquet(str(tmp_path / "persist"))) == [
        {"__time": ms(t[:-1]), "page": "absent is not an error", "n": None, "d": None, "count": 1, "added": None},
        {"__time": ms(t[:-1]), "page": "bad double dimension", "n": 1, "d": None, "count": 1, "added": 5},
        {"__time": ms(t[:-1]), "page": "bad long dimension", "n": None, "d": None, "count": 1, "added": 4},
        {"__time": ms(t[:-1]), "page": "bad longSum input", "n": 2, "d": None, "count": 1, "added": None},
        {"__time": ms(t[:-1]), "page": "ok", "n": 7, "d": 0.5, "count": 1, "added": 3},
    ]


def test_rows_the_filter_drops_are_thrown_away(spark, tmp_path):
    p = pipeline(spark, transformSpec={"filter": {"type": "in", "dimension": "page", "values": ["keep", "also"]}},
                 metricsSpec=[{"type": "count", "name": "count"}])
    t = "2024-01-01T00:00:00Z"
    values = [event(t, page="keep"), event(t, page="drop"), event(t, page="also"), event(t, other="no page"),
              event(t, page="keep"), "garbage"]
    result = persist(p, values, tmp_path / "persist")
    assert result.stats == RowStats(processed=3, thrown_away=2, unparseable=1, processed_bytes=byte_length(values))
    assert table(spark.read.parquet(str(tmp_path / "persist"))) == [
        {"__time": ms(t[:-1]), "page": "also", "count": 1},
        {"__time": ms(t[:-1]), "page": "keep", "count": 2},
    ]


# ---------------------------------------------------------------------------------------------------------------
# transformSpec


def test_transforms_run_before_the_filter(spark, tmp_path):
    p = pipeline(
        spark,
        dimensionsSpec={"dimensions": ["countryUpper", {"name": "n", "type": "long"}]},
        granularitySpec={"rollup": False},
        transformSpec={
            "transforms": [
                {"type": "expression", "name": "countryUpper", "expression": "upper(country)"},  # a new column
                {"type": "expression", "name": "n", "expression": "n * 10"},  # replaces the input field
                {"type": "expression", "name": "__time", "expression": "__time + 3600000"},  # moves the row
            ],
            # both sides see transform outputs: upper-cased names and n already multiplied
            "filter": {"type": "and", "fields": [
                {"type": "selector", "dimension": "countryUpper", "value": "SAN SERRIFFE"},
                {"type": "bound", "dimension": "n", "lower": "20", "ordering": "numeric"},
            ]},
        },
    )
    values = [
        event("2024-01-01T00:00:00Z", country="San Serriffe", n=3),  # 30: kept
        event("2024-01-01T00:00:00Z", country="san serriffe", n=1),  # 10: below the bound
        event("2024-01-01T00:00:00Z", country="Elbonia", n=5),  # ELBONIA
    ]
    result = persist(p, values, tmp_path / "persist")
    assert result.stats == RowStats(processed=1, thrown_away=2, processed_bytes=byte_length(values))
    assert table(spark.read.parquet(str(tmp_path / "persist"))) == [
        {"__time": ms("2024-01-01T01:00:00"), "countryUpper": "SAN SERRIFFE", "n": 30}]


def test_an_aggregator_expression_reads_the_fields_and_the_transformed_columns(spark):
    """Druid's `expression` on a numeric aggregator, instead of fieldName: over the row after its transforms."""
    p = pipeline(spark, granularitySpec={"queryGranularity": "DAY"},
                 transformSpec={"transforms": [{"type": "expression", "name": "net", "expression": "added - deleted"}]},
                 metricsSpec=[{"type": "longSum", "name": "doubled", "expression": "net * 2"},
                              {"type": "doubleMax", "name": "ratio", "expression": "added / (deleted + 1.0)"}])
    assert ingest(p, [event("2024-01-01T01:00:00Z", page="a", added=5, deleted=1),
                      event("2024-01-01T02:00:00Z", page="a", added=9, deleted=3)]) == [
        {"__time": ms("2024-01-01T00:00:00"), "page": "a", "doubled": 20, "ratio": 2.5}]


def test_a_time_transform_is_applied_before_query_granularity(spark):
    p = pipeline(spark, granularitySpec={"queryGranularity": "HOUR"}, metricsSpec=[{"type": "count", "name": "count"}],
                 transformSpec={"transforms": [{"type": "expression", "name": "__time",
                                                "expression": "__time - 1800000"}]})
    assert ingest(p, [event("2024-01-01T01:10:00Z", page="a"), event("2024-01-01T01:40:00Z", page="a")]) == [
        {"__time": ms("2024-01-01T00:00:00"), "page": "a", "count": 1},
        {"__time": ms("2024-01-01T01:00:00"), "page": "a", "count": 1},
    ]


# ---------------------------------------------------------------------------------------------------------------
# rollup

EVERY_AGGREGATOR = [
    {"type": "count", "name": "count"},
    {"type": "longSum", "name": "sumV", "fieldName": "v"},
    {"type": "doubleSum", "name": "sumX", "fieldName": "x"},
    {"type": "floatSum", "name": "sumF", "fieldName": "f"},
    {"type": "longMin", "name": "minV", "fieldName": "v"},
    {"type": "longMax", "name": "maxV", "fieldName": "v"},
    {"type": "doubleMin", "name": "minX", "fieldName": "x"},
    {"type": "doubleMax", "name": "maxX", "fieldName": "x"},
    {"type": "floatMin", "name": "minF", "fieldName": "f"},
    {"type": "floatMax", "name": "maxF", "fieldName": "f"},
]

ROLLUP_EVENTS = [
    event("2024-01-01T00:00:10Z", page="a", v=1, x=1.5, f=0.25),
    event("2024-01-01T00:00:50Z", page="a", v=5, x=-2.0),  # no f
    event("2024-01-01T00:01:05Z", page="a", x=4.0, f=0.5),  # no v
    event("2024-01-01T00:30:00Z", page="b", v=7, x=0.5, f=1.0),
    event("2024-01-01T01:15:00Z", page="a", v=3),  # no x, no f
]


def metrics(count, sum_v, sum_x, sum_f, min_v, max_v, min_x, max_x, min_f, max_f) -> dict:
    return {"count": count, "sumV": sum_v, "sumX": sum_x, "sumF": sum_f, "minV": min_v, "maxV": max_v,
            "minX": min_x, "maxX": max_x, "minF": min_f, "maxF": max_f}


@pytest.mark.parametrize("query_granularity, expected", [
    ("MINUTE", [
        {"__time": ms("2024-01-01T00:00"), "page": "a", **metrics(2, 6, -0.5, 0.25, 1, 5, -2.0, 1.5, 0.25, 0.25)},
        {"__time": ms("2024-01-01T00:01"), "page": "a", **metrics(1, None, 4.0, 0.5, None, None, 4.0, 4.0, 0.5, 0.5)},
        {"__time": ms("2024-01-01T00:30"), "page": "b", **metrics(1, 7, 0.5, 1.0, 7, 7, 0.5, 0.5, 1.0, 1.0)},
        {"__time": ms("2024-01-01T01:15"), "page": "a", **metrics(1, 3, None, None, 3, 3, None, None, None, None)},
    ]),
    ("HOUR", [
        {"__time": ms("2024-01-01T00:00"), "page": "a", **metrics(3, 6, 3.5, 0.75, 1, 5, -2.0, 4.0, 0.25, 0.5)},
        {"__time": ms("2024-01-01T00:00"), "page": "b", **metrics(1, 7, 0.5, 1.0, 7, 7, 0.5, 0.5, 1.0, 1.0)},
        {"__time": ms("2024-01-01T01:00"), "page": "a", **metrics(1, 3, None, None, 3, 3, None, None, None, None)},
    ]),
])
def test_rollup_at_query_granularity_with_every_aggregator_ignoring_nulls(spark, query_granularity, expected):
    p = pipeline(spark, metricsSpec=EVERY_AGGREGATOR, granularitySpec={"queryGranularity": query_granularity})
    assert ingest(p, ROLLUP_EVENTS) == expected


def test_rollup_groups_by_every_dimension_and_null_is_a_value(spark):
    p = pipeline(spark, dimensionsSpec={"dimensions": ["page", "user"]}, metricsSpec=[{"type": "count", "name": "n"}],
                 granularitySpec={"queryGranularity": "DAY"})
    t = "2024-01-01T05:00:00Z"
    assert ingest(p, [event(t, page="a", user="u"), event(t, page="a", user="u"), event(t, page="a", user="v"),
                      event(t, page="a"), event(t, page="a", user=None)]) == [
        {"__time": ms("2024-01-01"), "page": "a", "user": "u", "n": 2},
        {"__time": ms("2024-01-01"), "page": "a", "user": "v", "n": 1},
        {"__time": ms("2024-01-01"), "page": "a", "user": None, "n": 2},
    ]


def test_a_persist_not_rolled_up_can_count_the_rows_it_would_roll_up_into(spark, tmp_path):
    """What rollup_policy decides on instead of a shuffle: the distinct keys of the rows kept, not of the
    unparseable or filtered ones."""
    p = pipeline(spark, dimensionsSpec={"dimensions": ["page", "user"]}, metricsSpec=[{"type": "count", "name": "n"}],
                 granularitySpec={"queryGranularity": "HOUR"}, transformSpec={"filter": {
                     "type": "not", "field": {"type": "selector", "dimension": "page", "value": "dropped"}}})
    values = [event("2024-01-01T05:00:00Z", page="a", user="u"), event("2024-01-01T05:59:00Z", page="a", user="u"),
              event("2024-01-01T05:10:00Z", page="a"), event("2024-01-01T05:20:00Z", page="a", user=None),
              event("2024-01-01T06:00:00Z", page="a", user="u"), event("2024-01-01T05:00:00Z", page="b", user="u"),
              event("2024-01-01T05:00:00Z", page="dropped", user="x"), "not json"]
    counted = persist(p, values, tmp_path / "counted", rollup=False)
    assert counted.rollup_keys is None  # not asked for
    result = p.persist(records(p.spark, values), tmp_path / "keys", rollup=False, count_keys=True)
    assert (result.stats.processed, result.stats.thrown_away, result.stats.unparseable) == (6, 1, 1)
    assert result.rollup_keys == 4  # (05:00, a, u), (05:00, a, null), (06:00, a, u), (05:00, b, u)
    assert pq.read_table(tmp_path / "keys").num_rows == 6  # written as read


def test_without_rollup_every_event_is_a_row(spark):
    p = pipeline(spark, metricsSpec=[{"type": "count", "name": "count"}, {"type": "longSum", "name": "v",
                                                                          "fieldName": "v"}],
                 granularitySpec={"rollup": False, "queryGranularity": "MINUTE"})
    same = event("2024-01-01T00:00:10Z", page="a", v=2)
    assert ingest(p, [same, same, event("2024-01-01T00:00:20Z", page="a", v=5)]) == [
        {"__time": ms("2024-01-01T00:00"), "page": "a", "count": 1, "v": 2},
        {"__time": ms("2024-01-01T00:00"), "page": "a", "count": 1, "v": 2},
        {"__time": ms("2024-01-01T00:00"), "page": "a", "count": 1, "v": 5},
    ]


# ---------------------------------------------------------------------------------------------------------------
# persists and merge

MERGE_METRICS = [
    {"type": "count", "name": "count"},
    {"type": "longSum", "name": "sum", "fieldName": "v"},
    {"type": "longMin", "name": "min", "fieldName": "v"},
    {"type": "longMax", "name": "max", "fieldName": "v"},
    {"type": "doubleMax", "name": "maxX", "fieldName": "x"},
]
FIRST = [
    event("2024-01-01T00:00:10Z", page="a", v=5, x=1.0),
    event("2024-01-01T00:00:40Z", page="a", v=1),
    event("2024-01-01T00:05:00Z", page="a", v=2),
    event("2024-01-01T01:10:00Z", page="a", v=8),
    "unparseable",
]
SECOND = [
    event("2024-01-01T00:00:30Z", page="a", v=-3, x=2.5),
    event("2024-01-01T00:00:59Z", page="a", v=9),
    event("2024-01-01T01:10:30Z", page="a", v=2),
    event("2024-01-01T02:00:00Z", page="b", v=4),
]

#: FIRST and SECOND rolled up at MINUTE with MERGE_METRICS
ROLLED_UP = [
    {"__time": ms("2024-01-01T00:00"), "page": "a", "count": 4, "sum": 12, "min": -3, "max": 9, "maxX": 2.5},
    {"__time": ms("2024-01-01T00:05"), "page": "a", "count": 1, "sum": 2, "min": 2, "max": 2, "maxX": None},
    {"__time": ms("2024-01-01T01:10"), "page": "a", "count": 2, "sum": 10, "min": 2, "max": 8, "maxX": None},
    {"__time": ms("2024-01-01T02:00"), "page": "b", "count": 1, "sum": 4, "min": 4, "max": 4, "maxX": None},
]


@pytest.fixture(scope="module")
def two_persists(spark, tmp_path_factory) -> tuple[RowPipeline, list[Path], list[PersistResult]]:
    """FIRST and SECOND read and persisted once for the merge tests (each merge writes its own staging dir)."""
    p = pipeline(spark, metricsSpec=MERGE_METRICS, granularitySpec={"queryGranularity": "MINUTE"})
    directory = tmp_path_factory.mktemp("persists")
    dirs = [directory / "persist-0", directory / "persist-1"]
    return p, dirs, [persist(p, FIRST, dirs[0]), persist(p, SECOND, dirs[1])]


def test_each_persist_counts_its_own_rows(two_persists):
    _, _, (first, second) = two_persists
    assert first.stats == RowStats(processed=4, unparseable=1, processed_bytes=byte_length(FIRST))
    assert second.stats == RowStats(processed=4, processed_bytes=byte_length(SECOND))
    assert first.stats + second.stats == RowStats(processed=8, unparseable=1,
                                                  processed_bytes=byte_length(FIRST) + byte_length(SECOND))


def test_merge_combines_persists_count_sums_min_of_mins_max_of_maxes(spark, two_persists, tmp_path):
    p, dirs, _ = two_persists
    files = p.merge(dirs, parse_granularity("HOUR"), 100, tmp_path / "staging")
    assert [(f.bucket_start_millis, f.num_rows) for f in files] == [
        (ms("2024-01-01T00:00"), 2), (ms("2024-01-01T01:00"), 1), (ms("2024-01-01T02:00"), 1)]
    merged = spark.read.parquet(*(str(f.path) for f in files)).select("__time", "page", "count", "sum", "min", "max",
                                                                      "maxX")
    assert table(merged) == ROLLED_UP


def test_persists_not_rolled_up_merge_into_the_same_segments(spark, two_persists, tmp_path):
    """A persist may leave the rollup to the merge (when rows hardly combine): the segments are the same."""
    p, dirs, _ = two_persists
    raw = [tmp_path / "raw-0", tmp_path / "raw-1"]
    persist(p, FIRST, raw[0], rollup=False)
    persist(p, SECOND, raw[1], rollup=False)
    assert spark.read.parquet(str(raw[0])).count() == 4  # every kept row of FIRST, none combined yet

    def merged(directories: list[Path], staging: str) -> list[dict]:
        files = p.merge(directories, parse_granularity("HOUR"), 100, tmp_path / staging)
        return table(spark.read.parquet(*(str(f.path) for f in files)).drop("__bucket"))

    assert merged(raw, "from-raw") == merged(dirs, "from-rolled-up")
    assert merged([raw[0], dirs[1]], "mixed") == merged(dirs, "from-rolled-up-again")


@pytest.mark.parametrize("max_rows", [100, 1])
@pytest.mark.parametrize("subtasks", ["one", "two, rolled up perfectly"])
def test_a_batch_tasks_single_job_writes_the_segments_the_merge_of_its_persists_would(spark, two_persists, tmp_path,
                                                                                     max_rows, subtasks):
    """One subtask, or (a SQL GROUP BY's) perfect rollup over several: every row of a key in one writer."""
    p, dirs, (first, second) = two_persists
    read = [records(spark, FIRST + SECOND)] if subtasks == "one" else [records(spark, FIRST), records(spark, SECOND)]
    result, files = p.write_segments(read, parse_granularity("HOUR"), max_rows, tmp_path / "segments",
                                     perfect_rollup=subtasks != "one")
    assert result.stats == first.stats + second.stats
    assert result.parse_error_sample is not None and "unparseable" in result.parse_error_sample
    merged = p.merge(dirs, parse_granularity("HOUR"), max_rows, tmp_path / "merged")
    assert sorted((f.bucket_start_millis, f.num_rows) for f in files) == \
        sorted((f.bucket_start_millis, f.num_rows) for f in merged)

    def rows(segment_files: list) -> list[dict]:
        return table(spark.read.parquet(*(str(f.path) for f in segment_files)))

    assert rows(files) == rows(merged)


def test_a_batch_tasks_subtasks_each_roll_up_and_write_their_own_rows_which_queries_add_up(spark, two_persists,
                                                                                            tmp_path):
    """Dynamic partitioning is best-effort rollup, as in Druid: with no shuffle between the subtasks, a key both
    read is a row in each one's segment of the time chunk; aggregated as a query does, the answers are perfect
    rollup's."""
    p, _, (first, second) = two_persists
    result, files = p.write_segments([records(spark, FIRST), records(spark, SECOND)], parse_granularity("HOUR"), 100,
                                     tmp_path / "segments")
    assert result.stats == first.stats + second.stats
    assert result.parse_error_sample is not None and "unparseable" in result.parse_error_sample
    assert sorted((f.bucket_start_millis, f.num_rows) for f in files) == [
        (ms("2024-01-01T00:00"), 1), (ms("2024-01-01T00:00"), 2),  # 00:00 "a" in both, 00:05 in FIRST's only
        (ms("2024-01-01T01:00"), 1), (ms("2024-01-01T01:00"), 1), (ms("2024-01-01T02:00"), 1)]
    queried = spark.read.parquet(*(str(f.path) for f in files)).groupBy("__time", "page").agg(
        F.sum("count").alias("count"), F.sum("sum").alias("sum"), F.min("min").alias("min"),
        F.max("max").alias("max"), F.max("maxX").alias("maxX"))
    assert table(queried) == ROLLED_UP


def test_each_segment_file_holds_one_bucket_only(spark, two_persists, tmp_path):
    p, dirs, _ = two_persists
    for f in p.merge(dirs, parse_granularity("HOUR"), 100, tmp_path / "staging"):
        times = [r[0] for r in spark.read.parquet(str(f.path)).selectExpr("unix_millis(`__time`)").collect()]
        assert all(f.bucket_start_millis <= t < f.bucket_start_millis + 3_600_000 for t in times)


@pytest.mark.parametrize("segment_granularity, max_rows, expected", [
    ("HOUR", 1, [(ms("2024-01-01T00:00"), 1), (ms("2024-01-01T00:00"), 1),
                 (ms("2024-01-01T01:00"), 1), (ms("2024-01-01T02:00"), 1)]),
    ("DAY", 100, [(ms("2024-01-01"), 4)]),
    ("DAY", 3, [(ms("2024-01-01"), 1), (ms("2024-01-01"), 3)]),
    ("DAY", 2, [(ms("2024-01-01"), 2), (ms("2024-01-01"), 2)]),
])
def test_merge_splits_files_at_max_rows_per_segment_within_each_bucket(two_persists, tmp_path, segment_granularity,
                                                                      max_rows, expected):
    p, dirs, _ = two_persists
    files = p.merge(dirs, parse_granularity(segment_granularity), max_rows, tmp_path / "staging")
    assert sorted((f.bucket_start_millis, f.num_rows) for f in files) == expected
    assert all(f.path.exists() for f in files)


def test_merge_of_one_persist_splits_its_rolled_up_rows_into_buckets(spark, two_persists, tmp_path):
    p, dirs, _ = two_persists
    files = p.merge(dirs[:1], parse_granularity("HOUR"), 100, tmp_path / "staging")
    assert [(f.bucket_start_millis, f.num_rows) for f in files] == [(ms("2024-01-01T00:00"), 2),
                                                                   (ms("2024-01-01T01:00"), 1)]
    merged = spark.read.parquet(*(str(f.path) for f in files)).select("__time", "page", "count", "sum", "min", "max")
    assert table(merged) == [
        {"__time": ms("2024-01-01T00:00"), "page": "a", "count": 2, "sum": 6, "min": 1, "max": 5},
        {"__time": ms("2024-01-01T00:05"), "page": "a", "count": 1, "sum": 2, "min": 2, "max": 2},
        {"__time": ms("2024-01-01T01:10"), "page": "a", "count": 1, "sum": 8, "min": 8, "max": 8},
    ]


def test_merge_without_rollup_keeps_every_row_of_every_persist(spark, tmp_path):
    p = pipeline(spark, metricsSpec=[{"type": "count", "name": "count"}], granularitySpec={"rollup": False})
    same = event("2024-01-01T00:00:00Z", page="a")
    dirs = [tmp_path / "persist-0", tmp_path / "persist-1"]
    persist(p, [same, same], dirs[0])
    persist(p, [same], dirs[1])
    files = p.merge(dirs, parse_granularity("DAY"), 100, tmp_path / "staging")
    assert [(f.bucket_start_millis, f.num_rows) for f in files] == [(ms("2024-01-01"), 3)]


# ---------------------------------------------------------------------------------------------------------------
# RowStats


def test_row_stats_add_up_and_speak_druid():
    total = RowStats(processed=3, processed_with_error=1, unparseable=2, processed_bytes=100) + RowStats(
        processed=1, thrown_away=4, unparseable=1, processed_bytes=20)
    assert total == RowStats(processed=4, processed_with_error=1, thrown_away=4, unparseable=3, processed_bytes=120)
    assert total.parse_exceptions == 4  # unparseable + processedWithError
    assert total.to_json() == {"processed": 4, "processedWithError": 1, "thrownAway": 4, "unparseable": 3,
                               "processedBytes": 120}


# ---------------------------------------------------------------------------------------------------------------
# known bugs (see the reasons)


@pytest.mark.parametrize("values, unparseable, thrown_away", [
    (["nope", "{"], 2, 0),
    ([event("2024-01-01T00:00:00Z", page="drop")], 0, 1),
    ([], 0, 0),
], ids=["all-unparseable", "all-thrown-away", "no-records"])
def test_a_batch_with_no_surviving_row_still_reports_its_counters(spark, tmp_path, values, unparseable, thrown_away):
    p = pipeline(spark, metricsSpec=[{"type": "count", "name": "count"}],
                 transformSpec={"filter": {"type": "selector", "dimension": "page", "value": "keep"}})
    assert persist(p, values, tmp_path / "persist").stats == RowStats(
        unparseable=unparseable, thrown_away=thrown_away, processed_bytes=byte_length(values))


def test_names_with_dots_are_plain_column_names(spark):
    p = pipeline(spark, dimensionsSpec={"dimensions": ["user.name"]},
                 metricsSpec=[{"type": "longSum", "name": "added.total", "fieldName": "added"}])
    assert ingest(p, [event("2024-01-01T00:00:00Z", **{"user.name": "bob", "added": 3})]) == [
        {"__time": ms("2024-01-01"), "user.name": "bob", "added.total": 3}]


def test_dimension_names_differing_only_in_case_are_rejected_by_the_spec():
    # JSON field names are case-sensitive in Spark (as in Druid), but DuckDB, which answers queries, is not
    with pytest.raises(SpecError, match="compared ignoring case"):
        parse_supervisor_spec({"type": "kafka", "spec": {
            "dataSchema": {"dataSource": "d", "dimensionsSpec": {"dimensions": ["Page", "page"]}},
            "ioConfig": {"topic": "t", "inputFormat": {"type": "json"},
                         "consumerProperties": {"bootstrap.servers": "x"}}}})


# ---------------------------------------------------------------------------------------------------------------
# message rejection windows (druid-api.md §2.2): the task's window, fixed at its creation, drops rows as thrownAway

TASK_CREATED = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


def windowed(spark: SparkSession, io: dict, **data_schema: Any) -> RowPipeline:
    """`pipeline(...)` with the window of a task created at TASK_CREATED, with taskDuration PT1H and these
    ioConfig fields."""
    io_config = KafkaIOConfig.model_validate({"topic": "events", "inputFormat": {"type": "json"}, "taskDuration": "PT1H",
                                              "consumerProperties": {"bootstrap.servers": "unused:9092"}, **io})
    p = pipeline(spark, **data_schema)
    return RowPipeline(spark, p.plan, message_window(io_config, TASK_CREATED))


WINDOWS = [
    # ioConfig fields, then (timestamp, kept?) of one event each
    ({"lateMessageRejectionStartDateTime": "2024-01-01T11:00:00Z"}, [
        ("2000-01-01T00:00:00Z", False),
        ("2024-01-01T10:59:59.999Z", False),
        ("2024-01-01T11:00:00.000Z", True),  # the bound itself is kept
        ("2024-01-01T12:00:00Z", True),
        ("2030-06-01T00:00:00Z", True),  # no early bound
    ]),
    ({"lateMessageRejectionPeriod": "PT2H"}, [  # created 12:00 - 2h = 10:00
        ("2000-01-01T00:00:00Z", False),
        ("2024-01-01T09:59:59.999Z", False),
        ("2024-01-01T10:00:00.000Z", True),
        ("2024-01-01T12:00:00Z", True),
        ("2030-06-01T00:00:00Z", True),
    ]),
    ({"earlyMessageRejectionPeriod": "PT30M"}, [  # created 12:00 + taskDuration 1h + 30m = 13:30
        ("2000-01-01T00:00:00Z", True),  # no late bound
        ("2024-01-01T12:00:00Z", True),
        ("2024-01-01T13:30:00.000Z", True),
        ("2024-01-01T13:30:00.000900Z", True),  # still 13:30:00.000 in Druid's milliseconds
        ("2024-01-01T13:30:00.001Z", False),
        ("2030-06-01T00:00:00Z", False),
    ]),
]


@pytest.mark.parametrize("io, events", WINDOWS, ids=[next(iter(io)) for io, _ in WINDOWS])
def test_rows_outside_the_message_window_are_thrown_away_and_not_rolled_up(spark, tmp_path, io, events):
    p = windowed(spark, io, metricsSpec=[{"type": "count", "name": "count"}])
    values = [event(ts, page=f"row{i}") for i, (ts, _) in enumerate(events)]
    kept = [(i, ts) for i, (ts, keep) in enumerate(events) if keep]
    result = persist(p, values, tmp_path / "persist")
    assert result.stats == RowStats(processed=len(kept), thrown_away=len(events) - len(kept),
                                    processed_bytes=byte_length(values))
    rows = sorted(table(spark.read.parquet(str(tmp_path / "persist"))), key=lambda r: r["page"])
    assert rows == [{"__time": ms(ts.removesuffix("Z")), "page": f"row{i}", "count": 1} for i, ts in kept]


def test_the_window_applies_to_the_transformed_time_alongside_the_filter_and_after_parsing(spark, tmp_path):
    # window 11:00 .. 14:00 (late PT1H, early PT1H); the transform moves every row one hour later first
    p = windowed(spark, {"lateMessageRejectionPeriod": "PT1H", "earlyMessageRejectionPeriod": "PT1H"},
                 metricsSpec=[{"type": "count", "name": "count"}], granularitySpec={"queryGranularity": "HOUR"},
                 transformSpec={"transforms": [{"type": "expression", "name": "__time", "expression": "__time + 3600000"}],
                                "filter": {"type": "not", "field": {"type": "selector", "dimension": "page",
                                                                   "value": "drop"}}})
    values = [
        event("2024-01-01T09:59:59Z", page="a"),  # 10:59:59 after the transform: too late
        event("2024-01-01T10:00:00Z", page="a"),  # 11:00: kept
        event("2024-01-01T10:30:00Z", page="a"),  # 11:30: kept
        event("2024-01-01T10:30:00Z", page="drop"),  # inside the window, dropped by the filter
        event("2024-01-01T09:00:00Z", page="drop"),  # outside and filtered: thrown away once
        event("2024-01-01T13:00:00Z", page="b"),  # 14:00: kept
        event("2024-01-01T13:00:01Z", page="b"),  # 14:00:01: too early
        "not json",  # unparseable, not thrown away
        event(page="no time"),  # unparseable too
    ]
    result = persist(p, values, tmp_path / "persist")
    assert result.stats == RowStats(processed=3, thrown_away=4, unparseable=2, processed_bytes=byte_length(values))
    assert table(spark.read.parquet(str(tmp_path / "persist"))) == [
        {"__time": ms("2024-01-01T11:00"), "page": "a", "count": 2},
        {"__time": ms("2024-01-01T14:00"), "page": "b", "count": 1},
    ]


def test_without_rejection_settings_no_row_is_thrown_away_for_its_time(spark, tmp_path):
    p = windowed(spark, {}, metricsSpec=[{"type": "count", "name": "count"}])
    values = [event("1970-01-01T00:00:00Z", page="a"), event("2999-01-01T00:00:00Z", page="a")]
    assert persist(p, values, tmp_path / "persist").stats == RowStats(processed=2, processed_bytes=byte_length(values))


@pytest.mark.parametrize("spec", [
    "HOUR", "WEEK", "MONTH", "QUARTER", "YEAR", {"type": "period", "period": "PT3H"},
    {"type": "period", "period": "P2W"}, {"type": "period", "period": "P7M"},
    {"type": "period", "period": "P1Y", "origin": "2020-04-01T00:00:00Z"},
    {"type": "period", "period": "P1D", "origin": "1970-01-01T06:00:00Z"}, {"type": "period", "period": "P1DT12H"},
    {"type": "duration", "duration": 5_400_000, "origin": "2024-01-01T00:20:00Z"},
], ids=str)
def test_spark_buckets_rows_as_the_segment_intervals_are_named(spark, spec):
    """The pipeline truncates `__time` in Spark SQL, the task names segments in Python: they must agree."""
    granularity = parse_granularity(spec)
    instants = [datetime(1969, 12, 31, 22, 30, tzinfo=UTC), datetime(2024, 2, 29, 13, 47, 31, 123_000, tzinfo=UTC),
                datetime(2023, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC), datetime(2024, 3, 1, tzinfo=UTC),
                datetime(2026, 11, 27, 5, 59, 59, tzinfo=UTC)]
    frame = spark.createDataFrame([(i,) for i in instants], "t timestamp")
    buckets = [row[0] for row in frame.select(F.expr(granularity.spark_sql("t"))).collect()]
    assert [b.replace(tzinfo=UTC) for b in buckets] == [granularity.bucket_start(i).replace(tzinfo=UTC) for i in instants]
