"""regex: each line matched whole against `pattern` (Druid's `RegexReader`, `Matcher.matches()`), its groups
the values of `columns` in order (`column_1`, `column_2`, ... without columns: `ParserUtils`). A group that
took no part in the match is null; a line that does not match (a blank one too) is unparseable, with Druid's
message. Python's `re` stands in for `java.util.regex`: the common syntax is the same. A value holding
`listDelimiter` (Ctrl-A unless given) is several values (`split_lists`)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import pyarrow as pa

from sluice.connectors.formats.base import LIST_DELIMITER, error_values, sliced, split_lists
from sluice.connectors.formats.lines import LineReader, text_lines
from sluice.connectors.records import column_records_schema
from sluice.spec.input_format import RegexInputFormat


class RegexParser:
    needs_seekable = False

    def __init__(self, fmt: RegexInputFormat, fields: Sequence[str]) -> None:
        self.schema = column_records_schema(fields)
        self._pattern = re.compile(fmt.pattern)
        self._columns = fmt.columns or [f"column_{i + 1}" for i in range(self._pattern.groups)]
        self._list_delimiter = fmt.list_delimiter or LIST_DELIMITER

    def parse_stream(self, stream: BinaryIO, name: str) -> Iterator[pa.RecordBatch]:
        for block in LineReader(stream).blocks():
            locators = [f"{name}:{block.first_line + i}" for i in range(block.line_count)]
            yield from sliced(self._batch(locators, text_lines(block.data)))

    def parse_values(self, values: Sequence[bytes | None], locators: Sequence[str]) -> pa.RecordBatch:
        texts = [None if v is None else v.decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r")
                 for v in values]
        return self._batch(list(locators), texts)

    def _batch(self, locators: list[str], lines: Sequence[str | None]) -> pa.RecordBatch:
        errors: list[str | None] = []
        rows: list[tuple[str | None, ...] | None] = []
        for line in lines:
            match = None if line is None else self._pattern.fullmatch(line)
            rows.append(match.groups() if match else None)
            errors.append(None if match else
                          "the message has no value" if line is None else f"Unable to parse row [{line}]")
        return split_lists(error_values(self.schema, locators, errors, rows, self._columns), self._list_delimiter)
