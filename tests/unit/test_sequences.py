"""A streaming task's sequences: which range the next read goes into, what is published when, when a
checkpoint is due, and that sequences.json holds all of it (no Spark, no servers)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from sluice.task import sequences
from sluice.stream.offsets import END_OF_STREAM
from sluice.task.sequences import HandoffLimits, SequenceMetadata, checkpoint_reason, initial_sequences

BASE = "index_kafka_wiki_abc"
OPEN = END_OF_STREAM
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_new_task_has_one_open_sequence_from_its_start() -> None:
    [only] = initial_sequences(BASE, {0: {0: 10, 1: 20}})
    assert (only.sequence_name, only.start_offsets, only.end_offsets, only.checkpointed) == (
        f"{BASE}_0", {0: 10, 1: 20}, {0: OPEN, 1: OPEN}, False)


def test_a_replica_started_after_checkpoints_reads_the_same_sequences() -> None:
    chain = initial_sequences(BASE, {0: {0: 10}, 1: {0: 50}, 2: {0: 90}})
    assert [(s.sequence_name, s.start_offsets, s.end_offsets, s.checkpointed) for s in chain] == [
        (f"{BASE}_0", {0: 10}, {0: 50}, True),
        (f"{BASE}_1", {0: 50}, {0: 90}, True),
        (f"{BASE}_2", {0: 90}, {0: OPEN}, False),
    ]


def test_reads_fill_the_first_sequence_not_read_to_its_end() -> None:
    chain = initial_sequences(BASE, {0: {0: 0, 1: 0}, 1: {0: 50, 1: 40}})
    assert sequences.reading_sequence(chain, {0: 30, 1: 40}).sequence_id == 0  # a replica behind its group
    assert sequences.reading_sequence(chain, {0: 50, 1: 40}).sequence_id == 1
    finished = sequences.finish(chain, {0: 60, 1: 40})
    assert sequences.reading_sequence(finished, {0: 60, 1: 40}) is None


def test_a_checkpoint_ends_the_last_sequence_and_opens_the_next_where_it_ends() -> None:
    chain = sequences.checkpoint(initial_sequences(BASE, {0: {0: 0, 1: 5}}), {0: 100, 1: 7}, BASE)
    assert [(s.sequence_id, s.start_offsets, s.end_offsets, s.checkpointed) for s in chain] == [
        (0, {0: 0, 1: 5}, {0: 100, 1: 7}, True),
        (1, {0: 100, 1: 7}, {0: OPEN, 1: OPEN}, False),
    ]
    assert chain[1].sequence_name == f"{BASE}_1"


PUBLISHABLE = {
    # name: (checkpoints, finish end or None, current offsets, published ids, ids to publish now in order)
    "an open sequence is never published": ({0: {0: 0}}, None, {0: 80}, [], []),
    "a checkpointed sequence read to its end goes while the task reads on": (
        {0: {0: 0}, 1: {0: 50}}, None, {0: 70}, [], [0]),
    "a checkpointed sequence not yet read to its end waits": ({0: {0: 0}, 1: {0: 50}}, None, {0: 40}, [], []),
    "the last sequence goes only once finished and read there": ({0: {0: 0}, 1: {0: 50}}, {0: 90}, {0: 90}, [], [0, 1]),
    "finished but not read to the end yet": ({0: {0: 0}, 1: {0: 50}}, {0: 90}, {0: 80}, [], [0]),
    "published ones are skipped": ({0: {0: 0}, 1: {0: 50}}, {0: 90}, {0: 90}, [0], [1]),
}


@pytest.mark.parametrize("checkpoints, end, current, published, expected", PUBLISHABLE.values(), ids=PUBLISHABLE)
def test_sequences_are_published_in_order_once_read_to_their_end(checkpoints, end, current, published,
                                                                 expected) -> None:
    chain = initial_sequences(BASE, checkpoints)
    if end is not None:
        chain = sequences.finish(chain, end)
    for sequence_id in published:
        chain = sequences.mark_published(chain, sequence_id)
    ready = sequences.publishable(chain, current, finished=end is not None)
    assert [s.sequence_id for s in ready] == expected


def with_rows(bucket_rows: dict[int, int], *, checkpointed: bool = False) -> list[SequenceMetadata]:
    chain = initial_sequences(BASE, {0: {0: 0}})
    chain = sequences.add_persist(chain, 0, "persist/0/0", bucket_rows)
    return sequences.checkpoint(chain, {0: 10}, BASE)[:1] if checkpointed else chain


LIMITS = HandoffLimits(max_rows_per_segment=1000, max_total_rows=5000, intermediate_handoff_period=timedelta(hours=1))

CHECKPOINT_REASONS = {
    "under every limit": (with_rows({0: 999, 3_600_000: 999}), NOW, None),
    "one segment reached maxRowsPerSegment": (with_rows({0: 10, 3_600_000: 1000}), NOW, "maxRowsPerSegment"),
    "the rows held reached maxTotalRows": (with_rows({h * 3_600_000: 900 for h in range(6)}), NOW, "maxTotalRows"),
    "intermediateHandoffPeriod passed": (with_rows({0: 1}), NOW + timedelta(hours=1), "intermediateHandoffPeriod"),
    "a sequence with nothing persisted is not ended": (initial_sequences(BASE, {0: {0: 0}}),
                                                      NOW + timedelta(days=1), None),
    "a checkpointed sequence is not checkpointed again": (with_rows({0: 5000}, checkpointed=True), NOW, None),
}


@pytest.mark.parametrize("chain, now, expected", CHECKPOINT_REASONS.values(), ids=CHECKPOINT_REASONS)
def test_a_checkpoint_is_asked_for_when_a_handoff_limit_is_reached(chain, now, expected) -> None:
    reason = checkpoint_reason(chain, LIMITS, now, last_checkpoint=NOW)
    assert (reason is None) if expected is None else (expected in reason)


def test_persists_add_up_per_bucket_and_publishing_drops_them() -> None:
    chain = initial_sequences(BASE, {0: {0: 0}})
    chain = sequences.add_persist(chain, 0, "persist/0/0", {0: 3, 60_000: 1})
    chain = sequences.add_persist(chain, 0, "persist/0/1", {60_000: 2})
    assert (chain[0].persists, dict(chain[0].bucket_rows), chain[0].rows) == (
        ("persist/0/0", "persist/0/1"), {0: 3, 60_000: 3}, 6)
    published = sequences.mark_published(chain, 0)[0]
    assert (published.published, published.persists) == (True, ())


def test_sequences_survive_a_round_trip_through_json() -> None:
    chain = sequences.checkpoint(sequences.add_persist(initial_sequences(BASE, {0: {0: 3, 1: 4}}), 0, "persist/0/0",
                                                       {0: 7}), {0: 9, 1: 4}, BASE)
    assert [SequenceMetadata.from_json(s.to_json()) for s in chain] == chain
