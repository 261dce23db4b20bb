"""A streaming task's sequences (Druid's SequenceMetadata): the rules, as plain functions over dataclasses.

A task reads its partitions as a chain of sequences. Each covers offsets [start, end) and is published on its
own, by one transaction that moves the stored offsets from its start to its end. The first sequence starts at
the task's start offsets with no end; a checkpoint (the supervisor's setEndOffsets with finish=false) fixes the
end of the last sequence and opens the next one there, so a task that runs for hours hands its rows off as it
goes (incremental handoff) instead of holding them all until taskDuration. The final setEndOffsets
(finish=true) fixes the end of the last sequence, and the task stops reading once it gets there.

Sequence names are `<baseSequenceName>_<sequenceId>` and key segment allocation: replicas of a task group get
the same checkpoints, so they read the same ranges into the same sequences and allocate the same segment ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Mapping, Sequence

from sluice.stream.offsets import END_OF_STREAM


@dataclass(frozen=True)
class SequenceMetadata:
    sequence_id: int
    sequence_name: str
    start_offsets: dict[int, int]
    #: END_OF_STREAM per partition until a checkpoint or the final setEndOffsets fixes it
    end_offsets: dict[int, int]
    #: its end was fixed by a checkpoint: once read to its end, it is published while the task reads on
    checkpointed: bool = False
    #: the persist directories holding the rows read for it (relative to the task directory), in order
    persists: tuple[str, ...] = ()
    #: rows in its persists, per segment-granularity bucket (epoch millis): maxRowsPerSegment's measure. Rolled-up
    #: rows, or nearly: a persist leaves rollup to the merge when it would hardly shrink, and a task's first
    #: persist measures before it rolls up (rollup_policy.py)
    bucket_rows: Mapping[int, int] = field(default_factory=dict)
    #: its segments and its offsets are committed (by this task or by a replica)
    published: bool = False

    @property
    def rows(self) -> int:
        return sum(self.bucket_rows.values())

    def read_to_end(self, current: Mapping[int, int]) -> bool:
        return all(current[p] >= end for p, end in self.end_offsets.items())

    def to_json(self) -> dict[str, Any]:
        return {"sequenceId": self.sequence_id, "sequenceName": self.sequence_name,
                "startOffsets": _str_keys(self.start_offsets), "endOffsets": _str_keys(self.end_offsets),
                "checkpointed": self.checkpointed, "persists": list(self.persists),
                "bucketRows": _str_keys(self.bucket_rows), "published": self.published}

    @classmethod
    def from_json(cls, payload: Mapping[str, Any]) -> SequenceMetadata:
        return cls(int(payload["sequenceId"]), payload["sequenceName"], _int_keys(payload["startOffsets"]),
                   _int_keys(payload["endOffsets"]), bool(payload["checkpointed"]), tuple(payload["persists"]),
                   _int_keys(payload["bucketRows"]), bool(payload["published"]))


def sequence_name(base_sequence_name: str, sequence_id: int) -> str:
    return f"{base_sequence_name}_{sequence_id}"


def initial_sequences(base_sequence_name: str, checkpoints: Mapping[int, Mapping[int, int]]) -> list[SequenceMetadata]:
    """The sequences of a new task from its group's checkpoints (sequence id -> start offsets; one entry for a
    group that never checkpointed). A replica started after checkpoints reads the same sequences as the others:
    each one ends where the next starts."""
    ids = sorted(checkpoints)
    sequences = []
    for index, sequence_id in enumerate(ids):
        start = dict(checkpoints[sequence_id])
        last = index == len(ids) - 1
        end = {p: END_OF_STREAM for p in start} if last else dict(checkpoints[ids[index + 1]])
        sequences.append(SequenceMetadata(sequence_id, sequence_name(base_sequence_name, sequence_id), start, end,
                                          checkpointed=not last))
    return sequences


def reading_sequence(sequences: Sequence[SequenceMetadata], current: Mapping[int, int]) -> SequenceMetadata | None:
    """The sequence the next read goes into: the first one not read to its end (None: all are)."""
    return next((s for s in sequences if not s.read_to_end(current)), None)


def add_persist(sequences: list[SequenceMetadata], sequence_id: int, persist: str,
                bucket_rows: Mapping[int, int]) -> list[SequenceMetadata]:
    def added(s: SequenceMetadata) -> SequenceMetadata:
        rows = dict(s.bucket_rows)
        for bucket, count in bucket_rows.items():
            rows[bucket] = rows.get(bucket, 0) + count
        return replace(s, persists=(*s.persists, persist), bucket_rows=rows)

    return [added(s) if s.sequence_id == sequence_id else s for s in sequences]


def checkpoint(sequences: list[SequenceMetadata], end: Mapping[int, int],
               base_sequence_name: str) -> list[SequenceMetadata]:
    """setEndOffsets(finish=false): the last sequence ends at `end` and the next one starts there."""
    last = sequences[-1]
    ended = replace(last, end_offsets={**last.end_offsets, **end}, checkpointed=True)
    start = {p: ended.end_offsets[p] for p in last.start_offsets}
    following = SequenceMetadata(last.sequence_id + 1, sequence_name(base_sequence_name, last.sequence_id + 1),
                                 start, {p: END_OF_STREAM for p in start})
    return [*sequences[:-1], ended, following]


def finish(sequences: list[SequenceMetadata], end: Mapping[int, int]) -> list[SequenceMetadata]:
    """setEndOffsets(finish=true): the last sequence ends at `end`; the task publishes once it got there."""
    last = sequences[-1]
    return [*sequences[:-1], replace(last, end_offsets={**last.end_offsets, **end})]


def mark_published(sequences: list[SequenceMetadata], sequence_id: int) -> list[SequenceMetadata]:
    return [replace(s, published=True, persists=()) if s.sequence_id == sequence_id else s for s in sequences]


def publishable(sequences: Sequence[SequenceMetadata], current: Mapping[int, int],
                finished: bool) -> list[SequenceMetadata]:
    """The sequences to publish now, in order: every unpublished one read to its end, up to the first that is
    not. A checkpointed sequence goes while the task reads on; the last one only once the task is finished
    (its end was set with finish=true)."""
    ready = []
    for s in sequences:
        if s.published:
            continue
        if not s.read_to_end(current) or not (s.checkpointed or finished):
            break
        ready.append(s)
    return ready


@dataclass(frozen=True)
class HandoffLimits:
    """When a task asks its supervisor for a checkpoint (Druid's isPushRequired and intermediateHandoffPeriod)."""

    max_rows_per_segment: int
    max_total_rows: int | None
    intermediate_handoff_period: timedelta | None


def checkpoint_reason(sequences: Sequence[SequenceMetadata], limits: HandoffLimits, now: datetime,
                      last_checkpoint: datetime) -> str | None:
    """Why the last sequence should end now, or None. Only the last sequence can be checkpointed, and only once."""
    last = sequences[-1]
    if last.checkpointed or not last.persists:
        return None
    biggest = max(last.bucket_rows.values(), default=0)
    if biggest >= limits.max_rows_per_segment:
        return f"a segment of sequence {last.sequence_name} reached maxRowsPerSegment ({biggest} rows)"
    unpublished = sum(s.rows for s in sequences if not s.published)
    if limits.max_total_rows is not None and unpublished >= limits.max_total_rows:
        return f"the task holds {unpublished} unpublished rows, maxTotalRows is {limits.max_total_rows}"
    if limits.intermediate_handoff_period is not None and now - last_checkpoint >= limits.intermediate_handoff_period:
        return f"intermediateHandoffPeriod {limits.intermediate_handoff_period} passed since the last checkpoint"
    return None


def _str_keys(offsets: Mapping[int, int]) -> dict[str, int]:
    return {str(k): v for k, v in sorted(offsets.items())}


def _int_keys(offsets: Mapping[str, Any]) -> dict[int, int]:
    return {int(k): int(v) for k, v in offsets.items()}
