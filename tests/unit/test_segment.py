"""Segment identity: intervals, ids and the DataSegment JSON, as Druid writes them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec

DAY = "2015-09-12T00:00:00.000Z/2015-09-13T00:00:00.000Z"
VERSION = "2023-06-23T21:07:28.226Z"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (DAY, DAY),
        ("2015-09-12/2015-09-13", DAY),
        ("2015-09-12T00:00:00Z/2015-09-13T00:00:00Z", DAY),
        ("2015-09-12T02:00:00+02:00/2015-09-13T02:00:00+02:00", DAY),
        ("2015-09-12T00:47:53.259123Z/2015-09-12T01:00:00Z", "2015-09-12T00:47:53.259Z/2015-09-12T01:00:00.000Z"),
    ],
)
def test_interval_parses_iso_forms_and_prints_druid_form(text: str, expected: str) -> None:
    assert str(Interval.parse(text)) == expected
    assert Interval.parse(str(Interval.parse(text))) == Interval.parse(text)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("2015-09-12T00:00:00Z", "not of the form 'start/end'"),
        ("2015-09-13/2015-09-12", "is before its start"),
        ("2015-09-12/2015-09-13/2015-09-14", "not of the form 'start/end'"),
    ],
)
def test_interval_rejects_malformed_text(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Interval.parse(text)


def test_interval_needs_time_zone_aware_bounds() -> None:
    with pytest.raises(ValueError, match="no time zone"):
        Interval(datetime(2015, 9, 12), datetime(2015, 9, 13))


@pytest.mark.parametrize(
    ("a", "b", "overlaps", "a_contains_b"),
    [
        ("2015-09-12/2015-09-14", "2015-09-13/2015-09-15", True, False),
        ("2015-09-12/2015-09-14", "2015-09-12/2015-09-13", True, True),
        ("2015-09-12/2015-09-14", "2015-09-12/2015-09-14", True, True),
        ("2015-09-12/2015-09-13", "2015-09-13/2015-09-14", False, False),  # abutting
        ("2015-09-12/2015-09-13", "2015-09-20/2015-09-21", False, False),
        ("2015-09-13/2015-09-14", "2015-09-12/2015-09-15", True, False),
    ],
)
def test_interval_overlaps_and_contains(a: str, b: str, overlaps: bool, a_contains_b: bool) -> None:
    first, second = Interval.parse(a), Interval.parse(b)
    assert first.overlaps(second) is overlaps
    assert second.overlaps(first) is overlaps
    assert first.contains(second) is a_contains_b
    assert (first.intersection(second) is not None) is overlaps


@pytest.mark.parametrize(
    ("instant", "inside"),
    [(utc(2015, 9, 12), True), (utc(2015, 9, 12, 23, 59), True), (utc(2015, 9, 13), False), (utc(2015, 9, 11), False)],
)
def test_interval_contains_instants_half_open(instant: datetime, inside: bool) -> None:
    assert Interval.parse(DAY).contains(instant) is inside


def test_interval_floors_to_milliseconds() -> None:
    start = utc(2015, 9, 12) + timedelta(microseconds=1999)
    assert Interval(start, utc(2015, 9, 13)).start == utc(2015, 9, 12) + timedelta(milliseconds=1)


@pytest.mark.parametrize(
    ("partition_num", "expected"),
    [
        (0, f"wikipedia_2015-09-12T00:00:00.000Z_2015-09-13T00:00:00.000Z_{VERSION}"),
        (1, f"wikipedia_2015-09-12T00:00:00.000Z_2015-09-13T00:00:00.000Z_{VERSION}_1"),
        (17, f"wikipedia_2015-09-12T00:00:00.000Z_2015-09-13T00:00:00.000Z_{VERSION}_17"),
    ],
)
def test_segment_id_string_is_druids(partition_num: int, expected: str) -> None:
    assert str(SegmentId("wikipedia", Interval.parse(DAY), VERSION, partition_num)) == expected


def test_segment_ids_sort_by_data_source_interval_version_partition() -> None:
    day, next_day = Interval.parse(DAY), Interval.parse("2015-09-13/2015-09-14")
    ids = [
        SegmentId("wiki", next_day, "v1"),
        SegmentId("wiki", day, "v2"),
        SegmentId("wiki", day, "v1", 1),
        SegmentId("blog", next_day, "v9"),
        SegmentId("wiki", day, "v1", 0),
    ]
    assert sorted(ids) == [ids[3], ids[4], ids[2], ids[1], ids[0]]


def _segment(partition_num: int = 1) -> DataSegment:
    return DataSegment(
        id=SegmentId("wikipedia", Interval.parse(DAY), VERSION, partition_num),
        dimensions=["channel", "page"],
        metrics=["count", "added"],
        aggregators=[{"type": "count", "name": "count"}, {"type": "longSum", "name": "added", "fieldName": "added"}],
        shard_spec=numbered_shard_spec(partition_num),
        num_rows=39244,
        size=4_200_000,
        load_spec={"type": "local", "path": "/deep/wikipedia/index.parquet"},
    )


def test_payload_is_druids_data_segment_json() -> None:
    assert _segment().to_payload() == {
        "dataSource": "wikipedia",
        "interval": DAY,
        "version": VERSION,
        "loadSpec": {"type": "local", "path": "/deep/wikipedia/index.parquet"},
        "dimensions": "channel,page",
        "metrics": "count,added",
        "shardSpec": {"type": "numbered", "partitionNum": 1, "partitions": 0},
        "binaryVersion": 9,
        "size": 4_200_000,
        "identifier": f"wikipedia_2015-09-12T00:00:00.000Z_2015-09-13T00:00:00.000Z_{VERSION}_1",
        "num_rows": 39244,
        "aggregators": [{"type": "count", "name": "count"}, {"type": "longSum", "name": "added", "fieldName": "added"}],
    }


def test_payload_round_trips() -> None:
    segment = _segment()
    assert DataSegment.from_payload(segment.to_payload()) == segment


def test_reads_a_payload_written_by_druid() -> None:
    druid_payload = {
        "dataSource": "wikipedia",
        "interval": DAY,
        "version": VERSION,
        "loadSpec": {"type": "s3_zip", "bucket": "b", "key": "k/index.zip"},
        "dimensions": "",
        "metrics": "count",
        "shardSpec": {"type": "numbered", "partitionNum": 2, "partitions": 0},
        "binaryVersion": 9,
        "size": 10,
        "identifier": "ignored",
    }
    segment = DataSegment.from_payload(druid_payload)
    assert (segment.id.partition_num, segment.dimensions, segment.metrics) == (2, [], ["count"])
    assert (segment.num_rows, segment.aggregators) == (0, [])


def test_shard_spec_partition_must_match_the_id() -> None:
    with pytest.raises(ValueError, match="shardSpec.partitionNum is 3, expected the id's partition 1"):
        DataSegment(
            id=SegmentId("wikipedia", Interval.parse(DAY), VERSION, 1),
            dimensions=[],
            metrics=[],
            aggregators=[],
            shard_spec=numbered_shard_spec(3),
            num_rows=0,
            size=0,
        )
