"""avro_ocf: Avro object container files, read with fastavro (with the format's `schema` as the reader schema
when it has one), turned into Arrow columns typed after the Avro schema, and flattened as Parquet is.

Avro's types become Arrow's: records structs, arrays lists, maps maps, enums strings, fixed binary, logical
timestamps and dates Arrow's (so `stringify` gives their epoch millis). A union of null and one type is that
type; a union of several types is text, each value written as `stringify` would write its own type."""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal
from itertools import islice
from typing import Any, BinaryIO

import fastavro
import pyarrow as pa

from sluice.connectors.formats.base import BATCH_ROWS, FormatError, numbered_locators
from sluice.connectors.formats.nested import field_paths, flattened_batch, root_columns
from sluice.connectors.formats.values import stringify
from sluice.connectors.records import column_records_schema
from sluice.spec.input_format import AvroOcfInputFormat

#: turns a fastavro value into what pyarrow builds the column's type from; None: the value as it is
Prepare = Callable[[Any], Any] | None

_PRIMITIVES = {"null": pa.null(), "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
               "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(), "string": pa.string()}
_LOGICAL = {"timestamp-millis": pa.timestamp("ms", "UTC"), "timestamp-micros": pa.timestamp("us", "UTC"),
            "local-timestamp-millis": pa.timestamp("ms"), "local-timestamp-micros": pa.timestamp("us"),
            "date": pa.date32(), "time-millis": pa.time32("ms"), "time-micros": pa.time64("us"),
            "uuid": pa.string()}


class AvroOcfParser:
    needs_seekable = True

    def __init__(self, fmt: AvroOcfInputFormat, fields: Sequence[str]) -> None:
        self.schema = column_records_schema(fields)
        self._fmt = fmt
        self._paths = field_paths(fmt.flatten_spec, fields)

    def parse_stream(self, stream: BinaryIO, name: str) -> Iterator[pa.RecordBatch]:
        try:
            reader = fastavro.reader(stream, reader_schema=self._fmt.schema_)
            schema = reader.reader_schema or reader.writer_schema
            if not isinstance(schema, dict) or schema.get("type") != "record":
                raise ValueError("the file's schema is not a record")
            named: dict[str, Any] = {}
            columns = {f["name"]: _arrow_type(f["type"], named) for f in schema["fields"]}
            wanted = root_columns(self._paths, list(columns))
            row = 1
            while records := list(islice(reader, BATCH_ROWS)):
                arrays = [pa.array([_prepared(r.get(c), columns[c][1]) for r in records], columns[c][0])
                          for c in wanted]
                batch = pa.RecordBatch.from_arrays(arrays, names=wanted) if wanted else \
                    pa.RecordBatch.from_pydict({}, schema=pa.schema([]))
                locators = numbered_locators(f"{name}:row ", row, len(records))
                row += len(records)
                yield flattened_batch(self.schema, batch, self._paths, locators, self._fmt.binary_as_string)
        except (ValueError, EOFError, OSError, pa.ArrowException, fastavro.read.SchemaResolutionError) \
                as error:
            raise FormatError(f"{name}: cannot read it as an Avro container file: {error}") from error

    def parse_values(self, values: Sequence[bytes | None], locators: Sequence[str]) -> pa.RecordBatch:
        raise ValueError("avro_ocf is a file format: a Kafka message cannot be an Avro container file")


def _prepared(value: Any, prepare: Prepare) -> Any:
    return value if prepare is None or value is None else prepare(value)


def _arrow_type(schema: Any, named: dict[str, Any]) -> tuple[pa.DataType, Prepare]:
    """The Arrow type of an Avro schema, and how its fastavro values are prepared for it."""
    if isinstance(schema, str):
        return (_PRIMITIVES[schema], None) if schema in _PRIMITIVES else named[schema]
    if isinstance(schema, list):
        members = [s for s in schema if s != "null"]
        if len(members) == 1:
            return _arrow_type(members[0], named)
        for member in members:  # named types defined inside the union
            _arrow_type(member, named)
        return pa.string(), _union_text
    logical = schema.get("logicalType")
    if logical == "decimal":
        precision, scale = schema["precision"], schema.get("scale", 0)
        return (pa.decimal128 if precision <= 38 else pa.decimal256)(precision, scale), None
    if logical in _LOGICAL:
        return _LOGICAL[logical], None
    kind = schema["type"]
    if kind in ("record", "error"):
        named[schema["name"]] = result = _record_type(schema, named)
    elif kind == "enum":
        named[schema["name"]] = result = (pa.string(), None)
    elif kind == "fixed":
        named[schema["name"]] = result = (pa.binary(), None)
    elif kind == "array":
        item, prepare = _arrow_type(schema["items"], named)
        result = pa.list_(item), None if prepare is None else (lambda v: [_prepared(x, prepare) for x in v])
    elif kind == "map":
        item, prepare = _arrow_type(schema["values"], named)
        result = pa.map_(pa.string(), item), None if prepare is None else (
            lambda v: {k: _prepared(x, prepare) for k, x in v.items()})
    else:
        result = _arrow_type(kind, named)
    return result


def _record_type(schema: dict[str, Any], named: dict[str, Any]) -> tuple[pa.DataType, Prepare]:
    fields = {f["name"]: _arrow_type(f["type"], named) for f in schema["fields"]}
    struct = pa.struct([pa.field(name, t) for name, (t, _) in fields.items()])
    preparing = {name: prepare for name, (_, prepare) in fields.items() if prepare is not None}
    if not preparing:
        return struct, None
    return struct, lambda v: {k: _prepared(x, preparing.get(k)) for k, x in v.items()}


def _union_text(value: Any) -> str:
    """A value of a union of several types as text, as stringify writes a column of its type."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, float):
        return stringify(pa.array([value], pa.float64()))[0].as_py()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (dt.datetime, dt.date, Decimal)):
        return stringify(pa.array([value]))[0].as_py()
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
