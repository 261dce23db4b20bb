"""Deep storage on a local folder: Druid's layout, atomic pushes, loadSpecs, deletes; the bounded cache of remote
segment files (against a real S3 server: tests/integration/test_s3_deep_storage.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sluice.segment.deep_storage import DeepStorage, LocalDeepStorage, S3DeepStorage, SegmentCache
from sluice.segment.segment import Interval, SegmentId

SEGMENT = SegmentId("wikipedia", Interval.parse("2015-09-12/2015-09-13"), "2023-06-23T21:07:28.226Z", 1)
DRUID_DIR = "wikipedia/2015-09-12T00:00:00.000Z_2015-09-13T00:00:00.000Z/2023-06-23T21:07:28.226Z/1"


@pytest.fixture
def segment_file(tmp_path: Path) -> Path:
    path = tmp_path / "work" / "merged.parquet"
    path.parent.mkdir()
    path.write_bytes(b"PAR1 segment bytes PAR1")
    return path


@pytest.mark.parametrize("form", ["file://{root}", "{root}"])
def test_from_uri_gives_local_storage_for_file_uris_and_paths(tmp_path: Path, form: str) -> None:
    storage = DeepStorage.from_uri(form.format(root=tmp_path / "deep"))
    assert isinstance(storage, LocalDeepStorage)
    assert storage.root == tmp_path / "deep"


@pytest.mark.parametrize(
    ("uri", "error"),
    [
        ("hdfs://namenode/druid", "unsupported scheme 'hdfs'"),
        ("file://otherhost/druid", "found host 'otherhost'"),
        ("s3:///no-bucket", "found no bucket"),
    ],
)
def test_from_uri_rejects_what_it_cannot_serve(uri: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        DeepStorage.from_uri(uri)


def test_from_uri_gives_s3_storage_with_endpoint_override() -> None:
    storage = DeepStorage.from_uri(
        "s3://segments/druid/prod/",
        {"endpoint_override": "http://127.0.0.1:9000", "access_key": "k", "secret_key": "s", "region": "us-east-1"},
    )
    assert isinstance(storage, S3DeepStorage)
    assert (storage.bucket, storage.prefix) == ("segments", "druid/prod")


def test_push_copies_into_druids_layout_and_returns_the_load_spec(tmp_path: Path, segment_file: Path) -> None:
    storage = LocalDeepStorage(tmp_path / "deep")
    load_spec = storage.push(segment_file, SEGMENT)
    expected = tmp_path / "deep" / DRUID_DIR / "index.parquet"
    assert load_spec == {"type": "local", "path": str(expected)}
    assert expected.read_bytes() == segment_file.read_bytes()
    assert sorted(p.name for p in expected.parent.iterdir()) == ["index.parquet"]  # no temporary left behind


def test_push_replaces_an_earlier_push_of_the_same_id(tmp_path: Path, segment_file: Path) -> None:
    storage = LocalDeepStorage(tmp_path / "deep")
    storage.push(segment_file, SEGMENT)
    segment_file.write_bytes(b"second")
    assert Path(storage.local_path(storage.push(segment_file, SEGMENT))).read_bytes() == b"second"


def test_unique_paths_keep_replica_pushes_apart(tmp_path: Path, segment_file: Path) -> None:
    storage = LocalDeepStorage(tmp_path / "deep")
    first = Path(storage.local_path(storage.push(segment_file, SEGMENT, unique_path=True)))
    second = Path(storage.local_path(storage.push(segment_file, SEGMENT, unique_path=True)))
    assert first != second
    assert first.parent.parent == second.parent.parent == tmp_path / "deep" / DRUID_DIR
    storage.delete({"type": "local", "path": str(first)})
    assert second.exists()


def test_fetch_of_a_local_segment_is_the_file_itself(tmp_path: Path, segment_file: Path) -> None:
    storage = LocalDeepStorage(tmp_path / "deep")
    load_spec = storage.push(segment_file, SEGMENT)
    assert storage.fetch(load_spec, tmp_path / "cache") == Path(load_spec["path"])
    assert not (tmp_path / "cache").exists()


def test_delete_removes_the_file_and_the_folders_it_empties(tmp_path: Path, segment_file: Path) -> None:
    storage = LocalDeepStorage(tmp_path / "deep")
    kept = storage.push(segment_file, SegmentId(SEGMENT.data_source, SEGMENT.interval, SEGMENT.version, 0))
    removed = storage.push(segment_file, SEGMENT)
    storage.delete(removed)
    storage.delete(removed)  # deleting again is not an error: kills are retried
    assert not (tmp_path / "deep" / DRUID_DIR).exists()
    assert Path(kept["path"]).exists()
    storage.delete(kept)
    assert list((tmp_path / "deep").iterdir()) == []


@pytest.mark.parametrize(
    ("load_spec", "error"),
    [
        ({"type": "s3", "bucket": "b", "key": "k"}, "not readable by local deep storage"),
        ({"type": "local"}, "not readable by local deep storage"),
        ({"type": "local", "path": "/etc/passwd"}, "outside deep storage"),
    ],
)
def test_delete_refuses_foreign_load_specs(tmp_path: Path, load_spec: dict, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        LocalDeepStorage(tmp_path / "deep").delete(load_spec)


@pytest.mark.parametrize("path", ["/etc/passwd", "{root}/../outside.parquet", "{root}-sibling/x.parquet"])
def test_a_local_load_spec_outside_the_storage_root_is_neither_read_nor_deleted(tmp_path: Path, path: str) -> None:
    storage = LocalDeepStorage(tmp_path / "deep")
    load_spec = {"type": "local", "path": path.format(root=tmp_path / "deep")}
    for use in (storage.check_load_spec, lambda spec: storage.fetch(spec, tmp_path / "cache"), storage.delete):
        with pytest.raises(ValueError, match="outside deep storage"):
            use(load_spec)


@pytest.mark.parametrize("key", ["other/x.parquet", "druid/../x.parquet", "druidx/x.parquet"])
def test_an_s3_load_spec_outside_the_bucket_and_prefix_is_refused(key: str) -> None:
    import pyarrow.fs as pafs

    storage = S3DeepStorage("bucket", "druid", pafs.LocalFileSystem())
    storage.check_load_spec({"type": "s3", "bucket": "bucket", "key": "druid/wiki/1/index.parquet"})
    for load_spec in ({"type": "s3", "bucket": "bucket", "key": key}, {"type": "s3", "bucket": "other",
                                                                        "key": "druid/x.parquet"}):
        with pytest.raises(ValueError, match="outside deep storage"):
            storage.check_load_spec(load_spec)


# ------------------------------------------------------------------------------------------------- segment cache


class _Remote:
    """Files a fake remote store holds, counting the downloads the cache asks for."""

    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes = sizes
        self.downloads: list[str] = []

    def get(self, cache: SegmentCache, key: str) -> Path:
        def download(target: Path) -> None:
            self.downloads.append(key)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(b"x" * self.sizes[key])

        return cache.get(key, download)


def _cached(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def test_cache_downloads_once_and_evicts_the_least_recently_used_beyond_its_limit(tmp_path: Path) -> None:
    remote = _Remote({"b/a/index.parquet": 40, "b/b/index.parquet": 40, "b/c/index.parquet": 40})
    cache = SegmentCache(tmp_path / "cache", max_bytes=100)
    a = remote.get(cache, "b/a/index.parquet")
    remote.get(cache, "b/b/index.parquet")
    assert remote.get(cache, "b/a/index.parquet") == a  # a hit, and now the most recently used
    assert remote.downloads == ["b/a/index.parquet", "b/b/index.parquet"]

    remote.get(cache, "b/c/index.parquet")  # 120 bytes > 100: b, the least recently used, goes
    assert _cached(tmp_path / "cache") == {"b/a/index.parquet", "b/c/index.parquet"}
    assert cache.size_bytes == 80
    assert not (tmp_path / "cache" / "b" / "b").exists()  # no empty folders left behind


def test_cache_keeps_the_file_just_fetched_even_when_it_alone_exceeds_the_limit(tmp_path: Path) -> None:
    remote = _Remote({"small": 10, "huge": 500})
    cache = SegmentCache(tmp_path / "cache", max_bytes=100)
    remote.get(cache, "small")
    assert remote.get(cache, "huge").stat().st_size == 500
    assert _cached(tmp_path / "cache") == {"huge"}


def test_cache_reads_back_a_folder_left_by_an_earlier_process_in_access_order(tmp_path: Path) -> None:
    remote = _Remote({"old": 40, "recent": 40, "new": 40})
    first = SegmentCache(tmp_path / "cache", max_bytes=100)
    remote.get(first, "old")
    remote.get(first, "recent")
    os.utime(tmp_path / "cache" / "old", ns=(1, 1))  # accessed long ago

    restarted = SegmentCache(tmp_path / "cache", max_bytes=100)
    remote.get(restarted, "recent")
    remote.get(restarted, "new")
    assert remote.downloads == ["old", "recent", "new"]  # "recent" was served from the folder, not downloaded again
    assert _cached(tmp_path / "cache") == {"recent", "new"}
