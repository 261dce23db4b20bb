"""Supervisor spec JSON in -> a validated model, or the field path and message a user can act on."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Callable

import pytest
from hypothesis import given
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import strategies as st

from sluice.server.api_supervisor import supervisor_router
from sluice.spec.errors import SpecError
from sluice.spec.supervisor import parse_supervisor_spec
from sluice.periods import format_duration, parse_duration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "wikipedia-kafka-supervisor.json"

#: druid-api.md §2: the minimal valid spec from Druid's supervisor-api.md
DRUID_MINIMAL = {
    "type": "kafka",
    "spec": {
        "ioConfig": {"type": "kafka", "consumerProperties": {"bootstrap.servers": "localhost:9094"},
                     "topic": "social_media", "inputFormat": {"type": "json"}, "useEarliestOffset": True},
        "tuningConfig": {"type": "kafka"},
        "dataSchema": {
            "dataSource": "social_media",
            "timestampSpec": {"column": "__time", "format": "iso"},
            "dimensionsSpec": {"dimensions": ["username", "post_title", {"type": "long", "name": "views"},
                                              {"type": "long", "name": "upvotes"},
                                              {"type": "long", "name": "comments"}, "edited"]},
            "granularitySpec": {"queryGranularity": "none", "rollup": False, "segmentGranularity": "hour"},
        },
    },
}

WIKIPEDIA_DIMENSIONS = [
    "channel", "cityName", "comment", "countryIsoCode", "countryName", "isAnonymous", "isMinor", "isNew", "isRobot",
    "isUnpatrolled", "metroCode", "namespace", "page", "regionIsoCode", "regionName", "user",
    {"name": "added", "type": "long"}, {"name": "deleted", "type": "long"}, {"name": "delta", "type": "long"},
]

#: druid-api.md §3: the spec the older "Load data from Apache Kafka" tutorial submits
DRUID_TUTORIAL = {
    "type": "kafka",
    "spec": {
        "dataSchema": {
            "dataSource": "wikipedia",
            "timestampSpec": {"column": "time", "format": "auto"},
            "dimensionsSpec": {"dimensions": WIKIPEDIA_DIMENSIONS},
            "metricsSpec": [],
            "granularitySpec": {"type": "uniform", "segmentGranularity": "DAY", "queryGranularity": "NONE",
                                "rollup": False},
        },
        "tuningConfig": {"type": "kafka", "reportParseExceptions": False},
        "ioConfig": {"topic": "wikipedia", "inputFormat": {"type": "json"}, "replicas": 2, "taskDuration": "PT10M",
                     "completionTimeout": "PT20M", "consumerProperties": {"bootstrap.servers": "localhost:9092"}},
    },
}

#: druid-api.md §3: the same spec in the legacy parser form of the quickstart file (no `spec` wrapper)
DRUID_LEGACY = {
    "type": "kafka",
    "dataSchema": {
        "dataSource": "wikipedia",
        "parser": {
            "type": "string",
            "parseSpec": {
                "format": "json",
                "timestampSpec": {"column": "time", "format": "auto"},
                "dimensionsSpec": {"dimensions": WIKIPEDIA_DIMENSIONS},
            },
        },
        "metricsSpec": [],
        "granularitySpec": {"type": "uniform", "segmentGranularity": "DAY", "queryGranularity": "NONE",
                            "rollup": False},
    },
    "tuningConfig": {"type": "kafka", "reportParseExceptions": False},
    "ioConfig": {"topic": "wikipedia", "replicas": 2, "taskDuration": "PT10M", "completionTimeout": "PT20M",
                 "consumerProperties": {"bootstrap.servers": "localhost:9092"}},
}

#: the smallest spec Sluice runs; invalid cases below are this plus one change
MINIMAL = {
    "type": "kafka",
    "spec": {
        "dataSchema": {"dataSource": "events", "dimensionsSpec": {"dimensions": ["page"]}},
        "ioConfig": {"topic": "events", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "localhost:9092"}},
    },
}


def example() -> dict:
    return json.loads(EXAMPLE.read_text())


def changed(base: dict, path: str, value: Any) -> dict:
    """A deep copy of `base` with the dotted `path` set to `value` (or removed, for `DELETE`)."""
    payload = copy.deepcopy(base)
    *parents, last = path.split(".")
    node = payload
    for key in parents:
        node = node.setdefault(key, {})
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return payload


DELETE = object()


def spec_error(payload: Any) -> SpecError:
    with pytest.raises(SpecError) as raised:
        parse_supervisor_spec(payload)
    return raised.value


# ---------------------------------------------------------------------------------------------------------------
# accepted specs


@pytest.mark.parametrize("payload, data_source, topic, dimensions", [
    pytest.param(example(), "wikipedia", "wikipedia", 11, id="examples/wikipedia-kafka-supervisor.json"),
    pytest.param(DRUID_MINIMAL, "social_media", "social_media", 6, id="druid-minimal"),
    pytest.param(DRUID_TUTORIAL, "wikipedia", "wikipedia", 19, id="druid-tutorial"),
    pytest.param(DRUID_LEGACY, "wikipedia", "wikipedia", 19, id="druid-legacy-parser"),
    pytest.param(MINIMAL, "events", "events", 1, id="sluice-minimal"),
])
def test_druid_specs_are_accepted(payload, data_source, topic, dimensions):
    spec = parse_supervisor_spec(copy.deepcopy(payload))
    assert spec.id == data_source
    assert spec.spec.data_schema.data_source == data_source
    assert spec.spec.io_config.topic == topic
    assert len(spec.spec.data_schema.dimensions_spec.dimensions) == dimensions


def test_the_example_spec_is_read_as_written():
    spec = parse_supervisor_spec(example())
    schema, io, tuning = spec.spec.data_schema, spec.spec.io_config, spec.spec.tuning_config
    assert (schema.timestamp_spec.column, schema.timestamp_spec.format) == ("time", "iso")
    assert [(m.type, m.name, m.field_name) for m in schema.metrics_spec] == [
        ("count", "count", None), ("longSum", "added", "added"), ("longSum", "deleted", "deleted"),
        ("longSum", "delta", "delta"), ("longMax", "maxDelta", "delta"),
    ]
    assert (schema.granularity_spec.segment_granularity.name, schema.granularity_spec.query_granularity.name) == (
        "HOUR", "MINUTE")
    assert (io.task_count, io.task_duration, io.start_delay, io.period) == (
        2, timedelta(seconds=30), timedelta(seconds=1), timedelta(seconds=2))
    assert io.use_earliest_offset is True
    assert (tuning.max_parse_exceptions, tuning.log_parse_exceptions) == (10000, True)


def test_druid_minimal_spec_dimension_types_and_granularity():
    schema = parse_supervisor_spec(DRUID_MINIMAL).spec.data_schema
    assert [(d.name, d.type) for d in schema.dimensions_spec.dimensions] == [
        ("username", "string"), ("post_title", "string"), ("views", "long"), ("upvotes", "long"),
        ("comments", "long"), ("edited", "string"),
    ]
    assert schema.granularity_spec.segment_granularity.name == "HOUR"
    assert schema.granularity_spec.query_granularity.name == "NONE"
    assert schema.granularity_spec.rollup is False


def test_legacy_parser_form_is_normalised_to_the_current_form():
    legacy = parse_supervisor_spec(copy.deepcopy(DRUID_LEGACY))
    current = parse_supervisor_spec(copy.deepcopy(DRUID_TUTORIAL))
    assert legacy == current
    schema = legacy.spec.data_schema
    assert (schema.timestamp_spec.column, schema.timestamp_spec.format) == ("time", "auto")
    assert schema.dimensions_spec.dimensions[-1].name == "delta"
    assert legacy.spec.io_config.input_format.type == "json"  # the parser's format becomes ioConfig.inputFormat
    assert legacy.spec.io_config.replicas == 2
    assert legacy.spec.io_config.completion_timeout == timedelta(minutes=20)


def test_legacy_parse_spec_without_format_is_tsv_as_in_druid():
    """Druid's ParseSpec defaults to DelimitedParseSpec (tsv), which needs columns."""
    payload = changed(DRUID_LEGACY, "dataSchema.parser.parseSpec.format", DELETE)
    assert spec_error(payload).path == "dataSchema.parser.parseSpec.columns"
    payload = changed(payload, "dataSchema.parser.parseSpec.columns", ["time", "channel"])
    input_format = parse_supervisor_spec(payload).spec.io_config.input_format
    assert (input_format.type, input_format.delimiter, input_format.columns) == ("tsv", "\t", ["time", "channel"])


