"""Druid's `s3` input source: objects named by `uris`, `objects` or `prefixes`, kept when their key matches
`objectGlob`, read through `pyarrow.fs.S3FileSystem` (as S3 deep storage is)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from functools import cached_property, lru_cache
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from sluice.connectors.sources.files import FileRef, FileSource, RetryableError
from sluice.spec.errors import SpecError
from sluice.spec.input_source import reveal

if TYPE_CHECKING:
    from sluice.spec.input_format import RecordFormat
    from sluice.spec.input_source import MaxSizeSplitHint, S3InputSource


#: bytes asked of S3 at a time. Unbuffered, each read of the stream is a GET of its own: gzip's decompressor reads
#: 64 KiB at a time, and reading JSON from S3 took 2.7 times as long.
READ_BUFFER = 8 << 20


class S3Source(FileSource):
    transient = (*FileSource.transient, "filesystem")

    def __init__(self, spec: S3InputSource, input_format: RecordFormat, fields: Sequence[str],
                 split_hint: MaxSizeSplitHint | None = None, spec_path: str = "ioConfig.inputSource") -> None:
        super().__init__(input_format, fields, split_hint, spec_path)
        self.spec = spec

    def list_files(self) -> list[FileRef]:
        """As Druid's CloudObjectInputSource: `uris` and `objects` in their order (their sizes asked for, for the
        split hint; an empty one is kept), `prefixes` listed (sorted by key; empty objects left out); then the
        glob, over each object's key."""
        if self.spec.prefixes:
            found = [ref for i, prefix in enumerate(self.spec.prefixes) for ref in self._under(prefix, i)]
        else:
            found = self._named()
        if self.spec.object_glob:
            matches = java_glob(self.spec.object_glob).fullmatch
            found = [ref for ref in found if matches(_bucket_and_key(ref.uri)[1])]
        return found

    def open(self, ref: FileRef) -> BinaryIO:
        bucket, key = _bucket_and_key(ref.uri)
        try:
            # as stored: pyarrow would otherwise decompress by the suffix itself (compression="detect")
            return self.filesystem.open_input_stream(f"{bucket}/{key}", compression=None,  # type: ignore[return-value]
                                                     buffer_size=READ_BUFFER)
        except FileNotFoundError:
            raise
        except OSError as error:
            raise _classified(ref.uri, error) from error

    @cached_property
    def filesystem(self) -> pafs.S3FileSystem:
        """Made on first use in each process. `endpointConfig.url` (its scheme, or `clientConfig.protocol`)
        reaches an S3-compatible store; without it, AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL as deep storage reads
        them. Without `properties`, credentials come from AWS_ACCESS_KEY_ID and the other usual AWS sources."""
        client = self.spec.client_config
        settings: dict[str, object] = {"scheme": client.protocol if client else "https"}
        endpoint = (self.spec.endpoint_config.url if self.spec.endpoint_config else None) \
            or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            parts = urlsplit(endpoint if "://" in endpoint else f"//{endpoint}")
            if parts.scheme:
                settings["scheme"] = parts.scheme
            settings["endpoint_override"] = parts.netloc
            # Druid's default is virtual-hosted addressing (bucket.host); enablePathStyleAccess turns it off
            settings["force_virtual_addressing"] = not (client and client.enable_path_style_access)
        if self.spec.endpoint_config and self.spec.endpoint_config.signing_region:
            settings["region"] = self.spec.endpoint_config.signing_region
        properties = self.spec.properties
        if properties and properties.access_key_id is not None:
            settings["access_key"] = reveal(properties.access_key_id)
            settings["secret_key"] = reveal(properties.secret_access_key)
        return pafs.S3FileSystem(**settings)

    def _named(self) -> list[FileRef]:
        if self.spec.uris:
            uris = list(self.spec.uris)
            fields = [f"{self.spec_path}.uris[{i}]" for i in range(len(uris))]
        else:
            uris = [f"s3://{o.bucket}/{o.path.lstrip('/')}" for o in self.spec.objects or []]
            fields = [f"{self.spec_path}.objects[{i}]" for i in range(len(uris))]
        infos = self._info([f"{b}/{k}" for b, k in map(_bucket_and_key, uris)])
        refs = []
        for uri, info, field in zip(uris, infos, fields, strict=True):
            if info.type != pafs.FileType.File:
                raise SpecError(field, f"{uri} is not an object in S3 (not found, or a folder)")
            refs.append(FileRef(uri, info.size or 0))
        return refs

    def _under(self, prefix: str, index: int) -> list[FileRef]:
        """Every object whose key starts with the prefix's path, as S3's own prefix listing: `s3://b/logs/2024-`
        takes `logs/2024-01.json` and `logs/2024-02/a.json`. The folder that holds the prefix is listed."""
        bucket, key_prefix = _bucket_and_key(prefix)
        if not bucket:
            raise SpecError(f"{self.spec_path}.prefixes[{index}]", f"{prefix} names no bucket")
        folder = key_prefix.rsplit("/", 1)[0] if "/" in key_prefix else ""
        selector = pafs.FileSelector(f"{bucket}/{folder}".rstrip("/"), recursive=True, allow_not_found=True)
        infos = self._listing(selector, prefix)
        refs = []
        for info in infos:
            key = info.path.split("/", 1)[1] if "/" in info.path else ""
            if info.type == pafs.FileType.File and key.startswith(key_prefix) and (info.size or 0) > 0:
                refs.append(FileRef(f"s3://{bucket}/{key}", info.size or 0))
        return sorted(refs, key=lambda ref: ref.uri)

    def _info(self, paths: list[str]) -> list[pafs.FileInfo]:
        try:
            return self.filesystem.get_file_info(paths)
        except OSError as error:
            raise _classified(", ".join(paths), error) from error

    def _listing(self, selector: pafs.FileSelector, prefix: str) -> list[pafs.FileInfo]:
        try:
            return self.filesystem.get_file_info(selector)
        except OSError as error:
            raise _classified(prefix, error) from error


