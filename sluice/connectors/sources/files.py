"""What every file-shaped input source shares (Druid's `local`, `http`, `s3`, `inline`): files listed on the
driver, grouped into splits by the split hint (Druid's MaxSizeSplitHintSpec), and read in an executor — opened
with bounded retries, decompressed by file-name extension (Druid's CompressionUtils), spooled to a local file when
the format needs to seek, and parsed by the input format's parser.

A subclass says only how to list its files (`FileSource.list_files`) and how to open one (`FileSource.open`).
"""

from __future__ import annotations

import hashlib
import io
import logging
import lzma
import shutil
import tempfile
import time
import zipfile
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, BinaryIO

import pyarrow as pa

from sluice.connectors.base import BoundedSource
from sluice.spec.input_source import MaxSizeSplitHint

if TYPE_CHECKING:
    from sluice.spec.input_format import RecordFormat

log = logging.getLogger(__name__)

#: how many times a file is opened before its read fails (Druid's RetryUtils default of 3 tries)
OPEN_ATTEMPTS = 3
#: the wait before the second try; doubled before each later one
OPEN_BACKOFF_S = 0.5
_COPY_BUFFER = 1 << 20
#: what a broken file or stream raises while it is decompressed or read
_READ_ERRORS = (OSError, EOFError, lzma.LZMAError, zipfile.BadZipFile)


@dataclass(frozen=True)
class FileRef:
    """One file of the input: where it is (a path or a URI) and how many bytes it has (0 when not known)."""

    uri: str
    size: int


@dataclass(frozen=True)
class FileSplit:
    """Files one reader reads whole, one after another. `ordinal` is the split's place in the listing, so two
    splits of the same file (a file listed twice) still have different ids."""

    files: tuple[FileRef, ...]
    ordinal: int = 0

    @property
    def split_id(self) -> str:
        """Stable for the same listing: the ordinal, the first file, and (for several) a digest of all of them."""
        if len(self.files) == 1:
            return f"{self.ordinal}:{self.files[0].uri}"
        digest = hashlib.sha1("\n".join(f.uri for f in self.files).encode()).hexdigest()[:12]
        return f"{self.ordinal}:{self.files[0].uri}+{len(self.files) - 1}:{digest}"

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)


def group_files(refs: Iterable[FileRef], hint: MaxSizeSplitHint | None = None) -> list[FileSplit]:
    """Druid's MaxSizeSplitHintSpec.split: files in listing order, never cut; a split takes the next file only
    while its total stays strictly below maxSplitSize and it holds fewer than maxNumFiles files. A split's
    first file is taken whatever its size, so a file larger than maxSplitSize is a split of its own."""
    hint = hint or MaxSizeSplitHint()
    groups: list[list[FileRef]] = []
    current: list[FileRef] = []
    total = 0
    for ref in refs:
        if current and (total + ref.size >= hint.max_split_size or len(current) >= hint.max_num_files):
            groups.append(current)
            current, total = [], 0
        current.append(ref)
        total += ref.size
    if current:
        groups.append(current)
    return [FileSplit(tuple(group), ordinal) for ordinal, group in enumerate(groups)]


# -- opening, with retries --------------------------------------------------------------------------------


class RetryableError(OSError):
    """A failure that may pass if the file is opened again: HTTP 5xx, an S3 service error, a dropped
    connection. `ConnectionError` and `TimeoutError` count as retryable too; every other error fails at once."""


def is_retryable(error: BaseException) -> bool:
    return isinstance(error, (RetryableError, ConnectionError, TimeoutError))


def open_with_retries(open_file: Callable[[FileRef], BinaryIO], ref: FileRef, attempts: int = OPEN_ATTEMPTS,
                      backoff_s: float = OPEN_BACKOFF_S) -> BinaryIO:
    """`open_file(ref)`, tried up to `attempts` times with doubling waits while it fails retryably. The error
    raised names the file: a reader's error is all a user sees of which file of thousands failed."""
    for attempt in range(1, attempts + 1):
        try:
            return open_file(ref)
        except Exception as error:
            if not is_retryable(error) or attempt == attempts:
                raise _naming(error, ref.uri, attempt) from error
            wait = backoff_s * (2 ** (attempt - 1))
            log.warning("opening %s failed (%s); try %d of %d in %.1fs", ref.uri, error, attempt + 1, attempts, wait)
            time.sleep(wait)
    raise AssertionError("unreachable")


