"""Druid's `inline` input source: the spec's `data` is the content of one file, named `inline`."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, BinaryIO

from sluice.connectors.sources.files import FileRef, FileSource

if TYPE_CHECKING:
    from sluice.spec.input_format import RecordFormat
    from sluice.spec.input_source import InlineInputSource, MaxSizeSplitHint

NAME = "inline"


class InlineSource(FileSource):
    def __init__(self, spec: InlineInputSource, input_format: RecordFormat, fields: Sequence[str],
                 split_hint: MaxSizeSplitHint | None = None, spec_path: str = "ioConfig.inputSource") -> None:
        super().__init__(input_format, fields, split_hint, spec_path)
        self.spec = spec

    def list_files(self) -> list[FileRef]:
        return [FileRef(NAME, len(self.spec.data.encode()))]

    def open(self, ref: FileRef) -> BinaryIO:
        return io.BytesIO(self.spec.data.encode())
