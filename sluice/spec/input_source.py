"""ioConfig.inputSource of a batch task (Druid's input-sources reference). Reading is
`sluice.connectors.sources`; these are the validated specs."""

from __future__ import annotations

import os
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from sluice.spec.filters import DimFilter
from sluice.spec.intervals import parse_interval
from sluice.spec.model import SpecModel
from sluice.spec.system_fields import FILE_BUCKET, FILE_PATH, FILE_URI


class DefaultPassword(SpecModel):
    type: Literal["default"] = "default"
    password: str


class EnvironmentPassword(SpecModel):
    type: Literal["environment"]
    variable: str = Field(min_length=1)


#: Druid's PasswordProvider: a plain string, `{"type":"default","password":..}` or `{"type":"environment",..}`
Password = Union[str, Annotated[Union[DefaultPassword, EnvironmentPassword], Field(discriminator="type")]]


def reveal(password: Password | None) -> str | None:
    """The password itself; an environment variable is read where it is needed (the driver or an executor)."""
    if password is None or isinstance(password, str):
        return password
    if isinstance(password, DefaultPassword):
        return password.password
    value = os.environ.get(password.variable)
    if value is None:
        raise ValueError(f"environment variable [{password.variable}] of a password provider is not set")
    return value


def _system_fields(*supported: str) -> AfterValidator:
    """Druid's systemFields: the names of the file a row came from that become columns of the row, of those the input
    source has (its `configuredSystemFields`)."""

    def check(value: list[str]) -> list[str]:
        for name in value:
            if name not in supported:
                raise ValueError(f"[{name}] is not a system field of this input source, which has "
                                 f"{', '.join(supported)}")
        return value

    return AfterValidator(check)


#: a local file's and an HTTP URI's system fields
FileSystemFields = Annotated[list[str], _system_fields(FILE_URI, FILE_PATH)]


class LocalInputSource(SpecModel):
    type: Literal["local"]
    base_dir: str | None = None
    #: a wildcard over file names (`*`, `?`), Druid's WildcardFileFilter; required with baseDir
    filter: str | None = None
    files: list[str] = Field(default_factory=list)
    system_fields: FileSystemFields = Field(default_factory=list)

    @model_validator(mode="after")
    def _something_to_read(self) -> LocalInputSource:
        if not self.base_dir and not self.files:
            raise ValueError("at least one of baseDir or files is required")
        if self.base_dir and not self.filter:
            raise ValueError("filter is required with baseDir (use \"*\" for every file)")
        return self


class HttpInputSource(SpecModel):
    type: Literal["http"]
    uris: list[str] = Field(min_length=1)
    http_authentication_username: str | None = None
    http_authentication_password: Password | None = None
    request_headers: dict[str, str] = Field(default_factory=dict)
    system_fields: FileSystemFields = Field(default_factory=list)

    @field_validator("uris")
    @classmethod
    def _http_only(cls, value: list[str]) -> list[str]:
        """Druid's druid.ingestion.http.allowedProtocols default: http and https."""
        for uri in value:
            if not uri.lower().startswith(("http://", "https://")):
                raise ValueError(f"only http and https URIs are allowed, got {uri!r}")
        return value


class InlineInputSource(SpecModel):
    type: Literal["inline"]
    data: str


class S3Object(SpecModel):
    bucket: str = Field(min_length=1)
    path: str = Field(min_length=1)


class S3EndpointConfig(SpecModel):
    url: str | None = None
    signing_region: str | None = None


class S3ClientConfig(SpecModel):
    protocol: Literal["http", "https"] = "https"
    disable_chunked_encoding: bool = False
    enable_path_style_access: bool = False
    force_global_bucket_access_enabled: bool = False


class S3Properties(SpecModel):
    access_key_id: Password | None = None
    secret_access_key: Password | None = None
    assume_role_arn: str | None = None
    assume_role_external_id: str | None = None

    @model_validator(mode="after")
    def _both_keys(self) -> S3Properties:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("accessKeyId and secretAccessKey must be given together")
        if self.assume_role_arn:
            raise ValueError("assumeRoleArn is not supported; give accessKeyId and secretAccessKey")
        return self


class S3InputSource(SpecModel):
    type: Literal["s3"]
    uris: list[str] | None = None
    prefixes: list[str] | None = None
    objects: list[S3Object] | None = None
    #: a glob over object keys (`**.json`), applied to what uris, prefixes or objects name
    object_glob: str | None = None
    endpoint_config: S3EndpointConfig | None = None
    client_config: S3ClientConfig | None = None
    properties: S3Properties | None = None
    #: Druid's proxyConfig (host, port, username, password): not yet, the S3 client connects directly
    proxy_config: dict[str, Any] | None = None
    system_fields: Annotated[list[str], _system_fields(FILE_URI, FILE_BUCKET, FILE_PATH)] = Field(default_factory=list)

    @field_validator("proxy_config")
    @classmethod
    def _no_proxy(cls, value: dict[str, Any] | None) -> None:
        if value is not None:
            raise ValueError("an S3 proxy is not supported yet: the S3 client connects to the endpoint directly")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> S3InputSource:
        given = [name for name in ("uris", "prefixes", "objects") if getattr(self, name)]
        if len(given) != 1:
            raise ValueError("exactly one of uris, prefixes or objects must be set"
                             + (f"; found {', '.join(given)}" if given else ""))
        for uri in [*(self.uris or []), *(self.prefixes or [])]:
            if not uri.startswith("s3://"):
                raise ValueError(f"an S3 URI starts with s3://, got {uri!r}")
        return self


