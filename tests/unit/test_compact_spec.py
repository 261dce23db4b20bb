"""The `compact` task's pure part: a compaction request and the segments' metadata in, the `index_parallel`
payloads it runs out (Druid's CompactionTask.createIngestionSchema), and the request's validation."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.spec.batch import IngestionMode, parse_batch_task
from sluice.spec.errors import SpecError
from sluice.segment.columns import parquet_column_types
from sluice.task.compact_task import (COMPACTION_PRIORITY, InputSegment, compaction_payloads,
                                      select_segments, spec_from_json)
from sluice.task.task import TaskFailure

DS = "wiki"
COUNT = {"type": "count", "name": "count"}
ADDED = {"type": "longSum", "name": "added_sum", "fieldName": "added"}
PEAK = {"type": "doubleMax", "name": "peak", "fieldName": "delta"}


def segment(interval: str, version: str = "v1", partition: int = 0, dimensions: tuple[str, ...] = ("channel", "page"),
            aggregators: tuple[dict[str, Any], ...] = (COUNT, ADDED, PEAK)) -> DataSegment:
    return DataSegment(SegmentId(DS, Interval.parse(interval), version, partition), list(dimensions),
                       [a["name"] for a in aggregators], [dict(a) for a in aggregators],
                       numbered_shard_spec(partition), 10, 100, {"type": "local", "path": f"/x/{version}/{partition}"})


def inputs(*segments: DataSegment, types: dict[str, str] | None = None) -> list[InputSegment]:
    return [InputSegment(s, types or {}) for s in segments]


def compact(**fields: Any) -> Any:
    return spec_from_json({"type": "compact", "dataSource": DS, **fields})


DAY1 = "2024-03-01T00:00:00.000Z/2024-03-02T00:00:00.000Z"
DAY2 = "2024-03-02T00:00:00.000Z/2024-03-03T00:00:00.000Z"


def test_appended_segments_of_a_day_become_one_replace_over_the_druid_input_source():
    spec = compact(interval="2024-03-01/2024-03-02", context={"maxNumConcurrentSubTasks": 1})
    [payload] = compaction_payloads(spec, inputs(*(segment(DAY1, partition=p) for p in range(4)),
                                                 types={"channel": "string", "page": "long"}))
    schema = payload["spec"]["dataSchema"]
    assert schema["timestampSpec"] == {"column": "__time", "format": "millis"}
    assert schema["dimensionsSpec"] == {"dimensions": [{"name": "channel", "type": "string"},
                                                       {"name": "page", "type": "long"}]}
    # every metric combines the column it wrote: count -> longSum of "count", by output name
    assert schema["metricsSpec"] == [{"type": "longSum", "name": "count", "fieldName": "count"},
                                     {"type": "longSum", "name": "added_sum", "fieldName": "added_sum"},
                                     {"type": "doubleMax", "name": "peak", "fieldName": "peak"}]
    assert schema["granularitySpec"] == {"segmentGranularity": "DAY", "queryGranularity": "NONE", "rollup": True,
                                         "intervals": [DAY1]}
    assert payload["spec"]["ioConfig"]["inputSource"] == {"type": "druid", "dataSource": DS, "interval": DAY1}
    assert payload["id"] == spec.id and spec.id.startswith(f"compact_{DS}_")
    assert payload["context"]["priority"] == COMPACTION_PRIORITY == spec.priority
    parsed = parse_batch_task(payload)  # a valid batch task, run in overwrite mode
    assert parsed.spec.io_config.mode is IngestionMode.REPLACE_LEGACY


@pytest.mark.parametrize(("intervals", "expected"), [
    # one payload per interval, at the granularity of its length
    ([DAY1, DAY2], [(DAY1, "DAY"), (DAY2, "DAY")]),
    (["2024-03-01T00:00:00.000Z/2024-03-01T01:00:00.000Z", "2024-03-01T01:00:00.000Z/2024-03-01T02:00:00.000Z"],
     [("2024-03-01T00:00:00.000Z/2024-03-01T01:00:00.000Z", "HOUR"),
      ("2024-03-01T01:00:00.000Z/2024-03-01T02:00:00.000Z", "HOUR")]),
    # overlapping intervals are compacted together: an hour inside a day goes with the day
    ([DAY1, "2024-03-01T05:00:00.000Z/2024-03-01T06:00:00.000Z"], [(DAY1, "DAY")]),
    (["2024-03-01T00:00:00.000Z/2024-04-01T00:00:00.000Z"], [("2024-03-01T00:00:00.000Z/2024-04-01T00:00:00.000Z",
                                                              "MONTH")]),
])
def test_without_segment_granularity_segments_keep_theirs(intervals, expected):
    segments = [segment(interval, version=f"v{i}") for i, interval in enumerate(intervals)]
    payloads = compaction_payloads(compact(interval="2024-03-01/2024-04-01"), inputs(*segments))
    assert [(p["spec"]["dataSchema"]["granularitySpec"]["intervals"][0],
             p["spec"]["dataSchema"]["granularitySpec"]["segmentGranularity"]) for p in payloads] == expected


def test_a_given_segment_granularity_compacts_everything_together_over_whole_chunks():
    spec = compact(ioConfig={"type": "compact", "inputSpec": {"type": "interval", "interval": "2024-03-01/2024-03-03"},
                             "allowNonAlignedInterval": True, "dropExisting": True},
                   granularitySpec={"segmentGranularity": "MONTH", "queryGranularity": "HOUR", "rollup": False})
    [payload] = compaction_payloads(spec, inputs(segment(DAY1), segment(DAY2)))
    granularity = payload["spec"]["dataSchema"]["granularitySpec"]
    # widened to the month: a chunk is never replaced by only part of its rows
    assert granularity == {"segmentGranularity": "MONTH", "queryGranularity": "HOUR", "rollup": False,
                           "intervals": ["2024-03-01T00:00:00.000Z/2024-04-01T00:00:00.000Z"]}
    assert parse_batch_task(payload).spec.io_config.mode is IngestionMode.REPLACE


def test_dimensions_are_the_union_newest_segment_first_with_its_types():
    old = InputSegment(segment(DAY1, dimensions=("channel", "page")), {"channel": "string", "page": "string"})
    new = InputSegment(segment(DAY2, dimensions=("page", "user")), {"page": "long", "user": "string"})
    [payload] = compaction_payloads(compact(interval="2024-03-01/2024-03-03", granularitySpec={
        "segmentGranularity": "DAY"}), [old, new])
    assert payload["spec"]["dataSchema"]["dimensionsSpec"]["dimensions"] == [
        {"name": "page", "type": "long"}, {"name": "user", "type": "string"}, {"name": "channel", "type": "string"}]


def test_a_multi_value_dimension_keeps_the_order_its_segments_hold():
    """Ingestion put the values in the dimension's multiValueHandling order (sorted, or as they came): compaction
    re-reads them as they are, which is ARRAY; one segment holding the dimension as a list is enough."""
    older = InputSegment(segment(DAY1, dimensions=("tags", "page")), {"tags": "string", "page": "string"})
    listed = InputSegment(segment(DAY2, dimensions=("tags", "page")), {"tags": "string", "page": "string"},
                          frozenset({"tags"}))
    [payload] = compaction_payloads(compact(interval="2024-03-01/2024-03-03", granularitySpec={
        "segmentGranularity": "DAY"}), [older, listed])
    assert payload["spec"]["dataSchema"]["dimensionsSpec"]["dimensions"] == [
        {"name": "tags", "type": "string", "multiValueHandling": "ARRAY"}, {"name": "page", "type": "string"}]


def test_a_compacted_segment_and_a_raw_one_combine_the_same_way():
    compacted = segment(DAY1, version="v2", aggregators=({"type": "longSum", "name": "count", "fieldName": "count"},))
    raw = segment(DAY2, aggregators=(COUNT,))
    payloads = compaction_payloads(compact(interval="2024-03-01/2024-03-03"), inputs(compacted, raw))
    assert {json_key(p["spec"]["dataSchema"]["metricsSpec"]) for p in payloads} == {
        json_key([{"type": "longSum", "name": "count", "fieldName": "count"}])}


def json_key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def test_metrics_that_combine_differently_need_an_explicit_metrics_spec():
    a = segment(DAY1, aggregators=({"type": "longSum", "name": "m", "fieldName": "x"},))
    b = segment(DAY2, aggregators=({"type": "doubleMax", "name": "m", "fieldName": "x"},))
    with pytest.raises(TaskFailure, match="Failed to merge existing aggregators"):
        compaction_payloads(compact(interval="2024-03-01/2024-03-03", granularitySpec={"segmentGranularity": "DAY"}),
                            inputs(a, b))


def test_given_schema_parts_replace_what_the_segments_have():
    spec = compact(interval="2024-03-01/2024-03-02", dimensionsSpec={"dimensions": ["channel"]},
                   metricsSpec=[{"type": "longSum", "name": "count", "fieldName": "count"}],
                   transformSpec={"filter": {"type": "selector", "dimension": "channel", "value": "#en"}},
                   tuningConfig={"type": "index_parallel", "maxNumConcurrentSubTasks": 3})
    [payload] = compaction_payloads(spec, inputs(segment(DAY1)))
    schema = payload["spec"]["dataSchema"]
    assert [d["name"] for d in schema["dimensionsSpec"]["dimensions"]] == ["channel"]
    assert schema["metricsSpec"] == [{"type": "longSum", "name": "count", "fieldName": "count"}]
    assert schema["transformSpec"]["filter"]["value"] == "#en"
    assert payload["spec"]["tuningConfig"] == {"type": "index_parallel", "maxNumConcurrentSubTasks": 3}
    assert parse_batch_task(payload).spec.tuning_config.max_num_concurrent_sub_tasks == 3


def test_the_segments_read_are_the_visible_ones():
    old = [segment(DAY1, version="v1", partition=p) for p in range(3)]
    new = segment(DAY2, version="v9")
    newer_day1 = segment(DAY1, version="v2")
    chosen = select_segments(compact(interval="2024-03-01/2024-03-03"), [*old, new, newer_day1])
    assert [str(s.id) for s in chosen] == sorted([str(newer_day1.id), str(new.id)])
    listed = compact(ioConfig={"type": "compact", "inputSpec": {"type": "segments", "segments": [str(new.id)]}})
    assert select_segments(listed, [*old, new]) == [new]
    with pytest.raises(TaskFailure, match="different from the current used segments"):
        select_segments(compact(ioConfig={"type": "compact", "inputSpec": {
            "type": "segments", "segments": [str(old[0].id)]}}), old)  # the other partitions were left out
    with pytest.raises(TaskFailure, match="No segments found for compaction"):
        select_segments(compact(interval="2025-01-01/2025-01-02"), old)


@pytest.mark.parametrize(("fields", "path", "message"), [
    ({}, "", "exactly one of ioConfig and interval"),
    ({"interval": "2024-03-01/x"}, "interval", "2024-03-01/x"),
    ({"ioConfig": {"type": "compact", "inputSpec": {"type": "segments", "segments": []}}},
     "ioConfig.inputSpec.segments", "at least 1"),
    ({"ioConfig": {"type": "compact", "inputSpec": {"type": "interval", "interval": "2024-03-01T06/2024-03-02"}},
      "granularitySpec": {"segmentGranularity": "DAY"}}, "ioConfig.inputSpec.interval", "not aligned"),
    ({"interval": "2024-03-01/P1D", "segmentGranularity": "DAY", "granularitySpec": {"segmentGranularity": "HOUR"}},
     "", "Conflicting segment granularities"),
    ({"interval": "2024-03-01/P1D", "granularitySpec": {"queryGranularity": "fortnight"}}, "granularitySpec",
     "fortnight"),
    ({"interval": "2024-03-01/P1D", "tuningConfig": {"type": "kafka"}}, "tuningConfig.type", "kafka"),
    ({"interval": "2024-03-01/P1D", "tuningConfig": {"partitionsSpec": {"type": "hashed", "numShards": 2}}},
     "tuningConfig", "DynamicPartitionsSpec must be used for best-effort rollup"),
    ({"interval": "2024-03-01/P1D", "inputSource": {}}, "inputSource", "does not support this field"),
])
def test_a_bad_compaction_request_names_the_field(fields, path, message):
    with pytest.raises(SpecError) as caught:
        compact(**fields)
    assert caught.value.path == path and message in caught.value.message, str(caught.value)


def test_a_stored_payload_reads_back_as_the_same_task():
    spec = compact(interval="2024-03-01/P1D", segmentGranularity="DAY", context={"priority": 30})
    again = spec_from_json(spec.to_json())
    assert again.to_json() == spec.to_json() and again.priority == 30 and again.id == spec.id


def test_parquet_types_become_druid_dimension_types():
    schema = pa.schema([("a", pa.string()), ("b", pa.int64()), ("c", pa.float32()), ("d", pa.float64()),
                        ("__time", pa.timestamp("ms", tz="UTC")), ("mv", pa.list_(pa.string())),
                        ("j", pa.struct([("json", pa.string()), ('$."x"', pa.int64())])),
                        ("longs", pa.list_(pa.int64())), ("strings", pa.struct([("array", pa.list_(pa.string()))]))])
    # an ARRAY column is typed again from its values (auto), as schema discovery typed it
    assert parquet_column_types(schema) == {"a": "string", "b": "long", "c": "float", "d": "double",
                                            "__time": "string", "mv": "string", "j": "json", "longs": "auto",
                                            "strings": "auto"}

