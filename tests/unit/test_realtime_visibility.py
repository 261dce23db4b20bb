"""Rows running tasks hold (Druid's realtime queries): one replica per task group answers, a group answers until its
publish commits, and through the hand-off to segments every answer counts each row exactly once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import Connection, Engine, event

from sluice.broker.broker import Broker
from sluice.broker.realtime import RealtimePiece, visible_pieces
from sluice.metadata.offsets import StreamOffsets
from sluice.metadata.store import CommittedState, MetadataStore
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.realtime import RealtimeView


def _view(progress: int, *files: str, source: str = "wiki", sequence: str = "index_kafka_wiki_a",
          start: dict[int, int] | None = None) -> RealtimeView:
    return RealtimeView(source, sequence, start or {0: 0, 1: 0}, progress, files)


def _paths(pieces: dict[str, list[RealtimePiece]]) -> dict[str, list[str]]:
    return {source: [piece.path for piece in found] for source, found in pieces.items()}


# ------------------------------------------------------------------------------------------------ the rule itself


def test_only_the_furthest_replica_of_a_group_answers() -> None:
    behind, ahead = _view(4, "r1/0.parquet"), _view(9, "r2/0.parquet", "r2/1.parquet")
    assert _paths(visible_pieces([behind, ahead], {})) == {"wiki": ["r2/0.parquet", "r2/1.parquet"]}
    assert _paths(visible_pieces([ahead, behind], {})) == {"wiki": ["r2/0.parquet", "r2/1.parquet"]}


def test_a_task_that_has_persisted_nothing_shows_nothing() -> None:
    assert visible_pieces([_view(0)], {}) == {}


def test_groups_of_a_data_source_answer_side_by_side() -> None:
    views = [_view(5, "a/0.parquet"), _view(3, "b/0.parquet", sequence="index_kafka_wiki_b", start={2: 0})]
    assert _paths(visible_pieces(views, {})) == {"wiki": ["a/0.parquet", "b/0.parquet"]}


@pytest.mark.parametrize("committed, answers", [
    ({}, True),  # nothing committed yet
    ({"wiki": {0: 100, 1: 50}}, True),  # the offsets it starts from: its publish has not committed
    ({"wiki": {0: 100}}, True),  # a partition never committed has not moved
    ({"wiki": {0: 180, 1: 50}}, False),  # one partition moved past its start: its publish committed
    ({"wiki": {0: 100, 1: 90}}, False),
    ({"news": {0: 180, 1: 90}}, True),  # another data source's offsets say nothing about it
])
def test_a_group_answers_until_the_committed_offsets_move_past_its_start(
        committed: dict[str, dict[int, int]], answers: bool) -> None:
    view = _view(7, "a/0.parquet", start={0: 100, 1: 50})
    assert _paths(visible_pieces([view], committed)) == ({"wiki": ["a/0.parquet"]} if answers else {})


def test_the_next_generation_answers_beside_the_group_it_follows_then_alone() -> None:
    first = _view(100, "g1/0.parquet", start={0: 0})
    second = _view(20, "g2/0.parquet", sequence="index_kafka_wiki_g2", start={0: 100})  # starts where g1 ends
    assert _paths(visible_pieces([first, second], {"wiki": {0: 0}})) == {"wiki": ["g1/0.parquet", "g2/0.parquet"]}
    assert _paths(visible_pieces([first, second], {"wiki": {0: 100}})) == {"wiki": ["g2/0.parquet"]}


def test_each_sequence_answers_from_the_replica_furthest_into_it_until_that_sequence_commits() -> None:
    """A task that checkpointed holds two unpublished sequences; they are committed one by one."""
    views = [_view(100, "a/s0-0.parquet", "a/s0-1.parquet", sequence="g_0", start={0: 0}),
             _view(30, "a/s1-0.parquet", sequence="g_1", start={0: 100}),
             _view(60, "b/s0-0.parquet", sequence="g_0", start={0: 0}),  # replica b is still in sequence 0
             ]
    assert _paths(visible_pieces(views, {"wiki": {0: 0}})) == {
        "wiki": ["a/s0-0.parquet", "a/s0-1.parquet", "a/s1-0.parquet"]}
    assert _paths(visible_pieces(views, {"wiki": {0: 100}})) == {"wiki": ["a/s1-0.parquet"]}  # sequence 0 committed


def test_data_sources_are_independent() -> None:
    wiki = _view(9, "wiki/0.parquet", sequence="same")
    news = _view(1, "news/0.parquet", source="news", sequence="same")  # not a replica of wiki's: another source
    assert _paths(visible_pieces([wiki, news], {})) == {"wiki": ["wiki/0.parquet"], "news": ["news/0.parquet"]}
    assert _paths(visible_pieces([wiki, news], {"wiki": {0: 5}})) == {"news": ["news/0.parquet"]}


# ------------------------------------------------------------------------------------- the hand-off, query by query

DAY = datetime(2015, 9, 12, tzinfo=UTC)
ROWS = 6  # what the task has read: offsets 0..3 of partition 0 and 0..2 of partition 1
START, END = StreamOffsets("edits", {0: 0, 1: 0}), StreamOffsets("edits", {0: 4, 1: 2})


def _write(path: Path, first: int, n: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    times = [DAY + timedelta(minutes=first + i) for i in range(n)]
    pq.write_table(pa.table({"__time": pa.array(times, pa.timestamp("ms", tz="UTC")), "n": range(first, first + n)}),
                   path)
    return path


class Task:
    """A reading task: two persists, then a publish that commits one segment holding the same rows and moves the
    offsets, then the persists deleted and the task gone, as KafkaIndexTask does it."""

    def __init__(self, root: Path, metadata: MetadataStore) -> None:
        self._metadata = metadata
        self._persists = [_write(root / "task" / "persist" / "0.parquet", 0, 4),
                          _write(root / "task" / "persist" / "1.parquet", 4, 2)]
        self._segment_file = _write(root / "deep" / "wiki" / "0.parquet", 0, ROWS)
        self.running = True

    def views(self) -> list[RealtimeView]:
        if not self.running:
            return []
        files = [str(path) for path in self._persists if path.exists()]
        return [RealtimeView("wiki", "index_kafka_wiki_a", dict(START.offsets), ROWS, tuple(files))]

    def commit(self) -> None:
        segment = DataSegment(
            id=SegmentId("wiki", Interval(DAY, DAY + timedelta(hours=1)), "v1", 0), dimensions=[], metrics=["n"],
            aggregators=[], shard_spec=numbered_shard_spec(0), num_rows=ROWS, size=self._segment_file.stat().st_size,
            load_spec={"type": "local", "path": str(self._segment_file)})
        assert self._metadata.commit_segments_and_metadata([segment], "wiki", START, END).success

    def hand_off(self) -> None:
        for path in self._persists:
            path.unlink()
        self.running = False


class PublishingStore(MetadataStore):
    """A metadata store where a publish lands right after the broker has read the committed state."""

    after_read: Callable[[], None] | None = None

    def committed_state(self) -> CommittedState:
        state = super().committed_state()
        if self.after_read is not None:
            hook, self.after_read = self.after_read, None
            hook()
        return state


@pytest.fixture
def store(tmp_path: Path) -> PublishingStore:
    metadata = PublishingStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    metadata.create_tables()
    metadata.reset_stream_offsets("wiki", START)  # the supervisor records where the group starts
    return metadata


def _count(broker: Broker) -> int:
    return broker.sql("SELECT COUNT(*) FROM wiki").rows[0][0]


def test_every_answer_counts_each_row_once_from_the_task_then_from_its_segment(
        store: PublishingStore, tmp_path: Path) -> None:
    task = Task(tmp_path, store)
    broker = Broker(store, LocalDeepStorage(tmp_path / "deep"), tmp_path / "cache", realtime=task.views,
                    snapshot_ttl_s=0)
    assert _count(broker) == ROWS
    task.commit()  # persists still on disk and listed: the task is cleaning up
    assert _count(broker) == ROWS
    task.hand_off()
    assert _count(broker) == ROWS


def test_a_snapshot_kept_for_its_ttl_answers_as_of_its_moment_through_a_publish(
        store: PublishingStore, tmp_path: Path) -> None:
    """Segments and offsets are one snapshot: a publish after it hides nothing (the audit's case: cached segments
    beside fresh offsets hid the task's rows from both)."""
    task = Task(tmp_path, store)
    broker = Broker(store, LocalDeepStorage(tmp_path / "deep"), tmp_path / "cache", realtime=task.views,
                    snapshot_ttl_s=3600)
    assert _count(broker) == ROWS
    task.commit()
    assert _count(broker) == ROWS  # still the snapshot before the publish: the persists answer
    task.hand_off()
    assert _count(broker) == ROWS  # its persists are gone: a fresh snapshot, whose segment answers


def test_a_task_that_publishes_and_leaves_right_after_the_state_is_read_is_not_lost(
        store: PublishingStore, tmp_path: Path) -> None:
    """The views are fetched before the committed state: fetched after it, they would miss a task that committed and
    left in between, whose segment the state does not hold either."""
    task = Task(tmp_path, store)
    broker = Broker(store, LocalDeepStorage(tmp_path / "deep"), tmp_path / "cache", realtime=task.views,
                    snapshot_ttl_s=0)

    def publish() -> None:
        task.commit()
        task.hand_off()

    store.after_read = publish
    assert _count(broker) == ROWS


def test_a_publish_between_the_views_and_the_state_is_counted_once(store: PublishingStore, tmp_path: Path) -> None:
    task = Task(tmp_path, store)
    published = []

    def views_then_publish() -> list[RealtimeView]:
        views = task.views()
        if not published:
            task.commit()  # the state read next holds the segment and the moved offsets
            published.append(True)
        return views

    broker = Broker(store, LocalDeepStorage(tmp_path / "deep"), tmp_path / "cache", realtime=views_then_publish,
                    snapshot_ttl_s=0)
    assert _count(broker) == ROWS


# --------------------------------------------------------------------------------------------- the committed state


@pytest.fixture(params=["sqlite", "postgresql"])
def metadata_uri(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'metadata.db'}"
        return
    from sluice.dev import postgres as pg

    bin_dir = pg.find_bin_dir()
    if bin_dir is None:
        pytest.skip(pg.MISSING_REASON)
    with pg.postgres_server(bin_dir) as uri:
        yield uri


def test_the_committed_state_never_holds_half_of_a_publish(metadata_uri: str, tmp_path: Path) -> None:
    """A publish landing between the state's two reads (segments, then offsets) is in neither of them: on PostgreSQL
    each statement of a READ COMMITTED transaction would see it from the moment it commits."""
    reader, publisher = MetadataStore(metadata_uri), MetadataStore(metadata_uri)
    reader.create_tables()
    reader.reset_stream_offsets("wiki", START)
    task = Task(tmp_path, publisher)

    def publish_after_the_segments_are_read(conn: Connection, _cursor: Any, statement: str, *_: Any) -> None:
        if "druid_segments" in statement and not published:
            published.append(True)
            task.commit()

    published: list[bool] = []
    event.listen(Engine, "after_cursor_execute", publish_after_the_segments_are_read)
    try:
        state = reader.committed_state()
    finally:
        event.remove(Engine, "after_cursor_execute", publish_after_the_segments_are_read)
    assert published
    assert (state.used_segments, state.stream_offsets) == ([], {"wiki": START})
    assert reader.committed_state().stream_offsets == {"wiki": END}
    reader.close()
    publisher.close()
