"""Druid's native batch task specs: `index_parallel` and `index` (the same spec with its own type names).

`appendToExisting` and `dropExisting` choose the mode (Druid's BatchIngestionMode): append adds segments to
what a time chunk holds; otherwise the task overwrites the chunks it writes (REPLACE_LEGACY), or with
`dropExisting` every chunk of `granularitySpec.intervals`, leaving tombstones where no row falls (REPLACE).
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Literal, Union

from pydantic import Field, ValidationError, field_validator, model_validator

from sluice.spec.context import TaskContext
from sluice.spec.data_schema import DISCOVERS_JSON_ONLY, DataSchema, GranularitySpec
from sluice.spec.errors import SpecError, from_validation_error
from sluice.spec.input_format import RecordFormat
from sluice.spec.input_source import FORMATLESS_SOURCES, InputSource, SplitHintSpec
from sluice.spec.intervals import parse_interval
from sluice.spec.model import SpecModel
from sluice.spec.tuning import DruidRuntimeTuning, defaults_only

MAX_INT = 2_147_483_647
#: Druid's default priority of batch index tasks (realtime 75, compaction 25)
BATCH_PRIORITY = 50


class IngestionMode(str, Enum):
    APPEND = "APPEND"
    REPLACE = "REPLACE"
    REPLACE_LEGACY = "REPLACE_LEGACY"


class BatchGranularitySpec(GranularitySpec):
    """A batch task's granularitySpec: `intervals` bound the rows read (others are thrown away) and, given
    up front, the time chunks locked before reading."""

    @field_validator("intervals")
    @classmethod
    def _no_intervals(cls, value: list[str] | None) -> list[str] | None:
        for text in value or []:
            parse_interval(text)
        return value

    def parsed_intervals(self) -> list[tuple[datetime, datetime]]:
        return [parse_interval(text) for text in self.intervals or []]


class BatchDataSchema(DataSchema):
    granularity_spec: BatchGranularitySpec = Field(default_factory=BatchGranularitySpec)


class DynamicPartitionsSpec(SpecModel):
    """Best-effort rollup: segments cut at maxRowsPerSegment rows."""

    type: Literal["dynamic"]
    max_rows_per_segment: int = Field(5_000_000, ge=1)
    max_total_rows: int | None = Field(20_000_000, ge=1)


class HashedPartitionsSpec(SpecModel):
    """Perfect rollup; each time chunk's rows hashed on partitionDimensions (all dimensions when null) into
    numShards segments, or as many as targetRowsPerSegment makes."""

    type: Literal["hashed"]
    num_shards: int | None = Field(None, ge=1)
    target_rows_per_segment: int | None = Field(None, ge=1)
    max_rows_per_segment: int | None = Field(None, ge=1)
    partition_dimensions: list[str] | None = None
    partition_function: Literal["murmur3_32_abs"] = "murmur3_32_abs"

    @model_validator(mode="after")
    def _one_size(self) -> HashedPartitionsSpec:
        if self.num_shards is not None and (self.target_rows_per_segment or self.max_rows_per_segment):
            raise ValueError("Can't use numShards with targetRowsPerSegment or maxRowsPerSegment")
        return self

    @property
    def target_rows(self) -> int:
        return self.target_rows_per_segment or self.max_rows_per_segment or 5_000_000


class SingleDimPartitionsSpec(SpecModel):
    type: Literal["single_dim"]
    partition_dimension: str | None = None
    target_rows_per_segment: int | None = Field(None, ge=1)
    max_rows_per_segment: int | None = Field(None, ge=1)
    assume_grouped: bool = False

    @model_validator(mode="after")
    def _one_size(self) -> SingleDimPartitionsSpec:
        _exactly_one_size(self.target_rows_per_segment, self.max_rows_per_segment)
        return self

    @property
    def dimensions(self) -> list[str]:
        return [self.partition_dimension] if self.partition_dimension else []

    @property
    def target_rows(self) -> int:
        return self.target_rows_per_segment or self.max_rows_per_segment or 5_000_000


class RangePartitionsSpec(SpecModel):
    type: Literal["range"]
    partition_dimensions: list[str] = Field(min_length=1)
    target_rows_per_segment: int | None = Field(None, ge=1)
    max_rows_per_segment: int | None = Field(None, ge=1)
    assume_grouped: bool = False

    @model_validator(mode="after")
    def _one_size(self) -> RangePartitionsSpec:
        _exactly_one_size(self.target_rows_per_segment, self.max_rows_per_segment)
        return self

    @property
    def dimensions(self) -> list[str]:
        return self.partition_dimensions

    @property
    def target_rows(self) -> int:
        return self.target_rows_per_segment or self.max_rows_per_segment or 5_000_000


def _exactly_one_size(target: int | None, maximum: int | None) -> None:
    if (target is None) == (maximum is None):
        raise ValueError("Exactly one of targetRowsPerSegment or maxRowsPerSegment must be present")


PartitionsSpec = Annotated[
    Union[DynamicPartitionsSpec, HashedPartitionsSpec, SingleDimPartitionsSpec, RangePartitionsSpec],
    Field(discriminator="type"),
]


class BatchIOConfig(SpecModel):
    type: Literal["index_parallel", "index"]
    input_source: InputSource
    input_format: RecordFormat | None = None
    append_to_existing: bool = False
    drop_existing: bool = False

    @model_validator(mode="after")
    def _format_fits_source(self) -> BatchIOConfig:
        kind = self.input_source.type
        if kind in FORMATLESS_SOURCES and self.input_format is not None:
            raise ValueError(f"a {kind} input source reads its own columns; remove inputFormat")
        if kind not in FORMATLESS_SOURCES and kind != "combining" and self.input_format is None:
            raise ValueError(f"inputFormat is required for a {kind} input source")
        if self.append_to_existing and self.drop_existing:
            raise ValueError("Cannot both drop existing segments and append to existing segments. "
                             "Either dropExisting or appendToExisting should be set to false")
        return self

    @property
    def mode(self) -> IngestionMode:
        if self.append_to_existing:
            return IngestionMode.APPEND
        return IngestionMode.REPLACE if self.drop_existing else IngestionMode.REPLACE_LEGACY


class BatchTuningConfig(DruidRuntimeTuning):
    """Druid's ParallelIndexTuningConfig. Fields that steer Druid's own JVM and sub-task RPC are accepted with any
    value: Spark plans those parts of the job itself."""

    type: Literal["index_parallel", "index"] | None = None
    max_rows_in_memory: int = Field(1_000_000, ge=1)
    max_bytes_in_memory: int = Field(0, ge=-1)
    partitions_spec: PartitionsSpec | None = None
    force_guaranteed_rollup: bool = False
    #: the readers of the input (Spark tasks reading splits at once), and the Spark partitions of the merge
    max_num_concurrent_sub_tasks: int = Field(1, ge=1)
    max_retry: int = Field(3, ge=0)
    max_parse_exceptions: int = Field(MAX_INT, ge=-1)
    max_saved_parse_exceptions: int = Field(0, ge=0)
    log_parse_exceptions: bool = False
    report_parse_exceptions: bool = False
    split_hint_spec: SplitHintSpec | None = None
    # accepted, as Spark plans the work they tune in Druid
    push_timeout: int = 0
    max_num_segments_to_merge: int = 100
    total_num_merge_tasks: int = 10
    task_status_check_period_ms: int = 1000
    chat_handler_timeout: str = "PT10S"
    chat_handler_num_retries: int = 5
    await_segment_availability_timeout_millis: int = 0
    max_allowed_lock_count: int = -1
    #: the `index` task's deprecated forms of partitionsSpec
    max_rows_per_segment: int | None = Field(None, ge=1)
    max_total_rows: int | None = Field(None, ge=1)
    num_shards: int | None = Field(None, ge=1)
    partition_dimensions: list[str] | None = None

    _defaults = defaults_only({"max_allowed_lock_count": (-1, "a task takes a lock on every time chunk it writes")})

    @model_validator(mode="before")
    @classmethod
    def _deprecated_names(cls, data: Any) -> Any:
        """Druid's deprecated `maxNumSubTasks` is maxNumConcurrentSubTasks and `targetPartitionSize` is
        maxRowsPerSegment; each with its new name is refused, as Druid refuses it."""
        if not isinstance(data, dict):
            return data
        if "maxNumSubTasks" in data:
            if "maxNumConcurrentSubTasks" in data:
                raise ValueError("Can't use both maxNumSubTasks and maxNumConcurrentSubTasks. "
                                 "Use maxNumConcurrentSubTasks instead")
            data = {("maxNumConcurrentSubTasks" if key == "maxNumSubTasks" else key): value
                    for key, value in data.items()}
        if "targetPartitionSize" in data:
            target = data["targetPartitionSize"]
            if target is not None and data.get("maxRowsPerSegment") is not None:
                raise ValueError("Can't use targetPartitionSize and maxRowsPerSegment together")
            data = {key: value for key, value in data.items() if key != "targetPartitionSize"}
            if target is not None:
                data["maxRowsPerSegment"] = target
        return data

    @model_validator(mode="after")
    def _rollup_fits_partitions(self) -> BatchTuningConfig:
        """Druid's ParallelIndexTuningConfig / IndexTask checks, with its messages."""
        spec = self.effective_partitions_spec
        if self.force_guaranteed_rollup and isinstance(spec, DynamicPartitionsSpec):
            raise ValueError("DynamicPartitionsSpec cannot be used for perfect rollup")
        if not self.force_guaranteed_rollup and not isinstance(spec, DynamicPartitionsSpec):
            raise ValueError("DynamicPartitionsSpec must be used for best-effort rollup")
        return self

    @property
    def effective_partitions_spec(self) -> Any:
        """Druid's IndexTuningConfig.getPartitionsSpec and getGivenOrDefaultPartitionsSpec: perfect rollup without a
        partitionsSpec hashes, on the deprecated fields' sizes."""
        if self.partitions_spec is not None:
            return self.partitions_spec
        if self.force_guaranteed_rollup or self.num_shards is not None or self.partition_dimensions is not None:
            # without perfect rollup, a hashed spec is refused (`_rollup_fits_partitions`) whatever its size
            return HashedPartitionsSpec(type="hashed", num_shards=self.num_shards,
                                        max_rows_per_segment=self.max_rows_per_segment if self.force_guaranteed_rollup
                                        else None, partition_dimensions=self.partition_dimensions)
        return DynamicPartitionsSpec(type="dynamic", max_rows_per_segment=self.max_rows_per_segment or 5_000_000,
                                     max_total_rows=self.max_total_rows or 20_000_000)

    def effective_max_parse_exceptions(self) -> int:
        if self.report_parse_exceptions:
            return 0
        return MAX_INT if self.max_parse_exceptions < 0 else self.max_parse_exceptions


