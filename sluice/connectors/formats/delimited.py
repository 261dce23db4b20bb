"""csv and tsv, as Druid's `DelimitedValueReader` reads them.

Druid's rules, which this reader keeps:
- a file is read line by line (`FastLineIterator`): `skipHeaderRows` lines are dropped, then, with
  `findColumnsFromHeader` (or the deprecated `hasHeaderRow`), the next line names the columns (instead of
  `columns`); an empty name becomes `column_N` (1-based), and a repeated one makes the file unreadable
  ("Duplicate column entries found").
- csv is opencsv's RFC4180Parser: `"` quotes, `""` is a quote inside quotes, an unquoted empty value is null
  but `""` is an empty string (SQL-compatible nulls); a quote left open at the end of the line makes the row
  unparseable ("Unable to parse row [...]"), since a line is parsed on its own (no line breaks in values).
- tsv (`DelimitedBytes.split`) splits on the delimiter only: quotes are plain characters, every empty value is
  null.
- a row with fewer values than columns leaves the rest null, and values beyond the columns are dropped
  (`Utils.zipMapPartial`); a blank line is a row of nulls.
- `listDelimiter` (Ctrl-A unless given) splits a value into a multi-value (`split_lists`).

pyarrow's CSV reader parses each block; the rows it sets aside (a different number of values, an open quote)
are parsed by `split_line` here and put back in place. A block whose rows do not line up with its lines
(a quoted line break, a lone `\\r`, malformed UTF-8) is parsed line by line here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from sluice.connectors.formats.base import (
    LIST_DELIMITER,
    FormatError,
    column_batch,
    error_values,
    numbered_locators,
    sliced,
    split_lists,
)
from sluice.connectors.formats.lines import Block, LineReader, text_lines
from sluice.connectors.records import column_records_schema
from sluice.spec.input_format import CsvInputFormat, TsvInputFormat


class UnparseableRow(ValueError):
    pass


class DelimitedParser:
    needs_seekable = False

    def __init__(self, fmt: CsvInputFormat | TsvInputFormat, fields: Sequence[str]) -> None:
        self.schema = column_records_schema(fields)
        self._fmt = fmt
        self._quoted = isinstance(fmt, CsvInputFormat)
        self._delimiter = fmt.delimiter_char
        self._list_delimiter = fmt.list_delimiter or LIST_DELIMITER

    def parse_stream(self, stream: BinaryIO, name: str) -> Iterator[pa.RecordBatch]:
        reader = LineReader(stream)
        for _ in range(self._fmt.skip_header_rows):
            if reader.next_line() is None:
                return
        columns = self._fmt.columns
        if self._fmt.header:
            line = reader.next_line()
            if line is None:
                return
            columns = header_columns(self.split_line(line.decode("utf-8", errors="replace")), name)
        delimiter = self._list_delimiter.encode()
        for block in reader.blocks():
            batch = self._parse_block(block, list(columns or []), f"{name}:")
            # a block without the delimiter has no multi-value: its columns need not be searched one by one
            yield from sliced(split_lists(batch, self._list_delimiter) if delimiter in block.data else batch)

    def parse_values(self, values: Sequence[bytes | None], locators: Sequence[str]) -> pa.RecordBatch:
        """Each message value is one row of `columns` (a message has no header to name them)."""
        if not self._fmt.columns:
            raise ValueError(f"{self._fmt.type} messages need columns: findColumnsFromHeader reads files only")
        texts = [None if v is None else v.decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r")
                 for v in values]
        return split_lists(self._rows_batch(list(locators), texts, self._fmt.columns,
                                            null_error="the message has no value"), self._list_delimiter)

    def split_line(self, line: str) -> list[str | None]:
        """One line's values: RFC 4180 for csv, a plain split for tsv; empty unquoted values are null."""
        if not self._quoted:
            return [value or None for value in line.split(self._delimiter)]
        return split_rfc4180(line, self._delimiter)

    def _parse_block(self, block: Block, columns: list[str], prefix: str) -> pa.RecordBatch:
        locators = numbered_locators(prefix, block.first_line, block.line_count)
        wanted = [c in self.schema.names for c in columns]
        table = self._arrow_rows(block, wanted)
        if table is None:
            return self._rows_batch(locators.to_pylist(), text_lines(block.data), columns)
        good, odd = table
        out = {field: good.column(f"c{i}").combine_chunks()
               for i, field in reversed(list(enumerate(columns))) if wanted[i]}
        batch = column_batch(self.schema, locators.take(_good_positions(block.line_count, odd)), None, out)
        if not odd:
            return batch
        rows = self._rows_batch([f"{prefix}{block.first_line + n - 1}" for n, _ in odd], [t for _, t in odd], columns)
        return pa.concat_batches([batch, rows]).take(_merge_order(block.line_count, [n for n, _ in odd]))

    def _arrow_rows(self, block: Block, wanted: list[bool]) -> tuple[pa.Table, list[tuple[int, str]]] | None:
        """pyarrow's reading of a block (the columns `wanted`): the rows with a value per column, and (line in
        block, text) of the others; None when its rows cannot be matched to the block's lines."""
        data = block.data
        if len(self._delimiter.encode()) != 1 or data.count(b"\r") != data.count(b"\r\n"):
            return None
        odd: list[tuple[int, str]] = []

        def set_aside(row: pa_csv.InvalidRow) -> str:
            odd.append((row.number, row.text))
            return "skip"

        names = [f"c{i}" for i in range(len(wanted))]
        included = [name for name, read in zip(names, wanted) if read]
        try:
            table = pa_csv.read_csv(
                pa.py_buffer(data),
                read_options=pa_csv.ReadOptions(column_names=names, use_threads=False, block_size=len(data) + 1),
                parse_options=pa_csv.ParseOptions(
                    delimiter=self._delimiter, quote_char='"' if self._quoted else False, double_quote=True,
                    newlines_in_values=False, ignore_empty_lines=False, invalid_row_handler=set_aside),
                convert_options=pa_csv.ConvertOptions(
                    column_types={n: pa.string() for n in names}, null_values=[""], strings_can_be_null=True,
                    quoted_strings_can_be_null=False, include_columns=included or names[:1]))
        except (pa.ArrowInvalid, UnicodeDecodeError):
            return None
        if table.num_rows + len(odd) != block.line_count or any(n < 1 or "\n" in t for n, t in odd):
            return None
        return table, odd

    def _rows_batch(self, locators: list[str], lines: Sequence[str | None], columns: Sequence[str],
                    null_error: str = "") -> pa.RecordBatch:
        """Lines parsed one by one (`split_line`), an unparseable one an error record as Druid reports it."""
        errors: list[str | None] = []
        rows: list[list[str | None] | None] = []
        for line in lines:
            try:
                if line is None:
                    raise UnparseableRow(null_error)
                rows.append(self.split_line(line))
                errors.append(None)
            except UnparseableRow as error:
                rows.append(None)
                errors.append(str(error) or f"Unable to parse row [{line}]")
        return error_values(self.schema, locators, errors, rows, columns)


