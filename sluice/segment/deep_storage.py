"""Deep storage: where segment files live once pushed (a local folder or an S3-compatible store).

A pushed file is addressed by its *loadSpec*, the JSON stored in the segment's descriptor:
``{"type":"local","path":"/abs/path"}`` or ``{"type":"s3","bucket":..,"key":..}``. Files are laid
out as Druid lays them out, ``dataSource/start_end/version/partitionNum/index.parquet``, so a
listing of deep storage reads like the segment ids it holds.

A file is never visible half-written: a local push writes a temporary name and renames it, and
an S3 object only appears once its upload completes. That matters because a task pushes before
it publishes, and a published loadSpec must always point at a whole file.

Files in remote deep storage are read from a local copy (`SegmentCache`, Druid's segment cache),
which holds at most a configured number of bytes. An S3 loadSpec carries the file's SHA-256 (``sha256``), taken as
it was pushed: a copy whose bytes differ (a truncated or corrupted download) is thrown away and fetched again,
once, before the read fails.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import uuid
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from sluice.ids import path_under
from sluice.segment.segment import SegmentId
from sluice.timestamps import format_timestamp

SEGMENT_FILE_NAME = "index.parquet"
# The local copies of remote segments a process keeps by default (Druid's segmentCache maxSize has no default; a
# limit that fits a development machine is the safer default than none).
DEFAULT_CACHE_MAX_BYTES = 10 << 30
_COPY_BUFFER = 8 << 20


def default_cache_dir() -> Path:
    """Where a process with no cache directory of its own keeps copies of remote segments: one folder under the
    machine's temporary directory, which every reader there shares."""
    return Path(tempfile.gettempdir()) / "sluice-segment-cache"


def storage_dir(segment_id: SegmentId, unique_path: bool = False) -> str:
    """Druid's ``getDefaultStorageDir``: ``dataSource/start_end/version/partitionNum[/uuid]``.

    Streaming replicas push the same segment id; with ``unique_path`` each push gets its own
    folder, so a replica that loses the publish race can delete its file without deleting the
    winner's (Druid's ``useUniquePath`` for appenderator pushes).
    """
    parts = [
        segment_id.data_source,
        f"{format_timestamp(segment_id.interval.start)}_{format_timestamp(segment_id.interval.end)}",
        segment_id.version,
        str(segment_id.partition_num),
    ]
    if unique_path:
        parts.append(uuid.uuid4().hex)
    return "/".join(parts)


