"""Druid's native JSON queries as validated models: the query types, filters, aggregators, post-aggregators,
dimension specs, limit and having specs, and virtual columns.

Field names and defaults are Druid's. Unknown fields are rejected rather than ignored, so a query using something
Sluice does not implement (an `extractionFn`, a `subtotalsSpec`…) fails with the field's path instead of returning an
answer that silently differs from Druid's.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import BeforeValidator, Discriminator, Field, PlainValidator, Tag, model_validator

from sluice.broker.native import sketches as sk
from sluice.broker.native.datasources import DataSource, JoinDataSource, QueryDataSource, Table
from sluice.broker.native.time import QueryGranularity
from sluice.lookups.specs import MapLookupExtractorFactory
from sluice.timestamps import MAX_INSTANT, MIN_INSTANT, EpochInterval, parse_instant, parse_interval
# the aggregators' models are ingestion's, with the types only a query has (a query builds what a rollup keeps)
from sluice.spec.data_schema import (AggregatorType, FirstLastAggregatorSpec, FirstLastType, HllSketchAggregatorSpec,
                                     HyperUniqueAggregatorSpec, NumericAggregatorSpec, QuantilesSketchAggregatorSpec,
                                     TDigestSketchAggregatorSpec, ThetaSketchAggregatorSpec)
from sluice.spec.model import SpecModel

ETERNITY = EpochInterval(MIN_INSTANT, MAX_INSTANT)


def _granularity(value: Any) -> QueryGranularity:
    """`"hour"`, `{"type": "hour"}`, `{"type": "period", …}` or `{"type": "duration", …}`."""
    if isinstance(value, str):
        return QueryGranularity.simple(value)
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ValueError(f"expected a granularity such as \"hour\" or {{\"type\": \"period\", …}}, got {value!r}")
    kind, fields = value["type"], {k: v for k, v in value.items() if k != "type"}
    allowed = {"period": {"period", "timeZone", "origin"}, "duration": {"duration", "origin"}}.get(kind, set())
    if unknown := sorted(set(fields) - allowed):
        raise ValueError(f"unknown field(s) {', '.join(unknown)} in a {kind} granularity")
    if kind == "period":
        if not isinstance(fields.get("period"), str):
            raise ValueError("a period granularity needs a \"period\" such as PT1H")
        return QueryGranularity.of_period(fields["period"], fields.get("timeZone"), fields.get("origin"))
    if kind == "duration":
        duration = fields.get("duration")
        if not isinstance(duration, int) or duration <= 0:
            raise ValueError("a duration granularity needs a positive \"duration\" in milliseconds")
        origin = fields.get("origin")
        return QueryGranularity("duration", origin=parse_instant(origin) if origin else 0, duration=duration)
    return QueryGranularity.simple(kind)


def _intervals(value: Any) -> tuple[EpochInterval, ...]:
    """A list of `start/end` strings, one such string, or `{"type": "intervals", "intervals": [...]}`."""
    if isinstance(value, dict) and value.get("type") == "intervals" and set(value) == {"type", "intervals"}:
        value = value["intervals"]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("expected a list of ISO-8601 intervals such as [\"2015-09-12/2015-09-13\"]")
    return tuple(parse_interval(v) for v in value)


Granularity = Annotated[QueryGranularity, PlainValidator(_granularity)]
Intervals = Annotated[tuple[EpochInterval, ...], PlainValidator(_intervals)]
Scalar = Union[str, int, float, bool, None]


# ---------------------------------------------------------------------------------------------- dimension specs


class DefaultDimensionSpec(SpecModel):
    type: Literal["default"] = "default"
    dimension: str
    output_name: str | None = None
    output_type: Annotated[Literal["STRING", "LONG", "FLOAT", "DOUBLE"], BeforeValidator(
        lambda v: v.upper() if isinstance(v, str) else v)] = "STRING"

    @property
    def name(self) -> str:
        return self.output_name or self.dimension


class _LookupExtraction(SpecModel):
    """Druid's lookup extraction: a missing (or null) key gives the key itself with `retainMissingValue`, else
    `replaceMissingValueWith` (null by default). `injective` and `optimize` only tune Druid's planning."""

    retain_missing_value: bool = False
    replace_missing_value_with: str | None = None
    injective: bool | None = None
    optimize: bool = True

    @model_validator(mode="after")
    def _retain_or_replace(self) -> _LookupExtraction:
        if self.retain_missing_value and self.replace_missing_value_with is not None:
            raise ValueError("Cannot specify a [replaceMissingValueWith] and set [retainMissingValue] to true")
        return self


