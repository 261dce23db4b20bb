"""The Kafka supervisor spec, in Druid's current form and its legacy parser-based form."""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import (
    ConfigDict,
    Field,
    StrictInt,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

from sluice.periods import format_duration, parse_duration
from sluice.spec.context import TaskContext
from sluice.spec.data_schema import DISCOVERS_JSON_ONLY, DataSchema
from sluice.spec.errors import SpecError, from_validation_error
from sluice.spec.input_format import (
    LINE_FORMATS,
    CsvInputFormat,
    FlattenSpec,
    RegexInputFormat,
    TsvInputFormat,
)
from sluice.spec.legacy import from_legacy_parser
from sluice.spec.model import SpecModel
from sluice.spec.tuning import DruidRuntimeTuning, defaults_only

if TYPE_CHECKING:
    from sluice.stream.job_spec import StreamJobSpec

MAX_INT = 2_147_483_647
#: the most reading tasks (taskCount × replicas) one supervisor may run: a bound that keeps a typo from flooding the
#: task queue, far above a Kafka topic's partitions (taskCount beyond them reads nothing more)
MAX_SUPERVISOR_TASKS = 10_000


class PeriodField(SpecModel):
    """Mixin: every timedelta field is written and read as an ISO-8601 period, as Druid does."""

    @field_validator("*", mode="before")
    @classmethod
    def _periods(cls, value: Any, info: Any) -> Any:
        annotation = cls.model_fields[info.field_name].annotation
        if annotation is timedelta or timedelta in get_args(annotation):
            if isinstance(value, str):
                return parse_duration(value)
            if value is not None and not isinstance(value, timedelta):  # 30 is not 30 seconds to Druid either
                raise ValueError(f"expected an ISO-8601 period such as PT30S, got {value!r}")
        return value

    @field_serializer("*", when_used="json")
    def _period_text(self, value: Any) -> Any:
        return format_duration(value) if isinstance(value, timedelta) else value


# ---------------------------------------------------------------------------------------------------------------
# ioConfig.inputFormat: how a Kafka message becomes a record (Druid's data-formats reference)


class JsonInputFormat(SpecModel):
    type: Literal["json"]
    #: read by Spark's get_json_object beside from_json (ingest_plan.compile_plan)
    flatten_spec: FlattenSpec | None = None
    #: Jackson parser features; accepted as Druid does, and read with Spark's JSON parser's defaults
    feature_spec: dict[str, Any] = Field(default_factory=dict)
    #: accepted: Sluice keeps absent and null columns alike (SQL-compatible nulls)
    keep_null_columns: bool = False
    #: accepted: a Kafka message is one JSON record
    assume_newline_delimited: bool = False
    use_json_node_reader: bool = False

    @model_serializer(mode="wrap")
    def _without_unset_parts(self, handler: Any) -> dict[str, Any]:
        """Druid's serialized form of a plain json format: no empty flattenSpec or featureSpec."""
        data = handler(self)
        for key in ("flattenSpec", "flatten_spec"):
            if data.get(key, 0) is None:
                del data[key]
        for key in ("featureSpec", "feature_spec"):
            if data.get(key, None) == {}:
                del data[key]
        return data


class _OneRecordPerMessage(SpecModel):
    """A Kafka message is one record without a header, so csv and tsv need `columns`. Druid's legacy parser refuses
    a header or skipped rows on a stream ("hasHeaderRow or maxSkipHeaderRows is not supported"); today's reader
    would take each message's first line as its header and drop every one-line message. Sluice answers 400 at
    submission, before any task runs."""

    columns: list[str] | None = Field(None, validate_default=True)

    @field_validator("columns")
    @classmethod
    def _required(cls, value: list[str] | None) -> list[str] | None:
        if not value:
            raise ValueError("columns are required: a Kafka message has no header row to name them")
        return value

    @field_validator("find_columns_from_header", "has_header_row", "skip_header_rows", check_fields=False)
    @classmethod
    def _no_header(cls, value: Any, info: ValidationInfo) -> Any:
        if value:
            raise ValueError(f"hasHeaderRow or maxSkipHeaderRows is not supported on a stream: a Kafka message is "
                             f"one record without a header (got {to_camel(info.field_name or '')} = {value})")
        return value


class StreamCsvFormat(_OneRecordPerMessage, CsvInputFormat):
    pass


class StreamTsvFormat(_OneRecordPerMessage, TsvInputFormat):
    pass


class FileOnlyFormat(SpecModel):
    """parquet, orc and avro_ocf read whole files (footers, seeks): never one record per message."""

    model_config = ConfigDict(extra="allow")
    type: Literal["parquet", "orc", "avro_ocf"]

    @field_validator("type")
    @classmethod
    def _not_for_messages(cls, value: str) -> str:
        raise ValueError(f"inputFormat type {value!r} reads whole files, not one record per Kafka message; a "
                         f"message is read as {', '.join(LINE_FORMATS)} (or kafka, around one of them)")


#: the format of a message value or key: one record per message
MessageFormat = Annotated[
    JsonInputFormat | StreamCsvFormat | StreamTsvFormat | RegexInputFormat | FileOnlyFormat,
    Field(discriminator="type"),
]


class KafkaHeaderFormat(SpecModel):
    """Header values decoded as text (Druid's KafkaStringHeaderFormat)."""

    type: Literal["string"]
    #: a Java charset name; Python's codecs know the common ones by the same names
    encoding: str = "UTF-8"

    @field_validator("encoding")
    @classmethod
    def _known(cls, value: str) -> str:
        try:
            codecs.lookup(value)
        except LookupError:
            raise ValueError(f"unknown encoding {value!r}") from None
        return value


class KafkaInputFormat(SpecModel):
    """Druid's `kafka` inputFormat: the value parsed by `valueFormat`, blended with the message's metadata.

    The metadata map is the headers (with `headerFormat` only; a repeated header key keeps its last value), then,
    unless a header already has the name, the timestamp (epoch millis), the topic and the key (`keyFormat`'s
    first column; no keyFormat, no key). The value's fields win over metadata fields of the same name
    (KafkaInputReader.buildBlendedEventMap); Spark's JSON parse cannot tell an absent field from a null one, so a
    null value field falls back to the metadata. A tombstone (null value) is a row of the metadata alone.
    """

    type: Literal["kafka"]
    value_format: MessageFormat
    key_format: MessageFormat | None = None
    header_format: KafkaHeaderFormat | None = None
    header_column_prefix: str = "kafka.header."
    key_column_name: str = "kafka.key"
    timestamp_column_name: str = "kafka.timestamp"
    topic_column_name: str = "kafka.topic"

    @field_validator("key_format")
    @classmethod
    def _plain_key(cls, value: Any) -> Any:
        if isinstance(value, JsonInputFormat) and value.flatten_spec is not None:
            raise ValueError("a keyFormat's flattenSpec is not supported: the key is the first field of the key's "
                             "JSON object")
        return value

    def metadata_fields(self, fields: Sequence[str]) -> list[str]:
        """Those of `fields` that the message's metadata can supply (what the reader must extract)."""
        names = {self.timestamp_column_name, self.topic_column_name}
        names |= {self.key_column_name} if self.key_format is not None else set()
        headers = self.header_format is not None
        return [f for f in fields if f in names or (headers and f.startswith(self.header_column_prefix))]


#: the formats a Kafka message can be read with
STREAM_FORMATS = (*LINE_FORMATS, "kafka")

StreamFormat = Annotated[
    JsonInputFormat | StreamCsvFormat | StreamTsvFormat | RegexInputFormat | KafkaInputFormat | FileOnlyFormat,
    Field(discriminator="type"),
]


def flatten_spec_of(input_format: Any) -> FlattenSpec | None:
    """The flattenSpec that `compile_plan` reads a JSON value with, if the value is JSON."""
    value = input_format.value_format if isinstance(input_format, KafkaInputFormat) else input_format
    return value.flatten_spec if isinstance(value, JsonInputFormat) else None


class IdleConfig(SpecModel):
    """Druid's ioConfig.idleConfig: with `enabled`, a supervisor whose stream got no new data for
    `inactiveAfterMillis` (null: druid.supervisor.idleConfig.inactiveAfterMillis) and that has read everything turns
    IDLE and starts no new tasks until data arrives."""

    enabled: bool = False
    inactive_after_millis: int | None = None

    @field_validator("inactive_after_millis")
    @classmethod
    def _positive(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError("inactiveAfterMillis should be a postive number")  # sic, Druid's message
        return value


class KafkaIOConfig(PeriodField):
    type: Literal["kafka"] = "kafka"
    topic: str = Field(min_length=1)
    input_format: StreamFormat
    consumer_properties: dict[str, str | int | float | bool]
    #: milliseconds: how often a reading task asks for its partitions' latest offsets, and how long it waits when
    #: nothing is new (Druid: how long its consumer's poll waits for records)
    poll_timeout: int = Field(100, ge=1)
    #: JSON integers only (true or "2" are refused), and at most MAX_SUPERVISOR_TASKS tasks with the replicas
    task_count: StrictInt = Field(1, ge=1, le=MAX_SUPERVISOR_TASKS)
    replicas: StrictInt = Field(1, ge=1, le=MAX_SUPERVISOR_TASKS)
    task_duration: timedelta = timedelta(hours=1)
    start_delay: timedelta = timedelta(seconds=5)
    period: timedelta = timedelta(seconds=30)
    use_earliest_offset: bool = False
    completion_timeout: timedelta = timedelta(minutes=30)
    #: rows timestamped before this instant are thrown away (Druid: the task's minimumMessageTime)
    late_message_rejection_start_date_time: datetime | None = None
    #: rows older than the task's creation time minus this period are thrown away
    late_message_rejection_period: timedelta | None = None
    #: rows newer than the task's creation time plus taskDuration plus this period are thrown away
    early_message_rejection_period: timedelta | None = None
    idle_config: IdleConfig | None = None
    # accepted at Druid's defaults; other values are refused, naming the field (docs/spec-fields.md)
    topic_pattern: str | None = None
    auto_scaler_config: dict[str, Any] | None = None
    stop_task_count: int | None = None
    server_priority_to_replicas: dict[str, int] | None = None
    config_overrides: dict[str, Any] | None = None
    emit_time_lag_metrics: bool = False
    lag_aggregator: dict[str, Any] | None = None
    partition_ids: list[int] | None = None
    bounded_stream_config: dict[str, Any] | None = None
    #: what Druid writes back in a supervisor's spec (GET): a spec fetched from Druid is accepted as it is
    stream: str | None = None
    use_earliest_sequence_number: bool | None = None

    @field_validator("stream")
    @classmethod
    def _stream_is_the_topic(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and value != info.data.get("topic"):
            raise ValueError(f"stream is Druid's copy of the topic; it must be {info.data.get('topic')!r}")
        return value

    @field_validator("use_earliest_sequence_number")
    @classmethod
    def _same_start(cls, value: bool | None, info: ValidationInfo) -> bool | None:
        if value is not None and value != info.data.get("use_earliest_offset"):
            raise ValueError("useEarliestSequenceNumber is Druid's copy of useEarliestOffset; they must agree")
        return value

    _defaults = defaults_only({
        **dict.fromkeys(("topic_pattern", "server_priority_to_replicas", "config_overrides", "partition_ids",
                         "bounded_stream_config"), (None, "not supported yet")),
        "emit_time_lag_metrics": (False, "lag is reported in records (offsets), not in time"),
    })

    @field_validator("auto_scaler_config")
    @classmethod
    def _fixed_task_count(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value and value.get("enableTaskAutoScaler"):
            raise ValueError("the task autoscaler is not supported yet: set enableTaskAutoScaler false, and taskCount "
                             "is the number of reading tasks")
        return value

    @field_validator("replicas")
    @classmethod
    def _bounded_tasks(cls, value: int, info: ValidationInfo) -> int:
        tasks = value * info.data.get("task_count", 1)
        if tasks > MAX_SUPERVISOR_TASKS:
            raise ValueError(f"taskCount × replicas is {tasks}; a supervisor runs at most {MAX_SUPERVISOR_TASKS} "
                             "reading tasks")
        return value

    @field_validator("stop_task_count")
    @classmethod
    def _all_at_once(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and value < info.data.get("task_count", 1):
            raise ValueError("stopTaskCount below taskCount is not supported yet: every task group of a supervisor "
                             "rolls over at once")
        return value

    @field_validator("lag_aggregator")
    @classmethod
    def _summed_lag(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value not in (None, {"type": "default"}):
            raise ValueError("only {'type': 'default'} (Druid's default) is supported: lag is summed over partitions")
        return value

    @property
    def poll_timeout_s(self) -> float:
        return self.poll_timeout / 1000

    @property
    def flatten_spec(self) -> FlattenSpec | None:
        """The flattenSpec a JSON message value is read with (the inputFormat's, or its kafka valueFormat's)."""
        return flatten_spec_of(self.input_format)

    @field_validator("late_message_rejection_start_date_time", mode="before")
    @classmethod
    def _epoch_millis(cls, value: Any) -> Any:
        """A number is epoch millis, as Joda-Time reads it (pydantic would guess seconds for small ones)."""
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                return datetime.fromtimestamp(value / 1000, UTC)
            except (OverflowError, OSError, ValueError):
                raise ValueError(f"epoch millis {value} is out of range; use an ISO-8601 date-time") from None
        return value

    @field_validator("late_message_rejection_start_date_time")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        """Druid runs in UTC: a date-time without a zone is UTC, and every instant is kept in UTC."""
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    @field_validator("late_message_rejection_period")
    @classmethod
    def _one_late_bound(cls, value: timedelta | None, info: ValidationInfo) -> timedelta | None:
        # validated after lateMessageRejectionStartDateTime (declared first), so the error names this field
        if value is not None and info.data.get("late_message_rejection_start_date_time") is not None:
            raise ValueError("SeekableStreamSupervisorIOConfig does not support both properties "
                             "lateMessageRejectionStartDateTime and lateMessageRejectionPeriod.")
        return value

    @field_validator("consumer_properties")
    @classmethod
    def _bootstrap_servers(cls, value: dict) -> dict:
        if "bootstrap.servers" not in value:
            raise ValueError("consumerProperties must contain entry for [bootstrap.servers]")
        return value

    @field_validator("task_duration", "period", "completion_timeout")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be a positive period")
        return value


#: Druid's default maxTotalRows of a streaming task
DEFAULT_MAX_TOTAL_ROWS = 20_000_000


class PartitionsSpec(SpecModel):
    type: Literal["dynamic"]
    max_rows_per_segment: int | None = Field(None, ge=1)
    max_total_rows: int | None = Field(None, ge=1)


class KafkaTuningConfig(PeriodField, DruidRuntimeTuning):
    type: Literal["kafka"] = "kafka"
    #: the most events one Spark read job takes in (Druid: rows held in memory before a persist)
    max_rows_in_memory: int = Field(150_000, ge=1)
    #: the most input bytes one Spark read job takes in; 0 = default (no byte cap beyond the row cap), -1 = none
    max_bytes_in_memory: int = Field(0, ge=-1)
    #: a segment of a task's current sequence reaching this many rows makes the task checkpoint (hand off early);
    #: segment files are also split at it
    max_rows_per_segment: int = Field(5_000_000, ge=1)
    #: the rows a task may hold unpublished before it checkpoints (null: Druid's 20M)
    max_total_rows: int | None = Field(None, ge=1)
    partitions_spec: PartitionsSpec | None = None
    intermediate_persist_period: timedelta = timedelta(minutes=10)
    #: how long a task reads into one sequence before it checkpoints; null: no limit (Druid's P2147483647D)
    intermediate_handoff_period: timedelta | None = None
    max_parse_exceptions: int = Field(MAX_INT, ge=0)
    max_saved_parse_exceptions: int = Field(0, ge=0)
    log_parse_exceptions: bool = False
    #: deprecated in Druid; true means fail on the first parse exception
    report_parse_exceptions: bool = False
    #: when stored offsets are gone from the stream, start those partitions over (earliest or latest per
    #: useEarliestOffset) and alert, instead of stopping until an operator resets the supervisor
    reset_offset_automatically: bool = False
    # Druid's supervisor-to-task RPC and handoff waits: Sluice's own are fixed, so these are accepted and unused
    handoff_condition_timeout: int = 900_000
    chat_retries: int = 8
    http_timeout: timedelta = timedelta(seconds=10)
    shutdown_timeout: timedelta = timedelta(seconds=80)
    offset_fetch_period: timedelta = timedelta(seconds=30)
    worker_threads: int | None = None
    release_locks_on_handoff: bool = False
    #: Kinesis only; Kafka ignores it, as Druid does
    repartition_transition_duration: timedelta = timedelta(minutes=2)
    skip_sequence_number_availability_check: bool = False
    streaming_partitions_spec: dict[str, Any] | None = None

    _defaults = defaults_only({
        "skip_sequence_number_availability_check": (False, "a task always checks that its start offsets are still in "
                                                           "Kafka"),
        "streaming_partitions_spec": (None, "not supported yet"),
    })

    def effective_max_parse_exceptions(self) -> int:
        return 0 if self.report_parse_exceptions else self.max_parse_exceptions

    def effective_max_rows_per_segment(self) -> int:
        if self.partitions_spec and self.partitions_spec.max_rows_per_segment:
            return self.partitions_spec.max_rows_per_segment
        return self.max_rows_per_segment

    def effective_max_total_rows(self) -> int:
        if self.partitions_spec and self.partitions_spec.max_total_rows:
            return self.partitions_spec.max_total_rows
        return self.max_total_rows or DEFAULT_MAX_TOTAL_ROWS


class IngestionSpec(SpecModel):
    data_schema: DataSchema
    io_config: KafkaIOConfig
    tuning_config: KafkaTuningConfig = Field(default_factory=KafkaTuningConfig)

    @model_validator(mode="after")
    def _discovers_in_json(self) -> IngestionSpec:
        if self.data_schema.dimensions_spec.discovers and self.io_config.input_format.type != "json":
            raise ValueError(DISCOVERS_JSON_ONLY)
        return self


class KafkaSupervisorSpec(SpecModel):
    type: Literal["kafka"]
    spec: IngestionSpec
    suspended: bool = False
    context: TaskContext | None = None
    supervisor_id: str | None = Field(None, alias="id")

    @field_validator("supervisor_id")
    @classmethod
    def _named_after_its_data_source(cls, value: str | None, info: ValidationInfo) -> str | None:
        spec = info.data.get("spec")
        if value is not None and spec is not None and value != spec.data_schema.data_source:
            raise ValueError(f"a supervisor is named after its data source in Sluice (one per data source): give id "
                             f"{spec.data_schema.data_source!r} or leave it out")
        return value

    @property
    def id(self) -> str:
        """One supervisor per data source, as in classic Druid."""
        return self.spec.data_schema.data_source

    @property
    def data_sources(self) -> list[str]:
        return [self.id]

    def to_json(self) -> dict:
        """Druid's serialized form: the nested spec plus top-level copies of its three parts."""
        spec = {
            "dataSchema": self.spec.data_schema.to_json(),
            "ioConfig": self.spec.io_config.to_json(),
            "tuningConfig": self.spec.tuning_config.to_json(),
        }
        return {"type": self.type, "spec": spec, **spec, "context": self.context.to_json() if self.context else None,
                "suspended": self.suspended}


_LEGACY_KEYS = ("dataSchema", "ioConfig", "tuningConfig")


def parse_supervisor_spec(payload: Any) -> KafkaSupervisorSpec | StreamJobSpec:
    """Validate a submitted supervisor spec (a Kafka supervisor's, or a stream job's); raises SpecError naming the
    offending field path as the user wrote it."""
    if not isinstance(payload, dict):
        raise SpecError("", "a supervisor spec must be a JSON object")
    if payload.get("type") == "stream":
        from sluice.stream.job_spec import parse_stream_job_spec  # it builds on this module's formats

        return parse_stream_job_spec(payload)
    if payload.get("type") not in ("kafka", None):
        raise SpecError("type", f"supervisor type {payload.get('type')!r} is not supported; Sluice runs 'kafka' "
                                "and 'stream'")
    if "spec" in payload:
        # Druid's serialized form repeats the spec's parts at the top level; as in Druid, `spec` wins
        current = {k: v for k, v in payload.items() if k not in _LEGACY_KEYS}
        current["spec"], paths = _from_legacy(current["spec"], "spec.")
    elif "dataSchema" in payload:
        # the older form: the spec's parts beside `type`, without the `spec` wrapper
        spec, paths = _from_legacy({k: payload[k] for k in _LEGACY_KEYS if k in payload}, "")
        current = {"spec": spec, **{k: v for k, v in payload.items() if k not in (*_LEGACY_KEYS, "type")}}
        paths["spec."] = ""
    else:
        current, paths = payload, {}
    document = {"type": "kafka", **current}
    try:
        return KafkaSupervisorSpec.model_validate(document)
    except ValidationError as err:
        error = from_validation_error(err, document)
        path, message = error.path, error.message
        first = err.errors()[0]
        if first["type"] in ("union_tag_invalid", "union_tag_not_found") and path.endswith(_FORMAT_TYPES):
            allowed = STREAM_FORMATS if path.endswith("inputFormat.type") else LINE_FORMATS
            tag = (first.get("ctx") or {}).get("tag")
            message = (f"type {tag!r} is not supported" if tag else "Field required") + \
                f"; a Kafka message is read as one of {', '.join(allowed)}"
        raise SpecError(_legacy_path(path, paths), message) from None


#: the fields that hold an input format (a discriminated union on `type`)
_FORMAT_TYPES = ("inputFormat.type", "valueFormat.type", "keyFormat.type")


def _legacy_path(path: str, paths: dict[str, str]) -> str:
    """`path` in the normalized spec -> where the user wrote it (the first, most specific, match wins)."""
    for prefix, original in paths.items():
        if path == prefix.removesuffix(".") or path.startswith(prefix if prefix.endswith(".") else prefix + "."):
            rest = path[len(prefix):].lstrip(".")
            return f"{original}.{rest}" if original and rest else original or rest
    return path


def _from_legacy(spec: Any, prefix: str) -> tuple[Any, dict[str, str]]:
    """Move a legacy `dataSchema.parser.parseSpec` into today's places (`legacy.py`, shared with batch tasks); and
    where each moved part came from, as paths of the validated document (`spec.…`) -> paths the user wrote."""
    if not isinstance(spec, dict):
        return spec, {}
    data_schema, io_config = spec.get("dataSchema"), spec.get("ioConfig")
    if isinstance(data_schema, dict) and "parser" in data_schema and isinstance(io_config, dict) \
            and "inputFormat" in io_config:
        raise SpecError(f"{prefix}ioConfig.inputFormat",
                        "Cannot use parser and inputFormat together; move the parseSpec's format into inputFormat")
    try:
        converted, moved = from_legacy_parser(spec)
    except SpecError as error:
        raise SpecError(prefix + error.path, error.message) from None
    return converted, {f"spec.{today}": prefix + legacy for today, legacy in moved.items()}