class DeepStorage(ABC):
    """Push, read and delete segment files by loadSpec."""

    @staticmethod
    def from_uri(uri: str, options: Mapping[str, Any] | None = None, *,
                 cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> DeepStorage:
        """``file:///abs/dir`` or a plain path → local; ``s3://bucket/prefix`` → S3.

        ``options`` go to ``pyarrow.fs.S3FileSystem`` (``endpoint_override``, ``access_key``,
        ``secret_key``, ``region``, ``scheme``...); see `S3DeepStorage.connect`. ``cache_max_bytes``
        bounds the local copies of remote segments (see `SegmentCache`).
        """
        parts = urlsplit(uri)
        if parts.scheme == "":
            return LocalDeepStorage(Path(uri))
        if parts.scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise ValueError(
                    f"deep storage URI {uri!r}: expected file:///absolute/dir, found host {parts.netloc!r}"
                )
            return LocalDeepStorage(Path(parts.path))
        if parts.scheme == "s3":
            if not parts.netloc:
                raise ValueError(f"deep storage URI {uri!r}: expected s3://bucket/prefix, found no bucket")
            return S3DeepStorage.connect(parts.netloc, parts.path, options or {}, cache_max_bytes=cache_max_bytes)
        raise ValueError(
            f"deep storage URI {uri!r}: unsupported scheme {parts.scheme!r}; "
            "expected file:///abs/dir, a plain path or s3://bucket/prefix"
        )

    @property
    @abstractmethod
    def uri(self) -> str:
        """What `from_uri` builds this storage from again (S3's client options come from the environment)."""

    @abstractmethod
    def push(self, local_file: Path, segment_id: SegmentId, *, unique_path: bool = False) -> dict[str, Any]:
        """Copy a finished segment file into deep storage and return its loadSpec."""

    @abstractmethod
    def fetch(self, load_spec: Mapping[str, Any], cache_dir: Path) -> Path:
        """A local path holding the segment file, downloading into ``cache_dir`` if needed."""

    def drop_copy(self, load_spec: Mapping[str, Any], cache_dir: Path) -> None:
        """Delete the local copy `fetch` made in ``cache_dir``, if any: the segment is no longer read here."""

    def check_load_spec(self, load_spec: Mapping[str, Any]) -> None:
        """Raise ValueError unless the loadSpec names a file inside this deep storage: a published segment must not
        make the broker read, or a kill delete, anything else."""
        self.location(load_spec)

    @abstractmethod
    def location(self, load_spec: Mapping[str, Any]) -> Any:
        """Where the loadSpec's file is in this storage; ValueError for a loadSpec of another storage or outside."""

    @abstractmethod
    def files(self) -> Iterator[tuple[dict[str, Any], datetime]]:
        """Every segment file in this storage (and the temporary files of pushes that died), as a loadSpec, with
        when it was last written: to find the files no segment names (a losing replica's push, a push whose task
        died before it committed). Nothing else kept in the storage (stream jobs' checkpoints) is listed."""

    @abstractmethod
    def delete(self, load_spec: Mapping[str, Any]) -> None:
        """Delete a segment file; deleting a missing file is not an error (kills are retried)."""


class LocalDeepStorage(DeepStorage):
    """Deep storage in a local (or mounted) folder; the default for one machine."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    @property
    def uri(self) -> str:
        return self.root.as_uri()

    def push(self, local_file: Path, segment_id: SegmentId, *, unique_path: bool = False) -> dict[str, Any]:
        target = path_under(self.root, storage_dir(segment_id, unique_path), SEGMENT_FILE_NAME)
        with open(local_file, "rb") as source:
            _write_atomically(source, target)
        return {"type": "local", "path": str(target)}

    def location(self, load_spec: Mapping[str, Any]) -> Path:
        """The absolute path of a local loadSpec's file, which must be inside the storage root."""
        if load_spec.get("type") != "local" or not isinstance(load_spec.get("path"), str):
            raise ValueError(
                f"loadSpec {dict(load_spec)} is not readable by local deep storage; expected type 'local' with a path"
            )
        path = Path(load_spec["path"]).resolve()
        if not path.is_relative_to(self.root):
            raise ValueError(f"loadSpec path {load_spec['path']} is outside deep storage {self.root}")
        return path

    def files(self) -> Iterator[tuple[dict[str, Any], datetime]]:
        for path in self.root.rglob("*"):
            if _is_segment_file(path.name) and path.is_file():
                yield {"type": "local", "path": str(path)}, datetime.fromtimestamp(path.stat().st_mtime, UTC)

    def local_path(self, load_spec: Mapping[str, Any]) -> str:
        return str(self.location(load_spec))

    def fetch(self, load_spec: Mapping[str, Any], cache_dir: Path) -> Path:
        """The file itself: a local segment needs no copy."""
        return self.location(load_spec)

    def delete(self, load_spec: Mapping[str, Any]) -> None:
        """Delete the file and the folders it leaves empty, up to the storage root."""
        _remove_with_empty_folders(self.location(load_spec), self.root)


class S3DeepStorage(DeepStorage):
    """Deep storage in an S3-compatible object store, through ``pyarrow.fs``."""

    def __init__(self, bucket: str, prefix: str, filesystem: pafs.FileSystem, *,
                 cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.cache_max_bytes = cache_max_bytes
        self._fs = filesystem

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"

    @classmethod
    def connect(cls, bucket: str, prefix: str, options: Mapping[str, Any], *,
                cache_max_bytes: int = DEFAULT_CACHE_MAX_BYTES) -> S3DeepStorage:
        """Build the S3 client. Credentials come from ``options`` or the usual AWS sources.

        An S3-compatible server (MinIO, Ceph, ...) is reached with ``endpoint_override`` in
        ``options`` or ``AWS_ENDPOINT_URL_S3``/``AWS_ENDPOINT_URL`` in the environment; an
        endpoint given as a URL (``http://host:9000``) also sets the scheme.
        """
        settings = dict(options)
        endpoint = (
            settings.pop("endpoint_override", None)
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )
        if endpoint:
            parts = urlsplit(endpoint)
            if parts.scheme:
                settings.setdefault("scheme", parts.scheme)
                endpoint = parts.netloc
            settings["endpoint_override"] = endpoint
        return cls(bucket, prefix, pafs.S3FileSystem(**settings), cache_max_bytes=cache_max_bytes)

    def push(self, local_file: Path, segment_id: SegmentId, *, unique_path: bool = False) -> dict[str, Any]:
        key = "/".join(filter(None, [self.prefix, storage_dir(segment_id, unique_path), SEGMENT_FILE_NAME]))
        with open(local_file, "rb") as source, self._fs.open_output_stream(f"{self.bucket}/{key}") as sink:
            digest = _copy(source, sink)
        return {"type": "s3", "bucket": self.bucket, "key": key, "sha256": digest}

    def fetch(self, load_spec: Mapping[str, Any], cache_dir: Path) -> Path:
        """The copy in ``cache_dir/bucket/key``, downloaded if the cache does not hold it, and checked against the
        loadSpec's ``sha256`` where it has one (segments pushed before it was recorded have none)."""
        bucket, key = self.location(load_spec)
        expected = load_spec.get("sha256")

        def download(target: Path) -> None:
            for attempt in (1, 2):
                with self._fs.open_input_stream(f"{bucket}/{key}") as source:
                    digest = _write_atomically(source, target, expected)
                if expected is None or digest == expected:
                    return
                if attempt == 2:
                    raise SegmentChecksumError(f"s3://{bucket}/{key}: downloaded twice, its SHA-256 was {digest} "
                                               f"both times, not {expected} as when it was pushed")

        return SegmentCache.at(cache_dir, self.cache_max_bytes).get(f"{bucket}/{key}", download)

    def drop_copy(self, load_spec: Mapping[str, Any], cache_dir: Path) -> None:
        bucket, key = self.location(load_spec)
        SegmentCache.at(cache_dir, self.cache_max_bytes).drop(f"{bucket}/{key}")

    def delete(self, load_spec: Mapping[str, Any]) -> None:
        bucket, key = self.location(load_spec)
        try:
            self._fs.delete_file(f"{bucket}/{key}")
        except FileNotFoundError:
            pass

    def files(self) -> Iterator[tuple[dict[str, Any], datetime]]:
        base = "/".join(filter(None, [self.bucket, self.prefix]))
        for info in self._fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True)):
            if info.type == pafs.FileType.File and _is_segment_file(info.base_name):
                key = info.path.removeprefix(f"{self.bucket}/")
                yield {"type": "s3", "bucket": self.bucket, "key": key}, info.mtime.astimezone(UTC)

    def location(self, load_spec: Mapping[str, Any]) -> tuple[str, str]:
        """(bucket, key) of an S3 loadSpec, which must be under this storage's bucket and prefix."""
        if load_spec.get("type") != "s3" or "bucket" not in load_spec or "key" not in load_spec:
            raise ValueError(
                f"loadSpec {dict(load_spec)} is not readable by S3 deep storage; expected type 's3' with bucket and key"
            )
        bucket, key = str(load_spec["bucket"]), str(load_spec["key"])
        parts = key.split("/")
        if bucket != self.bucket or ".." in parts or (self.prefix and parts[:len(self.prefix.split("/"))]
                                                       != self.prefix.split("/")):
            raise ValueError(f"loadSpec s3://{bucket}/{key} is outside deep storage {self.uri}")
        return bucket, key


