"""File splits and the pure rules of file sources: Druid's MaxSizeSplitHintSpec grouping, Commons IO's wildcard
(local `filter`), Java's glob (S3 `objectGlob`), decompression by suffix, and which open errors are retried."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zipfile

import pyarrow as pa
import pytest

from sluice.connectors.sources.files import (
    FileRef,
    FileSplit,
    RetryableError,
    decompress,
    group_files,
    open_with_retries,
)
from sluice.connectors.sources.local import wildcard
from sluice.connectors.sources.s3 import java_glob
from sluice.spec.input_source import MaxSizeSplitHint


def _sizes(splits: list[FileSplit]) -> list[list[int]]:
    return [[f.size for f in s.files] for s in splits]


def _refs(*sizes: int) -> list[FileRef]:
    return [FileRef(f"/data/{i}.json", size) for i, size in enumerate(sizes)]


@pytest.mark.parametrize(("sizes", "max_split_size", "max_num_files", "expected"), [
    # a split takes the next file only while its total stays strictly below maxSplitSize (Druid's `<`)
    ([3, 3, 3, 3], 10, 1000, [[3, 3, 3], [3]]),
    ([5, 5, 5], 10, 1000, [[5], [5], [5]]),            # 5 + 5 reaches 10: not below it
    ([4, 5, 1], 10, 1000, [[4, 5], [1]]),
    ([25, 1, 1], 10, 1000, [[25], [1, 1]]),            # a file larger than the limit is a split of its own
    ([1, 25, 1], 10, 1000, [[1], [25], [1]]),
    ([1, 1, 1, 1, 1], 100, 2, [[1, 1], [1, 1], [1]]),  # maxNumFiles
    ([], 10, 1000, []),
])
def test_files_are_grouped_as_druids_max_size_split_hint_groups_them(
        sizes: list[int], max_split_size: int, max_num_files: int, expected: list[list[int]]) -> None:
    hint = MaxSizeSplitHint(maxSplitSize=max_split_size, maxNumFiles=max_num_files)
    splits = group_files(_refs(*sizes), hint)
    assert _sizes(splits) == expected
    assert [f for s in splits for f in s.files] == _refs(*sizes)  # every file once, in listing order
    assert [s.size_bytes for s in splits] == [sum(group) for group in expected]


def test_the_default_hint_is_druids_1gib_and_1000_files() -> None:
    assert _sizes(group_files(_refs(*[1] * 1001))) == [[1] * 1000, [1]]
    assert len(group_files(_refs(1 << 29, 1 << 29))) == 2  # 512MiB + 512MiB reaches 1GiB


def test_human_readable_sizes_are_accepted() -> None:
    assert MaxSizeSplitHint(maxSplitSize="1KiB").max_split_size == 1024


def test_split_ids_are_unique_and_stable_even_for_a_file_listed_twice() -> None:
    refs = [FileRef("/a.json", 10), FileRef("/a.json", 10), FileRef("/b.json", 1), FileRef("/c.json", 1)]
    hint = MaxSizeSplitHint(maxSplitSize=5)
    ids = [s.split_id for s in group_files(refs, hint)]
    assert len(set(ids)) == len(ids) == 3
    assert ids == [s.split_id for s in group_files(list(refs), hint)]
    assert ids[0] == "0:/a.json"


@pytest.mark.parametrize(("pattern", "name", "matches"), [
    ("*.json", "wiki.json", True),
    ("*.json", "wiki.json.gz", False),
    ("*.json*", "wiki.json.gz", True),
    ("wiki-?.csv", "wiki-1.csv", True),
    ("wiki-?.csv", "wiki-10.csv", False),
    ("*.JSON", "wiki.json", False),   # case-sensitive, as Druid's filter
    ("[ab].json", "a.json", False),   # no character classes: brackets are themselves
    ("[ab].json", "[ab].json", True),
    ("*", "anything at all", True),
])
def test_local_filter_is_a_commons_io_wildcard(pattern: str, name: str, matches: bool) -> None:
    assert bool(wildcard(pattern).fullmatch(name)) is matches


@pytest.mark.parametrize(("glob", "key", "matches"), [
    ("**.json", "a/b/c.json", True),
    ("**.json", "c.json", True),
    ("*.json", "c.json", True),
    ("*.json", "a/c.json", False),        # `*` stays in one segment
    ("**/*.json", "c.json", False),       # as Java's PathMatcher: `**/` needs a slash
    ("**/*.json", "a/c.json", True),
    ("logs/?.csv", "logs/1.csv", True),
    ("logs/?.csv", "logs//.csv", False),
    ("{a,b}/*.csv", "b/x.csv", True),
    ("{a,b}/*.csv", "c/x.csv", False),
    ("data-[0-9].json", "data-7.json", True),
    ("data-[!0-9].json", "data-7.json", False),
    ("data-[!0-9].json", "data-x.json", True),
    ("a\\*.json", "a*.json", True),
    ("a\\*.json", "ab.json", False),
    ("a.json", "aXjson", False),          # a dot is a dot
])
def test_object_glob_is_javas_path_matcher_glob(glob: str, key: str, matches: bool) -> None:
    assert bool(java_glob(glob).fullmatch(key)) is matches


_TEXT = b'{"a":1}\n{"a":2}\n'


def _zip(*entries: tuple[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries:
            archive.writestr(name, data)
    return buffer.getvalue()


def _snappy_framed(data: bytes) -> bytes:
    """Snappy's framing format: the stream identifier, then one compressed chunk (CRC left zero: not checked)."""
    block = pa.Codec("snappy").compress(data, asbytes=True)
    chunk = b"\x00\x00\x00\x00" + block
    return b"\xff\x06\x00\x00sNaPpY" + b"\x00" + len(chunk).to_bytes(3, "little") + chunk