class RegisteredLookupExtractionFn(_LookupExtraction):
    type: Literal["registeredLookup"]
    lookup: str = Field(min_length=1)


class LookupExtractionFn(_LookupExtraction):
    type: Literal["lookup"]
    lookup: MapLookupExtractorFactory


ExtractionFn = Annotated[Union[RegisteredLookupExtractionFn, LookupExtractionFn], Field(discriminator="type")]


class ExtractionDimensionSpec(SpecModel):
    type: Literal["extraction"]
    dimension: str
    output_name: str | None = None
    output_type: Literal["STRING"] = "STRING"
    extraction_fn: ExtractionFn

    @property
    def name(self) -> str:
        return self.output_name or self.dimension


class LookupDimensionSpec(_LookupExtraction):
    """A lookup given inline (`lookup`) or registered (`name`)."""

    type: Literal["lookup"]
    dimension: str
    output_name: str | None = None
    lookup: MapLookupExtractorFactory | None = None
    lookup_name: str | None = Field(default=None, alias="name", min_length=1)

    @model_validator(mode="after")
    def _one_lookup(self) -> LookupDimensionSpec:
        if (self.lookup is None) == (self.lookup_name is None):
            raise ValueError("exactly one of lookup (a map given inline) and name (a registered lookup) must be set")
        return self

    @property
    def name(self) -> str:
        return self.output_name or self.dimension


def _dimension_spec_type(value: Any) -> str:
    """A spec without `type` is a default one; its tag is written as a label (in parentheses) so that an error in
    it names the user's field, not a tag their JSON does not have."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return "(default)" if kind is None else kind


#: a dimension as a query names it: a column name, a default spec, or a spec that maps its values through a lookup
DimensionSpec = Annotated[
    Union[Annotated[DefaultDimensionSpec, Tag("default")], Annotated[DefaultDimensionSpec, Tag("(default)")],
          Annotated[ExtractionDimensionSpec, Tag("extraction")], Annotated[LookupDimensionSpec, Tag("lookup")]],
    Discriminator(_dimension_spec_type, custom_error_type="dimension_spec_type",
                  custom_error_message="expected a dimension spec of type default, extraction or lookup"),
    BeforeValidator(lambda v: {"dimension": v} if isinstance(v, str) else v),
]
#: a dimension read as it is stored (search, cardinality, column comparison)
PlainDimensionSpec = Annotated[
    DefaultDimensionSpec, BeforeValidator(lambda v: {"dimension": v} if isinstance(v, str) else v)
]


# -------------------------------------------------------------------------------------------------------- filters


class _Filter(SpecModel):
    #: only tunes Druid's bitmap index use, which Parquet segments do not have
    filter_tuning: dict[str, Any] | None = None


class SelectorFilter(_Filter):
    type: Literal["selector"]
    dimension: str
    value: Scalar = None


class EqualityFilter(_Filter):
    type: Literal["equals"]
    column: str
    match_value_type: str
    match_value: Any


class InFilter(_Filter):
    type: Literal["in"]
    dimension: str
    values: list[Scalar]


class BoundFilter(_Filter):
    type: Literal["bound"]
    dimension: str
    lower: Scalar = None
    upper: Scalar = None
    lower_strict: bool = False
    upper_strict: bool = False
    ordering: Annotated[Literal["lexicographic", "numeric", "strlen"], BeforeValidator(
        lambda v: v.get("type") if isinstance(v, dict) else v)] = "lexicographic"
    #: the legacy spelling of `"ordering": "alphanumeric"`, which Sluice does not implement
    alpha_numeric: Literal[False] = False


class RangeFilter(_Filter):
    type: Literal["range"]
    column: str
    match_value_type: str
    lower: Any = None
    upper: Any = None
    lower_open: bool = False
    upper_open: bool = False


class LikeFilter(_Filter):
    type: Literal["like"]
    dimension: str
    pattern: str
    escape: str | None = None


class RegexFilter(_Filter):
    type: Literal["regex"]
    dimension: str
    pattern: str


class NullFilter(_Filter):
    type: Literal["null"]
    column: str


class AndFilter(_Filter):
    type: Literal["and"]
    fields: list[DimFilter]


class OrFilter(_Filter):
    type: Literal["or"]
    fields: list[DimFilter]


class NotFilter(_Filter):
    type: Literal["not"]
    field: DimFilter


class IntervalFilter(_Filter):
    type: Literal["interval"]
    dimension: str
    intervals: Intervals


class ColumnComparisonFilter(_Filter):
    type: Literal["columnComparison"]
    dimensions: list[PlainDimensionSpec] = Field(min_length=2)


class ExpressionFilter(_Filter):
    type: Literal["expression"]
    expression: str


class TrueFilter(_Filter):
    type: Literal["true"]


class FalseFilter(_Filter):
    type: Literal["false"]


class ContainsSearch(SpecModel):
    type: Literal["contains", "insensitive_contains"]
    value: str
    case_sensitive: bool = False


class FragmentSearch(SpecModel):
    type: Literal["fragment"]
    values: list[str]
    case_sensitive: bool = False


class RegexSearch(SpecModel):
    type: Literal["regex"]
    pattern: str


SearchQuerySpec = Annotated[Union[ContainsSearch, FragmentSearch, RegexSearch], Field(discriminator="type")]


class SearchFilter(_Filter):
    type: Literal["search"]
    dimension: str
    query: SearchQuerySpec


DimFilter = Annotated[
    Union[
        SelectorFilter, EqualityFilter, InFilter, BoundFilter, RangeFilter, LikeFilter, RegexFilter, NullFilter,
        AndFilter, OrFilter, NotFilter, IntervalFilter, ColumnComparisonFilter, ExpressionFilter, TrueFilter,
        FalseFilter, SearchFilter,
    ],
    Field(discriminator="type"),
]
for _junction in (AndFilter, OrFilter, NotFilter):
    _junction.model_rebuild()


# ------------------------------------------------------------------------------------------------ virtual columns


class ExpressionVirtualColumn(SpecModel):
    type: Literal["expression"]
    name: str
    expression: str
    output_type: Annotated[Literal["LONG", "FLOAT", "DOUBLE", "STRING"] | None, BeforeValidator(
        lambda v: v.upper() if isinstance(v, str) else v)] = None


# ---------------------------------------------------------------------------------------------------- aggregators


class _NamedAggregator(SpecModel):
    name: str

    @property
    def output_name(self) -> str:
        return self.name


class CountAggregator(_NamedAggregator):
    type: Literal["count"]
    #: ignored, as Druid does; pydruid sends it
    field_name: str | None = None


NUMERIC_AGGREGATORS = (*(t for t in get_args(AggregatorType) if t != "count"),
                       "doubleMean", "longAny", "doubleAny", "floatAny")
FIRST_LAST_AGGREGATORS = (*get_args(FirstLastType), "stringAny")


class NumericAggregator(NumericAggregatorSpec):
    """Ingestion's sums, minimums and maximums, and at query time doubleMean and the *Any aggregators: over a column
    or an expression."""

    type: Literal[NUMERIC_AGGREGATORS]  # type: ignore[valid-type]


class FirstLastAggregator(FirstLastAggregatorSpec):
    """Ingestion's first/last aggregators, and at query time stringAny."""

    type: Literal[FIRST_LAST_AGGREGATORS]  # type: ignore[valid-type]
    aggregate_multiple_values: bool | None = None