class BatchIngestionSpec(SpecModel):
    data_schema: BatchDataSchema
    io_config: BatchIOConfig
    tuning_config: BatchTuningConfig = Field(default_factory=BatchTuningConfig)

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "dataSchema": self.data_schema.to_json()}

    @model_validator(mode="after")
    def _append_is_best_effort(self) -> BatchIngestionSpec:
        if self.io_config.append_to_existing and self.tuning_config.force_guaranteed_rollup:
            raise ValueError("Perfect rollup cannot be guaranteed when appending to existing dataSources")
        if self.io_config.drop_existing and not self.data_schema.granularity_spec.intervals:
            raise ValueError("dropExisting needs granularitySpec.intervals: the time chunks to replace")
        if self.data_schema.dimensions_spec.discovers and getattr(self.io_config.input_format, "type", None) != "json":
            raise ValueError(DISCOVERS_JSON_ONLY)
        partition_dims = getattr(self.tuning_config.effective_partitions_spec, "dimensions", None) or []
        known = {d.name for d in self.data_schema.dimensions_spec.dimensions}
        if unknown := [d for d in partition_dims if d not in known]:
            raise ValueError(f"partitionsSpec names dimensions that are not in dimensionsSpec: {', '.join(unknown)}")
        return self


class BatchTaskPayload(SpecModel):
    type: Literal["index_parallel", "index"]
    id: str | None = None
    spec: BatchIngestionSpec
    context: TaskContext = Field(default_factory=TaskContext)
    #: Druid writes these in a stored task payload; accepted and recomputed
    group_id: str | None = None
    data_source: str | None = None
    resource: dict[str, Any] | None = None
    created_time: str | None = None


