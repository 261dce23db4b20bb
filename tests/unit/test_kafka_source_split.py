"""Planning of the sluice_kafka source: offset ranges → Spark input partitions (no Spark, no broker)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.stream.kafka_ranges import SCHEMA, KafkaRangeDataSource, OffsetRange, parse_ranges, split_ranges


def test_one_split_per_partition_without_limit() -> None:
    assert split_ranges({1: (5, 9), 0: (0, 3)}) == [OffsetRange(0, 0, 3), OffsetRange(1, 5, 9)]


def test_long_range_is_cut_into_slices_of_at_most_max_records() -> None:
    assert split_ranges({0: (0, 25), 1: (7, 10)}, 10) == [
        OffsetRange(0, 0, 10),
        OffsetRange(0, 10, 20),
        OffsetRange(0, 20, 25),
        OffsetRange(1, 7, 10),
    ]


def test_empty_ranges_make_no_split() -> None:
    assert split_ranges({0: (4, 4), 1: (0, 1)}, 10) == [OffsetRange(1, 0, 1)]
    assert split_ranges({}) == []


@pytest.mark.parametrize("ranges", [{0: (5, 4)}, {0: (-1, 3)}])
def test_invalid_range_is_rejected(ranges: dict[int, tuple[int, int]]) -> None:
    with pytest.raises(ValueError, match="invalid offset range"):
        split_ranges(ranges)


def test_non_positive_max_records_is_rejected() -> None:
    with pytest.raises(ValueError, match="max_records"):
        split_ranges({0: (0, 3)}, 0)


@given(
    ranges=st.dictionaries(
        st.integers(0, 63),
        st.tuples(st.integers(0, 10**6), st.integers(0, 5000)).map(lambda t: (t[0], t[0] + t[1])),
        max_size=8,
    ),
    max_records=st.one_of(st.none(), st.integers(1, 2000)),
)
def test_splits_cover_each_range_exactly_once(ranges: dict[int, tuple[int, int]], max_records: int | None) -> None:
    splits = split_ranges(ranges, max_records)
    for partition, (start, end) in ranges.items():
        own = [s for s in splits if s.partition == partition]
        covered = [offset for s in own for offset in range(s.start, s.end)]
        assert covered == list(range(start, end))
        assert all(s.start < s.end for s in own)
        if max_records is not None:
            assert all(s.end - s.start <= max_records for s in own)


def test_parse_ranges_reads_json_object() -> None:
    assert parse_ranges('{"0": [0, 10], "3": [5, 6]}') == {0: (0, 10), 3: (5, 6)}


@pytest.mark.parametrize("text", ["[1, 2]", '{"0": 5}', '{"x": [0, 1]}', "not json", '{"0": [1]}'])
def test_parse_ranges_rejects_other_shapes(text: str) -> None:
    with pytest.raises(ValueError, match="ranges"):
        parse_ranges(text)


def test_reader_plans_splits_from_options() -> None:
    source = KafkaRangeDataSource(
        {
            "topic": "t",
            "consumerProperties": json.dumps({"bootstrap.servers": "127.0.0.1:1"}),
            "ranges": json.dumps({"1": [0, 5], "0": [10, 12]}),
            "maxRecordsPerSplit": "3",
        }
    )
    assert source.schema() == SCHEMA
    assert source.reader(SCHEMA).partitions() == [OffsetRange(0, 10, 12), OffsetRange(1, 0, 3), OffsetRange(1, 3, 5)]


def test_reader_requires_topic() -> None:
    with pytest.raises(ValueError, match='"topic"'):
        KafkaRangeDataSource({"consumerProperties": "{}", "ranges": "{}"}).reader(SCHEMA)
