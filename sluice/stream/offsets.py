"""Pure offset arithmetic for a reading task: which range to read next, and when reading is done."""

from __future__ import annotations

from typing import Mapping

#: Druid's "no end yet" end offset (Long.MAX_VALUE)
END_OF_STREAM = 9_223_372_036_854_775_807


def next_ranges(current: Mapping[int, int], latest: Mapping[int, int], end: Mapping[int, int],
                max_records: int) -> dict[int, tuple[int, int]]:
    """The offset ranges of the next read: up to what the stream has and the task's end offsets,
    at most `max_records` records in all, shared evenly among the partitions that have data."""
    available = {p: min(latest.get(p, c), end.get(p, END_OF_STREAM)) - c for p, c in current.items()}
    waiting = sorted(p for p, n in available.items() if n > 0)
    ranges: dict[int, tuple[int, int]] = {}
    budget = max(max_records, 1)
    for index, partition in enumerate(waiting):
        share = max(budget // (len(waiting) - index), 1)
        take = min(available[partition], share)
        ranges[partition] = (current[partition], current[partition] + take)
        budget -= take
        if budget <= 0:
            break
    return ranges


def is_finished(current: Mapping[int, int], end: Mapping[int, int]) -> bool:
    return all(current[p] >= end.get(p, END_OF_STREAM) for p in current)
