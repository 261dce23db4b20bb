"""parquet and orc: files read with pyarrow, only the top-level columns the fields' paths start from, a row group
(Parquet) or stripe (ORC) at a time. Records are located by row, counted from 1 through the file."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import BinaryIO

import pyarrow as pa
import pyarrow.orc as pa_orc
import pyarrow.parquet as pq

from sluice.connectors.formats.base import BATCH_ROWS, FormatError, numbered_locators
from sluice.connectors.formats.nested import field_paths, flattened_batch, root_columns
from sluice.connectors.records import column_records_schema
from sluice.spec.input_format import OrcInputFormat, ParquetInputFormat


class ColumnarParser:
    needs_seekable = True

    def __init__(self, fmt: ParquetInputFormat | OrcInputFormat, fields: Sequence[str]) -> None:
        self.schema = column_records_schema(fields)
        self._fmt = fmt
        self._paths = field_paths(fmt.flatten_spec, fields)

    def parse_stream(self, stream: BinaryIO, name: str) -> Iterator[pa.RecordBatch]:
        row = 1
        for batch in self._file_batches(stream, name):
            locators = numbered_locators(f"{name}:row ", row, batch.num_rows)
            row += batch.num_rows
            yield flattened_batch(self.schema, batch, self._paths, locators, self._fmt.binary_as_string)

    def parse_values(self, values: Sequence[bytes | None], locators: Sequence[str]) -> pa.RecordBatch:
        raise ValueError(f"{self._fmt.type} is a file format: a Kafka message cannot be read as {self._fmt.type}")

    def _file_batches(self, stream: BinaryIO, name: str) -> Iterator[pa.RecordBatch]:
        kind = self._fmt.type
        try:
            if kind == "parquet":
                file = pq.ParquetFile(stream)
                columns = root_columns(self._paths, file.schema_arrow.names)
                batches = file.iter_batches(batch_size=BATCH_ROWS, columns=columns)
            else:
                orc = pa_orc.ORCFile(stream)
                # no column read would read no rows: read the first one to count them
                columns = root_columns(self._paths, orc.schema.names) or orc.schema.names[:1]
                batches = (stripe.slice(start, BATCH_ROWS)
                           for stripe in (orc.read_stripe(i, columns=columns) for i in range(orc.nstripes))
                           for start in range(0, stripe.num_rows, BATCH_ROWS))
            yield from batches
        except (pa.ArrowException, OSError, ValueError) as error:
            raise FormatError(f"{name}: cannot read it as {kind}: {error}") from error