def test_legacy_form_keeps_top_level_suspended():
    payload = {**copy.deepcopy(DRUID_LEGACY), "suspended": True}
    assert parse_supervisor_spec(payload).suspended is True


# ---------------------------------------------------------------------------------------------------------------
# defaults (druid-api.md §2.1–2.3)


@pytest.mark.parametrize("field, expected", [
    (lambda s: s.spec.io_config.task_count, 1),
    (lambda s: s.spec.io_config.replicas, 1),
    (lambda s: s.spec.io_config.task_duration, timedelta(hours=1)),
    (lambda s: s.spec.io_config.period, timedelta(seconds=30)),
    (lambda s: s.spec.io_config.start_delay, timedelta(seconds=5)),
    (lambda s: s.spec.io_config.completion_timeout, timedelta(minutes=30)),
    (lambda s: s.spec.io_config.use_earliest_offset, False),
    (lambda s: s.spec.io_config.poll_timeout, 100),
    (lambda s: s.spec.tuning_config.max_rows_in_memory, 150_000),
    (lambda s: s.spec.tuning_config.max_rows_per_segment, 5_000_000),
    (lambda s: s.spec.tuning_config.intermediate_persist_period, timedelta(minutes=10)),
    (lambda s: s.spec.tuning_config.max_parse_exceptions, 2_147_483_647),
    (lambda s: s.spec.data_schema.granularity_spec.rollup, True),
    (lambda s: s.spec.data_schema.granularity_spec.segment_granularity.name, "DAY"),
    (lambda s: s.spec.data_schema.granularity_spec.query_granularity.name, "NONE"),
    (lambda s: s.spec.data_schema.timestamp_spec.column, "timestamp"),
    (lambda s: s.spec.data_schema.timestamp_spec.format, "auto"),
    (lambda s: s.spec.data_schema.timestamp_spec.missing_value, None),
    (lambda s: s.spec.data_schema.dimensions_spec.dimensions[0].type, "string"),
    (lambda s: s.spec.data_schema.metrics_spec, []),
    (lambda s: s.spec.data_schema.transform_spec.filter, None),
    (lambda s: s.suspended, False),
], ids=[
    "taskCount", "replicas", "taskDuration", "period", "startDelay", "completionTimeout", "useEarliestOffset",
    "pollTimeout", "maxRowsInMemory", "maxRowsPerSegment", "intermediatePersistPeriod", "maxParseExceptions",
    "rollup", "segmentGranularity", "queryGranularity", "timestampColumn", "timestampFormat", "missingValue",
    "dimensionType", "metricsSpec", "filter", "suspended",
])
def test_defaults(field: Callable, expected):
    assert field(parse_supervisor_spec(copy.deepcopy(MINIMAL))) == expected


def test_report_parse_exceptions_means_no_parse_exception_is_allowed():
    spec = parse_supervisor_spec(changed(MINIMAL, "spec.tuningConfig", {"type": "kafka", "reportParseExceptions": True,
                                                                         "maxParseExceptions": 50}))
    assert spec.spec.tuning_config.effective_max_parse_exceptions() == 0


def test_max_total_rows_null_as_druid_serializes_it_is_accepted():
    spec = parse_supervisor_spec(changed(MINIMAL, "spec.tuningConfig", {
        "type": "kafka", "maxTotalRows": None, "partitionsSpec": {"type": "dynamic", "maxTotalRows": None}}))
    assert spec.spec.tuning_config.max_total_rows is None
    assert spec.spec.tuning_config.partitions_spec.max_total_rows is None
    assert spec.spec.tuning_config.effective_max_total_rows() == 20_000_000  # Druid's default


def test_handoff_limits_are_read_with_druids_names():
    spec = parse_supervisor_spec(changed(MINIMAL, "spec.tuningConfig", {
        "type": "kafka", "maxTotalRows": 1000, "intermediateHandoffPeriod": "PT10M",
        "partitionsSpec": {"type": "dynamic", "maxRowsPerSegment": 200}}))
    tuning = spec.spec.tuning_config
    assert (tuning.effective_max_total_rows(), tuning.intermediate_handoff_period,
            tuning.effective_max_rows_per_segment()) == (1000, timedelta(minutes=10), 200)
    assert parse_supervisor_spec(spec.to_json()).spec.tuning_config == tuning  # stored supervisors keep them


@pytest.mark.parametrize("exclusions", [
    pytest.param(["__time", "time"], id="druid-serialized-form"),
    pytest.param(["time", "added", "count"], id="timestamp-and-metric-columns"),
    pytest.param(["Channel", "ip"], id="names-compare-exactly"),
])
def test_exclusions_that_are_not_dimensions_are_accepted_and_change_no_dimension(exclusions):
    """Druid's GET form lists `__time` and the timestamp column as exclusions: posting it back must work."""
    payload = example()
    payload["spec"]["dataSchema"]["dimensionsSpec"]["dimensionExclusions"] = exclusions
    spec = parse_supervisor_spec(payload)
    dimensions_spec = spec.spec.data_schema.dimensions_spec
    assert dimensions_spec.dimension_exclusions == exclusions
    assert dimensions_spec.dimensions == parse_supervisor_spec(example()).spec.data_schema.dimensions_spec.dimensions
    assert spec.to_json()["spec"]["dataSchema"]["dimensionsSpec"]["dimensionExclusions"] == exclusions


def test_druids_dimensions_spec_defaults_are_accepted_as_its_examples_write_them():
    """Druid's own examples carry `"spatialDimensions": []`; its defaults of the other fields run as written."""
    payload = example()
    payload["spec"]["dataSchema"]["dimensionsSpec"].update(spatialDimensions=[], includeAllDimensions=False,
                                                            useSchemaDiscovery=False, forceSegmentSortByTime=True)
    spec = parse_supervisor_spec(payload)
    assert spec.spec.data_schema.dimensions_spec.dimensions == \
        parse_supervisor_spec(example()).spec.data_schema.dimensions_spec.dimensions
    assert spec.to_json()["spec"]["dataSchema"]["dimensionsSpec"]["spatialDimensions"] == []