class CardinalityAggregator(_NamedAggregator):
    """Distinct values, estimated (Druid uses HyperLogLog; Sluice DuckDB's approx_count_distinct)."""

    type: Literal["cardinality"]
    fields: list[PlainDimensionSpec] = Field(min_length=1)
    by_row: bool = False
    round: bool = False


class FilteredAggregator(SpecModel):
    type: Literal["filtered"]
    filter: DimFilter
    aggregator: Aggregator
    name: str | None = None

    @property
    def output_name(self) -> str:
        return self.name or self.aggregator.output_name


Aggregator = Annotated[
    Union[
        CountAggregator, NumericAggregator, FirstLastAggregator, CardinalityAggregator, HyperUniqueAggregatorSpec,
        HllSketchAggregatorSpec, ThetaSketchAggregatorSpec, QuantilesSketchAggregatorSpec, TDigestSketchAggregatorSpec,
        FilteredAggregator,
    ],
    Field(discriminator="type"),
]
FilteredAggregator.model_rebuild()


# ----------------------------------------------------------------------------------------------- post-aggregators


class ArithmeticPostAggregator(SpecModel):
    type: Literal["arithmetic"]
    name: str | None = None
    fn: Literal["+", "-", "*", "/", "quotient", "pow"]
    fields: list[PostAggregator] = Field(min_length=1)
    ordering: Literal["numericFirst"] | None = None


class FieldAccessPostAggregator(SpecModel):
    type: Literal["fieldAccess", "finalizingFieldAccess", "hyperUniqueCardinality"]
    name: str | None = None
    field_name: str