@pytest.mark.parametrize(("name", "stored"), [
    ("a.json", _TEXT),
    ("a.json.gz", gzip.compress(_TEXT[:8]) + gzip.compress(_TEXT[8:])),   # concatenated members, as Druid reads
    ("a.json.bz2", bz2.compress(_TEXT[:8]) + bz2.compress(_TEXT[8:])),
    ("a.json.xz", lzma.compress(_TEXT[:8]) + lzma.compress(_TEXT[8:])),
    ("a.json.zst", pa.Codec("zstd").compress(_TEXT, asbytes=True)),
    ("a.json.zip", _zip(("a.json", _TEXT), ("b.json", b'{"a":3}\n'))),  # only the first entry, as Druid
    ("a.json.sz", _snappy_framed(_TEXT)),
], ids=lambda value: value if isinstance(value, str) else "")  # gzip stamps its bytes with the time: not in the id
def test_files_are_decompressed_by_their_suffix(name: str, stored: bytes) -> None:
    with decompress(io.BytesIO(stored), name) as stream:
        assert stream.read() == _TEXT


def test_an_empty_zip_reads_as_no_bytes() -> None:
    assert decompress(io.BytesIO(_zip()), "a.zip").read() == b""


def test_lz4_is_refused_with_the_file_named() -> None:
    with pytest.raises(ValueError, match="x.json.lz4"):
        decompress(io.BytesIO(b""), "x.json.lz4")


class _Flaky:
    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.calls = 0

    def __call__(self, ref: FileRef) -> io.BytesIO:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return io.BytesIO(b"ok")


@pytest.mark.parametrize(("errors", "calls", "raised"), [
    ([RetryableError("HTTP 500"), ConnectionError("reset")], 3, None),
    ([RetryableError("HTTP 500")] * 3, 3, RetryableError),
    ([FileNotFoundError("HTTP 404")], 1, FileNotFoundError),
    ([PermissionError("HTTP 403")], 1, PermissionError),
    ([ValueError("bad")], 1, ValueError),
])
def test_opening_is_retried_on_transient_errors_only(errors: list[Exception], calls: int,
                                                      raised: type[Exception] | None) -> None:
    opener = _Flaky(list(errors))
    ref = FileRef("s3://bucket/x.json", 2)
    if raised is None:
        assert open_with_retries(opener, ref, backoff_s=0).read() == b"ok"
    else:
        with pytest.raises(raised, match="s3://bucket/x.json"):
            open_with_retries(opener, ref, backoff_s=0)
    assert opener.calls == calls
