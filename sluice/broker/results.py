"""Druid SQL's result formats, byte for byte as Druid's writers produce them.

- `object` / `array`: one JSON array of row objects / row arrays, then a newline (`application/json`).
- `objectLines` / `arrayLines`: one JSON value per line, then an empty line so that a reader can tell the response
  was not cut off (`text/plain`).
- `csv`: opencsv's quoting (only fields with `"`, `,` or a line break are quoted, quotes doubled), an empty line at
  the end, and a row of one empty field written as `""` so that it is not mistaken for that end (`text/csv`).

Numbers are written as Java writes them (`1.0E7`, not `10000000.0`), timestamps as ISO `2015-09-12T00:47:53.259Z`
(with the offset of the query's sqlTimeZone, `2015-09-11T17:47:53.259-07:00`, when the result carries one).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from sluice.broker.engine import QueryResult
from sluice.broker.errors import SqlError

RESULT_FORMATS = ("object", "array", "objectLines", "arrayLines", "csv")


# A header: the rows Druid writes before the data, each a name ("name", "type", "sqlType") and one value per column.
_Header = list[tuple[str, list[str]]]
_Writer = Callable[[list[str], _Header, list[list[Any]]], str]


def render(
    result: QueryResult, result_format: str, header: bool, types_header: bool, sql_types_header: bool,
    *, stringify_arrays: bool = False,
) -> tuple[bytes, str]:
    """The response body and its media type. Type header rows are only written along with the `header` row.

    `stringify_arrays` is Druid's sqlStringifyArrays (true by default over HTTP): arrays are written as JSON text.
    """
    if result_format not in _WRITERS:
        raise SqlError(f"Unknown resultFormat '{result_format}', expected one of {', '.join(RESULT_FORMATS)}")
    write, media_type = _WRITERS[result_format]
    head: _Header = []
    if header:
        head = [("name", result.columns)]
        head += [("type", result.druid_types)] * types_header + [("sqlType", result.sql_types)] * sql_types_header
    rows = [[_plain(value, kind) for value, kind in zip(row, result.druid_types)] for row in result.rows]
    strings = [kind == "STRING" for kind in result.druid_types]
    if any(strings):  # a multi-value string's values: always JSON text, as Druid's SqlResults.coerce writes them
        rows = [[_json(value) if string and isinstance(value, list) else value for value, string in zip(row, strings)]
                for row in rows]
    if stringify_arrays:  # only ARRAY columns: a COMPLEX<json> array stays a nested value
        arrays = [kind.startswith("ARRAY<") for kind in result.druid_types]
        rows = [[_json(value) if array and value is not None else value for value, array in zip(row, arrays)]
                for row in rows]
    return write(result.columns, head, rows).encode(), media_type


def _plain(value: Any, druid_type: str) -> Any:
    """A value as Druid hands it to its writers: timestamps as ISO text, floats in Java's notation (`_JavaNumber`)."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=None).isoformat(timespec="milliseconds") + _offset(value)
    if isinstance(value, date):
        return value.isoformat() + "T00:00:00.000Z"
    if isinstance(value, float):
        if druid_type != "FLOAT" and (value == 0 or 1e-3 <= abs(value) < 1e7):
            return value  # Python's repr writes these doubles exactly as Java does
        return _JavaNumber(value, single=druid_type == "FLOAT")
    if isinstance(value, list):
        return [_plain(v, druid_type) for v in value]
    if isinstance(value, dict):  # COMPLEX<json>
        return {k: _plain(v, druid_type) for k, v in value.items()}
    return value


def _offset(value: datetime) -> str:
    """Joda's ISO offset: `Z` for UTC (and naive UTC values), else `+hh:mm` / `-hh:mm`."""
    offset = value.utcoffset()
    if not offset:
        return "Z"
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


