"""Druid's result-level cache on the broker (`sluice/broker/result_cache.py`), over segment files in local deep storage
and an SQLite metadata store: a repeated query is answered without reading a file, a publish makes the next answer
fresh, a system table or a query of the clock is never kept, the caller's READ is checked on a hit, and the context
turns the cache off."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.broker import Broker
from sluice.broker.errors import SqlError
from sluice.broker.result_cache import ResultCacheConfig, ResultLevelCache
from sluice.metadata.store import MetadataStore
from sluice.security.access import Forbidden
from sluice.security.resources import Action, Resource
from sluice.segment.deep_storage import DeepStorage
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec

DAY = datetime(2015, 9, 12, tzinfo=UTC)
TOTAL = "SELECT SUM(added) AS added FROM wiki"


class _Only:
    """A caller who may read one data source."""

    def __init__(self, source: str) -> None:
        self.source = source

    def allows(self, resource: Resource, action: Action) -> bool:
        return resource == Resource.datasource(self.source) and action is Action.READ


@pytest.fixture
def published(tmp_path: Path) -> Iterator[tuple[MetadataStore, DeepStorage, list[Path]]]:
    metadata = MetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    metadata.create_tables()
    yield metadata, DeepStorage.from_uri((tmp_path / "deep").as_uri()), []
    metadata.close()


def publish(published: tuple[MetadataStore, DeepStorage, list[Path]], hour: int, added: list[int],
            folder: Path) -> None:
    metadata, storage, files = published
    start = DAY + timedelta(hours=hour)
    path = folder / f"hour{hour}.parquet"
    pq.write_table(pa.table({"__time": pa.array([start] * len(added), pa.timestamp("ms", tz="UTC")),
                             "added": pa.array(added, pa.int64())}), path)
    segment_id = SegmentId("wiki", Interval(start, start + timedelta(hours=1)), "2026-01-01T00:00:00.000Z", 0)
    load_spec = storage.push(path, segment_id)
    files.append(Path(load_spec["path"]))
    assert metadata.commit_segments_and_metadata([DataSegment(
        id=segment_id, dimensions=[], metrics=["added"], aggregators=[], shard_spec=numbered_shard_spec(0),
        num_rows=len(added), size=path.stat().st_size, load_spec=load_spec)], "wiki", None, None).success


def broker(published, **config: object) -> Broker:
    metadata, storage, _ = published
    cache = ResultLevelCache(ResultCacheConfig(**{"use": True, "populate": True, **config}))
    return Broker(metadata, storage, Path("unused-cache"), snapshot_ttl_s=0, result_cache=cache)


def hide_files(published) -> None:
    """Every segment file moved away: only a kept result can answer now."""
    for path in published[2]:
        path.rename(path.with_suffix(".hidden"))


def test_a_repeated_query_is_answered_from_the_cache_until_a_publish_changes_its_segments(published, tmp_path) -> None:
    publish(published, 0, [1, 2], tmp_path)
    cached = broker(published)
    assert cached.sql(TOTAL).rows == [(3,)]
    hide_files(published)
    assert cached.sql(TOTAL).rows == [(3,)]
    assert cached.sql(TOTAL, context={"sqlQueryId": "another-id", "timeout": 1000}).rows == [(3,)]  # same key
    with pytest.raises(SqlError):  # another query: it has to read the files
        cached.sql("SELECT COUNT(*) FROM wiki")
    with pytest.raises(SqlError):  # the context can turn the cache off for a query
        cached.sql(TOTAL, context={"useResultLevelCache": False})
    for path in published[2]:
        path.with_suffix(".hidden").rename(path)

    publish(published, 1, [10], tmp_path)  # a new segment: the kept result is stale
    assert cached.sql(TOTAL).rows == [(13,)]
    with pytest.raises(Forbidden):  # the caller's READ is checked on a hit too
        cached.sql(TOTAL, permissions=_Only("other"))
    assert cached.sql(TOTAL, permissions=_Only("wiki")).rows == [(13,)]


def test_system_tables_and_the_clock_are_never_kept_and_nothing_is_kept_without_populate(published, tmp_path) -> None:
    publish(published, 0, [1], tmp_path)
    cached = broker(published)
    count = "SELECT COUNT(*) FROM sys.segments"
    assert cached.sql(count).rows == [(1,)]
    publish(published, 1, [2], tmp_path)
    assert cached.sql(count).rows == [(2,)]
    clock = "SELECT SUM(added) AS added, MAX(__time) < CURRENT_TIMESTAMP AS past FROM wiki"
    assert cached.sql(clock).rows == [(3, True)]
    hide_files(published)
    with pytest.raises(SqlError):  # never kept: its answer changes with the time it runs
        cached.sql(clock)
    for path in published[2]:
        path.with_suffix(".hidden").rename(path)

    only_use = broker(published, populate=False)
    assert only_use.sql(TOTAL).rows == [(3,)]
    hide_files(published)
    with pytest.raises(SqlError):
        only_use.sql(TOTAL)


def test_the_least_recently_used_results_go_beyond_the_caches_size(published, tmp_path) -> None:
    publish(published, 0, [1, 2], tmp_path)
    queries = [f"SELECT SUM(added) + {i} AS n FROM wiki" for i in range(3)]
    small = broker(published, size_bytes=13)  # room for two results of 6 bytes (`[[3]]` and the name `n`)
    for query in queries:
        small.sql(query)
    hide_files(published)
    with pytest.raises(SqlError):  # the first went when the third came
        small.sql(queries[0])
    assert [small.sql(q).rows for q in queries[1:]] == [[(4,)], [(5,)]]


def test_a_hit_is_answered_on_the_current_snapshot_without_reading_anything_while_it_is_recent(published,
                                                                                              tmp_path) -> None:
    """`Broker.cached` is what the SQL API answers on its event loop: no file and no metadata read, so a segment
    published since the snapshot is not seen until the snapshot is due again, and then the hit has to be run."""
    metadata, storage, _ = published
    publish(published, 0, [1, 2], tmp_path)
    cache = ResultLevelCache(ResultCacheConfig(use=True, populate=True))
    recent = Broker(metadata, storage, Path("unused-cache"), snapshot_ttl_s=3600, result_cache=cache)
    assert recent.cached(TOTAL) is None  # nothing kept yet
    assert recent.sql(TOTAL).rows == [(3,)]
    publish(published, 1, [10], tmp_path)
    hide_files(published)
    assert recent.cached(TOTAL, context={"sqlQueryId": "q-2"}).rows == [(3,)]
    assert recent.cached(TOTAL, context={"useResultLevelCache": False}) is None
    with pytest.raises(Forbidden):
        recent.cached(TOTAL, permissions=_Only("other"))

    for path in published[2]:
        path.with_suffix(".hidden").rename(path)
    due = Broker(metadata, storage, Path("unused-cache"), snapshot_ttl_s=0, result_cache=cache)
    assert due.sql(TOTAL).rows == [(13,)]  # kept, over both segments
    assert due.cached(TOTAL) is None  # but its snapshot is due again at once: only `sql` may answer
