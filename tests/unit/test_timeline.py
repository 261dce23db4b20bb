"""VersionedIntervalTimeline: segments in → visible pieces and overshadowed ids out.

Segments are written as ``(start_hour, end_hour, version, partition_num, core_partitions)``
on one day; visible pieces as ``(start_hour, end_hour, version, [partition_nums])``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.segment.segment import ETERNITY, DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.segment.timeline import VersionedIntervalTimeline

DAY_START = datetime(2015, 9, 12, tzinfo=timezone.utc)
Seg = tuple[int, int, str, int, int]


def hours(start: int, end: int) -> Interval:
    return Interval(DAY_START + timedelta(hours=start), DAY_START + timedelta(hours=end))


def segment(start: int, end: int, version: str, partition_num: int = 0, core_partitions: int = 0) -> DataSegment:
    return DataSegment(
        id=SegmentId("wiki", hours(start, end), version, partition_num),
        dimensions=[],
        metrics=[],
        aggregators=[],
        shard_spec=numbered_shard_spec(partition_num, core_partitions),
        num_rows=1,
        size=1,
    )


def timeline(*segments: Seg) -> VersionedIntervalTimeline:
    return VersionedIntervalTimeline.from_segments(segment(*spec) for spec in segments)


def visible(tl: VersionedIntervalTimeline, within: Interval = ETERNITY) -> list[tuple[int, int, str, list[int]]]:
    def hour(instant: datetime) -> int:
        return int((instant - DAY_START) / timedelta(hours=1))

    return [
        (hour(piece.interval.start), hour(piece.interval.end), piece.version, [s.id.partition_num for s in piece.segments])
        for piece in tl.lookup(within)
    ]


LOOKUP_CASES = {
    "one segment": ([(0, 24, "v1", 0, 0)], [(0, 24, "v1", [0])]),
    "higher version hides the same interval": (
        [(0, 24, "v1", 0, 0), (0, 24, "v1", 1, 0), (0, 24, "v2", 0, 0)],
        [(0, 24, "v2", [0])],
    ),
    "higher version hides only where it overlaps": (
        [(0, 24, "v1", 0, 0), (6, 12, "v2", 0, 0)],
        [(0, 6, "v1", [0]), (6, 12, "v2", [0]), (12, 24, "v1", [0])],
    ),
    "lower version stays visible outside the higher one": (
        [(0, 12, "v2", 0, 0), (6, 24, "v1", 0, 0)],
        [(0, 12, "v2", [0]), (12, 24, "v1", [0])],
    ),
    "three nested versions": (
        [(0, 24, "v1", 0, 0), (4, 20, "v2", 0, 0), (8, 12, "v3", 0, 0)],
        [(0, 4, "v1", [0]), (4, 8, "v2", [0]), (8, 12, "v3", [0]), (12, 20, "v2", [0]), (20, 24, "v1", [0])],
    ),
    "incomplete higher version does not overshadow": (
        [(0, 24, "v1", 0, 0), (0, 24, "v2", 0, 2)],
        [(0, 24, "v1", [0])],
    ),
    "complete core partitions overshadow": (
        [(0, 24, "v1", 0, 0), (0, 24, "v2", 0, 2), (0, 24, "v2", 1, 2)],
        [(0, 24, "v2", [0, 1])],
    ),
    "appended partitions beyond the core are visible with it": (
        [(0, 24, "v2", 0, 2), (0, 24, "v2", 1, 2), (0, 24, "v2", 2, 2)],
        [(0, 24, "v2", [0, 1, 2])],
    ),
    "zero core partitions: any subset is complete": ([(0, 24, "v1", 3, 0), (0, 24, "v1", 5, 0)], [(0, 24, "v1", [3, 5])]),
    "gaps stay gaps": ([(0, 6, "v1", 0, 0), (12, 18, "v1", 0, 0)], [(0, 6, "v1", [0]), (12, 18, "v1", [0])]),
    "abutting chunks of one version": ([(0, 6, "v1", 0, 0), (6, 12, "v1", 0, 0)], [(0, 6, "v1", [0]), (6, 12, "v1", [0])]),
}


@pytest.mark.parametrize(("segments", "expected"), LOOKUP_CASES.values(), ids=LOOKUP_CASES.keys())
def test_lookup(segments: list[Seg], expected: list[tuple[int, int, str, list[int]]]) -> None:
    assert visible(timeline(*segments)) == expected


def test_lookup_is_clipped_to_the_requested_interval() -> None:
    tl = timeline((0, 24, "v1", 0, 0), (6, 12, "v2", 0, 0))
    assert visible(tl, hours(3, 9)) == [(3, 6, "v1", [0]), (6, 9, "v2", [0])]
    assert tl.lookup(hours(3, 9))[0].true_interval == hours(0, 24)
    assert visible(tl, Interval.parse("2016-01-01/2016-01-02")) == []


def test_lookup_with_incomplete_partitions_lets_them_overshadow() -> None:
    tl = timeline((0, 24, "v1", 0, 0), (6, 12, "v2", 0, 2))
    pieces = [(str(p.interval), p.version) for p in tl.lookup_with_incomplete_partitions(hours(0, 24))]
    assert pieces == [(str(hours(0, 6)), "v1"), (str(hours(6, 12)), "v2"), (str(hours(12, 24)), "v1")]


PARTS_CASES = {
    "a segment shown whole": ([(0, 24, "v1", 0, 0)], {"v1/0": [(0, 24)]}),
    "a hole in the middle leaves two parts of every partition": (
        [(0, 24, "v1", 0, 2), (0, 24, "v1", 1, 2), (6, 12, "v2", 0, 0)],
        {"v1/0": [(0, 6), (12, 24)], "v1/1": [(0, 6), (12, 24)], "v2/0": [(6, 12)]},
    ),
    "nested versions clip each other": (
        [(0, 24, "v1", 0, 0), (4, 20, "v2", 0, 0), (8, 12, "v3", 0, 0)],
        {"v1/0": [(0, 4), (20, 24)], "v2/0": [(4, 8), (12, 20)], "v3/0": [(8, 12)]},
    ),
    "covered by two abutting higher chunks: no part": (
        [(0, 24, "v1", 0, 0), (0, 12, "v2", 0, 0), (12, 24, "v3", 0, 0)],
        {"v2/0": [(0, 12)], "v3/0": [(12, 24)]},
    ),
    "an incomplete higher version hides nothing": ([(0, 24, "v1", 0, 0), (6, 12, "v2", 0, 2)], {"v1/0": [(0, 24)]}),
}


def parts(tl: VersionedIntervalTimeline, within: Interval = ETERNITY) -> dict[str, list[tuple[int, int]]]:
    def hour(instant: datetime) -> int:
        return int((instant - DAY_START) / timedelta(hours=1))

    return {
        f"{segment_id.version}/{segment_id.partition_num}": [(hour(i.start), hour(i.end)) for i in intervals]
        for segment_id, intervals in tl.visible_parts(within).items()
    }


@pytest.mark.parametrize(("segments", "expected"), PARTS_CASES.values(), ids=PARTS_CASES.keys())
def test_visible_parts(segments: list[Seg], expected: dict[str, list[tuple[int, int]]]) -> None:
    assert parts(timeline(*segments)) == expected


def test_visible_parts_are_clipped_to_the_requested_interval() -> None:
    tl = timeline((0, 24, "v1", 0, 0), (6, 12, "v2", 0, 0))
    assert parts(tl, hours(3, 9)) == {"v1/0": [(3, 6)], "v2/0": [(6, 9)]}
    assert parts(tl, hours(13, 14)) == {"v1/0": [(13, 14)]}


OVERSHADOWED_CASES = {
    "same interval, higher version": ([(0, 24, "v1", 0, 0), (0, 24, "v1", 1, 0), (0, 24, "v2", 0, 0)], {"v1/0", "v1/1"}),
    "partial overlap keeps the lower version": ([(0, 24, "v1", 0, 0), (6, 12, "v2", 0, 0)], set()),
    "one higher version over two chunks": ([(0, 12, "v1", 0, 0), (12, 24, "v1", 0, 0), (0, 24, "v2", 0, 0)], {"v1/0"}),
    "covered by two higher chunks together": ([(0, 24, "v1", 0, 0), (0, 12, "v2", 0, 0), (12, 24, "v3", 0, 0)], {"v1/0"}),
    "incomplete newer version overshadows nothing and is kept": ([(0, 24, "v1", 0, 0), (0, 24, "v2", 0, 2)], set()),
    "incomplete older version under a complete one": ([(0, 24, "v1", 0, 2), (0, 24, "v2", 0, 0)], {"v1/0"}),
    "incomplete under incomplete": ([(0, 24, "v1", 0, 2), (0, 24, "v2", 0, 2)], {"v1/0"}),
}


@pytest.mark.parametrize(("segments", "expected"), OVERSHADOWED_CASES.values(), ids=OVERSHADOWED_CASES.keys())
def test_find_fully_overshadowed(segments: list[Seg], expected: set[str]) -> None:
    found = timeline(*segments).find_fully_overshadowed()
    # Two chunks of one version share the label "v1/0"; the label set is what the table states.
    assert {f"{i.version}/{i.partition_num}" for i in found} == expected
    assert len(found) == sum(1 for s in segments if f"{s[2]}/{s[3]}" in expected)


def test_same_version_overlapping_different_intervals_is_refused() -> None:
    with pytest.raises(ValueError, match=r"Cannot add overlapping segments \[.*\] with the same version \[v1\]"):
        timeline((0, 12, "v1", 0, 0), (6, 18, "v1", 0, 0))


def test_one_timeline_holds_one_data_source() -> None:
    other = DataSegment(SegmentId("blog", hours(0, 1), "v1"), [], [], [], numbered_shard_spec(0), 1, 1)
    with pytest.raises(ValueError, match=r"belongs to data source \[blog\], but this timeline holds \[wiki\]"):
        VersionedIntervalTimeline.from_segments([segment(0, 1, "v1"), other])


# -- properties, checked against a brute-force oracle hour by hour ------------------------------

GRID_HOURS = 12
VERSIONS = ("v0", "v1", "v2", "v3")


@st.composite
def segment_sets(draw: st.DrawFn) -> list[DataSegment]:
    """Per version, disjoint chunks (same-version overlaps are invalid), each with some partitions."""
    segments = []
    for version in VERSIONS:
        points = sorted(draw(st.sets(st.integers(0, GRID_HOURS), max_size=6)))
        for start, end in zip(points[0::2], points[1::2]):
            core = draw(st.integers(0, 2))
            for partition_num in draw(st.sets(st.integers(0, 3), min_size=1, max_size=3)):
                segments.append(segment(start, end, version, partition_num, core))
    return segments


def _holders(segments: list[DataSegment]) -> dict[tuple[Interval, str], tuple[bool, set[SegmentId]]]:
    """(interval, version) → (complete, ids), computed independently of the timeline."""
    groups: dict[tuple[Interval, str], list[DataSegment]] = {}
    for s in segments:
        groups.setdefault((s.interval, s.version), []).append(s)
    return {
        key: (
            all(n in {s.id.partition_num for s in group} for n in range(max(s.core_partitions for s in group))),
            {s.id for s in group},
        )
        for key, group in groups.items()
    }


def _winner(holders: dict, hour: int, complete_only: bool) -> tuple[Interval, str] | None:
    covering = [
        key
        for key, (complete, _) in holders.items()
        if key[0].contains(hours(hour, hour + 1)) and (complete or not complete_only)
    ]
    return max(covering, key=lambda key: key[1], default=None)


@given(segment_sets())
def test_visible_pieces_never_overlap_and_come_in_time_order(segments: list[DataSegment]) -> None:
    pieces = VersionedIntervalTimeline.from_segments(segments).lookup(ETERNITY)
    for before, after in zip(pieces, pieces[1:]):
        assert before.interval.end <= after.interval.start


@given(segment_sets())
def test_every_instant_shows_the_highest_complete_version_covering_it(segments: list[DataSegment]) -> None:
    holders = _holders(segments)
    pieces = VersionedIntervalTimeline.from_segments(segments).lookup(ETERNITY)
    for hour in range(GRID_HOURS):
        shown = [p for p in pieces if p.interval.contains(hours(hour, hour + 1))]
        winner = _winner(holders, hour, complete_only=True)
        if winner is None:
            assert shown == []
        else:
            shown_holders = [(p.true_interval, p.version, {s.id for s in p.segments}) for p in shown]
            assert shown_holders == [(*winner, holders[winner][1])]


@given(segment_sets())
def test_fully_overshadowed_means_visible_at_no_instant(segments: list[DataSegment]) -> None:
    holders = _holders(segments)
    survivors = {
        key
        for hour in range(GRID_HOURS)
        for key in (_winner(holders, hour, complete_only=True), _winner(holders, hour, complete_only=False))
        if key is not None
    }
    expected = {i for key, (_, ids) in holders.items() if key not in survivors for i in ids}
    assert VersionedIntervalTimeline.from_segments(segments).find_fully_overshadowed() == expected


@given(segment_sets())
def test_visible_parts_show_each_segment_exactly_where_its_holder_wins(segments: list[DataSegment]) -> None:
    holders = _holders(segments)
    found = VersionedIntervalTimeline.from_segments(segments).visible_parts(ETERNITY)
    for intervals in found.values():
        for before, after in zip(intervals, intervals[1:]):
            assert before.end < after.start  # in time order, apart: adjacent parts would be one
    for hour in range(GRID_HOURS):
        shown = {i for i, intervals in found.items() if any(p.contains(hours(hour, hour + 1)) for p in intervals)}
        winner = _winner(holders, hour, complete_only=True)
        assert shown == (holders[winner][1] if winner else set())