class SegmentCache:
    """Local copies of remote segment files under one folder, at most ``max_bytes`` of them: Druid's
    segment cache. Segment files are immutable, so a copy is never stale.

    When a new copy takes the total beyond the limit, the least recently used other copies are
    deleted until it fits (the copy just fetched is kept even if it alone is larger). That is the
    only eviction, so a file a query is about to read goes only when the cache is over its limit;
    if it went all the same, the query finds it gone and the broker reruns it on a fresh snapshot,
    which fetches it again. Recency survives a restart: a hit touches the file's mtime, and the
    folder is read back in mtime order. One cache object serves a folder in a process (`at`).
    """

    _open: dict[Path, SegmentCache] = {}
    _open_lock = threading.Lock()

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._sizes: OrderedDict[str, int] | None = None  # key → bytes, least recently used first; read lazily

    @classmethod
    def at(cls, root: Path, max_bytes: int) -> SegmentCache:
        """The process's cache of this folder (its limit is the latest one asked for)."""
        root = root.resolve()
        with cls._open_lock:
            cache = cls._open.setdefault(root, cls(root, max_bytes))
        cache.max_bytes = max_bytes
        return cache

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(self._entries().values())

    def get(self, key: str, download: Callable[[Path], None]) -> Path:
        """The local copy of ``key`` (a relative path), made by ``download(path)`` when missing."""
        target = self.root / key
        with self._lock:
            entries = self._entries()
            if target.exists():
                entries[key] = target.stat().st_size
                entries.move_to_end(key)
                os.utime(target)
                return target
            entries.pop(key, None)
        download(target)  # outside the lock: other segments are served meanwhile; a duplicate download is harmless
        with self._lock:
            entries = self._entries()
            entries[key] = target.stat().st_size
            entries.move_to_end(key)
            self._evict(keep=key)
        return target

    def drop(self, key: str) -> None:
        """Delete the copy of ``key``, if there is one."""
        with self._lock:
            self._entries().pop(key, None)
            _remove_with_empty_folders(self.root / key, self.root)

    def _entries(self) -> OrderedDict[str, int]:
        if self._sizes is None:
            found = [(path.stat().st_mtime_ns, path.relative_to(self.root).as_posix(), path.stat().st_size)
                     for path in self.root.rglob("*") if path.is_file() and not path.name.startswith(".")]
            self._sizes = OrderedDict((key, size) for _, key, size in sorted(found))
        return self._sizes

    def _evict(self, keep: str) -> None:
        entries = self._entries()
        total = sum(entries.values())
        for key in list(entries):
            if total <= self.max_bytes:
                return
            if key == keep:
                continue
            total -= entries.pop(key)
            _remove_with_empty_folders(self.root / key, self.root)


