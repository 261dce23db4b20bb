"""S3 deep storage against a real S3-compatible server (moto's, on loopback): segments pushed in Druid's layout,
fetched into the local segment cache once (checked against the SHA-256 taken at the push), served from the cache
afterwards, evicted beyond the cache's limit, read by the broker through the cache, and dropped from it once a new
version overshadows the segment."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from moto.server import ThreadedMotoServer

from sluice.broker.broker import Broker
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import DeepStorage, S3DeepStorage, SegmentChecksumError
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from tests.integration.harness import free_port

BUCKET = "segments"
DAY = datetime(2015, 9, 12, tzinfo=UTC)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def _storage(endpoint: str, bucket: str, cache_max_bytes: int) -> S3DeepStorage:
    """S3 deep storage in a new bucket, made beforehand as an operator makes it."""
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                 region_name="us-east-1").create_bucket(Bucket=bucket)
    storage = DeepStorage.from_uri(
        f"s3://{bucket}/druid/segments",
        {"endpoint_override": endpoint, "access_key": "test", "secret_key": "test", "region": "us-east-1"},
        cache_max_bytes=cache_max_bytes)
    assert isinstance(storage, S3DeepStorage)
    return storage


def _segment_file(folder: Path, hour: int, pages: list[str]) -> tuple[Path, SegmentId]:
    path = folder / f"hour{hour}.parquet"
    start = DAY + timedelta(hours=hour)
    pq.write_table(pa.table({
        "__time": pa.array([start + timedelta(minutes=i) for i in range(len(pages))], pa.timestamp("ms", tz="UTC")),
        "page": pa.array(pages, pa.string()),
    }), path)
    return path, SegmentId("wiki", Interval(start, start + timedelta(hours=1)), "2026-01-01T00:00:00.000Z", 0)


def test_a_segment_is_downloaded_once_then_served_from_the_cache(endpoint: str, tmp_path: Path) -> None:
    storage = _storage(endpoint, BUCKET, cache_max_bytes=1 << 20)
    path, segment_id = _segment_file(tmp_path, 0, ["Cat", "Dog"])
    load_spec = storage.push(path, segment_id)
    assert load_spec == {"type": "s3", "bucket": BUCKET, "key": "druid/segments/wiki/2015-09-12T00:00:00.000Z_"
                         "2015-09-12T01:00:00.000Z/2026-01-01T00:00:00.000Z/0/index.parquet",
                         "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}

    cache = tmp_path / "cache"
    local = storage.fetch(load_spec, cache)
    assert local == cache / BUCKET / load_spec["key"]
    assert local.read_bytes() == path.read_bytes()

    storage.delete(load_spec)  # gone from S3: a second fetch can only be answered by the cache
    assert storage.fetch(load_spec, cache) == local
    assert pq.read_table(local).column("page").to_pylist() == ["Cat", "Dog"]
    storage.delete(load_spec)  # deleting again is not an error


def test_a_download_that_is_not_the_pushed_file_is_refused_and_not_cached(endpoint: str, tmp_path: Path) -> None:
    storage = _storage(endpoint, "corrupted", cache_max_bytes=1 << 20)
    path, segment_id = _segment_file(tmp_path, 0, ["Cat", "Dog"])
    load_spec = storage.push(path, segment_id)
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                          region_name="us-east-1")
    client.put_object(Bucket="corrupted", Key=load_spec["key"], Body=path.read_bytes()[:-100])  # truncated
    cache = tmp_path / "cache"
    with pytest.raises(SegmentChecksumError, match=f"not {load_spec['sha256']} as when it was pushed"):
        storage.fetch(load_spec, cache)
    assert not [p for p in cache.rglob("*") if p.is_file()]

    client.put_object(Bucket="corrupted", Key=load_spec["key"], Body=path.read_bytes())  # repaired
    assert storage.fetch(load_spec, cache).read_bytes() == path.read_bytes()
    unchecked = {k: v for k, v in load_spec.items() if k != "sha256"}  # pushed before checksums were recorded
    assert storage.fetch(unchecked, tmp_path / "other-cache").read_bytes() == path.read_bytes()


def test_the_cache_evicts_the_least_recently_used_segments_beyond_its_limit(endpoint: str, tmp_path: Path) -> None:
    pushed = [_segment_file(tmp_path, hour, [f"page{hour}-{i}" for i in range(50)]) for hour in range(3)]
    size = max(path.stat().st_size for path, _ in pushed)
    storage = _storage(endpoint, "evictions", cache_max_bytes=2 * size)
    first, second, third = (storage.push(path, segment_id) for path, segment_id in pushed)
    cache = tmp_path / "cache"

    storage.fetch(first, cache)
    storage.fetch(second, cache)
    storage.fetch(first, cache)  # the first is now the most recently used
    storage.fetch(third, cache)  # three copies exceed the limit: the second goes

    def cached(load_spec: dict) -> bool:
        return (cache / load_spec["bucket"] / load_spec["key"]).exists()

    assert [cached(first), cached(second), cached(third)] == [True, False, True]
    assert sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) <= 2 * size
    assert storage.fetch(second, cache).read_bytes() == pushed[1][0].read_bytes()  # downloaded again on demand
    assert [cached(first), cached(second), cached(third)] == [False, True, True]


def test_the_broker_answers_from_segments_in_s3(endpoint: str, tmp_path: Path) -> None:
    storage = _storage(endpoint, "broker", cache_max_bytes=1 << 20)
    segments = []
    for hour, pages in enumerate([["Cat", "Dog"], ["Cat"]]):
        path, segment_id = _segment_file(tmp_path, hour, pages)
        segments.append(DataSegment(
            id=segment_id, dimensions=["page"], metrics=[], aggregators=[], shard_spec=numbered_shard_spec(0),
            num_rows=len(pages), size=path.stat().st_size, load_spec=storage.push(path, segment_id)))
    metadata = MetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    metadata.create_tables()
    assert metadata.commit_segments_and_metadata(segments, "wiki", None, None).success
    broker = Broker(metadata, storage, tmp_path / "cache", snapshot_ttl_s=0)

    def cached_versions() -> list[str]:  # .../wiki/start_end/version/0/index.parquet
        return sorted(p.parts[-3] for p in (tmp_path / "cache").rglob("*.parquet"))

    pages = "SELECT page, COUNT(*) FROM wiki GROUP BY page ORDER BY page"
    try:
        assert broker.sql(pages).rows == [("Cat", 2), ("Dog", 1)]
        assert cached_versions() == ["2026-01-01T00:00:00.000Z"] * 2

        # a new version of the first hour overshadows its segment: the broker drops its copy
        (tmp_path / "v2").mkdir()
        path, old_id = _segment_file(tmp_path / "v2", 0, ["Emu"])
        new_id = SegmentId("wiki", old_id.interval, "2026-02-01T00:00:00.000Z", 0)
        assert metadata.commit_segments_and_metadata([DataSegment(
            id=new_id, dimensions=["page"], metrics=[], aggregators=[], shard_spec=numbered_shard_spec(0), num_rows=1,
            size=path.stat().st_size, load_spec=storage.push(path, new_id))], "wiki", None, None).success
        assert broker.sql(pages).rows == [("Cat", 1), ("Emu", 1)]
        assert cached_versions() == ["2026-01-01T00:00:00.000Z", "2026-02-01T00:00:00.000Z"]
    finally:
        metadata.close()
