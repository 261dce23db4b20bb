"""Input formats: the bytes of one (decompressed) file, or Kafka message values, as Arrow record batches in one of
the two shapes of `sluice.connectors.records`.

json keeps each line's bytes for Spark's `from_json`; csv, tsv and regex split lines as Druid's text readers do;
parquet, orc and avro_ocf read typed columns, follow the flattenSpec and write the values as text (`stringify`).
A record that cannot be parsed is an error record (`__error`); a file that cannot be read raises FormatError.
"""

from __future__ import annotations

from collections.abc import Sequence

from sluice.connectors.formats.avro import AvroOcfParser
from sluice.connectors.formats.base import FormatError, RecordParser
from sluice.connectors.formats.columnar import ColumnarParser
from sluice.connectors.formats.delimited import DelimitedParser
from sluice.connectors.formats.json_lines import JsonLinesParser
from sluice.connectors.formats.regex import RegexParser
from sluice.connectors.formats.values import stringify
from sluice.spec.input_format import (
    AvroOcfInputFormat,
    CsvInputFormat,
    JsonInputFormat,
    OrcInputFormat,
    ParquetInputFormat,
    RecordFormat,
    RegexInputFormat,
    TsvInputFormat,
)

__all__ = ["FormatError", "RecordParser", "record_parser", "stringify"]


def record_parser(fmt: RecordFormat, fields: Sequence[str]) -> RecordParser:
    """The parser of `fmt` for an ingestion that reads `fields` (json reads every field: `fields` is unused)."""
    if isinstance(fmt, JsonInputFormat):
        return JsonLinesParser()
    if isinstance(fmt, (CsvInputFormat, TsvInputFormat)):
        return DelimitedParser(fmt, fields)
    if isinstance(fmt, RegexInputFormat):
        return RegexParser(fmt, fields)
    if isinstance(fmt, (ParquetInputFormat, OrcInputFormat)):
        return ColumnarParser(fmt, fields)
    if isinstance(fmt, AvroOcfInputFormat):
        return AvroOcfParser(fmt, fields)
    raise ValueError(f"no parser for input format {type(fmt).__name__}")