def test_partitions_spec_max_rows_per_segment_wins():
    spec = parse_supervisor_spec(changed(MINIMAL, "spec.tuningConfig", {
        "type": "kafka", "maxRowsPerSegment": 10, "partitionsSpec": {"type": "dynamic", "maxRowsPerSegment": 7}}))
    assert spec.spec.tuning_config.effective_max_rows_per_segment() == 7


@pytest.mark.parametrize("text, expected", [
    ("PT1H", timedelta(hours=1)),
    ("PT3600S", timedelta(hours=1)),
    ("PT10M", timedelta(minutes=10)),
    ("PT1H30M15S", timedelta(hours=1, minutes=30, seconds=15)),
    ("PT0.5S", timedelta(milliseconds=500)),
    ("P1D", timedelta(days=1)),
    ("P1W", timedelta(weeks=1)),
    ("P1DT12H", timedelta(days=1, hours=12)),
    ("pt2m", timedelta(minutes=2)),
])
def test_period_text(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text, error", [
    ("P", "'P' is not an ISO-8601 period"), ("PT", "'PT' is not an ISO-8601 period"), ("P1DT", "'P1DT' is not"),
    ("1H", "'1H' is not an ISO-8601 period"), ("PT1X", "'PT1X' is not"), ("", "'' is not an ISO-8601 period"),
    ("30 seconds", "'30 seconds' is not an ISO-8601 period"), ("PT-5S", "period 'PT-5S' is negative"),
    ("P1M", "P1M contains months or years, which vary in length"), ("P1Y", "P1Y contains months or years"),
])
def test_periods_without_a_fixed_length_or_not_iso_are_rejected(text, error):
    with pytest.raises(ValueError, match=error):
        parse_duration(text)


@pytest.mark.parametrize("value, text", [
    (timedelta(hours=1), "PT3600S"), (timedelta(minutes=30), "PT1800S"), (timedelta(milliseconds=1500), "PT1.5S"),
])
def test_periods_are_written_in_whole_seconds_as_druid_serializes_them(value, text):
    assert format_duration(value) == text


@given(hours=st.integers(0, 1000), minutes=st.integers(0, 59), seconds=st.integers(0, 59))
def test_format_then_parse_period_is_identity(hours, minutes, seconds):
    value = timedelta(hours=hours, minutes=minutes, seconds=seconds)
    assert parse_duration(format_duration(value)) == value


@given(hours=st.none() | st.integers(0, 1000), minutes=st.none() | st.integers(0, 10_000),
       seconds=st.none() | st.integers(0, 100_000))
def test_iso_period_text_means_its_parts_and_survives_a_round_trip(hours, minutes, seconds):
    parts = [(hours, "H"), (minutes, "M"), (seconds, "S")]
    if all(n is None for n, _ in parts):
        hours = 0
        parts[0] = (0, "H")
    text = "PT" + "".join(f"{n}{unit}" for n, unit in parts if n is not None)
    value = parse_duration(text)
    assert value == timedelta(hours=hours or 0, minutes=minutes or 0, seconds=seconds or 0)
    assert parse_duration(format_duration(value)) == value


# ---------------------------------------------------------------------------------------------------------------
# invalid specs: the field path, then what is wrong

DOES_NOT_SUPPORT = "Sluice does not support this field"

