"""Deep storage: where segment files live once pushed (a local folder or an S3-compatible store).

A pushed file is addressed by its *loadSpec*, the JSON stored in the segment's descriptor:
``{"type":"local","path":"/abs/path"}`` or ``{"type":"s3","bucket":..,"key":..}``. Files are laid
out as Druid lays them out, ``dataSource/start_end/version/partitionNum/index.parquet``, so a
listing of deep storage reads like the segment ids it holds.

A file is never visible half-written: a local push writes a temporary name and renames it, and
an S3 object only appears once its upload completes. That matters because a task pushes before
it publishes, and a published loadSpec must always point at a whole file.
"""

from __future__ import annotations

import os
import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from sluice.segment.segment import SegmentId
from sluice.timestamps import format_timestamp

SEGMENT_FILE_NAME = "index.parquet"
_COPY_BUFFER = 8 << 20


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
    def from_uri(uri: str, options: Mapping[str, Any] | None = None) -> DeepStorage:
        """``file:///abs/dir`` or a plain path → local; ``s3://bucket/prefix`` → S3.

        ``options`` go to ``pyarrow.fs.S3FileSystem`` (``endpoint_override``, ``access_key``,
        ``secret_key``, ``region``, ``scheme``...); see `S3DeepStorage.connect`.
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
            return S3DeepStorage.connect(parts.netloc, parts.path, options or {})
        raise ValueError(
            f"deep storage URI {uri!r}: unsupported scheme {parts.scheme!r}; "
            "expected file:///abs/dir, a plain path or s3://bucket/prefix"
        )

    @abstractmethod
    def push(self, local_file: Path, segment_id: SegmentId, *, unique_path: bool = False) -> dict[str, Any]:
        """Copy a finished segment file into deep storage and return its loadSpec."""

    @abstractmethod
    def fetch(self, load_spec: Mapping[str, Any], cache_dir: Path) -> Path:
        """A local path holding the segment file, downloading into ``cache_dir`` if needed."""

    @abstractmethod
    def delete(self, load_spec: Mapping[str, Any]) -> None:
        """Delete a segment file; deleting a missing file is not an error (kills are retried)."""


class LocalDeepStorage(DeepStorage):
    """Deep storage in a local (or mounted) folder; the default for one machine."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def push(self, local_file: Path, segment_id: SegmentId, *, unique_path: bool = False) -> dict[str, Any]:
        target = self.root / storage_dir(segment_id, unique_path) / SEGMENT_FILE_NAME
        with open(local_file, "rb") as source:
            _write_atomically(source, target)
        return {"type": "local", "path": str(target)}

    def local_path(self, load_spec: Mapping[str, Any]) -> str:
        """The absolute path of a local loadSpec's file."""
        if load_spec.get("type") != "local" or "path" not in load_spec:
            raise ValueError(
                f"loadSpec {dict(load_spec)} is not readable by local deep storage; expected type 'local' with a path"
            )
        return str(load_spec["path"])

    def fetch(self, load_spec: Mapping[str, Any], cache_dir: Path) -> Path:
        """The file itself: a local segment needs no copy."""
        return Path(self.local_path(load_spec))

    def delete(self, load_spec: Mapping[str, Any]) -> None:
        """Delete the file and the folders it leaves empty, up to the storage root."""
        path = Path(self.local_path(load_spec)).resolve()
        if not path.is_relative_to(self.root):
            raise ValueError(f"refusing to delete {path}: it is outside deep storage {self.root}")
        path.unlink(missing_ok=True)
        for folder in path.parents:
            if folder == self.root or not folder.is_relative_to(self.root):
                break
            try:
                folder.rmdir()
            except OSError:  # not empty (other partitions or versions) or already gone
                break


class S3DeepStorage(DeepStorage):
    """Deep storage in an S3-compatible object store, through ``pyarrow.fs``."""

    def __init__(self, bucket: str, prefix: str, filesystem: pafs.FileSystem) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._fs = filesystem

    @classmethod
    def connect(cls, bucket: str, prefix: str, options: Mapping[str, Any]) -> S3DeepStorage:
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
        return cls(bucket, prefix, pafs.S3FileSystem(**settings))

    def push(self, local_file: Path, segment_id: SegmentId, *, unique_path: bool = False) -> dict[str, Any]:
        key = "/".join(filter(None, [self.prefix, storage_dir(segment_id, unique_path), SEGMENT_FILE_NAME]))
        with open(local_file, "rb") as source, self._fs.open_output_stream(f"{self.bucket}/{key}") as sink:
            shutil.copyfileobj(source, sink, _COPY_BUFFER)
        return {"type": "s3", "bucket": self.bucket, "key": key}

    def fetch(self, load_spec: Mapping[str, Any], cache_dir: Path) -> Path:
        """Download once into ``cache_dir/bucket/key``; segment files are immutable, so a cached
        copy is never stale."""
        bucket, key = self._location(load_spec)
        target = cache_dir / bucket / key
        if target.exists():
            return target
        with self._fs.open_input_stream(f"{bucket}/{key}") as source:
            _write_atomically(source, target)
        return target

    def delete(self, load_spec: Mapping[str, Any]) -> None:
        bucket, key = self._location(load_spec)
        try:
            self._fs.delete_file(f"{bucket}/{key}")
        except FileNotFoundError:
            pass

    @staticmethod
    def _location(load_spec: Mapping[str, Any]) -> tuple[str, str]:
        if load_spec.get("type") != "s3" or "bucket" not in load_spec or "key" not in load_spec:
            raise ValueError(
                f"loadSpec {dict(load_spec)} is not readable by S3 deep storage; expected type 's3' with bucket and key"
            )
        return str(load_spec["bucket"]), str(load_spec["key"])


def _write_atomically(source: BinaryIO | pa.NativeFile, target: Path) -> None:
    """Write ``target`` under a temporary name, then rename: readers see no file or a whole one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temporary, "wb") as sink:
            shutil.copyfileobj(source, sink, _COPY_BUFFER)
            # The rename may reach the disk before the data: flush the bytes first so a crash
            # never leaves a whole-looking name over a short file.
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
