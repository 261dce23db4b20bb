"""json: one JSON value per line, handed to Spark unparsed.

Spark's `from_json` parses the values in the JVM, as it parses the Kafka stream's: one parser and one set of
parse rules for stream and batch. So this reader only splits lines, and skips the blank ones (Druid's JSON
reader reads whitespace between values as nothing)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.connectors.formats.base import BATCH_ROWS, numbered_locators
from sluice.connectors.formats.lines import LineReader, line_bounds, split_lines
from sluice.connectors.records import json_records_schema

#: what a line holding no JSON value looks like (JSON's whitespace)
_BLANK = r"^[ \t\r\n]*$"
_WHITESPACE = np.array([b" "[0], b"\t"[0], b"\r"[0], b"\n"[0]], dtype=np.uint8)


class JsonLinesParser:
    needs_seekable = False

    def __init__(self) -> None:
        self.schema = json_records_schema()

    def parse_stream(self, stream: BinaryIO, name: str) -> Iterator[pa.RecordBatch]:
        for block in LineReader(stream).blocks():
            lines = split_lines(block.data)
            locators = numbered_locators(f"{name}:", block.first_line, len(lines))
            batch = pa.RecordBatch.from_arrays([locators, lines], schema=self.schema)
            if _may_have_blank_lines(block.data):
                blank = pc.match_substring_regex(lines, _BLANK)
                if pc.any(blank).as_py():
                    batch = batch.filter(pc.invert(blank))
            for start in range(0, batch.num_rows, BATCH_ROWS):
                yield batch.slice(start, BATCH_ROWS)

    def parse_values(self, values: Sequence[bytes | None], locators: Sequence[str]) -> pa.RecordBatch:
        """Each message value as it is: a null value (a tombstone) stays null, and `from_json` reads it as a
        record with no fields."""
        return pa.RecordBatch.from_arrays([pa.array(list(locators), pa.string()), pa.array(list(values), pa.binary())],
                                          schema=self.schema)


def _may_have_blank_lines(data: bytes) -> bool:
    """Whether a line of the block starts with whitespace or is empty: only then is it worth matching every line
    against _BLANK (a cheap look at each line's first byte)."""
    starts, _ = line_bounds(data)
    raw = np.frombuffer(data, dtype=np.uint8)
    return bool(np.isin(raw[np.minimum(starts, len(raw) - 1)], _WHITESPACE).any()) or starts[-1] >= len(raw)