def _remove_with_empty_folders(path: Path, root: Path) -> None:
    """Delete a file and the folders it leaves empty, up to ``root``."""
    path.unlink(missing_ok=True)
    for folder in path.parents:
        if folder == root or not folder.is_relative_to(root):
            break
        try:
            folder.rmdir()
        except OSError:  # not empty (other partitions or versions) or already gone
            break


def _is_segment_file(name: str) -> bool:
    """A segment file, or what `_write_atomically` left of one when the process died while writing it."""
    return name == SEGMENT_FILE_NAME or (name.startswith(f".{SEGMENT_FILE_NAME}.") and name.endswith(".tmp"))


class SegmentChecksumError(OSError):
    """A downloaded segment file is not the one that was pushed."""


def _copy(source: BinaryIO | pa.NativeFile, sink: Any) -> str:
    """Copy everything; return the bytes' SHA-256 (hex)."""
    digest = hashlib.sha256()
    while chunk := source.read(_COPY_BUFFER):
        digest.update(chunk)
        sink.write(chunk)
    return digest.hexdigest()


def _write_atomically(source: BinaryIO | pa.NativeFile, target: Path, expected_sha256: str | None = None) -> str:
    """Write ``target`` under a temporary name, then rename: readers see no file or a whole one. Return the bytes'
    SHA-256; when it is not `expected_sha256`, nothing is written."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temporary, "wb") as sink:
            digest = _copy(source, sink)
            # The rename may reach the disk before the data: flush the bytes first so a crash
            # never leaves a whole-looking name over a short file.
            sink.flush()
            os.fsync(sink.fileno())
        if expected_sha256 is None or digest == expected_sha256:
            os.replace(temporary, target)
        return digest
    finally:
        temporary.unlink(missing_ok=True)