INVALID = [
    ("spec.dataSchema.dataSource", DELETE,
     "spec.dataSchema.dataSource", "Field required"),
    ("spec.dataSchema.dataSource", "",
     "spec.dataSchema.dataSource", "dataSource cannot be null or empty. Please provide a dataSource."),
    ("spec.ioConfig.topic", DELETE,
     "spec.ioConfig.topic", "Field required"),
    ("spec.ioConfig.consumerProperties", {"group.id": "g"},
     "spec.ioConfig.consumerProperties", "consumerProperties must contain entry for [bootstrap.servers]"),
    ("spec.ioConfig.inputFormat", DELETE,
     "spec.ioConfig.inputFormat", "Field required"),
    ("spec.ioConfig.inputFormat", {"type": "parquet"},
     "spec.ioConfig.inputFormat.type", "inputFormat type 'parquet' reads whole files, not one record per Kafka message"),
    ("spec.dataSchema.metricsSpec", [{"type": "longSum", "name": "added"}],
     "spec.dataSchema.metricsSpec[0].fieldName", "longSum needs fieldName"),
    ("spec.dataSchema.metricsSpec", [{"type": "count", "name": "count"}, {"type": "doubleMax", "name": "m"}],
     "spec.dataSchema.metricsSpec[1].fieldName", "doubleMax needs fieldName"),
    ("spec.dataSchema.metricsSpec", [{"type": "javascript", "name": "users", "fieldName": "user"}],
     "spec.dataSchema.metricsSpec[0].type", "'longSum'"),
    ("spec.dataSchema.metricsSpec", [{"type": "thetaSketch", "name": "users", "fieldName": "user", "size": 1000}],
     "spec.dataSchema.metricsSpec[0].size", "must be a power of 2 from 16 to 67108864, got 1000"),
    ("spec.ioConfig.period", "30 seconds",
     "spec.ioConfig.period", "'30 seconds' is not an ISO-8601 period such as PT1H, P1D or P1M"),
    ("spec.ioConfig.taskDuration", "P1M",
     "spec.ioConfig.taskDuration", "period P1M contains months or years, which vary in length"),
    ("spec.ioConfig.taskDuration", "PT0S",
     "spec.ioConfig.taskDuration", "must be a positive period"),
    ("spec.tuningConfig", {"type": "kafka", "intermediatePersistPeriod": "ten minutes"},
     "spec.tuningConfig.intermediatePersistPeriod", "'ten minutes' is not an ISO-8601 period"),
    ("spec.ioConfig.taskCount", 0,
     "spec.ioConfig.taskCount", "greater than or equal to 1"),
    ("spec.dataSchema.granularitySpec", {"segmentGranularity": "fortnight"},
     "spec.dataSchema.granularitySpec.segmentGranularity", "unknown granularity 'fortnight'"),
    ("spec.dataSchema.granularitySpec", {"queryGranularity": {"type": "period", "period": "PT3H", "timeZone": "CET"}},
     "spec.dataSchema.granularitySpec.queryGranularity", "timeZone 'CET' is not supported"),
    ("spec.dataSchema.granularitySpec", {"segmentGranularity": "NONE"},
     "spec.dataSchema.granularitySpec.segmentGranularity", "segmentGranularity NONE would make a segment per"),
    ("spec.dataSchema.granularitySpec", {"intervals": ["2024-01-01/2024-01-02"]},
     "spec.dataSchema.granularitySpec.intervals", "intervals are not used by streaming ingestion"),
    ("spec.dataSchema.timestampSpec", {"column": "ts", "format": "rfc1123"},
     "spec.dataSchema.timestampSpec.format", "unknown timestamp format 'rfc1123'"),
    ("spec.dataSchema.timestampSpec", {"column": "ts", "format": "EEE, dd MMM yyyy HH:mm:ss Z"},
     "spec.dataSchema.timestampSpec.format", "Joda pattern letters E are not supported yet"),
    ("spec.dataSchema.timestampSpec", {"column": "ts", "format": "xxxx-'W'ww-e"},
     "spec.dataSchema.timestampSpec.format", "Joda pattern letters e, w, x are not supported yet"),
    ("spec.dataSchema.timestampSpec", {"column": "ts", "missingValue": "not a date"},
     "spec.dataSchema.timestampSpec.missingValue", "valid datetime"),
    ("spec.tuningConfig", {"type": "kafka", "skipSequenceNumberAvailabilityCheck": True},
     "spec.tuningConfig.skipSequenceNumberAvailabilityCheck", "only False (Druid's default) is supported"),
    ("spec.ioConfig.autoScalerConfig", {"enableTaskAutoScaler": True, "taskCountMax": 4, "taskCountMin": 1},
     "spec.ioConfig.autoScalerConfig", "the task autoscaler is not supported yet"),
    ("spec.dataSchema.flattenSpec", {"useFieldDiscovery": True},
     "spec.dataSchema.flattenSpec", DOES_NOT_SUPPORT),
    ("spec.ioConfig.inputFormat", {"type": "json", "flattenSpec": {"fields": [{"type": "path", "name": "x"}]}},
     "spec.ioConfig.inputFormat.flattenSpec.fields[0]", "a path field needs expr"),
    ("spec.ioConfig.topicPattern", "metrics-.*",
     "spec.ioConfig.topicPattern", "only None (Druid's default) is supported: not supported yet"),
    ("spec.dataSchema.dimensionsSpec",
     {"dimensions": ["page"], "spatialDimensions": [{"dimName": "coordinates", "dims": ["lat", "long"]}]},
     "spec.dataSchema.dimensionsSpec.spatialDimensions", "spatial dimensions are not supported"),
    ("spec.dataSchema.dimensionsSpec", {"dimensions": ["page"], "forceSegmentSortByTime": False},
     "spec.dataSchema.dimensionsSpec.forceSegmentSortByTime", "always sorted by __time first"),
    ("spec.dataSchema.dimensionsSpec", {"dimensions": [{"name": "tags", "multiValueHandling": "SORTED"}]},
     "spec.dataSchema.dimensionsSpec.dimensions[0].multiValueHandling", "'SORTED_ARRAY', 'SORTED_SET' or 'ARRAY'"),
    ("spec.dataSchema.dimensionsSpec", {"dimensions": [{"name": "payload", "type": "geo"}]},
     "spec.dataSchema.dimensionsSpec.dimensions[0].type", "'long'"),
    ("spec.dataSchema.dimensionsSpec", {"dimensions": ["page", "user", "page"]},
     "spec.dataSchema", "column 'page' is defined twice across dimensions and metrics"),
    ("spec.dataSchema.metricsSpec", [{"type": "count", "name": "page"}],
     "spec.dataSchema", "column 'page' is defined twice across dimensions and metrics"),
    ("spec.dataSchema.dimensionsSpec", {"dimensions": ["__time"]},
     "spec.dataSchema", "a dimension or metric cannot be named __time"),
    ("spec.dataSchema.transformSpec", {"filter": {"type": "regex", "dimension": "page", "pattern": "^A"}},
     "spec.dataSchema.transformSpec.filter.type", "'regex'"),
    ("spec.dataSchema.transformSpec",
     {"transforms": [{"type": "expression", "name": "hour", "expression": "array_length(page)"}]},
     "spec.dataSchema.transformSpec.transforms[0].expression", "function array_length() is not supported"),
    ("spec.dataSchema.transformSpec",  # a function Spark cannot run with Druid's meaning is refused on submit
     {"transforms": [{"type": "expression", "name": "h", "expression": "timestamp_floor(__time, 'PT1H', 0, 'UTC')"}]},
     "spec.dataSchema.transformSpec.transforms[0].expression", "timestamp_floor() at ingestion takes an origin only"),
    ("spec.dataSchema.transformSpec",
     {"transforms": [{"type": "expression", "name": "x", "expression": "page +"}]},
     "spec.dataSchema.transformSpec.transforms[0].expression", "ends unexpectedly"),
    ("spec.dataSchema.dimensionsSpec", {"dimensions": ["page", "user"], "dimensionExclusions": ["ip", "user"]},
     "spec.dataSchema.dimensionsSpec.dimensionExclusions",
     "dimensions and dimensions exclusions cannot overlap; in both: user"),
    ("spec.dataSchema.dimensionsSpec",
     {"dimensions": ["page", {"name": "n", "type": "long"}], "dimensionExclusions": ["n", "page"]},
     "spec.dataSchema.dimensionsSpec.dimensionExclusions",
     "dimensions and dimensions exclusions cannot overlap; in both: n, page"),
    ("spec.tuningConfig", {"type": "kafka", "maxTotalRows": 0},
     "spec.tuningConfig.maxTotalRows", "greater than or equal to 1"),
    ("spec.tuningConfig", {"type": "kafka", "intermediateHandoffPeriod": "soon"},
     "spec.tuningConfig.intermediateHandoffPeriod", "soon"),
    ("type", "kinesis",
     "type", "supervisor type 'kinesis' is not supported"),
    ("spec.ioConfig.idleConfig", {"enabled": True, "inactiveAfterMillis": 0},
     "spec.ioConfig.idleConfig.inactiveAfterMillis", "inactiveAfterMillis should be a postive number"),
    ("spec.ioConfig.idleConfig", {"enabled": True, "inactiveAfter": 1000},
     "spec.ioConfig.idleConfig.inactiveAfter", DOES_NOT_SUPPORT),
    # wrong types are refused, not coerced; task counts are bounded
    ("spec.ioConfig.taskCount", True, "spec.ioConfig.taskCount", "Input should be a valid integer"),
    ("spec.ioConfig.taskCount", "2", "spec.ioConfig.taskCount", "Input should be a valid integer"),
    ("spec.ioConfig.replicas", 1e9, "spec.ioConfig.replicas", "Input should be a valid integer"),
    ("spec.ioConfig.replicas", 10**9, "spec.ioConfig.replicas", "Input should be less than or equal to 10000"),
    ("spec.ioConfig.taskDuration", 30, "spec.ioConfig.taskDuration",
     "expected an ISO-8601 period such as PT30S, got 30"),
    ("spec.ioConfig.period", "PT0.000001S", "spec.ioConfig.period", "must be a positive period"),
]


def test_a_supervisor_runs_at_most_ten_thousand_reading_tasks():
    spec = changed(changed(MINIMAL, "spec.ioConfig.taskCount", 2), "spec.ioConfig.replicas", 5_000)
    assert spec_error(changed(spec, "spec.ioConfig.replicas", 5_001)).message == (
        "taskCount × replicas is 10002; a supervisor runs at most 10000 reading tasks")
    assert parse_supervisor_spec(spec).spec.io_config.replicas == 5_000