def _naming(error: BaseException, uri: str, attempts: int) -> Exception:
    if uri in str(error):
        message = str(error)
    else:
        message = f"cannot read {uri}: {error}"
    if attempts > 1:
        message += f" (after {attempts} tries)"
    try:
        return type(error)(message)
    except Exception:  # noqa: BLE001 - an error type whose constructor takes other arguments
        return OSError(message)


# -- decompression, by extension ---------------------------------------------------------------------------

#: Druid's CompressionUtils.Format suffixes, and the pyarrow codec of those pyarrow streams
_ARROW_CODECS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd"}


def compression_of(path: str) -> str | None:
    """The compression suffix of a file name (`.gz`, `.bz2`, `.xz`, `.zst`, `.zip`, `.sz`, `.lz4`), or None."""
    for suffix in (*_ARROW_CODECS, ".xz", ".zip", ".sz", ".lz4"):
        if path.endswith(suffix):
            return suffix
    return None


def decompress(stream: BinaryIO, path: str, spool_dir: str | None = None) -> BinaryIO:
    """The decompressed bytes of `stream`, chosen by `path`'s suffix as Druid's CompressionUtils.decompress
    chooses: concatenated gzip, bzip2, xz and zstd members are read one after another; of a zip archive only
    the first entry is read (an empty archive reads as no bytes); `.sz` is Snappy's framing format."""
    suffix = compression_of(path)
    if suffix is None:
        return stream
    if suffix in _ARROW_CODECS:
        native = stream if isinstance(stream, pa.NativeFile) else pa.PythonFile(stream, mode="r")
        return io.BufferedReader(pa.CompressedInputStream(native, _ARROW_CODECS[suffix]), _COPY_BUFFER)
    if suffix == ".xz":
        return lzma.LZMAFile(stream)  # type: ignore[return-value]
    if suffix == ".zip":
        archive = zipfile.ZipFile(stream if _seekable(stream) else spool(stream, spool_dir))
        entries = archive.infolist()
        return archive.open(entries[0]) if entries else io.BytesIO()  # type: ignore[return-value]
    if suffix == ".sz":
        return io.BufferedReader(_SnappyFramedReader(stream), _COPY_BUFFER)
    raise ValueError(f"cannot read {path}: .lz4 files are written in lz4-java's block stream format, which "
                     "Sluice does not read; recompress the file with gzip or zstd")


def spool(stream: BinaryIO, spool_dir: str | None = None) -> BinaryIO:
    """A seekable local copy of a stream (deleted when closed), for formats that read a file's footer first."""
    copy = tempfile.TemporaryFile(dir=spool_dir)  # noqa: SIM115 - the caller closes it
    shutil.copyfileobj(stream, copy, _COPY_BUFFER)
    copy.seek(0)
    return copy  # type: ignore[return-value]


def _seekable(stream: BinaryIO) -> bool:
    try:
        return bool(stream.seekable())
    except (AttributeError, ValueError, OSError):
        return False