def split_rfc4180(line: str, delimiter: str) -> list[str | None]:
    """opencsv's RFC4180Parser on one line, with SQL-compatible nulls: an unquoted empty value is null."""
    values: list[str | None] = []
    i, n = 0, len(line)
    while True:
        if i < n and line[i] == '"':
            text, i = _quoted(line, i + 1)
            end = line.find(delimiter, i)
            end = n if end < 0 else end
            values.append(text + line[i:end])
        else:
            end = line.find(delimiter, i)
            end = n if end < 0 else end
            values.append(line[i:end] or None)
        if end >= n:
            return values
        i = end + len(delimiter)


def _quoted(line: str, i: int) -> tuple[str, int]:
    """The text of a quoted value starting after its opening quote, and the position after its closing one."""
    parts = []
    while True:
        close = line.find('"', i)
        if close < 0:
            raise UnparseableRow(f"Unable to parse row [{line}]")
        parts.append(line[i:close])
        if line.startswith('"', close + 1):
            parts.append('"')
            i = close + 2
        else:
            return "".join(parts), close + 1


def header_columns(values: Sequence[str | None], name: str) -> list[str]:
    """Column names from a header line, as Druid's `findOrCreateInputRowSignature` makes them."""
    columns = [value or f"column_{i + 1}" for i, value in enumerate(values)]
    if repeated := sorted({c for c in columns if columns.count(c) > 1}):
        raise FormatError(f"{name}: Duplicate column entries found : [{', '.join(repeated)}]")
    return columns


def _good_positions(line_count: int, odd: list[tuple[int, str]]) -> pa.Array:
    """Positions (0-based) in the block of the lines pyarrow read: all but the set-aside ones."""
    keep = np.ones(line_count, dtype=bool)
    keep[[n - 1 for n, _ in odd]] = False
    return pa.array(np.flatnonzero(keep))


def _merge_order(line_count: int, odd_lines: list[int]) -> pa.Array:
    """The order that puts [pyarrow's rows..., set-aside rows...] back in line order."""
    is_odd = np.zeros(line_count, dtype=bool)
    is_odd[[n - 1 for n in odd_lines]] = True
    order = np.empty(line_count, dtype=np.int64)
    good = int(line_count - is_odd.sum())
    order[~is_odd] = np.arange(good)
    order[is_odd] = good + np.argsort(np.argsort(odd_lines))
    return pa.array(order)
