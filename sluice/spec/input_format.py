"""ioConfig.inputFormat: how the bytes of a file or a Kafka message become a record's fields (Druid's
data-formats reference). Parsing itself is `sluice.connectors.formats`."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import Field, field_validator, model_validator

from sluice.spec.model import SpecModel
from sluice.spec.tuning import defaults_only


class FlattenField(SpecModel):
    """One field of a flattenSpec: `root` (a top-level field), `path` (JSONPath, `$.a.b[0]`), `jq` (`.a.b[0]`,
    the jq subset that is also a path) or `tree` (`nodes`: the keys from the root down)."""

    type: Literal["root", "path", "jq", "tree"]
    name: str = Field(min_length=1)
    expr: str | None = None
    nodes: list[str] | None = None

    @model_validator(mode="after")
    def _has_its_expression(self) -> FlattenField:
        if self.type in ("path", "jq") and not self.expr:
            raise ValueError(f"a {self.type} field needs expr")
        if self.type == "tree" and not self.nodes:
            raise ValueError("a tree field needs nodes")
        if self.type == "jq" and not _JQ_PATH.fullmatch(self.expr or ""):
            raise ValueError(f"jq expression {self.expr!r} is not supported; Sluice reads jq paths such as "
                             ".a.b[0] or .[\"a b\"] (no filters, pipes or functions)")
        if self.type == "path" and not _JSON_PATH.fullmatch(self.expr or ""):
            raise ValueError(f"JSONPath {self.expr!r} is not supported; Sluice reads $.a.b[0] and $['a b'] paths "
                             "(no wildcards, filters or recursive descent)")
        return self

    def path(self) -> list[str | int]:
        """The keys and array indexes from the root to the field."""
        if self.type == "root":
            return [self.name]
        if self.type == "tree":
            return list(self.nodes or [])
        steps = _PATH_STEP.findall((self.expr or "").removeprefix("$"))
        return [int(index) if index else key or quoted for key, quoted, index in steps]


#: one step of a path: .key, ['key'] / ["key"], or [index]
_STEP = r"(?:\.([A-Za-z_][\w-]*)|\[['\"]([^'\"]+)['\"]\]|\[(\d+)\])"
_PATH_STEP = re.compile(_STEP)
_JSON_PATH = re.compile(rf"\$(?:{_STEP})+")
_JQ_PATH = re.compile(rf"(?:{_STEP})+")


class FlattenSpec(SpecModel):
    use_field_discovery: bool = True
    fields: list[FlattenField] = Field(default_factory=list)

    @field_validator("fields")
    @classmethod
    def _unique_names(cls, value: list[FlattenField]) -> list[FlattenField]:
        names = [f.name for f in value]
        if duplicates := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"flattenSpec field names must be unique; repeated: {', '.join(duplicates)}")
        return value


class JsonInputFormat(SpecModel):
    type: Literal["json"]
    flatten_spec: FlattenSpec | None = None
    #: Jackson parser features; accepted as Druid does, and read with Spark's JSON parser's defaults
    feature_spec: dict[str, Any] = Field(default_factory=dict)
    #: accepted: Sluice keeps absent and null columns alike (SQL-compatible nulls)
    keep_null_columns: bool | None = None
    assume_newline_delimited: bool = False
    use_json_node_reader: bool = False


class _DelimitedFormat(SpecModel):
    columns: list[str] | None = None
    #: the separator of a multi-value field's values (Druid's default: Ctrl-A)
    list_delimiter: str | None = None
    find_columns_from_header: bool = False
    #: Druid's deprecated name for findColumnsFromHeader
    has_header_row: bool | None = None
    skip_header_rows: int = Field(0, ge=0)
    try_parse_numbers: bool = False

    @model_validator(mode="after")
    def _columns_or_header(self) -> _DelimitedFormat:
        from_header = self.find_columns_from_header or bool(self.has_header_row)
        if not from_header and not self.columns:
            raise ValueError("columns are required unless findColumnsFromHeader is true")
        if self.columns:
            names = self.columns
            if duplicates := sorted({n for n in names if names.count(n) > 1}):
                raise ValueError(f"columns must be unique; repeated: {', '.join(duplicates)}")
            if any(not n for n in names):
                raise ValueError("a column name cannot be empty")
        return self

    @property
    def header(self) -> bool:
        return self.find_columns_from_header or bool(self.has_header_row)


class CsvInputFormat(_DelimitedFormat):
    type: Literal["csv"]

    @property
    def delimiter_char(self) -> str:
        return ","


class TsvInputFormat(_DelimitedFormat):
    type: Literal["tsv"]
    delimiter: str = Field("\t", min_length=1)

    @property
    def delimiter_char(self) -> str:
        return self.delimiter


class RegexInputFormat(SpecModel):
    type: Literal["regex"]
    pattern: str
    columns: list[str] | None = None
    list_delimiter: str | None = None

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"pattern does not compile: {error}") from None
        return value


class ParquetInputFormat(SpecModel):
    type: Literal["parquet"]
    flatten_spec: FlattenSpec | None = None
    binary_as_string: bool = False


class OrcInputFormat(SpecModel):
    type: Literal["orc"]
    flatten_spec: FlattenSpec | None = None
    binary_as_string: bool = False


class AvroOcfInputFormat(SpecModel):
    type: Literal["avro_ocf"]
    flatten_spec: FlattenSpec | None = None
    #: a reader schema to read the files with, instead of each file's own
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    binary_as_string: bool = False
    extract_unions_by_type: bool = False

    _defaults = defaults_only({"extract_unions_by_type": (False, "a union is read as the value it holds")})


#: the formats a file, a SQL row set or a Kafka message value can be in
RecordFormat = Annotated[
    Union[JsonInputFormat, CsvInputFormat, TsvInputFormat, RegexInputFormat, ParquetInputFormat, OrcInputFormat,
          AvroOcfInputFormat],
    Field(discriminator="type"),
]

#: formats that are read per line (so also per Kafka message)
LINE_FORMATS = ("json", "csv", "tsv", "regex")
