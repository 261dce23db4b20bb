"""Splits that Spark's own Parquet reader serves: local Parquet files read in the JVM, with no Python reader.

A Python reader of a local Parquet file only decodes it with pyarrow, turns each column into text
(`formats.values.stringify`) and hands the batches to Spark over a socket; Spark's vectorized reader decodes the
same file in the task itself. So where every file of a read has only columns whose text Spark SQL writes exactly as
`stringify` does (strings, integers, booleans, dates, timestamps of a time zone to the microsecond), the read's
subtasks are Spark's reader over the files the coordinator assigned to each reader, making the same records
(`records.column_records_schema`, located `path:row N`). Anything else (another type, a flattenSpec path, a
compressed or unreadable file, a name Spark would match case-insensitively) is read by the Python readers.

The coordinator still decides: each reader registers on the driver and gets its splits as a Python reader would.
Spark retries a failed task of its own reader, so no split is given back; progress is reported once the job's
output is committed, from the files' footers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from sluice.connectors.base import PlannedSplitsState
from sluice.connectors.formats.nested import field_paths
from sluice.connectors.formats.values import MILLIS_PER_DAY
from sluice.connectors.records import ERROR, LOCATOR
from sluice.connectors.sources.files import FileRef, compression_of
from sluice.connectors.sources.local import LocalSource
from sluice.spec.expressions import quote_identifier
from sluice.spec.input_format import ParquetInputFormat

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from sluice.connectors.coordination import CoordinatorHost

#: paths Spark takes as they are: nothing it would URL-encode in `_metadata.file_path` (which is `file:` and the
#: path) or read as a glob, and no file name that it skips as hidden (`_` or `.` first)
_SCHEME = "file:"
_PLAIN_PATH = re.compile(r"/(?:[A-Za-z0-9._+=,@~-]*/)*[A-Za-z0-9+=,@~-][A-Za-z0-9._+=,@~-]*")


@dataclass(frozen=True)
class NativeReader:
    """One reader's files, read by Spark: the DataFrame of its records, and what its progress will say."""

    records: DataFrame
    splits: int
    rows: int
    size: int


def native_readers(spark: SparkSession, host: CoordinatorHost[Any, Any], parallelism: int) -> list[NativeReader] | None:
    """Each reader's records read by Spark's Parquet reader, or None where a Python reader must read them (then
    nothing is registered with the coordinator)."""
    source = host.source
    if not isinstance(source, LocalSource) or not isinstance(source.input_format, ParquetInputFormat):
        return None
    paths = field_paths(source.input_format.flatten_spec, source.fields)
    if any(path != [field] for field, path in paths.items()):
        return None
    # the splits the started coordinator listed and planned, before any reader registered: its state
    planned = host.checkpoint(0)
    assert isinstance(planned, PlannedSplitsState), "a file source's coordinator plans its splits at start"
    footers = {ref.uri: _footer(ref) for splits in planned.pending.values() for split in splits for ref in split.files}
    types = _field_types(footers.values(), list(paths))
    if not types:  # no file holds any field: nothing for Spark to read
        return None
    schema = ", ".join(f"{quote_identifier(name)} {_SPARK_TYPES[_kind(t)]}" for name, t in types.items())
    text = {name: _text_sql(quote_identifier(name), t) for name, t in types.items()}
    readers = []
    for reader in range(parallelism):
        host.register(reader)
        box = host.poll(reader)
        assert box.no_more_splits, "a bounded file source assigns every split when its reader registers"
        refs = [ref for split in box.splits for ref in split.files]
        readers.append(NativeReader(_records(spark, refs, schema, text, source.output_schema()), len(box.splits),
                                    sum(footers[ref.uri].num_rows for ref in refs), sum(ref.size for ref in refs)))
    return readers


def _records(spark: SparkSession, refs: list[FileRef], schema: str, text: dict[str, str],
             records_schema: pa.Schema) -> DataFrame:
    """The records Python readers would make of these files: a field the files lack is null, as it is there."""
    from pyspark.sql.pandas.types import from_arrow_schema

    if not refs:
        return spark.createDataFrame([], from_arrow_schema(records_schema))
    locator = f"concat(substr(_metadata.file_path, {len(_SCHEME) + 1}), ':row ', _metadata.row_index + 1)"
    fields = [f"{text.get(name, 'CAST(NULL AS STRING)')} AS {quote_identifier(name)}"
              for name in records_schema.names[2:]]
    return (spark.read.schema(schema).parquet(*(ref.uri for ref in refs))
            .selectExpr(f"{locator} AS {LOCATOR}", f"CAST(NULL AS STRING) AS {ERROR}", *fields))


def _footer(ref: FileRef) -> pq.FileMetaData | None:
    if compression_of(ref.uri) or not _PLAIN_PATH.fullmatch(ref.uri):
        return None
    try:
        return pq.read_metadata(ref.uri)
    except (OSError, pa.ArrowException):
        return None  # the Python reader says which file is not Parquet, as it does for every source


def _field_types(footers: Any, fields: list[str]) -> dict[str, pa.DataType] | None:
    """Each field's type, where every file that has it has it alike and of a kind Spark reads to the same text;
    None otherwise. Spark matches column names regardless of case: a column named like a field but for its case
    would be read for that field, so it sends the read to the Python readers."""
    types: dict[str, pa.DataType] = {}
    folded = {f.lower(): f for f in fields}
    for footer in footers:
        if footer is None:
            return None
        for column in footer.schema.to_arrow_schema():
            field = folded.get(column.name.lower())
            if field is None:
                continue
            kind = _kind(column.type)
            if column.name != field or kind is None or types.setdefault(field, column.type) != column.type:
                return None
    return types


def _kind(t: pa.DataType) -> str | None:
    """The kind of `t` whose text Spark SQL writes as `stringify` does, if it has one."""
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_signed_integer(t):
        return str(t)
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_date32(t):
        return "date32"
    if pa.types.is_timestamp(t) and t.tz is not None and t.unit in ("s", "ms", "us"):
        return "timestamp"
    return None  # floats (Java's text), decimals, binary, nested, time zone-less and nanosecond times


_SPARK_TYPES = {"string": "STRING", "int8": "TINYINT", "int16": "SMALLINT", "int32": "INT", "int64": "BIGINT",
                "bool": "BOOLEAN", "date32": "DATE", "timestamp": "TIMESTAMP"}


def _text_sql(column: str, t: pa.DataType) -> str:
    """`stringify`'s text in Spark SQL: dates and timestamps as epoch milliseconds (floored), the rest as CAST."""
    kind = _kind(t)
    if kind == "string":
        return column
    if kind == "date32":
        return f"CAST(CAST(unix_date({column}) AS BIGINT) * {MILLIS_PER_DAY} AS STRING)"
    if kind == "timestamp":
        return f"CAST(unix_millis({column}) AS STRING)"
    return f"CAST({column} AS STRING)"