_SPEC_PARTS = ("dataSchema", "ioConfig", "tuningConfig")


def parse_batch_task(payload: dict[str, Any]) -> BatchTaskPayload:
    """Validate an `index_parallel` / `index` task; raises SpecError naming the field path the user wrote.

    Druid's older form puts dataSchema, ioConfig and tuningConfig beside `type` instead of under `spec`, and
    the legacy `dataSchema.parser` form is moved into today's places first (`legacy.py`)."""
    from sluice.spec.legacy import from_legacy_parser

    document, prefix = dict(payload), ""
    if "spec" not in document and any(part in document for part in _SPEC_PARTS):
        document["spec"] = {part: document.pop(part) for part in _SPEC_PARTS if part in document}
        prefix = "spec."
    spec = document.get("spec")
    if isinstance(spec, dict):
        document["spec"], paths = from_legacy_parser(spec)
    else:
        paths = {}
    try:
        return BatchTaskPayload.model_validate(document)
    except ValidationError as err:
        error = from_validation_error(err, document)
        path = error.path
        for moved, original in paths.items():
            if path.startswith("spec." + moved):
                path = "spec." + original + path[len("spec." + moved):]
                break
        if prefix and path.startswith(prefix):
            path = path[len(prefix):]
        raise SpecError(path, error.message) from None
