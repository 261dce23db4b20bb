"""Druid's `http` input source: each URI is one file and one split (Druid's HttpInputSource makes one split per
URI whatever the split hint), read with a streaming GET."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlsplit

import httpx

from sluice.connectors.sources.files import (
    FileRef,
    FileSource,
    FileSplit,
    RetryableError,
)
from sluice.spec.input_source import reveal

if TYPE_CHECKING:
    from sluice.spec.input_format import RecordFormat
    from sluice.spec.input_source import HttpInputSource, MaxSizeSplitHint

_TIMEOUT = httpx.Timeout(60.0, connect=30.0)
#: statuses worth another try: the server or a proxy in front of it may answer next time
_RETRYABLE_STATUSES = {408, 429, 500, 502, 503, 504}


class HttpSource(FileSource):
    transient = (*FileSource.transient, "client")

    def __init__(self, spec: HttpInputSource, input_format: RecordFormat, fields: Sequence[str],
                 split_hint: MaxSizeSplitHint | None = None, spec_path: str = "ioConfig.inputSource") -> None:
        super().__init__(input_format, fields, split_hint, spec_path)
        self.spec = spec

    def list_files(self) -> list[FileRef]:
        """The URIs as given; their sizes are not asked for (one split per URI needs none)."""
        return [FileRef(uri, 0) for uri in self.spec.uris]

    def enumerate_splits(self) -> list[FileSplit]:
        return [FileSplit((ref,), ordinal) for ordinal, ref in enumerate(self.list_files())]

    def path_of(self, ref: FileRef) -> str:
        """Druid's HttpEntity.getPath: the URI's path picks the decompression, so `/a.json.gz?sig=..` is gzip."""
        return urlsplit(ref.uri).path

    @cached_property
    def client(self) -> httpx.Client:
        """One client per process, made on first use. The bytes are read as the server sent them (no
        Accept-Encoding, as Java's URLConnection sends none): a `.gz` file is decompressed by its name only."""
        return httpx.Client(timeout=_TIMEOUT, follow_redirects=True, headers={"Accept-Encoding": "identity"})

    def open(self, ref: FileRef) -> BinaryIO:
        request = self.client.build_request("GET", ref.uri, headers=self.spec.request_headers)
        try:
            response = self.client.send(request, stream=True, auth=self._auth())
        except httpx.TimeoutException as error:
            raise TimeoutError(f"{ref.uri}: {error}") from error
        except httpx.TransportError as error:
            raise ConnectionError(f"{ref.uri}: {error}") from error
        if response.status_code >= 400:
            response.close()
            raise _status_error(ref.uri, response)
        return io.BufferedReader(_ResponseBody(response), 1 << 20)  # type: ignore[return-value]

    def _auth(self) -> httpx.BasicAuth | None:
        """Druid's rule: basic authentication when a user name and a password are both given. The password is
        revealed here, in the process that reads (an environment variable is read on the executor)."""
        user, password = self.spec.http_authentication_username, self.spec.http_authentication_password
        if not user or password is None:
            return None
        return httpx.BasicAuth(user, reveal(password) or "")


def _status_error(uri: str, response: httpx.Response) -> OSError:
    message = f"GET {uri} answered HTTP {response.status_code} {response.reason_phrase}"
    if response.status_code in (404, 410):
        return FileNotFoundError(message)
    if response.status_code in (401, 403):
        return PermissionError(message)
    if response.status_code in _RETRYABLE_STATUSES or response.status_code >= 500:
        return RetryableError(message)
    return OSError(message)


class _ResponseBody(io.RawIOBase):
    """A streamed response body as a file: raw bytes, read as they arrive; closing it closes the response."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._chunks: Iterator[bytes] = response.iter_raw()
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = memoryview(next(self._chunks))
            except StopIteration:
                return 0
            except httpx.TransportError as error:
                raise ConnectionError(f"{self._response.request.url}: {error}") from error
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]  # a memoryview: no copy of what is left
        return size

    def close(self) -> None:
        if not self.closed:
            self._response.close()
        super().close()