class ConstantPostAggregator(SpecModel):
    type: Literal["constant"]
    name: str | None = None
    value: int | float


class GreatestLeastPostAggregator(SpecModel):
    type: Literal["doubleGreatest", "doubleLeast", "longGreatest", "longLeast"]
    name: str | None = None
    fields: list[PostAggregator] = Field(min_length=1)


class ExpressionPostAggregator(SpecModel):
    type: Literal["expression"]
    name: str | None = None
    expression: str
    ordering: str | None = None
    output_type: str | None = None


PostAggregator = Annotated[
    Union[
        ArithmeticPostAggregator, FieldAccessPostAggregator, ConstantPostAggregator, GreatestLeastPostAggregator,
        ExpressionPostAggregator, *sk.SKETCH_POST_AGGREGATORS,
    ],
    Field(discriminator="type"),
]
for _composite in (ArithmeticPostAggregator, GreatestLeastPostAggregator, *sk.SKETCH_POST_AGGREGATORS):
    _composite.model_rebuild()  # their fields are post-aggregators, resolved here


# --------------------------------------------------------------------------------------------- limits and having


def _direction(value: Any) -> Any:
    if isinstance(value, str):
        return {"asc": "ascending", "desc": "descending"}.get(value.lower(), value.lower())
    return value


class OrderByColumnSpec(SpecModel):
    dimension: str
    direction: Annotated[Literal["ascending", "descending"], BeforeValidator(_direction)] = "ascending"
    dimension_order: Annotated[Literal["lexicographic", "numeric", "strlen"], BeforeValidator(
        lambda v: v.get("type") if isinstance(v, dict) else v)] = "lexicographic"


class DefaultLimitSpec(SpecModel):
    type: Literal["default"] = "default"
    columns: list[Annotated[OrderByColumnSpec, BeforeValidator(
        lambda v: {"dimension": v} if isinstance(v, str) else v)]] = []
    limit: int | None = Field(default=None, ge=0)
    offset: int = Field(default=0, ge=0)


class ComparisonHaving(SpecModel):
    type: Literal["greaterThan", "lessThan", "equalTo"]
    aggregation: str
    value: int | float


class DimSelectorHaving(SpecModel):
    type: Literal["dimSelector"]
    dimension: str
    value: Scalar = None


class FilterHaving(SpecModel):
    type: Literal["filter"]
    filter: DimFilter


class JunctionHaving(SpecModel):
    type: Literal["and", "or"]
    having_specs: list[HavingSpec]


class NotHaving(SpecModel):
    type: Literal["not"]
    having_spec: HavingSpec


class ConstantHaving(SpecModel):
    type: Literal["always", "never"]


HavingSpec = Annotated[
    Union[ComparisonHaving, DimSelectorHaving, FilterHaving, JunctionHaving, NotHaving, ConstantHaving],
    Field(discriminator="type"),
]
JunctionHaving.model_rebuild()
NotHaving.model_rebuild()


# -------------------------------------------------------------------------------------------------------- queries


class _Query(SpecModel):
    data_source: DataSource
    context: dict[str, Any] = {}


class _Aggregating(_Query):
    intervals: Intervals
    granularity: Granularity = QueryGranularity("all")
    filter: DimFilter | None = None
    virtual_columns: list[ExpressionVirtualColumn] = []
    aggregations: list[Aggregator] = []
    post_aggregations: list[PostAggregator] = []


class TimeseriesQuery(_Aggregating):
    query_type: Literal["timeseries"]
    descending: Annotated[bool, BeforeValidator(lambda v: v.lower() == "true" if isinstance(v, str) else v)] = False
    limit: int | None = Field(default=None, ge=0)


class NumericMetricSpec(SpecModel):
    type: Literal["numeric"]
    metric: str


class DimensionMetricSpec(SpecModel):
    type: Literal["dimension", "lexicographic"] = "dimension"
    ordering: Annotated[Literal["lexicographic", "numeric", "strlen"], BeforeValidator(
        lambda v: v.get("type") if isinstance(v, dict) else v)] = "lexicographic"
    previous_stop: str | None = None


class InvertedMetricSpec(SpecModel):
    type: Literal["inverted"]
    metric: TopNMetricSpec


TopNMetricSpec = Annotated[
    Union[NumericMetricSpec, DimensionMetricSpec, InvertedMetricSpec],
    Field(discriminator="type"),
    BeforeValidator(lambda v: {"type": "numeric", "metric": v} if isinstance(v, str) else v),
]
InvertedMetricSpec.model_rebuild()


