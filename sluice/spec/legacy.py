"""Druid's legacy parser form, `dataSchema.parser.parseSpec`, moved into today's places: timestampSpec and
dimensionsSpec into dataSchema, the format (with columns, delimiter, flattenSpec…) into ioConfig.inputFormat
(Druid's migrate-from-firehose guide). Supervisors and batch tasks accept it alike."""

from __future__ import annotations

from typing import Any

from sluice.spec.errors import SpecError

PARSE_SPEC = "dataSchema.parser.parseSpec"
#: parseSpec keys that become inputFormat keys, per format (`hasHeaderRow` is read by the delimited formats)
_FORMAT_KEYS = {
    "json": ("flattenSpec", "featureSpec", "keepNullColumns"),
    "csv": ("columns", "listDelimiter", "hasHeaderRow", "skipHeaderRows", "findColumnsFromHeader"),
    "tsv": ("columns", "delimiter", "listDelimiter", "hasHeaderRow", "skipHeaderRows", "findColumnsFromHeader"),
    "regex": ("pattern", "columns", "listDelimiter"),
}


def from_legacy_parser(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """`spec` (dataSchema, ioConfig, tuningConfig) in today's form, and where each moved part came from
    (today's path -> the legacy path) so that errors name what the user wrote."""
    data_schema = spec.get("dataSchema")
    if not isinstance(data_schema, dict) or "parser" not in data_schema:
        return spec, {}
    data_schema = dict(data_schema)
    parser = data_schema.pop("parser")
    if not isinstance(parser, dict) or not isinstance(parser.get("parseSpec"), dict):
        raise SpecError("dataSchema.parser.parseSpec", "the legacy parser needs a parseSpec object")
    if parser.get("type", "string") != "string":
        raise SpecError("dataSchema.parser.type", f"parser type {parser.get('type')!r} is not supported; use 'string'")
    parse_spec = dict(parser["parseSpec"])
    fmt = parse_spec.pop("format", "tsv")  # Druid's default parseSpec format
    if fmt not in _FORMAT_KEYS:
        raise SpecError(f"{PARSE_SPEC}.format", f"format {fmt!r} is not supported; use one of {', '.join(_FORMAT_KEYS)}")
    for key in ("timestampSpec", "dimensionsSpec"):
        if key in parse_spec:
            data_schema[key] = parse_spec.pop(key)
    input_format = {"type": fmt}
    for key in _FORMAT_KEYS[fmt]:
        if key in parse_spec:
            input_format[key] = parse_spec.pop(key)
    if parse_spec:
        key = sorted(parse_spec)[0]
        raise SpecError(f"{PARSE_SPEC}.{key}", f"not a field of a {fmt} parseSpec that Sluice reads")
    io_config = dict(spec.get("ioConfig") or {})
    io_config.setdefault("inputFormat", input_format)
    moved = {"dataSchema.timestampSpec": f"{PARSE_SPEC}.timestampSpec",
             "dataSchema.dimensionsSpec": f"{PARSE_SPEC}.dimensionsSpec",
             "ioConfig.inputFormat.type": f"{PARSE_SPEC}.format",
             "ioConfig.inputFormat": PARSE_SPEC}
    return {**spec, "dataSchema": data_schema, "ioConfig": io_config}, moved