@pytest.mark.parametrize("field, value, path, message", INVALID,
                         ids=[f"{f}={'<deleted>' if v is DELETE else json.dumps(v)}"[:80] for f, v, _, _ in INVALID])
def test_invalid_spec_names_the_field(field, value, path, message):
    error = spec_error(changed(MINIMAL, field, value))
    assert error.path == path
    assert message in error.message
    assert str(error) == f"{error.path}: {error.message}"


class RecordingSupervisors:
    """Stands in for the SupervisorManager: a rejected spec must never reach it."""

    def __init__(self) -> None:
        self.submitted: list[Any] = []

    def create_or_update(self, spec: Any, skip_restart_if_unmodified: bool = False) -> None:
        self.submitted.append(spec)


@pytest.mark.parametrize("field, value, error", [
    ("spec.dataSchema.dimensionsSpec", {"dimensions": ["page"], "dimensionExclusions": ["page"]},
     "spec.dataSchema.dimensionsSpec.dimensionExclusions: dimensions and dimensions exclusions cannot overlap; "
     "in both: page"),
    ("spec.tuningConfig", {"type": "kafka", "maxTotalRows": -5},
     "spec.tuningConfig.maxTotalRows: Input should be greater than or equal to 1"),
])
def test_the_supervisor_api_answers_400_naming_the_field_and_starts_nothing(field, value, error):
    supervisors = RecordingSupervisors()
    app = FastAPI()
    app.include_router(supervisor_router(supervisors))  # type: ignore[arg-type]
    response = TestClient(app).post("/druid/indexer/v1/supervisor", json=changed(MINIMAL, field, value))
    assert response.status_code == 400
    assert response.json()["error"].startswith(error)
    assert supervisors.submitted == []


def test_a_spec_that_is_not_an_object_is_rejected():
    assert str(spec_error([MINIMAL])) == "a supervisor spec must be a JSON object"


LEGACY_INVALID = [
    ("dataSchema.parser.parseSpec.format", "javascript",
     "dataSchema.parser.parseSpec.format", "format 'javascript' is not supported; use one of json, csv, tsv, regex"),
    ("dataSchema.parser.type", "avro_stream",
     "dataSchema.parser.type", "parser type 'avro_stream' is not supported"),
    ("dataSchema.parser.parseSpec", "json",
     "dataSchema.parser.parseSpec", "the legacy parser needs a parseSpec object"),
    ("dataSchema.parser.parseSpec.timestampSpec", {"column": "time", "format": "bogus"},
     "dataSchema.parser.parseSpec.timestampSpec.format", "unknown timestamp format"),
    ("dataSchema.parser.parseSpec.flattenSpec", {"fields": [{"type": "tree", "name": "x"}]},
     "dataSchema.parser.parseSpec.flattenSpec.fields[0]", "a tree field needs nodes"),
    ("dataSchema.metricsSpec", [{"type": "longSum", "name": "added"}],
     "dataSchema.metricsSpec[0].fieldName", "longSum needs fieldName"),
    ("ioConfig.topic", DELETE,
     "ioConfig.topic", "Field required"),
    ("tuningConfig.appendableIndexSpec", {"preserveExistingMetrics": True},
     "tuningConfig.appendableIndexSpec.preserveExistingMetrics", "only False (Druid's default) is supported"),
    ("dataSchema.parser.parseSpec.dimensionsSpec", {"dimensions": ["channel"], "dimensionExclusions": ["channel"]},
     "dataSchema.parser.parseSpec.dimensionsSpec.dimensionExclusions", "cannot overlap; in both: channel"),
    ("tuningConfig.maxTotalRows", 0,
     "tuningConfig.maxTotalRows", "greater than or equal to 1"),
]


@pytest.mark.parametrize("field, value, path, message", LEGACY_INVALID, ids=[f for f, _, _, _ in LEGACY_INVALID])
def test_invalid_legacy_spec_names_the_field_as_the_user_wrote_it(field, value, path, message):
    error = spec_error(changed(DRUID_LEGACY, field, value))
    assert error.path == path
    assert message in error.message


@pytest.mark.parametrize("field, value, path", [
    ("dataSchema.timestampSpec.format", "rfc1123", "dataSchema.timestampSpec.format"),
    ("ioConfig.inputFormat.type", "parquet", "ioConfig.inputFormat.type"),
])
def test_wrapperless_current_form_errors_name_the_field_as_written(field, value, path):
    wrapperless = {"type": "kafka", **copy.deepcopy(MINIMAL["spec"])}
    wrapperless["dataSchema"]["timestampSpec"] = {"column": "ts"}
    assert spec_error(changed(wrapperless, field, value)).path == path


def test_omitted_dimensions_are_schemaless_too():
    spec = parse_supervisor_spec(changed(MINIMAL, "spec.dataSchema.dimensionsSpec", {}))
    assert spec.spec.data_schema.dimensions_spec.discovers


@pytest.mark.parametrize("filter_, path", [
    ({"type": "and", "fields": [{"type": "selector", "dimension": "page", "value": "A"},
                                {"type": "like", "dimension": "page", "pattern": "A%"}]},
     "spec.dataSchema.transformSpec.filter.fields[1]"),
    ({"type": "bound", "dimension": "n"}, "spec.dataSchema.transformSpec.filter"),
])
def test_nested_filter_errors_name_the_nested_filter(filter_, path):
    error = spec_error(changed(MINIMAL, "spec.dataSchema.transformSpec", {"filter": filter_}))
    assert error.path.removesuffix(".type") == path


# ---------------------------------------------------------------------------------------------------------------
# serialized form


ROUND_TRIP = [
    pytest.param(example(), id="example"),
    pytest.param(DRUID_MINIMAL, id="druid-minimal"),
    pytest.param(DRUID_TUTORIAL, id="druid-tutorial"),
    pytest.param(DRUID_LEGACY, id="druid-legacy-parser"),
    pytest.param(changed(MINIMAL, "spec.dataSchema", {
        "dataSource": "events",
        "timestampSpec": {"column": "ts", "format": "yyyy-MM-dd HH:mm:ss", "missingValue": "2024-01-01T00:00:00Z"},
        "dimensionsSpec": {"dimensions": ["page", {"name": "n", "type": "double"}]},
        "metricsSpec": [{"type": "count", "name": "count"}, {"type": "floatMin", "name": "low", "fieldName": "f"}],
        "granularitySpec": {"segmentGranularity": {"type": "period", "period": "P1M"},
                            "queryGranularity": "fifteen_minute"},
        "transformSpec": {"transforms": [{"type": "expression", "name": "up", "expression": "upper(page)"}],
                          "filter": {"type": "not", "field": {"type": "in", "dimension": "up", "values": ["X", None]}}},
    }), id="every-section"),
]


@pytest.mark.parametrize("payload", ROUND_TRIP)
def test_to_json_round_trips_through_parse(payload):
    """Druid's GET form (nested `spec` plus top-level copies of its parts) can be posted back as it is."""
    spec = parse_supervisor_spec(copy.deepcopy(payload))
    assert parse_supervisor_spec(spec.to_json()) == spec
    assert parse_supervisor_spec(json.loads(json.dumps(spec.to_json()))) == spec


