"""`stringify`: any Arrow column to the text Spark casts to the spec's types.

Every source (Parquet, ORC, Avro, a SQL row set) hands its typed columns to Spark as strings, so that one cast
rule turns them into the spec's types whatever they came from. The text is what Druid's readers would hand to
a string dimension, where Spark's CAST still reads it back:

- integers: decimal text; booleans: `true` / `false`; strings: themselves
- floats and doubles: as Java's `Double.toString` / `Float.toString` writes them (`210.0`, `1.5`, `1.0E-5`,
  `NaN`, `Infinity`), which Sluice's (non-ANSI) Spark casts to DOUBLE, and to BIGINT when it is below 1e7; a
  whole number from 1e7 up within BIGINT's range is integer text instead (`12345678`, not `1.2345678E7`, which
  no CAST to BIGINT reads)
- decimals: plain text (`BigDecimal.toPlainString`, no exponent), keeping the column's scale
- timestamps (any unit, any time zone) and dates: epoch milliseconds, which is what Druid's Parquet, ORC and
  Avro readers hand the timestampSpec (`auto` and `millis` read it)
- binary: base64, or UTF-8 text with `binaryAsString`
- a struct of one binary field (a sketch column of a segment): the field's base64; a struct of one string field
  `json` (a json dimension of a segment): that JSON text
- structs, maps and lists: compact JSON (`{"a":1}`, `[1,2]`) with the same leaf rules (timestamps as millis)
"""

from __future__ import annotations

import base64
import json
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc

from sluice.segment.columns import is_string_array
from sluice.segment.nested import is_json_column

MILLIS_PER_DAY = 86_400_000
_PER_MILLI = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}