class _JavaNumber:
    """A float spelled as Java's Double.toString (or Float.toString for FLOAT columns)."""

    def __init__(self, value: float, single: bool) -> None:
        self.value = value
        self.text = _java_float_text(value, single)

    def json(self) -> str:
        # Jackson writes non-finite numbers as strings by default.
        return self.text if math.isfinite(self.value) else json.dumps(self.text)


def _java_float_text(value: float, single: bool) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    sign, digits, exponent = Decimal(_shortest_float32(value) if single else repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) + exponent  # position of the decimal point relative to the first digit
    magnitude = abs(value)
    if magnitude == 0 or 1e-3 <= magnitude < 1e7:
        if point <= 0:
            body = "0." + "0" * -point + text
        else:
            whole = text[:point].ljust(point, "0")
            body = f"{whole}.{text[point:] or '0'}"
    else:
        body = f"{text[0]}.{text[1:] or '0'}E{point - 1}"
    return ("-" if sign else "") + body


def _shortest_float32(value: float) -> str:
    """The shortest decimal text that reads back as the same 32-bit float."""
    target = struct.unpack("f", struct.pack("f", value))[0]
    for precision in range(1, 10):
        text = f"{value:.{precision}g}"
        if struct.unpack("f", struct.pack("f", float(text)))[0] == target:
            return text
    return repr(value)


# ----------------------------------------------------------------------------------------------------------- JSON


def _json(value: Any) -> str:
    """Jackson's compact JSON: no spaces, non-ASCII text as is."""
    if isinstance(value, _JavaNumber):
        return value.json()
    if isinstance(value, list | dict) and any(isinstance(v, _JavaNumber | list | dict) for v in _values(value)):
        if isinstance(value, list):
            return "[" + ",".join(map(_json, value)) + "]"
        return "{" + ",".join(f"{_json(str(k))}:{_json(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))  # the common case, in one call


def _values(container: list | dict) -> Any:
    return container.values() if isinstance(container, dict) else container


def _json_values(columns: list[str], head: _Header, rows: list[list[Any]], objects: bool) -> list[str]:
    if not objects:
        return [_json(values) for _, values in head] + [_json(row) for row in rows]
    values = [dict(zip(columns, row)) for row in rows]
    return [_json(value) for value in ([_header_object(columns, head)] if head else []) + values]


def _header_object(columns: list[str], head: _Header) -> dict[str, Any]:
    """Druid's header object: `{"col": null}`, or `{"col": {"type": …, "sqlType": …}}` with type rows."""
    types = head[1:]
    return {column: {key: values[i] for key, values in types} or None for i, column in enumerate(columns)}


def _json_array(objects: bool) -> _Writer:
    return lambda columns, head, rows: "[" + ",".join(_json_values(columns, head, rows, objects)) + "]\n"


def _json_lines(objects: bool) -> _Writer:
    return lambda columns, head, rows: "\n".join(_json_values(columns, head, rows, objects)) + "\n\n"


# ------------------------------------------------------------------------------------------------------------ CSV


def _csv(columns: list[str], head: _Header, rows: list[list[Any]]) -> str:
    lines = [",".join(map(_csv_field, values)) for _, values in head]
    for row in rows:
        fields = [_csv_text(value) for value in row]
        lines.append('""' if fields == [""] else ",".join(map(_csv_field, fields)))
    return "".join(line + "\n" for line in lines) + "\n"


def _csv_text(value: Any) -> str:
    """Java's toString of the value; null and the empty string are both empty in CSV."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, _JavaNumber):
        return value.text
    if isinstance(value, list | dict):
        return _json(value)
    return str(value)


def _csv_field(text: str) -> str:
    if any(c in text for c in '",\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


_WRITERS: dict[str, tuple[_Writer, str]] = {
    "object": (_json_array(objects=True), "application/json"),
    "array": (_json_array(objects=False), "application/json"),
    "objectLines": (_json_lines(objects=True), "text/plain"),
    "arrayLines": (_json_lines(objects=False), "text/plain"),
    "csv": (_csv, "text/csv"),
}