def test_in_the_serialized_form_the_nested_spec_wins_over_the_top_level_copies():
    payload = {**copy.deepcopy(MINIMAL), "dataSchema": {"dataSource": "stale"}, "ioConfig": {}, "tuningConfig": {}}
    assert parse_supervisor_spec(payload).id == "events"


def test_serialized_form_has_druid_shape():
    serialized = parse_supervisor_spec(copy.deepcopy(MINIMAL)).to_json()
    assert serialized["dataSchema"] == serialized["spec"]["dataSchema"]
    assert serialized["ioConfig"]["taskDuration"] == "PT3600S"
    assert serialized["ioConfig"]["completionTimeout"] == "PT1800S"
    assert serialized["dataSchema"]["granularitySpec"] == {
        "type": "uniform", "segmentGranularity": "DAY", "queryGranularity": "NONE", "rollup": True, "intervals": None}
    assert serialized["dataSchema"]["dimensionsSpec"]["dimensions"] == [
        {"name": "page", "type": "string", "createBitmapIndex": True, "multiValueHandling": "SORTED_ARRAY"}]
    assert (serialized["context"], serialized["suspended"]) == (None, False)


# ---------------------------------------------------------------------------------------------------------------
# message rejection windows (druid-api.md §2.2)

BOTH_LATE_BOUNDS = ("SeekableStreamSupervisorIOConfig does not support both properties "
                    "lateMessageRejectionStartDateTime and lateMessageRejectionPeriod.")


def with_io(**fields: Any) -> dict:
    """MINIMAL with these ioConfig fields added."""
    return changed(MINIMAL, "spec.ioConfig", {**MINIMAL["spec"]["ioConfig"], **fields})


def io_config(**fields: Any):
    return parse_supervisor_spec(with_io(**fields)).spec.io_config


def test_no_message_is_rejected_by_default():
    io = io_config()
    assert (io.late_message_rejection_start_date_time, io.late_message_rejection_period,
            io.early_message_rejection_period) == (None, None, None)


@pytest.mark.parametrize("fields, start, late, early", [
    ({"lateMessageRejectionStartDateTime": "2024-01-01T00:00:00Z"}, datetime(2024, 1, 1, tzinfo=UTC), None, None),
    ({"lateMessageRejectionStartDateTime": "2024-01-01T00:00:00"}, datetime(2024, 1, 1, tzinfo=UTC), None, None),
    ({"lateMessageRejectionStartDateTime": "2024-01-01"}, datetime(2024, 1, 1, tzinfo=UTC), None, None),
    ({"lateMessageRejectionStartDateTime": "2024-01-01T02:00:00+02:00"}, datetime(2024, 1, 1, tzinfo=UTC), None, None),
    ({"lateMessageRejectionStartDateTime": 1704067200000}, datetime(2024, 1, 1, tzinfo=UTC), None, None),  # millis
    ({"lateMessageRejectionPeriod": "PT1H"}, None, timedelta(hours=1), None),
    ({"earlyMessageRejectionPeriod": "P1D"}, None, None, timedelta(days=1)),
    ({"lateMessageRejectionPeriod": "PT10M", "earlyMessageRejectionPeriod": "PT3600S"},
     None, timedelta(minutes=10), timedelta(hours=1)),
    ({"lateMessageRejectionStartDateTime": "2024-01-01T00:00:00Z", "earlyMessageRejectionPeriod": "PT1H"},
     datetime(2024, 1, 1, tzinfo=UTC), None, timedelta(hours=1)),
    ({"lateMessageRejectionStartDateTime": "2024-01-01T00:00:00Z", "lateMessageRejectionPeriod": None},
     datetime(2024, 1, 1, tzinfo=UTC), None, None),  # null is absent, as in Druid's serialized form
])
def test_message_rejection_settings_are_read_in_utc_and_iso_periods(fields, start, late, early):
    io = io_config(**fields)
    assert io.late_message_rejection_start_date_time == start
    if start is not None:
        assert io.late_message_rejection_start_date_time.tzinfo == UTC
    assert (io.late_message_rejection_period, io.early_message_rejection_period) == (late, early)


@pytest.mark.parametrize("fields, path, message", [
    ({"lateMessageRejectionStartDateTime": "2024-01-01T00:00:00Z", "lateMessageRejectionPeriod": "PT1H"},
     "spec.ioConfig.lateMessageRejectionPeriod", BOTH_LATE_BOUNDS),
    ({"lateMessageRejectionPeriod": "PT1H", "lateMessageRejectionStartDateTime": "2024-01-01T00:00:00Z"},
     "spec.ioConfig.lateMessageRejectionPeriod", BOTH_LATE_BOUNDS),  # the order the user wrote them in is no matter
    ({"lateMessageRejectionPeriod": "P1M"},
     "spec.ioConfig.lateMessageRejectionPeriod", "period P1M contains months or years, which vary in length"),
    ({"earlyMessageRejectionPeriod": "an hour"},
     "spec.ioConfig.earlyMessageRejectionPeriod", "'an hour' is not an ISO-8601 period"),
    ({"lateMessageRejectionStartDateTime": "last tuesday"},
     "spec.ioConfig.lateMessageRejectionStartDateTime", "valid datetime"),
    ({"lateMessageRejectionStartDateTime": 10**30},
     "spec.ioConfig.lateMessageRejectionStartDateTime", "epoch millis 1000000000000000000000000000000 is out of range"),
])
def test_invalid_message_rejection_settings_name_the_field(fields, path, message):
    error = spec_error(with_io(**fields))
    assert error.path == path
    assert message in error.message


def test_both_late_bounds_in_the_legacy_form_name_the_field_as_written():
    payload = changed(DRUID_LEGACY, "ioConfig.lateMessageRejectionPeriod", "PT1H")
    payload["ioConfig"]["lateMessageRejectionStartDateTime"] = "2024-01-01T00:00:00Z"
    error = spec_error(payload)
    assert str(error) == f"ioConfig.lateMessageRejectionPeriod: {BOTH_LATE_BOUNDS}"


def test_message_rejection_settings_serialize_as_druid_does_and_round_trip():
    spec = parse_supervisor_spec(with_io(lateMessageRejectionStartDateTime="2024-01-01T02:00:00+02:00",
                                         earlyMessageRejectionPeriod="PT1H"))
    io = spec.to_json()["ioConfig"]
    assert (io["lateMessageRejectionStartDateTime"], io["lateMessageRejectionPeriod"],
            io["earlyMessageRejectionPeriod"]) == ("2024-01-01T00:00:00Z", None, "PT3600S")
    assert parse_supervisor_spec(json.loads(json.dumps(spec.to_json()))) == spec


@pytest.mark.parametrize("tuning, expected", [(None, False), ({"type": "kafka", "resetOffsetAutomatically": True}, True)])
def test_reset_offset_automatically_is_off_unless_asked(tuning, expected):
    payload = MINIMAL if tuning is None else changed(MINIMAL, "spec.tuningConfig", tuning)
    assert parse_supervisor_spec(copy.deepcopy(payload)).spec.tuning_config.reset_offset_automatically is expected