def stringify(array: pa.Array | pa.ChunkedArray, binary_as_string: bool = False) -> pa.Array:
    """`array` as a `pa.string()` array of the same length, nulls kept (see the module's rules)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks else pa.array([], array.type)
    t = array.type
    if pa.types.is_dictionary(t):
        return stringify(array.dictionary_decode(), binary_as_string)
    if isinstance(t, pa.ExtensionType):
        return stringify(array.storage, binary_as_string)
    if pa.types.is_null(t):
        return pa.nulls(len(array), pa.string())
    if pa.types.is_string(t):
        return array
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return array.cast(pa.string())
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return array.cast(pa.string())
    if pa.types.is_floating(t):
        return _java_float_text(array)
    if pa.types.is_decimal(t):
        return _plain_decimal_text(array)
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return epoch_millis(array).cast(pa.string())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) \
            or pa.types.is_binary_view(t):
        return _binary_text(array, binary_as_string)
    if pa.types.is_struct(t) and t.num_fields == 1 and pa.types.is_binary(t.field(0).type):
        # a sketch as segments store one (a struct named after its kind): Base64, as Druid writes a sketch in JSON
        return _binary_text(pc.struct_field(array, [0]), False)
    if is_string_array(t):  # an ARRAY<STRING> as segments store one: its list, as JSON text
        return stringify(pc.struct_field(array, [0]), binary_as_string)
    if is_json_column(t):
        return pc.struct_field(array, [0])  # a json dimension as segments store one: its JSON text
    if pa.types.is_nested(t):
        ready = _json_ready(array, binary_as_string).to_pylist(maps_as_pydicts="lossy")
        return pa.array([None if v is None else json.dumps(v, separators=(",", ":"), ensure_ascii=False,
                                                            allow_nan=True) for v in ready], pa.string())
    # time of day, duration, interval: Arrow's own text (no Druid reader hands these to a timestampSpec)
    return array.cast(pa.string())


def epoch_millis(array: pa.Array) -> pa.Array:
    """Timestamps or dates as int64 milliseconds since 1970-01-01T00:00Z (floored, so before 1970 too)."""
    t = array.type
    if pa.types.is_date32(t):
        return pc.multiply(array.cast(pa.int32()).cast(pa.int64()), MILLIS_PER_DAY)
    if pa.types.is_date64(t):
        return array.cast(pa.int64())
    raw = array.view(pa.int64()) if not array.offset else array.cast(pa.timestamp(t.unit)).view(pa.int64())
    if t.unit == "s":
        return pc.multiply(raw, 1000)
    per_milli = _PER_MILLI[t.unit]
    if per_milli == 1:
        return raw
    quotient = pc.divide(raw, per_milli)  # truncates toward zero
    behind = pc.and_(pc.less(raw, 0), pc.not_equal(pc.multiply(quotient, per_milli), raw))
    return pc.if_else(behind, pc.subtract(quotient, 1), quotient)


def _java_float_text(array: pa.Array) -> pa.Array:
    """Java's Double/Float.toString text (`210.0`, `1.5`, `1.0E-5`, `1.0E20`, `NaN`), except a whole number
    from 1e7 up within BIGINT's range, which is integer text (`12345678`) so that it still casts to BIGINT.
    Arrow already prints the shortest round-trip digits (of a float's own precision); Java writes `d.dddE±n`
    outside [1e-3, 1e7), where Arrow writes `1e-05`."""
    double = array.cast(pa.float64())
    magnitude = pc.abs(double)
    whole = pc.and_(pc.is_finite(double), pc.and_(pc.equal(pc.floor(double), double), pc.less(magnitude, 2.0 ** 63)))
    whole = pc.fill_null(whole, False)
    integers = pc.if_else(whole, double, 0.0).cast(pa.int64()).cast(pa.string())
    plain = pc.and_(pc.greater_equal(magnitude, 1e-3), pc.less(magnitude, 1e7))
    small_whole = pc.fill_null(pc.and_(whole, pc.less(magnitude, 1e7)), False)
    integers = pc.if_else(small_whole, pc.binary_join_element_wise(integers, ".0", ""), integers)
    text = pc.if_else(whole, integers, array.cast(pa.string()))
    # NaN compares false, and a whole zero is below 1e-3: both land in `others` unless whole
    others = pc.fill_null(pc.invert(pc.or_(whole, plain)), False)
    if not pc.any(others).as_py():
        return text
    java = pa.array([_java_scientific(v) for v in text.filter(others).to_pylist()], pa.string())
    return pc.replace_with_mask(text, others, java)


def _java_scientific(text: str) -> str:
    """Arrow's text of a float outside [1e-3, 1e7) (or NaN, ±inf) in Java's `1.2345E7` notation."""
    special = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
    if text.lower() in special:
        return special[text.lower()]
    sign, digits, exponent = Decimal(text).normalize().as_tuple()
    head, tail = str(digits[0]), "".join(map(str, digits[1:])) or "0"
    return f"{'-' if sign else ''}{head}.{tail}E{len(digits) - 1 + exponent}"


def _plain_decimal_text(array: pa.Array) -> pa.Array:
    """Decimals without exponent: Arrow prints a negative scale as `1.0E+3`, which Java's toPlainString
    would write `1000`."""
    if array.type.scale >= 0:
        return array.cast(pa.string())
    return pa.array([None if v is None else format(v, "f") for v in array.to_pylist()], pa.string())


def _binary_text(array: pa.Array, binary_as_string: bool) -> pa.Array:
    values = array.to_pylist()
    if binary_as_string:
        return pa.array([None if v is None else v.decode("utf-8", errors="replace") for v in values], pa.string())
    return pa.array([None if v is None else base64.b64encode(v).decode("ascii") for v in values], pa.string())


def _json_ready(array: pa.Array, binary_as_string: bool) -> pa.Array:
    """The nested array rebuilt so that its Python values are what its JSON text holds: timestamps and dates as
    millis, binary as text, decimals as doubles, map keys as text."""
    t = array.type
    mask = array.is_null() if array.null_count else None
    if pa.types.is_struct(t):
        children = [_json_ready(child, binary_as_string) for child in array.flatten()]
        return pa.StructArray.from_arrays(children, names=[f.name for f in t], mask=mask)
    if pa.types.is_map(t):
        offsets, (keys, items) = _rebased(array, array.keys, array.items)
        return pa.MapArray.from_arrays(offsets, stringify(keys, binary_as_string),
                                       _json_ready(items, binary_as_string), mask=mask)
    if pa.types.is_fixed_size_list(t) or pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        return _json_ready(array.cast(pa.list_(t.value_type)), binary_as_string)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offsets, (values,) = _rebased(array, array.values)
        kind = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        return kind.from_arrays(offsets, _json_ready(values, binary_as_string), mask=mask)
    if pa.types.is_dictionary(t):
        return _json_ready(array.dictionary_decode(), binary_as_string)
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return epoch_millis(array)
    if pa.types.is_decimal(t):
        return array.cast(pa.float64(), safe=False)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) \
            or pa.types.is_binary_view(t):
        return _binary_text(array, binary_as_string)
    if pa.types.is_union(t) or pa.types.is_time(t) or pa.types.is_duration(t) or pa.types.is_interval(t):
        return stringify(array, binary_as_string)
    return array


def _rebased(array: pa.Array, *children: pa.Array) -> tuple[pa.Array, list[pa.Array]]:
    """A (possibly sliced) list or map array's offsets from 0 and the children's range they cover: Arrow
    cannot rebuild a list from sliced offsets with a null mask."""
    offsets = array.offsets
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    return pc.subtract(offsets, start), [child.slice(start, end - start) for child in children]
