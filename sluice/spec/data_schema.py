"""dataSchema: what a row looks like (timestamp, dimensions, metrics), how it is bucketed and rolled up."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Union

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sluice.ids import DataSourceName
from sluice.spec.expressions import CompiledExpression, Lookups, compile_expression
from sluice.spec.filters import DimFilter
from sluice.spec.granularity import Granularity, parse_granularity
from sluice.spec.model import SpecModel, power_of_two
from sluice.spec.tuning import defaults_only

TIMESTAMP_FORMATS = ("auto", "iso", "posix", "millis", "micro", "nano")


class TimestampSpec(SpecModel):
    column: str = "timestamp"
    #: auto, iso, posix, millis, micro, nano, or a Joda-Time pattern such as "yyyy-MM-dd HH:mm:ss"
    format: str = "auto"
    missing_value: datetime | None = None

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value.lower() in TIMESTAMP_FORMATS:
            return value.lower()
        letters = _pattern_letters(value)
        if not letters or not letters <= _JODA_LETTERS:
            raise ValueError(f"unknown timestamp format {value!r}; expected {', '.join(TIMESTAMP_FORMATS)} or a Joda pattern")
        if unparsed := sorted(letters & _NOT_PARSED_BY_SPARK):
            raise ValueError(f"Joda pattern letters {', '.join(unparsed)} are not supported yet: Spark's parser "
                             "reads no century, week-based field or day-of-week name")
        return value


#: the pattern letters of Joda-Time's DateTimeFormat; text in single quotes is literal
_JODA_LETTERS = set("GCYxwweEyDMdaKhHkmsSzZ")
#: Joda letters Spark cannot parse: it rejects these fields (or fails the job), and its `x` is a zone offset
#: where Joda's is the weekyear, so every row would be unparseable; a 400 now beats tasks that fail later
_NOT_PARSED_BY_SPARK = set("CxweE")


def _pattern_letters(value: str) -> set[str]:
    unquoted = "".join(part for i, part in enumerate(value.split("'")) if i % 2 == 0)
    return {c for c in unquoted if c.isalpha()}


#: what a spec that discovers its dimensions from records of another format is told
DISCOVERS_JSON_ONLY = ("dataSchema.dimensionsSpec: dimensions are discovered in JSON records only (inputFormat json); "
                       "list the dimensions for this input")

DimensionType = Literal["string", "long", "float", "double", "json", "auto"]
MultiValueHandling = Literal["SORTED_ARRAY", "SORTED_SET", "ARRAY"]


class DimensionSpec(SpecModel):
    name: str = Field(min_length=1)
    type: DimensionType = "string"
    #: accepted because it only concerns Druid's bitmap indexes, which Parquet segments do not have
    create_bitmap_index: bool = True
    #: how a string dimension keeps a row's several values: sorted (SORTED_ARRAY), sorted without repeats
    #: (SORTED_SET), or as they came (ARRAY); any case, as Druid's `MultiValueHandling.fromString`
    multi_value_handling: MultiValueHandling = "SORTED_ARRAY"
    max_string_length: int | None = Field(None, exclude=True)  # only null: not written back

    _defaults = defaults_only({"max_string_length": (None, "strings are stored whole")})

    @field_validator("multi_value_handling", mode="before")
    @classmethod
    def _upper_case(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class DimensionsSpec(SpecModel):
    """The columns a row keeps as dimensions: the listed ones, and with discovery the row's other fields.

    Druid discovers dimensions when none are listed (string dimensions), with includeAllDimensions (the listed ones
    first, the rest as strings) and with useSchemaDiscovery (typed from the values). Discovery never takes the
    timestamp column, an aggregator's input, or a field of dimensionExclusions; a listed dimension cannot be
    excluded too (Druid refuses that spec).
    """

    dimensions: list[DimensionSpec] = Field(default_factory=list, validate_default=True)
    dimension_exclusions: list[str] = Field(default_factory=list)
    #: Druid's defaults are accepted; what Sluice cannot do yet is refused naming the field, never ignored
    spatial_dimensions: list[dict[str, Any]] = Field(default_factory=list)
    include_all_dimensions: bool = False
    use_schema_discovery: bool = False
    force_segment_sort_by_time: bool = True

    @field_validator("spatial_dimensions")
    @classmethod
    def _no_spatial_index(cls, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if value:
            raise ValueError("spatial dimensions are not supported: Sluice builds no spatial index; leave it empty")
        return value

    @field_validator("force_segment_sort_by_time")
    @classmethod
    def _sorted_by_time(cls, value: bool) -> bool:
        if not value:
            raise ValueError("segments are always sorted by __time first in Sluice; leave it true")
        return value

    @field_validator("dimensions", mode="before")
    @classmethod
    def _names_are_string_dimensions(cls, value: object) -> object:
        if isinstance(value, list):
            return [{"name": item} if isinstance(item, str) else item for item in value]
        return value

    @property
    def discovers(self) -> bool:
        return not self.dimensions or self.include_all_dimensions or self.use_schema_discovery

    @field_validator("dimension_exclusions")
    @classmethod
    def _exclusions_are_not_dimensions(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # validated after `dimensions` (declared first); names compare exactly, as Druid's do
        dimensions = {d.name for d in info.data.get("dimensions", [])}
        if overlap := [name for name in value if name in dimensions]:
            raise ValueError(f"dimensions and dimensions exclusions cannot overlap; in both: {', '.join(overlap)}")
        return value


AggregatorType = Literal[
    "count", "longSum", "doubleSum", "floatSum", "longMin", "longMax", "doubleMin", "doubleMax", "floatMin", "floatMax"
]
FirstLastType = Literal[
    "longFirst", "longLast", "doubleFirst", "doubleLast", "floatFirst", "floatLast", "stringFirst", "stringLast"
]


class _Aggregator(SpecModel):
    """An aggregator, at ingestion (a metric) or in a native query (an output column)."""

    name: str = Field(min_length=1)

    @property
    def output_name(self) -> str:
        return self.name


class _OverField(_Aggregator):
    """An aggregator of one input column (every ingestion-time aggregator but count)."""

    field_name: str = Field(min_length=1)


class NumericAggregatorSpec(_Aggregator):
    """count, sums, minimums and maximums: a number per row, combined by the same rule."""

    type: AggregatorType
    #: a Druid expression over the row's fields, instead of fieldName (before it: fieldName's check reads it);
    #: written only when given, as Druid writes it
    expression: str | None = Field(None, exclude_if=lambda value: value is None)
    field_name: str | None = Field(None, validate_default=True)

    @field_validator("expression")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            compile_expression(value)
        return value

    @field_validator("field_name")
    @classmethod
    def _field_or_expression(cls, value: str | None, info: ValidationInfo) -> str | None:
        kind, expression = info.data.get("type"), info.data.get("expression")
        if kind and kind != "count" and not value and not expression:
            raise ValueError(f"{kind} needs fieldName or expression")
        if value and expression:
            raise ValueError(f"{kind} takes fieldName or expression, not both")
        return value


class FirstLastAggregatorSpec(_OverField):
    """The value of the earliest (or latest) row, kept with its time, so that rolled-up rows and segments combine:
    Druid's serializable pair (`lhs` the time in millis, `rhs` the value). `timeColumn` is Druid's: `__time` (the
    row's own timestamp, before queryGranularity) or a column of epoch millis."""

    type: FirstLastType
    time_column: str = "__time"
    #: stringFirst / stringLast keep this many characters of a value (Druid counts bytes)
    max_string_bytes: int = Field(1024, gt=0)


class HllSketchAggregatorSpec(_OverField):
    """A DataSketches HLL sketch of the column's values (HLLSketchBuild) or of its sketches (HLLSketchMerge: Base64
    text, as Druid reads a sketch column in JSON). Built by Spark, which writes HLL_8 whatever tgtHllType says; the
    type only sets a sketch's size in Druid, not its estimate. Strings are hashed as their UTF-8 bytes."""

    type: Literal["HLLSketchBuild", "HLLSketchMerge"]
    lg_k: int = Field(12, ge=4, le=21)
    tgt_hll_type: Literal["HLL_4", "HLL_6", "HLL_8"] = "HLL_4"
    round: bool = False
    should_finalize: bool = True
    string_encoding: Literal["utf16le", "utf8"] = "utf16le"


class ThetaSketchAggregatorSpec(_OverField):
    type: Literal["thetaSketch"]
    size: Annotated[int, power_of_two(16, 1 << 26)] = 16384
    is_input_theta_sketch: bool = False
    should_finalize: bool = True


class QuantilesSketchAggregatorSpec(_OverField):
    """A DataSketches quantiles (doubles) sketch of the column's numbers; a column of sketches (Base64) merges."""

    type: Literal["quantilesDoublesSketch"]
    k: Annotated[int, power_of_two(2, 32768)] = 128
    max_stream_length: int = Field(1_000_000_000, gt=0)
    should_finalize: bool = True


class TDigestSketchAggregatorSpec(_OverField):
    """A t-digest of the column's numbers (the druid-tdigestsketch extension); a column of digests (Base64) merges."""

    type: Literal["tDigestSketch"]
    compression: int = Field(100, ge=1)


class HyperUniqueAggregatorSpec(_OverField):
    """Distinct values, kept as a DataSketches HLL sketch (lgK 11: Druid's 2048 HyperLogLog registers), so that every
    distinct-count function reads it. `isInputHyperUnique` reads such sketches (Base64), as a re-index of the
    column does; Druid's own HyperLogLog bytes are not a DataSketches sketch, and such a row is processedWithError."""

    type: Literal["hyperUnique"]
    is_input_hyper_unique: bool = False
    round: bool = False


AggregatorSpec = Annotated[
    Union[NumericAggregatorSpec, FirstLastAggregatorSpec, HllSketchAggregatorSpec, ThetaSketchAggregatorSpec,
          QuantilesSketchAggregatorSpec, TDigestSketchAggregatorSpec, HyperUniqueAggregatorSpec],
    Field(discriminator="type"),
]


class GranularitySpec(SpecModel):
    type: Literal["uniform"] = "uniform"
    segment_granularity: Granularity = Field(default_factory=lambda: parse_granularity("DAY"))
    query_granularity: Granularity = Field(default_factory=lambda: parse_granularity("NONE"))
    rollup: bool = True
    #: ignored by Druid for streaming ingestion; only an empty value is accepted so nothing is silently dropped
    intervals: list[str] | None = None

    @field_validator("segment_granularity", "query_granularity", mode="before")
    @classmethod
    def _granularity(cls, value: object) -> Granularity:
        return parse_granularity(value)

    @field_validator("segment_granularity")
    @classmethod
    def _segment_granularity_has_buckets(cls, value: Granularity) -> Granularity:
        if value.name == "NONE":
            raise ValueError("segmentGranularity NONE would make a segment per millisecond; use MINUTE or coarser")
        return value

    @field_validator("intervals")
    @classmethod
    def _no_intervals(cls, value: list[str] | None) -> list[str] | None:
        if value:
            raise ValueError("intervals are not used by streaming ingestion; remove them")
        return value

    def to_json(self) -> dict:
        return {
            "type": self.type,
            "segmentGranularity": self.segment_granularity.to_json(),
            "queryGranularity": self.query_granularity.to_json(),
            "rollup": self.rollup,
            "intervals": self.intervals,
        }


class ExpressionTransform(SpecModel):
    type: Literal["expression"]
    name: str = Field(min_length=1)
    expression: str

    @field_validator("expression")
    @classmethod
    def _compiles(cls, value: str) -> str:
        compile_expression(value)
        return value

    def compiled(self, lookups: Lookups | None = None) -> CompiledExpression:
        return compile_expression(self.expression, lookups)


class TransformSpec(SpecModel):
    transforms: list[ExpressionTransform] = Field(default_factory=list)
    filter: DimFilter | None = None


class DataSchema(SpecModel):
    data_source: DataSourceName
    timestamp_spec: TimestampSpec = Field(default_factory=TimestampSpec)
    dimensions_spec: DimensionsSpec
    metrics_spec: list[AggregatorSpec] = Field(default_factory=list)
    granularity_spec: GranularitySpec = Field(default_factory=GranularitySpec)
    transform_spec: TransformSpec = Field(default_factory=TransformSpec)

    @model_validator(mode="after")
    def _unique_output_columns(self) -> "DataSchema":
        seen: set[str] = set()
        for name in [d.name for d in self.dimensions_spec.dimensions] + [m.name for m in self.metrics_spec]:
            if name == "__time":
                raise ValueError("__time is the row timestamp; a dimension or metric cannot be named __time")
            if name.lower() in seen:
                # DuckDB, the query engine, resolves identifiers without regard to case
                raise ValueError(f"column {name!r} is defined twice across dimensions and metrics "
                                 "(names are compared ignoring case, as the query engine does)")
            seen.add(name.lower())
        return self

    def to_json(self) -> dict:
        out = super().to_json()
        out["granularitySpec"] = self.granularity_spec.to_json()
        return out
