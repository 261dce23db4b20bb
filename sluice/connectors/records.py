"""The two shapes of the record batches a reader hands to the ingestion job.

JSON records go to Spark as their raw bytes (`value`) and are parsed in the JVM by `from_json`, as the Kafka
stream's are: one parser, one set of parse rules, for stream and batch. Every other format is parsed by the
reader (pyarrow's CSV and Parquet readers are C++, and a SQL result or a segment already has columns) into
one string column per field the ingestion spec reads; Spark casts them to the spec's types, as it casts
`from_json`'s strings.

Either shape carries `__locator`: where the record came from (`path:line`, `partition=P offset=O`), which is
what a parse exception reports. Column records carry `__error` too: why the reader could not parse the
record, or null. A record with an error is counted unparseable and goes no further.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from sluice.spec.system_fields import FILE_BUCKET, FILE_PATH, FILE_URI

LOCATOR = "__locator"
ERROR = "__error"
VALUE = "value"


#: a file record's URI in its locator (`uri:line`, `uri:row N`): a local file's absolute path, `s3://bucket/key`
#: or an HTTP(S) URI
_URI = f"regexp_extract({LOCATOR}, '^(.*):(row )?[0-9]+$', 1)"
_S3 = f"{_URI} LIKE 's3://%'"


def system_field_sql(name: str) -> str:
    """The Spark SQL of a system field, over a file record's locator, with Druid's values: a local file's
    `__file_uri` is `file:` and its path (Java's File.toURI), an HTTP URI's `__file_path` its path, an S3 object's its
    key and `__file_bucket` its bucket."""
    return {
        FILE_URI: f"CASE WHEN {_URI} LIKE '/%' THEN concat('file:', {_URI}) ELSE {_URI} END",
        FILE_PATH: f"CASE WHEN {_S3} THEN regexp_extract({_URI}, '^s3://[^/]*/(.*)$', 1) "
                   f"WHEN {_URI} RLIKE '^https?://' THEN parse_url({_URI}, 'PATH') ELSE {_URI} END",
        FILE_BUCKET: f"CASE WHEN {_S3} THEN regexp_extract({_URI}, '^s3://([^/]*)/', 1) END",
    }[name]


def json_records_schema() -> pa.Schema:
    return pa.schema([pa.field(LOCATOR, pa.string()), pa.field(VALUE, pa.binary())])


def column_records_schema(fields: Sequence[str]) -> pa.Schema:
    """One nullable string column per field, after the locator and error columns, in the order given."""
    return pa.schema([pa.field(LOCATOR, pa.string()), pa.field(ERROR, pa.string()),
                      *(pa.field(name, pa.string()) for name in fields)])


def is_json_records(schema: pa.Schema) -> bool:
    return schema.names == [LOCATOR, VALUE]
