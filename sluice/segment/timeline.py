"""Druid's VersionedIntervalTimeline: which segments are visible at each instant.

Segments are grouped into *partition holders*, one per (interval, version): all partitions of
one version of one time chunk. At every instant the visible holder is the one with the highest
version among those covering the instant. A higher version therefore overshadows a lower one
only where they overlap: the parts of the lower version outside the higher one's interval stay
visible. Versions compare as strings, as in Druid (they are ISO timestamps of lock acquisition).

Only *complete* holders are visible to queries (`lookup`): a batch overwrite that has published
two of its three core partitions must not hide the data it is replacing, nor show half of itself.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from sluice.segment.segment import ETERNITY, DataSegment, Interval, SegmentId


@dataclass(frozen=True)
class TimelineObjectHolder:
    """One visible piece of the timeline.

    ``interval`` is the visible part (a reader must drop rows outside it: the rest of the segment
    is overshadowed or outside the lookup); ``true_interval`` is the interval the segments were
    written for.
    """

    interval: Interval
    version: str
    segments: tuple[DataSegment, ...]
    true_interval: Interval


@dataclass(eq=False)
class _PartitionHolder:
    """All partitions of one version of one time chunk (compared by identity)."""

    interval: Interval
    version: str
    partitions: dict[int, DataSegment] = field(default_factory=dict)

    def is_complete(self) -> bool:
        """NumberedShardSpec completeness: every core partition 0..P-1 is present.

        Partitions numbered P and above are appended ones (streaming) and never make a chunk
        incomplete; with P = 0 any non-empty set of partitions is complete.
        """
        core = max(segment.core_partitions for segment in self.partitions.values())
        return all(num in self.partitions for num in range(core))

    def segments(self) -> tuple[DataSegment, ...]:
        return tuple(self.partitions[num] for num in sorted(self.partitions))


class VersionedIntervalTimeline:
    """The timeline of one data source. Pure: built from descriptors, no I/O."""

    def __init__(self) -> None:
        self._holders: dict[tuple[Interval, str], _PartitionHolder] = {}
        # Intervals already holding each version, to reject same-version overlaps on add.
        self._intervals_by_version: dict[str, set[Interval]] = defaultdict(set)
        self._data_source: str | None = None

    @classmethod
    def from_segments(cls, segments: Iterable[DataSegment]) -> VersionedIntervalTimeline:
        timeline = cls()
        for segment in segments:
            timeline.add(segment)
        return timeline

    def add(self, segment: DataSegment) -> None:
        """Add a segment; adding the same id again replaces the descriptor.

        Two different intervals with the same version must not overlap: a version is one lock on
        one time chunk, so such segments could only come from a bug, and neither could be said to
        overshadow the other. Druid refuses them the same way.
        """
        if self._data_source is None:
            self._data_source = segment.data_source
        elif segment.data_source != self._data_source:
            raise ValueError(
                f"segment {segment.id} belongs to data source [{segment.data_source}], "
                f"but this timeline holds [{self._data_source}]"
            )
        for other in self._intervals_by_version[segment.version]:
            if other != segment.interval and other.overlaps(segment.interval):
                raise ValueError(
                    f"Cannot add overlapping segments [{other} and {segment.interval}] "
                    f"with the same version [{segment.version}]"
                )
        key = (segment.interval, segment.version)
        holder = self._holders.get(key)
        if holder is None:
            holder = self._holders[key] = _PartitionHolder(segment.interval, segment.version)
            self._intervals_by_version[segment.version].add(segment.interval)
        holder.partitions[segment.id.partition_num] = segment

    def lookup(self, interval: Interval) -> list[TimelineObjectHolder]:
        """The visible complete partition sets over ``interval``, in time order, never overlapping."""
        return _visible([h for h in self._holders.values() if h.is_complete()], interval)

    def visible_parts(self, interval: Interval) -> dict[SegmentId, list[Interval]]:
        """Per segment visible within ``interval``, the parts where it shows, in time order, never adjacent.

        What Druid's broker sends in each SegmentDescriptor: the interval of the timeline piece, not the segment's
        own. A partially overshadowed segment shows in several pieces, and a reader must drop its rows outside them.
        """
        parts: dict[SegmentId, list[Interval]] = {}
        for holder in self.lookup(interval):  # pieces of one holder are merged when adjacent: never adjacent here
            for segment in holder.segments:
                parts.setdefault(segment.id, []).append(holder.interval)
        return parts

    def lookup_with_incomplete_partitions(self, interval: Interval) -> list[TimelineObjectHolder]:
        """Like `lookup`, but incomplete partition sets take part (and can overshadow)."""
        return _visible(list(self._holders.values()), interval)

    def find_fully_overshadowed(self) -> set[SegmentId]:
        """Ids of segments visible nowhere: what Druid's Coordinator marks unused.

        A holder survives if it is visible somewhere among the complete holders, or somewhere
        among all holders. The second rule keeps an incomplete newer version (still being
        published) from being dropped, and the first keeps the complete older data it is going
        to replace until it is complete.
        """
        visible_keys = {
            (piece.true_interval, piece.version)
            for pieces in (self.lookup(ETERNITY), self.lookup_with_incomplete_partitions(ETERNITY))
            for piece in pieces
        }
        return {
            segment.id
            for key, holder in self._holders.items()
            if key not in visible_keys
            for segment in holder.partitions.values()
        }


def _visible(holders: list[_PartitionHolder], within: Interval) -> list[TimelineObjectHolder]:
    """Sweep the boundaries of ``holders`` (clipped to ``within``) keeping a max-heap by version.

    Between two consecutive boundaries the same holders cover every instant, so the heap's top
    is the visible holder of that whole elementary range. Holders that have ended are removed
    lazily when they reach the top. Adjacent ranges won by the same holder are merged.
    """
    starts: dict[datetime, list[tuple[datetime, _PartitionHolder]]] = defaultdict(list)
    boundaries: set[datetime] = set()
    for holder in holders:
        part = holder.interval.intersection(within)
        if part is not None:
            starts[part.start].append((part.end, holder))
            boundaries.update((part.start, part.end))
    rank = {version: i for i, version in enumerate(sorted({h.version for h in holders}))}
    tiebreak = itertools.count()
    active: list[tuple[int, int, datetime, _PartitionHolder]] = []
    pieces: list[tuple[datetime, datetime, _PartitionHolder]] = []
    ordered = sorted(boundaries)
    for lo, hi in zip(ordered, ordered[1:]):
        for end, holder in starts.get(lo, ()):
            heapq.heappush(active, (-rank[holder.version], next(tiebreak), end, holder))
        while active and active[0][2] <= lo:
            heapq.heappop(active)
        if not active:
            continue
        winner = active[0][3]
        if pieces and pieces[-1][2] is winner and pieces[-1][1] == lo:
            pieces[-1] = (pieces[-1][0], hi, winner)
        else:
            pieces.append((lo, hi, winner))
    return [
        TimelineObjectHolder(Interval(lo, hi), holder.version, holder.segments(), holder.interval)
        for lo, hi, holder in pieces
    ]
