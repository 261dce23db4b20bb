"""Druid's `local` input source: files under `baseDir` (searched recursively) whose name matches `filter`, then
the files listed in `files`."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, BinaryIO

from sluice.connectors.sources.files import FileRef, FileSource
from sluice.spec.errors import SpecError

if TYPE_CHECKING:
    from sluice.spec.input_format import RecordFormat
    from sluice.spec.input_source import LocalInputSource, MaxSizeSplitHint


class LocalSource(FileSource):
    def __init__(self, spec: LocalInputSource, input_format: RecordFormat, fields: Sequence[str],
                 split_hint: MaxSizeSplitHint | None = None, spec_path: str = "ioConfig.inputSource") -> None:
        super().__init__(input_format, fields, split_hint, spec_path)
        self.spec = spec

    def list_files(self) -> list[FileRef]:
        """As Druid's LocalInputSource.getFileIterator: the directory's matches (sorted, so splits are the same on
        every listing), then `files` in their order; empty files are skipped. A file of the directory whose name
        is also the name of a file in `files` is left out of the directory's part, as Druid leaves it out."""
        listed = [self._listed_file(i, path) for i, path in enumerate(self.spec.files)]
        found = self._directory_files({os.path.basename(path) for path, _ in listed}) if self.spec.base_dir else []
        return [ref for ref in (*found, *(FileRef(path, size) for path, size in listed)) if ref.size > 0]

    def open(self, ref: FileRef) -> BinaryIO:
        return open(ref.uri, "rb")

    def _directory_files(self, excluded_names: set[str]) -> list[FileRef]:
        base_dir = self.spec.base_dir or ""
        if not os.path.isdir(base_dir):
            problem = "is not a directory" if os.path.exists(base_dir) else "does not exist"
            raise SpecError(f"{self.spec_path}.baseDir", f"{base_dir!r} {problem}")
        matches = wildcard(self.spec.filter or "*").fullmatch
        found = []
        for folder, _, names in os.walk(os.path.abspath(base_dir)):
            for name in names:
                path = os.path.join(folder, name)
                if matches(name) and name not in excluded_names and os.path.isfile(path):
                    found.append(FileRef(path, os.path.getsize(path)))
        return sorted(found, key=lambda ref: ref.uri)

    def _listed_file(self, index: int, path: str) -> tuple[str, int]:
        if not os.path.isfile(path):
            problem = "is not a file" if os.path.exists(path) else "does not exist"
            raise SpecError(f"{self.spec_path}.files[{index}]", f"{path!r} {problem}")
        return os.path.abspath(path), os.path.getsize(path)


@lru_cache(maxsize=64)
def wildcard(pattern: str) -> re.Pattern[str]:
    """Commons IO's WildcardFileFilter (what Druid's `filter` is): `*` any characters, `?` one character, every
    other character itself (no `[...]` classes, unlike fnmatch), case-sensitive."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.DOTALL)
