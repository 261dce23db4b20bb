"""What every format's parser is, and the pieces they share: the batch size, the error of an unreadable file,
and how a column-shaped batch is put together."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import BinaryIO, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: rows per batch: big enough that Arrow's per-batch costs vanish, small enough for an executor's memory
BATCH_ROWS = 65_536


class FormatError(ValueError):
    """A whole file cannot be read (a corrupt Parquet footer, a bad Avro header, a duplicate header column):
    no record of it can be parsed, so the file fails rather than each of its records."""


class RecordParser(Protocol):
    """Turns one file, or a list of Kafka message values, into batches of `schema`."""

    schema: pa.Schema
    #: Parquet, ORC and Avro files are read from their footer or with seeks: `parse_stream` needs a seekable file
    needs_seekable: bool

    def parse_stream(self, stream: BinaryIO, name: str) -> Iterator[pa.RecordBatch]:
        """The records of one whole (decompressed) file; `name` goes into each record's locator."""
        ...

    def parse_values(self, values: Sequence[bytes | None], locators: Sequence[str]) -> pa.RecordBatch:
        """One record per Kafka message value, located as the caller says. Raises ValueError for file-only
        formats."""
        ...


def numbered_locators(prefix: str, first: int, count: int) -> pa.Array:
    """`prefix` followed by the numbers first, first + 1, ...: `path:12`, `path:row 12`."""
    numbers = pa.array(np.arange(first, first + count, dtype=np.int64)).cast(pa.string())
    return pc.binary_join_element_wise(pa.scalar(prefix), numbers, "")


def column_batch(schema: pa.Schema, locators: pa.Array, errors: pa.Array | None,
                 columns: Mapping[str, pa.Array]) -> pa.RecordBatch:
    """A batch of `schema` (records.column_records_schema): a field with no column in `columns` is all null."""
    n = len(locators)
    arrays = [locators, errors if errors is not None else pa.nulls(n, pa.string())]
    for field in list(schema)[2:]:
        column = columns.get(field.name)
        arrays.append(pa.nulls(n, pa.string()) if column is None else column)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


#: Druid's listDelimiter when a csv, tsv or regex inputFormat names none (Ctrl-A)
LIST_DELIMITER = "\x01"


def split_lists(batch: pa.RecordBatch, delimiter: str) -> pa.RecordBatch:
    """Druid's listDelimiter: a field's value that holds it is several values, written as their JSON list (how every
    reader gives a multi-value field to the rows' parse). Only the few such values go through Python."""
    arrays = list(batch.columns)
    for i in range(2, len(arrays)):
        holds = pc.match_substring(arrays[i], delimiter)
        if pc.any(holds).as_py():
            split = [json.dumps(v.split(delimiter), ensure_ascii=False) if v is not None and delimiter in v else v
                     for v in arrays[i].to_pylist()]
            arrays[i] = pa.array(split, pa.string())
    return pa.RecordBatch.from_arrays(arrays, schema=batch.schema)


def sliced(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """`batch` in pieces of at most BATCH_ROWS rows (none for an empty batch)."""
    for start in range(0, batch.num_rows, BATCH_ROWS):
        yield batch.slice(start, BATCH_ROWS)


def error_values(schema: pa.Schema, locators: Sequence[str], errors: Sequence[str | None],
                 rows: Sequence[Sequence[str | None] | None], columns: Sequence[str]) -> pa.RecordBatch:
    """A batch built in Python, for the per-record paths (Kafka messages, rows Arrow could not read): `rows[i]`
    holds the values of `columns` (or None with an error)."""
    position = {c: i for i, c in reversed(list(enumerate(columns)))}
    out: dict[str, pa.Array] = {}
    for field in schema.names[2:]:
        i = position.get(field)
        if i is not None:
            out[field] = pa.array([row[i] if row is not None and i < len(row) else None for row in rows], pa.string())
    return column_batch(schema, pa.array(list(locators), pa.string()), pa.array(list(errors), pa.string()), out)
