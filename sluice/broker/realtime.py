"""Which rows of running tasks a query sees (Druid's realtime queries), without counting any row twice.

A reading task's persists hold the rows it has read, sequence by sequence; a sequence's rows become segments
when its publish commits, in the same transaction that moves the data source's committed offsets from the
sequence's start to its end. So, against one committed state (used segments and committed offsets read
together), a sequence's persists are visible exactly while the committed offsets of its partitions have not
moved past its start: after that, the state's segments hold its rows. Replicas of a task group read the same
sequences: for each sequence only the replica that read furthest into it answers. (How the broker orders this against fetching the tasks' views: sluice/broker/broker.py.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from sluice.broker.engine import file_version
from sluice.broker.sql.translate import TIME_COLUMN
from sluice.segment.segment import ETERNITY, Interval

if TYPE_CHECKING:
    from sluice.realtime import RealtimeView


@dataclass(frozen=True)
class RealtimePiece:
    """Rows a running task has read but not published yet: one Parquet persist file of a task group's sequence."""

    path: str
    #: the sequence's name, which the group's replicas share
    sequence_name: str
    #: its string dimensions that hold a row of several values as JSON text (`RealtimeView.multi_values`)
    multi_values: tuple[str, ...] = ()
    server: str | None = None  # the peon that serves it (`RealtimeView.server`)


def visible_pieces(views: Iterable[RealtimeView],
                   committed: Mapping[str, Mapping[int, int]]) -> dict[str, list[RealtimePiece]]:
    """Per data source, the files of the furthest replica of every sequence whose rows `committed` (per data source,
    the committed offset of each partition) does not hold yet."""
    furthest: dict[tuple[str, str], RealtimeView] = {}
    for view in views:
        key = (view.data_source, view.sequence_name)
        if view.files and (key not in furthest or view.progress > furthest[key].progress):
            furthest[key] = view
    pieces: dict[str, list[RealtimePiece]] = {}
    for (source, sequence), view in sorted(furthest.items()):
        offsets = committed.get(source, {})
        if any(offsets.get(p, start) > start for p, start in view.start_offsets.items()):
            continue  # its publish committed: the rows are in segments now
        pieces.setdefault(source, []).extend(RealtimePiece(path, sequence, view.multi_values, view.server)
                                             for path in view.files)
    return pieces


@dataclass(frozen=True)
class PieceFooter:
    """What a persist file's Parquet footer tells without reading its rows."""

    num_rows: int
    size: int  # bytes
    #: from the first to just after the last `__time` (Druid's intervals end exclusive, in milliseconds);
    #: ETERNITY when the file keeps no statistics for it
    interval: Interval


def piece_footer(path: str) -> PieceFooter:
    """The footer of a persist file (read once per version of the file); SegmentFileGone once it was handed off."""
    return _footer(path, *file_version(path, "Realtime"))


@lru_cache(maxsize=65536)
def _footer(path: str, _mtime_ns: int, size: int) -> PieceFooter:
    metadata = pq.read_metadata(path)
    names = metadata.schema.names
    interval = ETERNITY
    if TIME_COLUMN in names and metadata.num_row_groups:
        column = names.index(TIME_COLUMN)
        statistics = [metadata.row_group(g).column(column).statistics for g in range(metadata.num_row_groups)]
        if all(s is not None and s.has_min_max for s in statistics):
            start, end = min(_utc(s.min) for s in statistics), max(_utc(s.max) for s in statistics)
            interval = Interval(start, end + timedelta(milliseconds=1))
    return PieceFooter(metadata.num_rows, size, interval)


def _utc(moment: datetime) -> datetime:
    """A `__time` statistic: zoned when the file stores UTC-adjusted instants, naive (meaning UTC) otherwise."""
    return moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