class _SnappyFramedReader(io.RawIOBase):
    """Snappy's framing format (what Druid's FramedSnappyCompressorInputStream reads): chunks of a type byte and a
    3-byte little-endian length; 0x00 holds a masked CRC-32C and a Snappy block, 0x01 a CRC and raw bytes, 0xff
    the stream identifier, 0x80-0xfe are skipped. Checksums are not verified (there is no CRC-32C in the
    standard library; a corrupt block still fails to decompress)."""

    _IDENTIFIER = b"sNaPpY"

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._codec = pa.Codec("snappy")
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = self._next_chunk()
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]  # a memoryview: no copy of what is left
        return size

    def _next_chunk(self) -> bytes | None:
        header = self._read_exactly(4, allow_eof=True)
        if header is None:
            return None
        kind, length = header[0], int.from_bytes(header[1:4], "little")
        body = self._read_exactly(length) or b""
        if kind == 0xFF:
            if body != self._IDENTIFIER:
                raise ValueError("not a Snappy framed stream: bad stream identifier")
            return b""
        if kind == 0x00:
            block = body[4:]
            return self._codec.decompress(block, decompressed_size=_varint(block), asbytes=True)
        if kind == 0x01:
            return body[4:]
        if 0x02 <= kind <= 0x7F:
            raise ValueError(f"not a Snappy framed stream: reserved unskippable chunk type {kind:#04x}")
        return b""  # padding and skippable chunks

    def _read_exactly(self, size: int, allow_eof: bool = False) -> bytes | None:
        data = b""
        while len(data) < size:
            more = self._stream.read(size - len(data))
            if not more:
                if allow_eof and not data:
                    return None
                raise ValueError("truncated Snappy framed stream")
            data += more
        return data


def _varint(block: bytes) -> int:
    """The uncompressed length that starts a Snappy block (a little-endian base-128 varint)."""
    value = shift = 0
    for byte in block[:5]:
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    raise ValueError("corrupt Snappy block: bad length preamble")


# -- the source --------------------------------------------------------------------------------------------


class FileSource(BoundedSource[FileSplit]):
    """A source of files in an input format. It is pickled to Spark's executors, so it holds specs only: the
    parser (and a subclass's client) are built on first use in each process and dropped when pickled."""

    #: attributes built on first use (cached properties) that are not pickled
    transient: tuple[str, ...] = ("parser",)

    def __init__(self, input_format: RecordFormat, fields: Sequence[str], split_hint: MaxSizeSplitHint | None = None,
                 spec_path: str = "ioConfig.inputSource") -> None:
        self.input_format = input_format
        self.fields = tuple(fields)
        self.split_hint = split_hint or MaxSizeSplitHint()
        #: where this source's spec is in the task spec, for errors (`ioConfig.inputSource.delegates[1]`)
        self.spec_path = spec_path

    @abstractmethod
    def list_files(self) -> list[FileRef]:
        """Every file to read, in a stable order; runs on the driver."""

    @abstractmethod
    def open(self, ref: FileRef) -> BinaryIO:
        """The file's bytes as stored (still compressed); runs in an executor. Raise `RetryableError` (or
        `ConnectionError`, `TimeoutError`) for a failure worth another try, `FileNotFoundError` or
        `PermissionError` for a file that is gone or forbidden."""

    def path_of(self, ref: FileRef) -> str:
        """The part of a file's URI whose suffix says its compression (an HTTP URI's path, without the query)."""
        return ref.uri

    @cached_property
    def parser(self) -> Any:
        from sluice.connectors.formats import record_parser

        return record_parser(self.input_format, self.fields)

    def output_schema(self) -> pa.Schema:
        return self.parser.schema

    def enumerate_splits(self) -> list[FileSplit]:
        return group_files(self.list_files(), self.split_hint)

    def read_split(self, split: FileSplit) -> Iterator[pa.RecordBatch]:
        for ref in split.files:
            yield from self.read_file(ref)

    def read_file(self, ref: FileRef) -> Iterator[pa.RecordBatch]:
        """One file's batches: opened (with retries), decompressed, spooled if the format must seek, parsed."""
        with ExitStack() as stack:
            raw = stack.enter_context(open_with_retries(self.open, ref))
            try:
                data = stack.enter_context(decompress(raw, self.path_of(ref)))
            except _READ_ERRORS as error:
                raise _naming(error, ref.uri, 1) from error
            try:
                if self.parser.needs_seekable and not _seekable(data):
                    data = stack.enter_context(spool(data))
                yield from self.parser.parse_stream(data, ref.uri)
            except _READ_ERRORS as error:  # a corrupt archive or a dropped connection, mid-file
                raise _naming(error, ref.uri, 1) from error

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in self.transient}
