"""The metadata store on a real SQLite file and a real PostgreSQL server.

The exactly-once rule under test: a publish writes its segments and moves the stream offsets
from ``start`` to ``end`` in one transaction, and only when the stored offsets match ``start``.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import Table, create_engine, func, inspect, select

from sluice.metadata import tables
from sluice.metadata.store import EntryExistsError, MetadataStore, PublishResult, SegmentAllocationError, StreamOffsets
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.dev import postgres as pg

T = TypeVar("T")
HOUR_0 = Interval.parse("2015-09-12T00:00:00Z/2015-09-12T01:00:00Z")
HOUR_1 = Interval.parse("2015-09-12T01:00:00Z/2015-09-12T02:00:00Z")


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MetadataStore]:
    if request.param == "sqlite":
        uri = f"sqlite:///{tmp_path}/metadata/metadata.db"
    else:
        uri = pg.fresh_database(request.getfixturevalue("postgres_uri"))
    metadata_store = MetadataStore(uri)
    metadata_store.create_tables()
    yield metadata_store
    metadata_store.close()


def segment(
    partition_num: int = 0, version: str = "v1", interval: Interval = HOUR_0, data_source: str = "wiki"
) -> DataSegment:
    return DataSegment(
        id=SegmentId(data_source, interval, version, partition_num),
        dimensions=["channel"],
        metrics=["count"],
        aggregators=[{"type": "count", "name": "count"}],
        shard_spec=numbered_shard_spec(partition_num),
        num_rows=10,
        size=100,
        load_spec={"type": "local", "path": f"/deep/{partition_num}/index.parquet"},
    )


def offsets(mapping: dict[int, int], stream: str = "wiki") -> StreamOffsets:
    return StreamOffsets(stream, mapping)


def row_count(store: MetadataStore, table: Table) -> int:
    engine = create_engine(store.uri)
    try:
        with engine.connect() as conn:
            return conn.scalar(select(func.count()).select_from(table))
    finally:
        engine.dispose()


def run_together(calls: list[Callable[[], T]]) -> list[T]:
    """Run the calls on threads released at the same moment; results in call order."""
    barrier = threading.Barrier(len(calls))
    results: list[T | BaseException] = [None] * len(calls)  # type: ignore[list-item]

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = calls[index]()
        except BaseException as error:  # reported below, on the test's thread
            results[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results  # type: ignore[return-value]


def test_tables_carry_druids_names_and_creation_is_idempotent(store: MetadataStore) -> None:
    store.create_tables()
    engine = create_engine(store.uri)
    names = {name.lower() for name in inspect(engine).get_table_names()}
    engine.dispose()
    assert names == {"druid_segments", "druid_pendingsegments", "druid_datasource", "druid_supervisors", "druid_tasks",
                     "druid_tasklocks", "druid_config", "druid_rules", "druid_audit", "sluice_announcements",
                     "sluice_leader_leases", "alembic_version"}


# -- publish: compare-and-swap of the stream offsets --------------------------------------------

CAS_CASES = {
    # name: (stored, start, end, success, stored afterwards)
    "nothing stored yet: end is stored": (None, {0: 0}, {0: 10}, True, {0: 10}),
    "stored equals start: moved to end": ({0: 10}, {0: 10}, {0: 20}, True, {0: 20}),
    "partitions of other task groups are kept": ({0: 10, 1: 5}, {0: 10}, {0: 20}, True, {0: 20, 1: 5}),
    "a partition new to the store joins": ({0: 10}, {1: 0}, {1: 7}, True, {0: 10, 1: 7}),
    "stored is ahead of start (a replica already published)": ({0: 20}, {0: 10}, {0: 20}, False, {0: 20}),
    "stored is behind start (an earlier range is missing)": ({0: 5}, {0: 10}, {0: 20}, False, {0: 5}),
}


@pytest.mark.parametrize(("stored", "start", "end", "success", "after"), CAS_CASES.values(), ids=CAS_CASES.keys())
def test_publish_moves_offsets_only_from_the_stored_ones(
    store: MetadataStore,
    stored: dict[int, int] | None,
    start: dict[int, int],
    end: dict[int, int],
    success: bool,
    after: dict[int, int],
) -> None:
    if stored is not None:
        store.reset_stream_offsets("wiki", offsets(stored))
    result = store.commit_segments_and_metadata([segment(0), segment(1)], "wiki", offsets(start), offsets(end))
    assert result.success is success
    assert store.get_stream_offsets("wiki") == offsets(after)
    if success:
        assert result == PublishResult(True)
        assert [s.id for s in store.used_segments("wiki")] == [segment(0).id, segment(1).id]
    else:
        assert result.message == (
            f"Inconsistency between stored metadata state[{offsets(stored or {})}] and target state[{offsets(start)}]. "
            "Try resetting the supervisor."
        )
        assert row_count(store, tables.segments) == 0


def test_publish_from_another_topic_is_refused(store: MetadataStore) -> None:
    store.reset_stream_offsets("wiki", offsets({0: 10}, stream="wiki"))
    result = store.commit_segments_and_metadata([segment()], "wiki", offsets({0: 10}, "edits"), offsets({0: 20}, "edits"))
    assert not result.success
    assert "KafkaDataSourceMetadata{stream='wiki', partitionOffsetMap={0=10}}" in (result.message or "")
    assert store.get_stream_offsets("wiki") == offsets({0: 10})


def test_the_same_publish_twice_writes_once(store: MetadataStore) -> None:
    def publish() -> PublishResult:
        return store.commit_segments_and_metadata([segment()], "wiki", offsets({0: 0}), offsets({0: 10}))

    assert publish().success
    second = publish()
    assert not second.success and "Try resetting the supervisor" in (second.message or "")
    assert row_count(store, tables.segments) == 1
    assert store.get_stream_offsets("wiki") == offsets({0: 10})


def test_publish_without_offsets_is_idempotent(store: MetadataStore) -> None:
    assert store.commit_segments_and_metadata([segment()], "wiki", None, None).success
    assert store.commit_segments_and_metadata([segment(), segment(1)], "wiki", None, None).success
    assert row_count(store, tables.segments) == 2
    assert store.get_stream_offsets("wiki") is None


def test_concurrent_publishes_of_different_partitions_all_succeed(store: MetadataStore) -> None:
    partitions = range(6)
    results = run_together(
        [
            lambda p=p: store.commit_segments_and_metadata([segment(p)], "wiki", offsets({p: 0}), offsets({p: 100 + p}))
            for p in partitions
        ]
    )
    assert all(result.success for result in results), results
    assert store.get_stream_offsets("wiki") == offsets({p: 100 + p for p in partitions})
    assert [s.id.partition_num for s in store.used_segments("wiki")] == list(partitions)


def test_concurrent_replicas_publishing_the_same_range_commit_once(store: MetadataStore) -> None:
    store.reset_stream_offsets("wiki", offsets({0: 0}))
    results = run_together(
        [lambda: store.commit_segments_and_metadata([segment()], "wiki", offsets({0: 0}), offsets({0: 10}))] * 4
    )
    assert sorted(result.success for result in results) == [False, False, False, True]
    assert row_count(store, tables.segments) == 1
    assert store.get_stream_offsets("wiki") == offsets({0: 10})


def open_new_store(uri: str, barrier: threading.Barrier) -> int:
    """What each node does at start: open the store, create its tables, read."""
    barrier.wait()
    store = MetadataStore(uri)
    try:
        store.create_tables()
        return len(store.used_segments("wiki"))
    finally:
        store.close()


def test_processes_starting_together_on_a_new_sqlite_store_all_open_it(tmp_path: Path) -> None:
    # Switching a new file to WAL collided about once in eight rounds of four processes ("database is locked").
    processes, rounds = 4, 30
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(processes, mp_context=context) as pool:
        for n in range(rounds):
            barrier = manager.Barrier(processes)
            uri = f"sqlite:///{tmp_path}/{n}/metadata.db"
            assert list(pool.map(open_new_store, [uri] * processes, [barrier] * processes)) == [0] * processes


@pytest.mark.parametrize(
    ("segments", "start", "end", "error"),
    [
        ([segment()], offsets({0: 0}), None, "start/end metadata pair must be either null or non-null"),
        ([segment(), segment()], None, None, "duplicate ids"),
        ([segment(data_source="blog")], None, None, r"must all belong to data source \[wiki\], found \['blog'\]"),
    ],
)
def test_publish_rejects_malformed_requests(
    store: MetadataStore,
    segments: list[DataSegment],
    start: StreamOffsets | None,
    end: StreamOffsets | None,
    error: str,
) -> None:
    with pytest.raises(ValueError, match=error):
        store.commit_segments_and_metadata(segments, "wiki", start, end)
    assert row_count(store, tables.segments) == 0


def test_segments_overshadowed_within_the_publish_are_stored_unused(store: MetadataStore) -> None:
    assert store.commit_segments_and_metadata([segment(version="v1"), segment(version="v2")], "wiki", None, None).success
    assert [s.version for s in store.used_segments()] == ["v2"]
    assert row_count(store, tables.segments) == 2
    assert store.data_sources() == ["wiki"]


def test_used_segments_round_trip_the_descriptor(store: MetadataStore) -> None:
    store.commit_segments_and_metadata([segment(data_source="blog")], "blog", None, None)
    store.commit_segments_and_metadata([segment(3)], "wiki", None, None)
    assert store.used_segments("wiki") == [segment(3)]
    assert [s.data_source for s in store.used_segments()] == ["blog", "wiki"]
    assert store.data_sources() == ["blog", "wiki"]


# -- segment allocation through druid_pendingSegments -------------------------------------------


def test_allocation_numbers_partitions_within_the_chunk_and_is_idempotent(store: MetadataStore) -> None:
    first = store.allocate_segment("wiki", HOUR_0, "seq_0", None, lock_version="v1")
    steps = [
        # (sequence, previous id, lock version, interval) → (version, partition)
        (("seq_0", None, "v1", HOUR_0), ("v1", 0)),  # a retry gets the same id
        (("seq_1", None, "v2", HOUR_0), ("v1", 1)),  # a newer lock joins the chunk's version
        (("seq_0", str(first), "v2", HOUR_0), ("v1", 2)),  # the sequence continues
        (("seq_0", str(first), "v2", HOUR_0), ("v1", 2)),
        (("seq_1", None, "v2", HOUR_0), ("v1", 1)),
        (("seq_2", None, "v2", HOUR_1), ("v2", 0)),  # an empty chunk starts at the lock version
    ]
    assert (first.version, first.partition_num) == ("v1", 0)
    for (sequence, previous, lock, interval), expected in steps:
        allocated = store.allocate_segment("wiki", interval, sequence, previous, lock_version=lock)
        assert (allocated.data_source, allocated.interval) == ("wiki", interval)
        assert (allocated.version, allocated.partition_num) == expected, (sequence, previous)
    assert row_count(store, tables.pending_segments) == 4


def test_replicas_with_the_same_sequence_names_get_the_same_ids(store: MetadataStore) -> None:
    replica = [store.allocate_segment("wiki", HOUR_0, "seq_a", None, "v1")]
    replica.append(store.allocate_segment("wiki", HOUR_1, "seq_a", str(replica[0]), "v1"))
    other = [store.allocate_segment("wiki", HOUR_0, "seq_a", None, "v9")]
    other.append(store.allocate_segment("wiki", HOUR_1, "seq_a", str(other[0]), "v9"))
    assert other == replica


def test_pending_key_is_druids_sha1(store: MetadataStore) -> None:
    store.allocate_segment("wiki", HOUR_0, "seq_0", "prev", "v1")
    engine = create_engine(store.uri)
    with engine.connect() as conn:
        key = conn.scalar(select(tables.pending_segments.c.sequence_name_prev_id_sha1))
    engine.dispose()
    assert key == hashlib.sha1(b"seq_0\xffprev").hexdigest().upper()


def test_allocation_continues_after_committed_partitions(store: MetadataStore) -> None:
    store.commit_segments_and_metadata([segment(0, "v1"), segment(5, "v1")], "wiki", None, None)
    allocated = store.allocate_segment("wiki", HOUR_0, "seq_0", None, "v2")
    assert (allocated.version, allocated.partition_num) == ("v1", 6)


@pytest.mark.parametrize(
    ("committed", "request_args", "error"),
    [
        ([segment(version="v3")], ("seq_0", None, "v2", HOUR_0), r"already has version \[v3\], newer than the lock version \[v2\]"),
        (
            [segment(interval=Interval.parse("2015-09-12/2015-09-13"))],
            ("seq_0", None, "v2", HOUR_0),
            r"used segments of interval \[2015-09-12T00:00:00.000Z/2015-09-13T00:00:00.000Z\] \(version \[v1\]\) overlap it",
        ),
    ],
)
def test_allocation_refuses_chunks_it_cannot_join(
    store: MetadataStore, committed: list[DataSegment], request_args: tuple, error: str
) -> None:
    store.commit_segments_and_metadata(committed, "wiki", None, None)
    sequence, previous, lock, interval = request_args
    with pytest.raises(SegmentAllocationError, match=error):
        store.allocate_segment("wiki", interval, sequence, previous, lock)
    assert row_count(store, tables.pending_segments) == 0


def test_a_sequence_cannot_fork_into_another_interval(store: MetadataStore) -> None:
    store.allocate_segment("wiki", HOUR_0, "seq_0", None, "v1")
    with pytest.raises(SegmentAllocationError, match=r"Cannot use existing pending segment .* not \[wiki\] interval"):
        store.allocate_segment("wiki", HOUR_1, "seq_0", None, "v1")


def test_concurrent_allocations_get_distinct_partitions(store: MetadataStore) -> None:
    ids = run_together([lambda n=n: store.allocate_segment("wiki", HOUR_0, f"seq_{n}", None, "v1") for n in range(6)])
    assert sorted(i.partition_num for i in ids) == list(range(6))
    assert {i.version for i in ids} == {"v1"}


# -- stream offsets outside a publish -----------------------------------------------------------


def test_reset_merges_partitions_and_delete_forgets(store: MetadataStore) -> None:
    assert store.get_stream_offsets("wiki") is None
    store.reset_stream_offsets("wiki", offsets({0: 0, 1: 10, 2: 20, 3: 40}))
    store.reset_stream_offsets("wiki", offsets({0: 100, 2: 650}))
    assert store.get_stream_offsets("wiki") == offsets({0: 100, 1: 10, 2: 650, 3: 40})
    store.reset_stream_offsets("wiki", offsets({0: 1}, stream="edits"))
    assert store.get_stream_offsets("wiki") == offsets({0: 1}, stream="edits")
    assert store.delete_stream_offsets("wiki") is True
    assert store.delete_stream_offsets("wiki") is False
    assert store.get_stream_offsets("wiki") is None


# -- supervisors and tasks ------------------------------------------------------------------------


def test_supervisor_rows_are_a_history_and_terminate_writes_a_tombstone(store: MetadataStore) -> None:
    spec = {"type": "kafka", "spec": {"dataSchema": {"dataSource": "wiki"}}, "suspended": False}
    store.insert_supervisor("wiki", spec)
    store.insert_supervisor("wiki", {**spec, "suspended": True})
    store.insert_supervisor("blog", {**spec, "spec": {"dataSchema": {"dataSource": "blog"}}})
    store.terminate_supervisor("blog", ["blog"])

    assert store.active_supervisors() == {"wiki": {**spec, "suspended": True}}
    history = store.supervisor_history()
    assert [entry["spec"]["suspended"] for entry in history["wiki"]] == [True, False]
    assert history["blog"][0]["spec"] == {"type": "NoopSupervisorSpec", "id": "blog", "dataSources": ["blog"], "suspended": False}
    assert all(entry["version"].endswith("Z") for entry in history["wiki"])
    assert store.supervisor_history("wiki") == {"wiki": history["wiki"]}
    assert store.supervisor_history("nope") == {}


def test_task_rows(store: MetadataStore) -> None:
    running = {"status": "RUNNING", "duration": -1}
    store.insert_task("index_kafka_wiki_1", "wiki", "index_kafka", "group_wiki", {"id": "index_kafka_wiki_1"}, running)
    store.insert_task("index_kafka_wiki_2", "wiki", "index_kafka", "group_wiki", {"id": "index_kafka_wiki_2"}, running)
    store.insert_task("index_kafka_blog_1", "blog", "index_kafka", "group_blog", {"id": "index_kafka_blog_1"}, running)
    with pytest.raises(EntryExistsError, match=r"Task \[index_kafka_wiki_1\] already exists"):
        store.insert_task("index_kafka_wiki_1", "wiki", "index_kafka", "group_wiki", {}, running)

    success = {"status": "SUCCESS", "duration": 1200}
    assert store.set_task_status("index_kafka_wiki_1", success, active=False) is True
    assert store.set_task_status("index_kafka_wiki_1", running, active=True) is False  # never resurrected
    assert store.set_task_status("unknown", success, active=False) is False

    task = store.get_task("index_kafka_wiki_1")
    assert task is not None
    assert (task.data_source, task.task_type, task.group_id, task.status, task.active) == (
        "wiki", "index_kafka", "group_wiki", success, False
    )
    assert task.payload == {"id": "index_kafka_wiki_1"}
    assert store.get_task("unknown") is None

    def ids(**filters: object) -> list[str]:
        return sorted(t.id for t in store.list_tasks(**filters))  # type: ignore[arg-type]

    assert ids() == ["index_kafka_blog_1", "index_kafka_wiki_1", "index_kafka_wiki_2"]
    assert ids(active=True) == ["index_kafka_blog_1", "index_kafka_wiki_2"]
    assert ids(active=False) == ["index_kafka_wiki_1"]
    assert ids(active=True, data_source="wiki") == ["index_kafka_wiki_2"]