@pytest.mark.parametrize("idle, expected", [
    (None, None),
    ({"enabled": True}, (True, None)),  # inactiveAfterMillis: the overlord's druid.supervisor.idleConfig default
    ({"enabled": True, "inactiveAfterMillis": 30_000}, (True, 30_000)),
    ({"inactiveAfterMillis": 30_000}, (False, 30_000)),
])
def test_idle_config_is_read_with_druids_names_and_round_trips(idle, expected):
    spec = parse_supervisor_spec(MINIMAL if idle is None else with_io(idleConfig=idle))
    read = spec.spec.io_config.idle_config
    assert (None if read is None else (read.enabled, read.inactive_after_millis)) == expected
    assert parse_supervisor_spec(json.loads(json.dumps(spec.to_json()))) == spec
    if idle is not None:
        assert spec.to_json()["ioConfig"]["idleConfig"] == {"enabled": expected[0], "inactiveAfterMillis": expected[1]}


# ---------------------------------------------------------------------------------------------------------------
# ioConfig.inputFormat: every format a Kafka message can be read with (druid-batch-ops-console.md §2)


def with_format(input_format: Any) -> dict:
    return changed(MINIMAL, "spec.ioConfig.inputFormat", input_format)


KAFKA_FORMAT = {"type": "kafka", "valueFormat": {"type": "json"}, "keyFormat": {"type": "tsv", "columns": ["k"]},
                "headerFormat": {"type": "string"}}


@pytest.mark.parametrize("input_format, check", [
    ({"type": "csv", "columns": ["ts", "page"]}, lambda f: (f.type, f.columns) == ("csv", ["ts", "page"])),
    ({"type": "tsv", "columns": ["ts", "page"], "delimiter": "|"}, lambda f: f.delimiter_char == "|"),
    ({"type": "tsv", "columns": ["ts"], "hasHeaderRow": False, "skipHeaderRows": 0}, lambda f: f.delimiter == "\t"),
    ({"type": "regex", "pattern": r"(\d+) (.*)"}, lambda f: f.columns is None),
    ({"type": "json", "flattenSpec": {"fields": [{"type": "path", "name": "page", "expr": "$.a.b"}]}},
     lambda f: f.flatten_spec.fields[0].path() == ["a", "b"]),
    ({"type": "kafka", "valueFormat": {"type": "csv", "columns": ["page"]}},
     lambda f: (f.timestamp_column_name, f.topic_column_name, f.key_column_name, f.header_column_prefix,
                f.key_format, f.header_format) == ("kafka.timestamp", "kafka.topic", "kafka.key", "kafka.header.",
                                                   None, None)),
    (KAFKA_FORMAT, lambda f: (f.header_format.encoding, f.key_format.columns) == ("UTF-8", ["k"])),
], ids=["csv", "tsv-delimiter", "tsv-no-header", "regex", "json-flatten", "kafka-defaults", "kafka"])
def test_every_message_format_is_accepted_and_round_trips(input_format, check):
    spec = parse_supervisor_spec(with_format(input_format))
    assert check(spec.spec.io_config.input_format)
    assert parse_supervisor_spec(json.loads(json.dumps(spec.to_json()))) == spec


def test_a_plain_json_format_is_served_in_druids_form():
    assert parse_supervisor_spec(copy.deepcopy(MINIMAL)).to_json()["spec"]["ioConfig"]["inputFormat"] == {
        "type": "json", "keepNullColumns": False, "assumeNewlineDelimited": False, "useJsonNodeReader": False}


@pytest.mark.parametrize("input_format, flatten", [
    ({"type": "json"}, None),
    ({"type": "json", "flattenSpec": {"useFieldDiscovery": False}}, False),
    ({"type": "kafka", "valueFormat": {"type": "json", "flattenSpec": {"useFieldDiscovery": False}}}, False),
    ({"type": "csv", "columns": ["page"]}, None),
])
def test_the_flatten_spec_is_the_json_values(input_format, flatten):
    io = parse_supervisor_spec(with_format(input_format)).spec.io_config
    assert (io.flatten_spec.use_field_discovery if io.flatten_spec else None) == flatten


def test_the_kafka_format_supplies_only_the_metadata_fields_it_has():
    fmt = parse_supervisor_spec(with_format({**KAFKA_FORMAT, "headerColumnPrefix": "h."})).spec.io_config.input_format
    fields = ["page", "kafka.key", "kafka.timestamp", "kafka.topic", "h.env", "kafka.header.env"]
    assert fmt.metadata_fields(fields) == ["kafka.key", "kafka.timestamp", "kafka.topic", "h.env"]
    no_key = parse_supervisor_spec(with_format({"type": "kafka", "valueFormat": {"type": "json"}}))
    assert no_key.spec.io_config.input_format.metadata_fields(fields) == ["kafka.timestamp", "kafka.topic"]


NO_HEADER = "hasHeaderRow or maxSkipHeaderRows is not supported on a stream"

INVALID_FORMATS = [
    ({"type": "orc"}, "spec.ioConfig.inputFormat.type", "inputFormat type 'orc' reads whole files"),
    ({"type": "avro_ocf", "schema": {}}, "spec.ioConfig.inputFormat.type", "inputFormat type 'avro_ocf' reads whole"),
    ({"type": "protobuf"}, "spec.ioConfig.inputFormat.type",
     "type 'protobuf' is not supported; a Kafka message is read as one of json, csv, tsv, regex, kafka"),
    ({"columns": ["a"]}, "spec.ioConfig.inputFormat.type", "Field required"),
    ({"type": "csv"}, "spec.ioConfig.inputFormat.columns", "columns are required: a Kafka message has no header"),
    ({"type": "csv", "columns": ["a"], "findColumnsFromHeader": True},
     "spec.ioConfig.inputFormat.findColumnsFromHeader", NO_HEADER),
    ({"type": "tsv", "columns": ["a"], "hasHeaderRow": True}, "spec.ioConfig.inputFormat.hasHeaderRow", NO_HEADER),
    ({"type": "tsv", "columns": ["a"], "skipHeaderRows": 1}, "spec.ioConfig.inputFormat.skipHeaderRows", NO_HEADER),
    ({"type": "csv", "columns": ["a", "a"]}, "spec.ioConfig.inputFormat", "columns must be unique; repeated: a"),
    ({"type": "regex", "pattern": "("}, "spec.ioConfig.inputFormat.pattern", "pattern does not compile"),
    ({"type": "kafka"}, "spec.ioConfig.inputFormat.valueFormat", "Field required"),
    ({"type": "kafka", "valueFormat": {"type": "parquet"}}, "spec.ioConfig.inputFormat.valueFormat.type",
     "inputFormat type 'parquet' reads whole files"),
    ({"type": "kafka", "valueFormat": {"type": "kafka", "valueFormat": {"type": "json"}}},
     "spec.ioConfig.inputFormat.valueFormat.type",
     "type 'kafka' is not supported; a Kafka message is read as one of json, csv, tsv, regex"),
    ({"type": "kafka", "valueFormat": {"type": "csv"}}, "spec.ioConfig.inputFormat.valueFormat.columns",
     "columns are required"),
    ({"type": "kafka", "valueFormat": {"type": "json"}, "keyFormat": {"type": "json", "flattenSpec": {}}},
     "spec.ioConfig.inputFormat.keyFormat", "a keyFormat's flattenSpec is not supported"),
    ({"type": "kafka", "valueFormat": {"type": "json"}, "headerFormat": {"type": "string", "encoding": "EBCDIC-X"}},
     "spec.ioConfig.inputFormat.headerFormat.encoding", "unknown encoding 'EBCDIC-X'"),
    ({"type": "kafka", "valueFormat": {"type": "json"}, "headerFormat": {"type": "avro"}},
     "spec.ioConfig.inputFormat.headerFormat.type", "Input should be 'string'"),
    ({"type": "kafka", "valueFormat": {"type": "json"}, "partitionColumnName": "p"},
     "spec.ioConfig.inputFormat.partitionColumnName", DOES_NOT_SUPPORT),
]


