"""Druid's input sources as connectors: `create_source` turns a task's validated `ioConfig.inputSource` (and its
`inputFormat` and split hint) into the `Source` the ingestion job reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from sluice.spec.errors import SpecError
from sluice.spec.input_source import (
    FORMATLESS_SOURCES,
    CombiningInputSource,
    DruidInputSource,
    HttpInputSource,
    InlineInputSource,
    KafkaInputSource,
    LocalInputSource,
    MaxSizeSplitHint,
    S3InputSource,
    SegmentsSplitHint,
    SqlInputSource,
)

if TYPE_CHECKING:
    from sluice.connectors.api import Source
    from sluice.spec.input_format import RecordFormat
    from sluice.spec.input_source import InputSource

__all__ = ["create_source"]

#: where the parts of a task spec are, for errors a user can find in what they wrote
INPUT_SOURCE = "ioConfig.inputSource"
INPUT_FORMAT = "ioConfig.inputFormat"
SPLIT_HINT = "tuningConfig.splitHintSpec"


def create_source(input_source: InputSource, input_format: RecordFormat | None, fields: Sequence[str],
                  split_hint: MaxSizeSplitHint | SegmentsSplitHint | None = None, *,
                  druid: Callable[[DruidInputSource, Sequence[str]], Source] | None = None) -> Source:
    """The source that reads `fields` of the input. File sources (`local`, `http`, `s3`, `inline`) need an
    inputFormat; `sql` and `druid` read columns of their own and refuse one; `kafka` needs a line format (json, csv, tsv, regex). The
    `druid` source reads segments, so it is made by the caller, which has the metadata store. In a `combining`
    source the inputFormat is for the delegates that read files; a `sql` or `druid` delegate ignores it."""
    if input_format is not None and input_source.type in FORMATLESS_SOURCES:
        raise SpecError(INPUT_FORMAT, f"a {input_source.type} input source takes no inputFormat: its rows have "
                                      "columns of their own; remove inputFormat")
    return _create(input_source, input_format, fields, split_hint, druid, INPUT_SOURCE)


def _create(input_source: InputSource, input_format: RecordFormat | None, fields: Sequence[str],
            split_hint: MaxSizeSplitHint | SegmentsSplitHint | None,
            druid: Callable[[DruidInputSource, Sequence[str]], Source] | None, path: str) -> Source:
    if isinstance(input_source, SqlInputSource):
        from sluice.connectors.sources.sql import SqlSource

        return SqlSource(input_source, fields)
    if isinstance(input_source, DruidInputSource):
        if druid is None:
            raise SpecError(path, "the druid input source needs a metadata store, to find the segments it reads")
        return druid(input_source, fields)
    if isinstance(input_source, KafkaInputSource):
        from sluice.connectors.sources.kafka import KafkaSource

        return KafkaSource(input_source, input_format, fields)
    if isinstance(input_source, CombiningInputSource):
        from sluice.connectors.sources.combining import CombiningSource

        return CombiningSource([_create(delegate, input_format, fields, split_hint, druid, f"{path}.delegates[{i}]")
                                for i, delegate in enumerate(input_source.delegates)], path)
    return _file_source(input_source, input_format, fields, split_hint, path)


def _file_source(input_source: InputSource, input_format: RecordFormat | None, fields: Sequence[str],
                 split_hint: MaxSizeSplitHint | SegmentsSplitHint | None, path: str) -> Source:
    kind = input_source.type
    if input_format is None:
        raise SpecError(INPUT_FORMAT, f"inputFormat is required for a {kind} input source")
    if isinstance(split_hint, SegmentsSplitHint):
        raise SpecError(SPLIT_HINT, f"a segments split hint is for the druid input source; a {kind} input "
                                    "source groups files by maxSize")
    if isinstance(input_source, LocalInputSource):
        from sluice.connectors.sources.local import LocalSource

        return LocalSource(input_source, input_format, fields, split_hint, path)
    if isinstance(input_source, HttpInputSource):
        from sluice.connectors.sources.http import HttpSource

        return HttpSource(input_source, input_format, fields, split_hint, path)
    if isinstance(input_source, S3InputSource):
        from sluice.connectors.sources.s3 import S3Source

        return S3Source(input_source, input_format, fields, split_hint, path)
    if isinstance(input_source, InlineInputSource):
        from sluice.connectors.sources.inline import InlineSource

        return InlineSource(input_source, input_format, fields, split_hint, path)
    raise SpecError(f"{path}.type", f"unknown input source type {kind!r}")
