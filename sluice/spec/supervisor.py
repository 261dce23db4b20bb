"""The Kafka supervisor spec, in Druid's current form and its legacy parser-based form."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args

from pydantic import Field, ValidationError, ValidationInfo, field_serializer, field_validator

from sluice.spec.data_schema import DataSchema
from sluice.spec.errors import SpecError, from_validation_error
from sluice.spec.model import SpecModel
from sluice.spec.periods import format_period, parse_period

MAX_INT = 2_147_483_647


class PeriodField(SpecModel):
    """Mixin: every timedelta field is written and read as an ISO-8601 period, as Druid does."""

    @field_validator("*", mode="before")
    @classmethod
    def _periods(cls, value: Any, info: Any) -> Any:
        annotation = cls.model_fields[info.field_name].annotation
        if isinstance(value, str) and (annotation is timedelta or timedelta in get_args(annotation)):
            return parse_period(value)
        return value

    @field_serializer("*", when_used="json")
    def _period_text(self, value: Any) -> Any:
        return format_period(value) if isinstance(value, timedelta) else value


class JsonInputFormat(SpecModel):
    type: Literal["json"]
    #: accepted: Sluice keeps absent and null columns alike (SQL-compatible nulls)
    keep_null_columns: bool = False


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
    input_format: JsonInputFormat
    consumer_properties: dict[str, str | int | float | bool]
    poll_timeout: int = 100
    task_count: int = Field(1, ge=1)
    replicas: int = Field(1, ge=1)
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


class KafkaTuningConfig(PeriodField):
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


class KafkaSupervisorSpec(SpecModel):
    type: Literal["kafka"]
    spec: IngestionSpec
    suspended: bool = False
    context: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        """One supervisor per data source, as in classic Druid."""
        return self.spec.data_schema.data_source

    def to_json(self) -> dict:
        """Druid's serialized form: the nested spec plus top-level copies of its three parts."""
        spec = {
            "dataSchema": self.spec.data_schema.to_json(),
            "ioConfig": self.spec.io_config.to_json(),
            "tuningConfig": self.spec.tuning_config.to_json(),
        }
        return {"type": self.type, "spec": spec, **spec, "context": self.context, "suspended": self.suspended}


_LEGACY_KEYS = ("dataSchema", "ioConfig", "tuningConfig")


def parse_supervisor_spec(payload: Any) -> KafkaSupervisorSpec:
    """Validate a submitted supervisor spec; raises SpecError naming the offending field path."""
    if not isinstance(payload, dict):
        raise SpecError("", "a supervisor spec must be a JSON object")
    if payload.get("type") not in ("kafka", None):
        raise SpecError("type", f"supervisor type {payload.get('type')!r} is not supported; Sluice runs 'kafka'")
    if "spec" in payload:
        # Druid's serialized form repeats the spec's parts at the top level; as in Druid, `spec` wins
        current, paths = {k: v for k, v in payload.items() if k not in _LEGACY_KEYS}, {}
    elif "dataSchema" in payload:
        has_parser = isinstance(payload["dataSchema"], dict) and "parser" in payload["dataSchema"]
        current, paths = _from_legacy(payload), _LEGACY_PATHS if has_parser else {"spec.": ""}
    else:
        current, paths = payload, {}
    try:
        return KafkaSupervisorSpec.model_validate({"type": "kafka", **current})
    except ValidationError as err:
        error = from_validation_error(err, {"type": "kafka", **current})
        raise SpecError(_legacy_path(error.path, paths), error.message) from None


#: where a field of the normalized spec came from in the legacy form
_LEGACY_PATHS = {
    "spec.dataSchema.timestampSpec": "dataSchema.parser.parseSpec.timestampSpec",
    "spec.dataSchema.dimensionsSpec": "dataSchema.parser.parseSpec.dimensionsSpec",
    "spec.ioConfig.inputFormat": "dataSchema.parser.parseSpec.format",
    "spec.": "",
}


def _legacy_path(path: str, paths: dict[str, str]) -> str:
    for prefix, original in paths.items():
        if path.startswith(prefix):
            return original + path[len(prefix):] if original != "" else path[len(prefix):]
    return path


def _from_legacy(payload: dict) -> dict:
    """Move `dataSchema.parser.parseSpec` into today's places: timestampSpec, dimensionsSpec, inputFormat."""
    data_schema = dict(payload.get("dataSchema") or {})
    parser = data_schema.pop("parser", None)
    io_config = dict(payload.get("ioConfig") or {})
    if parser is not None:
        if not isinstance(parser, dict) or not isinstance(parser.get("parseSpec"), dict):
            raise SpecError("dataSchema.parser.parseSpec", "the legacy parser needs a parseSpec object")
        if parser.get("type", "string") != "string":
            raise SpecError("dataSchema.parser.type", f"parser type {parser.get('type')!r} is not supported; use 'string'")
        parse_spec = dict(parser["parseSpec"])
        fmt = parse_spec.pop("format", "json")
        if fmt != "json":
            raise SpecError("dataSchema.parser.parseSpec.format", f"format {fmt!r} is not supported yet; use 'json'")
        for key in ("timestampSpec", "dimensionsSpec"):
            if key in parse_spec:
                data_schema[key] = parse_spec.pop(key)
        if parse_spec:
            key = sorted(parse_spec)[0]
            raise SpecError(f"dataSchema.parser.parseSpec.{key}", "Sluice does not support this field (yet)")
        io_config.setdefault("inputFormat", {"type": "json"})
    rest = {k: v for k, v in payload.items() if k not in (*_LEGACY_KEYS, "type")}
    spec = {"dataSchema": data_schema, "ioConfig": io_config}
    if "tuningConfig" in payload:
        spec["tuningConfig"] = payload["tuningConfig"]
    return {"spec": spec, **rest}