@pytest.mark.parametrize("input_format, path, message", INVALID_FORMATS,
                         ids=[json.dumps(f)[:70] for f, _, _ in INVALID_FORMATS])
def test_an_input_format_a_stream_cannot_read_is_a_400_naming_the_field(input_format, path, message):
    error = spec_error(with_format(input_format))
    assert (error.path, error.message[:len(message)]) == (path, message)


def test_the_supervisor_api_answers_400_for_a_file_format():
    app = FastAPI()
    app.include_router(supervisor_router(RecordingSupervisors()))  # type: ignore[arg-type]
    response = TestClient(app).post("/druid/indexer/v1/supervisor", json=with_format({"type": "parquet"}))
    assert response.status_code == 400
    assert response.json()["error"].startswith("spec.ioConfig.inputFormat.type: inputFormat type 'parquet'")


# ---------------------------------------------------------------------------------------------------------------
# the legacy parser with every format (legacy.py, shared with batch tasks)


def legacy_with(parse_spec: dict[str, Any]) -> dict:
    """DRUID_LEGACY with these parseSpec fields (timestampSpec and dimensionsSpec kept)."""
    base = DRUID_LEGACY["dataSchema"]["parser"]["parseSpec"]
    return changed(DRUID_LEGACY, "dataSchema.parser.parseSpec", {**base, **parse_spec})


@pytest.mark.parametrize("parse_spec, expected", [
    ({"format": "csv", "columns": ["time", "channel"], "listDelimiter": "|", "hasHeaderRow": False,
      "skipHeaderRows": 0},
     {"type": "csv", "columns": ["time", "channel"], "listDelimiter": "|", "hasHeaderRow": False, "skipHeaderRows": 0}),
    ({"format": "tsv", "columns": ["time", "channel"], "delimiter": "|"},
     {"type": "tsv", "columns": ["time", "channel"], "delimiter": "|"}),
    ({"format": "regex", "pattern": "(\\S+) (\\S+)", "columns": ["time", "channel"]},
     {"type": "regex", "pattern": "(\\S+) (\\S+)", "columns": ["time", "channel"]}),
    ({"format": "json", "flattenSpec": {"fields": [{"type": "root", "name": "channel"}]}},
     {"type": "json", "flattenSpec": {"useFieldDiscovery": True, "fields": [
         {"type": "root", "name": "channel", "expr": None, "nodes": None}]}}),
], ids=["csv", "tsv", "regex", "json-flatten"])
def test_legacy_parse_specs_become_the_input_format(parse_spec, expected):
    spec = parse_supervisor_spec(legacy_with(parse_spec))
    served = spec.to_json()["spec"]["ioConfig"]["inputFormat"]
    assert {k: served[k] for k in expected} == expected
    assert (spec.spec.data_schema.timestamp_spec.column, spec.spec.data_schema.dimensions_spec.dimensions[0].name) \
        == ("time", "channel")
    assert parse_supervisor_spec(spec.to_json()) == spec


@pytest.mark.parametrize("parse_spec, path, message", [
    ({"format": "csv"}, "dataSchema.parser.parseSpec.columns", "columns are required"),
    ({"format": "csv", "columns": ["a"], "hasHeaderRow": True}, "dataSchema.parser.parseSpec.hasHeaderRow", NO_HEADER),
    ({"format": "tsv", "columns": ["a"], "skipHeaderRows": 2}, "dataSchema.parser.parseSpec.skipHeaderRows", NO_HEADER),
    ({"format": "tsv", "columns": ["a"], "delimiter": ""}, "dataSchema.parser.parseSpec.delimiter", "at least 1"),
    ({"format": "regex", "pattern": "("}, "dataSchema.parser.parseSpec.pattern", "pattern does not compile"),
    ({"format": "regex"}, "dataSchema.parser.parseSpec.pattern", "Field required"),
    ({"format": "csv", "columns": ["a"], "flattenSpec": {}}, "dataSchema.parser.parseSpec.flattenSpec",
     "not a field of a csv parseSpec"),
    ({"format": "json", "flattenSpec": {"fields": [{"type": "jq", "name": "a", "expr": ".a | length"}]}},
     "dataSchema.parser.parseSpec.flattenSpec.fields[0]", "jq expression"),
])
def test_legacy_parse_spec_errors_name_the_field_where_the_user_wrote_it(parse_spec, path, message):
    error = spec_error(legacy_with(parse_spec))
    assert error.path == path and message in error.message


def test_the_legacy_parser_inside_the_spec_wrapper_is_read_too():
    wrapped = {"type": "kafka", "spec": {k: copy.deepcopy(DRUID_LEGACY[k]) for k in ("dataSchema", "ioConfig")}}
    assert parse_supervisor_spec(wrapped).spec.io_config.input_format.type == "json"
    wrapped["spec"]["dataSchema"]["parser"]["parseSpec"]["format"] = "csv"
    assert spec_error(wrapped).path == "spec.dataSchema.parser.parseSpec.columns"


def test_a_parser_and_an_input_format_together_are_refused():
    error = spec_error(changed(DRUID_LEGACY, "ioConfig.inputFormat", {"type": "json"}))
    assert error.path == "ioConfig.inputFormat" and "Cannot use parser and inputFormat together" in error.message


@pytest.mark.parametrize("dimensions_spec, discovers, typed", [
    ({"dimensions": ["page"]}, False, False),
    ({"dimensions": []}, True, False),  # Druid's schemaless ingestion: every other field, as strings
    ({"dimensions": ["page"], "includeAllDimensions": True}, True, False),
    ({"dimensions": [], "useSchemaDiscovery": True}, True, True),
])
def test_dimensions_are_discovered_as_druid_discovers_them(dimensions_spec, discovers, typed):
    spec = parse_supervisor_spec(changed(MINIMAL, "spec.dataSchema.dimensionsSpec", dimensions_spec))
    assert spec.spec.data_schema.dimensions_spec.discovers is discovers
    assert spec.spec.data_schema.dimensions_spec.use_schema_discovery is typed


def test_dimensions_are_discovered_in_json_records_only():
    payload = changed(MINIMAL, "spec.dataSchema.dimensionsSpec", {"dimensions": []})
    error = spec_error(changed(payload, "spec.ioConfig.inputFormat", {"type": "csv", "columns": ["ts", "page"]}))
    assert error.path == "spec"
    assert error.message.startswith("dataSchema.dimensionsSpec: dimensions are discovered in JSON records only")
