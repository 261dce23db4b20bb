"""A segment file's columns in Druid's types, read from its Parquet schema (what the metadata does not record:
whether a dimension was ingested as a string, a long or a double)."""

from __future__ import annotations

import pyarrow as pa

from sluice.segment.nested import is_json_column


def parquet_column_types(schema: pa.Schema) -> dict[str, str]:
    """A segment file's columns as Druid's dimension types: integers long, 32-bit floats float, other floating
    point double, a json dimension's struct json, an ARRAY column auto, everything else string."""
    types: dict[str, str] = {}
    for field in schema:
        if pa.types.is_integer(field.type):
            types[field.name] = "long"
        elif pa.types.is_float32(field.type):
            types[field.name] = "float"
        elif pa.types.is_floating(field.type):
            types[field.name] = "double"
        elif is_json_column(field.type):
            types[field.name] = "json"
        elif is_array(field.type):  # typed again from its values, as it was
            types[field.name] = "auto"
        else:
            types[field.name] = "string"
    return types


def is_multi_value(arrow_type: pa.DataType) -> bool:
    """Whether a segment column stored as `arrow_type` is a multi-value string: a list of strings."""
    return (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)) and (
        pa.types.is_string(arrow_type.value_type) or pa.types.is_large_string(arrow_type.value_type))


#: the field of the struct an ARRAY<STRING> column is stored in: a bare list of strings is a multi-value string
ARRAY_FIELD = "array"


def is_string_array(arrow_type: pa.DataType) -> bool:
    """Whether a segment column stored as `arrow_type` is an ARRAY<STRING> (Druid's auto type of string arrays)."""
    return (pa.types.is_struct(arrow_type) and arrow_type.num_fields == 1
            and arrow_type.field(0).name == ARRAY_FIELD and is_multi_value(arrow_type.field(0).type))


def is_array(arrow_type: pa.DataType) -> bool:
    """Whether a segment column stored as `arrow_type` is an ARRAY column: of strings, longs or doubles."""
    return is_string_array(arrow_type) or (pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type)) \
        and not is_multi_value(arrow_type)