class SqlConnectorConfig(SpecModel):
    #: a JDBC URI (jdbc:postgresql://host:5432/db, jdbc:sqlite:/path/db) or an SQLAlchemy URL
    connect_uri: str = Field(min_length=1, alias="connectURI")
    user: str | None = None
    password: Password | None = None
    create_tables: bool = False


class SqlDatabase(SpecModel):
    type: Literal["postgresql", "sqlite", "mysql"]
    connector_config: SqlConnectorConfig


class SqlInputSource(SpecModel):
    """Each query of `sqls` is a split. Sluice's addition, from BitSail's divide-split constructor: with
    `splitColumn` (numeric or time) and `numSplits`, each query is cut into that many ranges of the column."""

    type: Literal["sql"]
    database: SqlDatabase
    sqls: list[str] = Field(min_length=1)
    fold_case: bool = False
    split_column: str | None = None
    num_splits: int | None = Field(None, ge=1, le=10_000)

    @model_validator(mode="after")
    def _splits_need_a_column(self) -> SqlInputSource:
        if self.num_splits is not None and self.num_splits > 1 and not self.split_column:
            raise ValueError("numSplits needs splitColumn, the numeric or time column to cut each query's rows by")
        return self


class DruidInputSource(SpecModel):
    """Re-index rows of a data source (Druid's `druid` input source)."""

    type: Literal["druid"]
    data_source: str = Field(min_length=1)
    interval: str
    filter: DimFilter | None = None
    dimensions: list[str] | None = None
    metrics: list[str] | None = None

    @field_validator("interval")
    @classmethod
    def _an_interval(cls, value: str) -> str:
        parse_interval(value)  # refused on submit, as Druid's Intervals.of refuses it
        return value


class KafkaInputSource(SpecModel):
    """Sluice's bounded Kafka source: offsets [start, end) per partition; by default from the earliest offset
    to the latest one when the task starts."""

    type: Literal["kafka"]
    topic: str = Field(min_length=1)
    consumer_properties: dict[str, str | int | float | bool]
    start_offsets: dict[int, int] | None = None
    end_offsets: dict[int, int] | None = None

    @field_validator("consumer_properties")
    @classmethod
    def _bootstrap_servers(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "bootstrap.servers" not in value:
            raise ValueError("consumerProperties must contain entry for [bootstrap.servers]")
        return value


class CombiningInputSource(SpecModel):
    type: Literal["combining"]
    delegates: list[InputSource] = Field(min_length=1)


InputSource = Annotated[
    Union[LocalInputSource, HttpInputSource, InlineInputSource, S3InputSource, SqlInputSource, DruidInputSource,
          KafkaInputSource, CombiningInputSource],
    Field(discriminator="type"),
]


def system_fields_of(source: InputSource) -> tuple[str, ...]:
    """The system fields a source's rows carry; a combining source's, those of its delegates together."""
    if isinstance(source, CombiningInputSource):
        return tuple(sorted(set().union(*(system_fields_of(d) for d in source.delegates))))
    return tuple(getattr(source, "system_fields", ()))
CombiningInputSource.model_rebuild()

#: input sources that read rows with columns of their own, and take no inputFormat
FORMATLESS_SOURCES = ("sql", "druid")


#: a size in bytes, written as a number or as Druid's HumanReadableBytes text (`1GiB`, `500MB`)
Bytes = Annotated[int, BeforeValidator(lambda value: parse_bytes(value) if isinstance(value, str) else value),
                  Field(ge=1)]


class MaxSizeSplitHint(SpecModel):
    """Druid's default split hint: files are grouped into splits of at most this many bytes or files (a file
    is never cut)."""

    type: Literal["maxSize"] = "maxSize"
    max_split_size: Bytes = 1 << 30
    max_num_files: int = Field(1000, ge=1)


class SegmentsSplitHint(SpecModel):
    type: Literal["segments"]
    max_input_segment_bytes_per_task: Bytes = 1 << 30
    max_num_segments: int = Field(1000, ge=1)


SplitHintSpec = Annotated[Union[MaxSizeSplitHint, SegmentsSplitHint], Field(discriminator="type")]

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "m": 1000**2, "mb": 1000**2, "mib": 1 << 20,
          "g": 1000**3, "gb": 1000**3, "gib": 1 << 30, "t": 1000**4, "tb": 1000**4, "tib": 1 << 40}


def parse_bytes(text: str) -> int:
    """Druid's HumanReadableBytes: `1GiB`, `500MB`, `100k`, `1024`."""
    number = text.strip().rstrip("BbIiKkMmGgTt ")
    unit = text.strip()[len(number):].strip().lower()
    if unit not in _UNITS or not number.isdigit():
        raise ValueError(f"{text!r} is not a size; write bytes as 1024, 500MB or 1GiB")
    return int(number) * _UNITS[unit]