def _bucket_and_key(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b.json` -> (`bucket`, `a/b.json`): Druid's CloudObjectLocation (the key has no leading /)."""
    parts = urlsplit(uri)
    return parts.netloc, parts.path.lstrip("/")


def _classified(what: str, error: OSError) -> OSError:
    """pyarrow reports S3 errors as OSError with the AWS error in the text: access denied fails at once, other
    service and network errors may pass on another try."""
    text = str(error)
    if "ACCESS_DENIED" in text or "AccessDenied" in text or "HTTP response code: 403" in text:
        return PermissionError(f"{what}: {text}")
    if "NO_SUCH_BUCKET" in text or "NoSuchBucket" in text:
        return FileNotFoundError(f"{what}: {text}")
    return RetryableError(f"{what}: {text}")


@lru_cache(maxsize=64)
def java_glob(glob: str) -> re.Pattern[str]:
    """Java's `FileSystems.getDefault().getPathMatcher("glob:" + objectGlob)`, which Druid matches keys with:
    `*` and `?` stay within one path segment, `**` crosses `/`, `[a-z]` and `[!a]` are classes, `{a,b}`
    alternatives (not nested), and a backslash escapes the next character."""
    out, i, in_group = [], 0, False
    while i < len(glob):
        c = glob[i]
        if c == "\\" and i + 1 < len(glob):
            out.append(re.escape(glob[i + 1]))
            i += 2
            continue
        if c == "*":
            if glob.startswith("**", i):
                out.append(".*")
                i += 2
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = glob.find("]", i + 1)
            if end < 0:
                raise ValueError(f"objectGlob {glob!r}: [ without a closing ]")
            body = glob[i + 1:end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            members = "".join(c if c == "-" else re.escape(c) for c in body)
            out.append("(?!/)[" + ("^" if negate else "") + members + "]")
            i = end + 1
            continue
        elif c == "{":
            if in_group:
                raise ValueError(f"objectGlob {glob!r}: groups {{}} cannot be nested")
            out.append("(?:")
            in_group = True
        elif c == "}" and in_group:
            out.append(")")
            in_group = False
        elif c == "," and in_group:
            out.append("|")
        else:
            out.append(re.escape(c))
        i += 1
    if in_group:
        raise ValueError(f"objectGlob {glob!r}: {{ without a closing }}")
    return re.compile("".join(out), re.DOTALL)