class TopNQuery(_Aggregating):
    query_type: Literal["topN"]
    dimension: DimensionSpec
    threshold: int = Field(ge=1)
    metric: TopNMetricSpec


class GroupByQuery(_Aggregating):
    query_type: Literal["groupBy"]
    dimensions: list[DimensionSpec] = []
    limit_spec: DefaultLimitSpec | None = None
    having: HavingSpec | None = None


class ScanOrderBy(SpecModel):
    column_name: str
    order: Annotated[Literal["ascending", "descending", "none"], BeforeValidator(_direction)] = "ascending"


class ScanQuery(_Query):
    query_type: Literal["scan"]
    intervals: Intervals
    filter: DimFilter | None = None
    virtual_columns: list[ExpressionVirtualColumn] = []
    columns: list[str] = []
    result_format: Literal["list", "compactedList"] = "list"
    batch_size: int = Field(default=20480, ge=1)
    limit: int | None = Field(default=None, ge=0)
    offset: int = Field(default=0, ge=0)
    order: Annotated[Literal["none", "ascending", "descending"], BeforeValidator(_direction)] = "none"
    order_by: list[ScanOrderBy] = []
    legacy: Literal[False] | None = None


class TimeBoundaryQuery(_Query):
    query_type: Literal["timeBoundary"]
    intervals: Intervals = (ETERNITY,)
    bound: Literal["minTime", "maxTime"] | None = None
    filter: DimFilter | None = None


class ToInclude(SpecModel):
    type: Literal["all", "none", "list"]
    columns: list[str] = []


ANALYSIS_TYPES = ("cardinality", "size", "interval", "aggregators", "minmax", "timestampSpec", "queryGranularity",
                  "rollup")


class SegmentMetadataQuery(_Query):
    query_type: Literal["segmentMetadata"]
    data_source: Table  # its answer is about segments, which only a table has
    intervals: Intervals | None = None
    to_include: ToInclude = ToInclude(type="all")
    merge: bool = False
    analysis_types: list[Literal[ANALYSIS_TYPES]] = ["cardinality", "interval", "minmax"]  # type: ignore[valid-type]
    lenient_aggregator_merge: bool | None = None
    aggregator_merge_strategy: Literal["strict", "lenient", "earliest", "latest"] | None = None
    using_default_interval: bool | None = None


class DataSourceMetadataQuery(_Query):
    query_type: Literal["dataSourceMetadata"]
    data_source: Table
    intervals: Intervals = (ETERNITY,)


class SearchSortSpec(SpecModel):
    type: Literal["lexicographic", "strlen", "numeric"] = "lexicographic"


class SearchQuery(_Query):
    query_type: Literal["search"]
    intervals: Intervals
    granularity: Granularity = QueryGranularity("all")
    filter: DimFilter | None = None
    virtual_columns: list[ExpressionVirtualColumn] = []
    limit: int = Field(default=1000, ge=0)
    search_dimensions: list[PlainDimensionSpec] = []
    query: SearchQuerySpec
    sort: SearchSortSpec = SearchSortSpec()


NativeQuery = Annotated[
    Union[
        TimeseriesQuery, TopNQuery, GroupByQuery, ScanQuery, TimeBoundaryQuery, SegmentMetadataQuery,
        DataSourceMetadataQuery, SearchQuery,
    ],
    Field(discriminator="query_type"),
]


def _sub_query_type(value: Any) -> str:
    """The tag of a query data source's query, written as a label so that an error names the user's field."""
    kind = value.get("queryType") if isinstance(value, dict) else getattr(value, "query_type", None)
    return f"queryType({kind})"


#: the queries whose results a query data source reads as rows
SubQuery = Annotated[
    Union[Annotated[TimeseriesQuery, Tag("queryType(timeseries)")], Annotated[TopNQuery, Tag("queryType(topN)")],
          Annotated[GroupByQuery, Tag("queryType(groupBy)")], Annotated[ScanQuery, Tag("queryType(scan)")]],
    Discriminator(_sub_query_type, custom_error_type="query_type",
                  custom_error_message="expected a timeseries, topN, groupBy or scan query"),
]
# A query data source holds a query, which holds a data source: the models refer to each other across modules.
for _model in (QueryDataSource, JoinDataSource, TimeseriesQuery, TopNQuery, GroupByQuery, ScanQuery,
               TimeBoundaryQuery, SegmentMetadataQuery, DataSourceMetadataQuery, SearchQuery):
    _model.model_rebuild(_types_namespace={"q": sys.modules[__name__]})
