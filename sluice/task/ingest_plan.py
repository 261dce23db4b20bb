"""The dataSchema compiled into the Spark SQL expressions of one ingestion pass.

Druid processes a row as: parse → timestampSpec → transformSpec (transforms, then filter) →
dimensionsSpec / metricsSpec → rollup at queryGranularity. Each step is one expression list here,
so the Spark job is a straight pipeline of `selectExpr`s and one aggregation, and this module stays
free of Spark (its output is plain text that tests can read).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa

from sluice.spec.data_schema import (
    AggregatorSpec,
    DataSchema,
    FirstLastAggregatorSpec,
    HllSketchAggregatorSpec,
    HyperUniqueAggregatorSpec,
    NumericAggregatorSpec,
    QuantilesSketchAggregatorSpec,
    TDigestSketchAggregatorSpec,
    ThetaSketchAggregatorSpec,
    TimestampSpec,
)
from sluice.spec.expressions import CompiledExpression, Lookups, compile_expression
from sluice.spec.expressions import quote_identifier as q
from sluice.spec.expressions import string_literal
from sluice.spec.input_format import FlattenSpec
from sluice.segment.nested import JSON_FIELD
from sluice.timestamps import to_millis

#: raw JSON text that Spark could not parse lands in this column (from_json's corrupt-record option)
CORRUPT_COLUMN = "__corrupt"
TIME = "__time"

#: an `auto` dimension is text until publish, where its values say its type (see IngestPlan.inferred)
_DIMENSION_SQL_TYPE = {"string": "STRING", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE", "auto": "STRING"}


#: the Spark SQL type of each first/last aggregator's value
_PAIR_VALUES = {"long": "BIGINT", "double": "DOUBLE", "float": "FLOAT", "string": "STRING"}
_ARROW_TYPES = {"BIGINT": pa.int64(), "DOUBLE": pa.float64(), "FLOAT": pa.float32(), "STRING": pa.string()}
#: where a sketch's bytes say its kind, (1-based position, bytes): a DataSketches sketch's family is its third byte
#: (after the preamble's length and serialization version), a t-digest starts with its encoding, int 1
_SKETCH_MAGIC = {"HLLSketch": (3, b"\x07"), "thetaSketch": (3, b"\x03"), "quantilesDoublesSketch": (3, b"\x08"),
                 "tDigestSketch": (1, b"\x00\x00\x00\x01")}
#: the Spark functions that build a quantiles sketch and a t-digest (see sketch_udfs) from a group's values, merging
#: the sketches it holds (persisted, or an input's)
QUANTILES_FUNCTION, TDIGEST_FUNCTION = "sluice_quantiles_sketch", "sluice_tdigest_sketch"
#: the sketches built so, from numbers: an input that is not a number may be such a sketch, merged
BUILT_BY_PYTHON = ("quantilesDoublesSketch", "tDigestSketch")


@dataclass(frozen=True)
class Aggregator:
    """How one metricsSpec entry is computed at ingestion and combined across persists and segments.

    `input_sql` is the typed value of one row (`__in_<name>`); `aggregate_sql` rolls those up (or, combining, rolls
    up rolled-up rows, which is also how segments merge); `row_sql` is one row's value in the stored form when a
    row is not rolled up, None when only an aggregation makes that form (a sketch)."""

    spec: AggregatorSpec
    #: a numeric aggregator's `expression` (instead of fieldName), compiled over the row's fields
    expression: CompiledExpression | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def sql_type(self) -> str:
        """The stored column's Spark SQL type."""
        kind = self.spec.type
        return "BIGINT" if kind == "count" or kind.startswith("long") else (
            "DOUBLE" if kind.startswith("double") else "FLOAT")

    @property
    def arrow_type(self) -> pa.DataType:
        """The stored column's type in a segment file (written without Spark: an empty segment)."""
        return _ARROW_TYPES[self.sql_type]

    def input_sql(self) -> str:
        """The typed per-row input value (nulls are ignored by the aggregation, as in SQL-compatible Druid)."""
        if self.spec.type == "count":
            return "CAST(1 AS BIGINT)"
        value = f"({self.expression.sql})" if self.expression else q(self.spec.field_name)
        return f"CAST({value} AS {self.sql_type})"

    def parse_check_sql(self) -> str | None:
        """SQL that is NULL for a non-null raw input that does not parse (a processedWithError row), or None when
        every input parses (an expression's value is what it is, as Druid's)."""
        return None if self.spec.type == "count" or self.expression else self.input_sql()

    def aggregate_sql(self, column: str, combining: bool) -> str:
        function = "sum" if self.spec.type == "count" else self.spec.type.removeprefix("long").removeprefix(
            "double").removeprefix("float").lower()
        return f"CAST({function}({q(column)}) AS {self.sql_type}) AS {q(self.name)}"

    def row_sql(self, column: str) -> str | None:
        return f"{q(column)} AS {q(self.name)}"

    @property
    def reads(self) -> set[str]:
        """The raw input fields."""
        if self.expression:
            return self.expression.columns
        return {self.spec.field_name} if self.spec.field_name else set()


@dataclass(frozen=True)
class FirstLastAggregator(Aggregator):
    """Druid's serializable pair: STRUCT<lhs: time millis, rhs: value>. The earliest (latest) pair wins, so pairs
    combine as values do; a pair given as Druid writes one (`{"lhs": …, "rhs": …}`, how a re-index reads a first/last
    column) is taken as that pair."""

    spec: FirstLastAggregatorSpec

    @property
    def value_type(self) -> str:
        return _PAIR_VALUES[self.spec.type.removesuffix("First").removesuffix("Last")]

    @property
    def sql_type(self) -> str:
        return f"STRUCT<lhs: BIGINT, rhs: {self.value_type}>"

    @property
    def arrow_type(self) -> pa.DataType:
        return pa.struct([("lhs", pa.int64()), ("rhs", _ARROW_TYPES[self.value_type])])

    def _value(self) -> str:
        value = f"CAST({q(self.spec.field_name)} AS {self.value_type})"
        if self.value_type == "STRING":
            return f"left({value}, {self.spec.max_string_bytes})"
        return value

    def _is_pair(self) -> str:
        return f"startswith({q(self.spec.field_name)}, '{{\"lhs\":')"

    def input_sql(self) -> str:
        field, time = q(self.spec.field_name), self.spec.time_column
        millis = f"unix_millis({q(TIME)})" if time == TIME else f"CAST({q(time)} AS BIGINT)"
        return (f"CASE WHEN {self._is_pair()} THEN from_json({field}, 'lhs BIGINT, rhs {self.value_type}') "
                f"ELSE named_struct('lhs', {millis}, 'rhs', {self._value()}) END")

    def parse_check_sql(self) -> str | None:
        return None if self.value_type == "STRING" else f"CASE WHEN {self._is_pair()} THEN 0 ELSE {self._value()} END"

    def aggregate_sql(self, column: str, combining: bool) -> str:
        function = "min_by" if self.spec.type.endswith("First") else "max_by"
        return f"{function}({q(column)}, {q(column)}.lhs) AS {q(self.name)}"

    @property
    def reads(self) -> set[str]:
        return {self.spec.field_name} | ({self.spec.time_column} - {TIME})


@dataclass(frozen=True)
class SketchAggregator(Aggregator):
    """A sketch (DataSketches', or a t-digest), stored as a one-field STRUCT named after Druid's complex type (what the
    broker reads as a sketch). Spark builds HLL and Theta sketches itself; the quantiles sketch and the t-digest are built by a
    Python function over the group's values. An input that is a sketch (Base64, as Druid writes one in JSON) is
    merged."""

    spec: (HllSketchAggregatorSpec | ThetaSketchAggregatorSpec | QuantilesSketchAggregatorSpec
           | TDigestSketchAggregatorSpec | HyperUniqueAggregatorSpec)

    @property
    def kind(self) -> str:
        return self.spec.type if self.spec.type in ("thetaSketch", *BUILT_BY_PYTHON) else "HLLSketch"

    @property
    def sql_type(self) -> str:
        return f"STRUCT<{self.kind}: BINARY>"

    @property
    def arrow_type(self) -> pa.DataType:
        return pa.struct([(self.kind, pa.binary())])

    @property
    def takes_sketches(self) -> bool:
        spec = self.spec
        return (spec.type == "HLLSketchMerge" or getattr(spec, "is_input_theta_sketch", False)
                or getattr(spec, "is_input_hyper_unique", False))

    def _sketch_bytes(self) -> str:
        """The input field's Base64 decoded, NULL unless it is a sketch of this kind."""
        decoded = f"try_to_binary({q(self.spec.field_name)}, 'base64')"
        position, magic = _SKETCH_MAGIC[self.kind]
        return f"CASE WHEN substring({decoded}, {position}, {len(magic)}) = X'{magic.hex()}' THEN {decoded} END"

    def input_sql(self) -> str:
        if self.kind in BUILT_BY_PYTHON:  # numbers are built from, sketches merged: Druid tells by type
            field = q(self.spec.field_name)
            return (f"named_struct('value', CAST({field} AS DOUBLE), 'sketch', CASE WHEN CAST({field} AS DOUBLE) "
                    f"IS NULL THEN {self._sketch_bytes()} END)")
        return self._sketch_bytes() if self.takes_sketches else f"CAST({q(self.spec.field_name)} AS STRING)"

    def parse_check_sql(self) -> str | None:
        if self.kind in BUILT_BY_PYTHON:
            number = f"CAST({q(self.spec.field_name)} AS DOUBLE)"
            return f"CASE WHEN {number} IS NOT NULL OR {self._sketch_bytes()} IS NOT NULL THEN 0 END"
        return self._sketch_bytes() if self.takes_sketches else None

    def _log2_size(self) -> int:
        spec = self.spec
        if isinstance(spec, ThetaSketchAggregatorSpec):
            return spec.size.bit_length() - 1
        return spec.lg_k if isinstance(spec, HllSketchAggregatorSpec) else 11  # hyperUnique: 2048 registers

    def aggregate_sql(self, column: str, combining: bool) -> str:
        sketches = combining or self.takes_sketches
        value = f"{q(column)}.{self.kind}" if combining else q(column)
        lg = self._log2_size()
        if self.kind == "HLLSketch":
            sketch = f"hll_union_agg({value}, true)" if sketches else f"hll_sketch_agg({value}, {lg})"
        elif self.kind == "thetaSketch":
            sketch = f"theta_union_agg({value}, {lg})" if sketches else f"theta_sketch_agg({value}, {lg})"
        else:
            values, merged = ("array()", f"collect_list({value})") if combining else (
                f"collect_list({value}.value)", f"collect_list({value}.sketch)")
            spec = self.spec
            function, size = (TDIGEST_FUNCTION, spec.compression) if isinstance(spec, TDigestSketchAggregatorSpec) \
                else (QUANTILES_FUNCTION, spec.k)  # type: ignore[union-attr]
            sketch = f"{function}({values}, {merged}, {size})"
        return f"named_struct('{self.kind}', {sketch}) AS {q(self.name)}"

    def row_sql(self, column: str) -> str | None:
        return None


def aggregator(spec: AggregatorSpec, lookups: Lookups | None = None) -> Aggregator:
    if isinstance(spec, FirstLastAggregatorSpec):
        return FirstLastAggregator(spec)
    if isinstance(spec, NumericAggregatorSpec):
        return Aggregator(spec, compile_expression(spec.expression, lookups) if spec.expression else None)
    return SketchAggregator(spec)


@dataclass(frozen=True)
class MessageWindow:
    """Druid's minimumMessageTime / maximumMessageTime: a row timestamped outside is thrown away.

    The supervisor's rejection settings (lateMessageRejectionStartDateTime or lateMessageRejectionPeriod,
    earlyMessageRejectionPeriod) become fixed instants when a task is created, so every persist of the
    task keeps rows by the same rule. Both ends are inclusive, and are compared in epoch millis, as
    Druid compares a row's millisecond timestamp.
    """

    minimum: datetime | None = None
    maximum: datetime | None = None

    def outside_sql(self, time_column: str = TIME) -> str:
        """Spark SQL that is true for a row whose (transformed) timestamp lies outside the window."""
        millis = f"unix_millis({q(time_column)})"
        bounds = [f"{millis} < {to_millis(self.minimum)}" if self.minimum else None,
                  f"{millis} > {to_millis(self.maximum)}" if self.maximum else None]
        return " OR ".join(b for b in bounds if b) or "FALSE"


@dataclass(frozen=True)
class IntervalsWindow:
    """A batch task's granularitySpec.intervals: a row timestamped outside all of them is thrown away. No
    intervals keep every row."""

    intervals: tuple[tuple[datetime, datetime], ...] = ()

    def outside_sql(self, time_column: str = TIME) -> str:
        if not self.intervals:
            return "FALSE"
        millis = f"unix_millis({q(time_column)})"
        inside = " OR ".join(f"({millis} >= {to_millis(start)} AND {millis} < {to_millis(end)})"
                             for start, end in self.intervals)
        return f"NOT ({inside})"


#: the record's top-level JSON fields as text (a map), read when dimensions are discovered
FIELDS_MAP = "__fields"
#: the discovered fields of a row: its (field, text) entries, sorted (an array of entries groups; a map does not)
DISCOVERED = "__discovered"


@dataclass(frozen=True)
class Discovery:
    """Dimensions found in the rows (Druid's schemaless ingestion and schema discovery): every top-level field with a
    value that is not excluded. Values are text until publish, where useSchemaDiscovery types a column long or double
    when every value reads as one (`typed`)."""

    #: the listed dimensions, the timestamp column, the aggregators' inputs and outputs, dimensionExclusions
    excluded: tuple[str, ...]
    typed: bool
    #: transforms of a field of the record: the discovered value is the transformed one (a new field a transform
    #: makes is not discovered, as in Druid)
    transformed: tuple[str, ...] = ()

    def entries_sql(self) -> str:
        """The row's discovered entries, over the typed row (FIELDS_MAP and the transforms' columns). Without
        `typed`, an array is a multi-value string, as a listed string dimension's (`multi_value_sql`), in Druid's
        default SORTED_ARRAY order; schema discovery keeps it as JSON."""
        excluded = ", ".join(string_literal(name) for name in self.excluded)
        fields = FIELDS_MAP
        if self.transformed:
            cases = " ".join(f"WHEN {string_literal(t)} THEN CAST({q(t)} AS STRING)" for t in self.transformed)
            fields = f"transform_values({FIELDS_MAP}, (k, v) -> CASE k {cases} ELSE v END)"
        if not self.typed:
            fields = f"transform_values({fields}, (k, v) -> {multi_value_sql('v', 'SORTED_ARRAY')})"
        return (f"array_sort(map_entries(map_filter({fields}, (k, v) -> v IS NOT NULL AND "
                f"NOT array_contains(array({excluded}), k))))")


@dataclass(frozen=True)
class IngestPlan:
    json_schema_ddl: str
    #: the column from_json fills with a malformed record's text; only when a record with none of the fields still
    #: makes a row (timestampSpec.missingValue): otherwise malformed JSON, which parses to no fields, has no
    #: timestamp and is unparseable anyway, and Spark's parse is cheaper without the column
    corrupt_column: str | None
    #: (column, sql) for the timestamp, evaluated over the raw JSON fields
    time_sql: str
    transforms: dict[str, str]
    filter_sql: str | None
    #: column -> SQL, made before the typed columns: a string dimension's values when its text is a JSON array.
    #: A column, not an expression repeated in the typed one: Spark's code generation evaluates an expression that
    #: occurs several times once for every row, also where a CASE would not reach it: parsing every value of every
    #: string dimension as JSON, a batch job took 1.5 × as long as with no multi-value handling at all.
    value_arrays: dict[str, str]
    #: output column -> typed SQL
    typed_columns: dict[str, str]
    #: (raw input column, SQL over the raw fields): a non-null raw value whose SQL is NULL did not parse, which
    #: makes the row processedWithError
    parse_checks: tuple[tuple[str, str], ...]
    query_granularity_sql: str
    dimensions: list[str]
    aggregators: list[Aggregator]
    rollup: bool
    #: the raw input fields the row is built from, in order (the columns a non-JSON reader produces)
    fields: tuple[str, ...] = ()
    #: JSON fields read by a flattenSpec path instead of by name: field -> Spark JSONPath
    json_paths: tuple[tuple[str, str], ...] = ()
    #: JSON fields that are null whatever the record holds (flattenSpec without useFieldDiscovery)
    json_absent: tuple[str, ...] = ()
    #: dimensions found in the records, beside the listed ones
    discovery: Discovery | None = None
    #: listed dimensions of type `auto`: typed at publish from their values, as useSchemaDiscovery's are
    auto_dimensions: tuple[str, ...] = ()
    #: listed dimensions of type `string`: any of them may be multi-valued (`multi_value_sql`)
    string_dimensions: tuple[str, ...] = ()
    #: the input source's systemFields the rows read: columns from the record's locator, not from the record
    system_fields: tuple[str, ...] = ()

    @property
    def metrics(self) -> list[str]:
        return [a.name for a in self.aggregators]

    def rollup_aggregations(self, combining: bool) -> list[str]:
        """Aggregations over typed rows (ingest) or over rolled-up rows (merge of persists)."""
        return [a.aggregate_sql(a.name if combining else f"__in_{a.name}", combining) for a in self.aggregators]

    def row_values(self) -> list[str] | None:
        """Each metric of one typed row in its stored form (rows not rolled up), or None when a metric has that form
        only from an aggregation (a sketch): then every row is rolled up alone."""
        values = [a.row_sql(f"__in_{a.name}") for a in self.aggregators]
        return None if None in values else values  # type: ignore[return-value]


def compile_plan(schema: DataSchema, flatten: FlattenSpec | None = None, lookups: Lookups | None = None,
                 system_fields: tuple[str, ...] = ()) -> IngestPlan:
    """`flatten` is a JSON inputFormat's flattenSpec (other formats flatten in their reader); `lookups` are the maps
    transforms read with `lookup()` (without them, the plan only says what the rows read, not what they hold);
    `system_fields` the input source's."""
    transforms = {t.name: t.compiled(lookups) for t in schema.transform_spec.transforms}
    transform_inputs = set().union(*(t.columns for t in transforms.values())) if transforms else set()
    dimensions = schema.dimensions_spec.dimensions
    aggregators = [aggregator(m, lookups) for m in schema.metrics_spec]
    filter_ = schema.transform_spec.filter

    referenced = {d.name for d in dimensions}.union(*(a.reads for a in aggregators))
    referenced |= filter_.columns() if filter_ else set()
    # `__time` in an expression means the row timestamp, not a JSON field (unless it is the timestamp column)
    fields = ((referenced - set(transforms)) | transform_inputs) - {TIME} | {schema.timestamp_spec.column}
    system = tuple(name for name in system_fields if name in fields)
    fields -= set(system)
    paths = {f.name: _json_path(f.path()) for f in flatten.fields if f.name in fields} if flatten else {}
    absent = sorted(fields - set(paths)) if flatten and not flatten.use_field_discovery else []
    json_fields = fields - set(paths) - set(absent)
    corrupt = CORRUPT_COLUMN if schema.timestamp_spec.missing_value is not None else None
    # from_json needs a field to parse into: a record read only through paths still parses (and fails) as a whole
    ddl = ", ".join([*(f"{q(name)} STRING" for name in sorted(json_fields or {"__any"})),
                     *([f"{q(corrupt)} STRING"] if corrupt else [])])

    strings = [d.name for d in dimensions if d.type == "string"]
    values = {name: f"__values_{name}" for name in strings}  # the value_arrays column of each string dimension
    arrays = {values[name]: f"CASE WHEN startswith({q(name)}, '[') THEN {STRING_ARRAY_SQL.format(c=q(name))} END"
              for name in strings}
    typed = {d.name: json_sql(q(d.name)) if d.type == "json" else
             multi_value_sql(q(d.name), d.multi_value_handling, q(values[d.name])) if d.type == "string" else
             f"CAST({q(d.name)} AS {_DIMENSION_SQL_TYPE[d.type]})" for d in dimensions}
    checks = [(d.name, typed[d.name]) for d in dimensions if d.type not in ("string", "json", "auto")]
    for metric in aggregators:
        typed[f"__in_{metric.name}"] = metric.input_sql()
        if (check := metric.parse_check_sql()) is not None:
            checks.append((metric.spec.field_name, check))

    return IngestPlan(
        json_schema_ddl=ddl,
        corrupt_column=corrupt,
        time_sql=timestamp_sql(schema.timestamp_spec),
        transforms={
            name: f"timestamp_millis(CAST({t.sql} AS BIGINT))" if name == TIME else t.sql for name, t in transforms.items()
        },
        filter_sql=filter_.to_spark_sql() if filter_ else None,
        value_arrays=arrays,
        typed_columns=typed,
        parse_checks=tuple(checks),
        query_granularity_sql=schema.granularity_spec.query_granularity.spark_sql(q(TIME)),
        dimensions=[d.name for d in dimensions],
        aggregators=aggregators,
        rollup=schema.granularity_spec.rollup,
        fields=tuple(sorted(fields)),
        json_paths=tuple(sorted(paths.items())),
        json_absent=tuple(absent),
        discovery=_discovery(schema, aggregators) if schema.dimensions_spec.discovers else None,
        auto_dimensions=tuple(d.name for d in dimensions if d.type == "auto"),
        string_dimensions=tuple(strings),
        system_fields=system,
    )


def _discovery(schema: DataSchema, aggregators: list[Aggregator]) -> Discovery:
    spec = schema.dimensions_spec
    excluded = {d.name for d in spec.dimensions} | {schema.timestamp_spec.column, TIME} | set(spec.dimension_exclusions)
    excluded |= {a.name for a in aggregators}.union(*(a.reads for a in aggregators))
    transformed = tuple(sorted(t.name for t in schema.transform_spec.transforms if t.name not in excluded))
    return Discovery(tuple(sorted(excluded)), spec.use_schema_discovery, transformed)


def multi_value_sql(raw: str, handling: str, values: str | None = None) -> str:
    """A string dimension's value from the field's text. A JSON array (a multi-value field, as the readers write one)
    is a multi-value in Druid's multiValueHandling: SORTED_ARRAY sorts its values (nulls first, as Druid's
    StringDimensionIndexer), SORTED_SET sorts them and drops repeats, ARRAY keeps them as they came. No value is null
    and one value that value, as Druid stores them; more are the array's JSON text until publish, where the column
    becomes a list (`MULTI_VALUE_SQL`). Text that starts with `[` but is no JSON array is a plain value.

    Neither lambdas (`transform`, `array_sort`) nor `from_json`: Spark evaluates those without code generation,
    which takes the whole projection of every row out of whole-stage codegen (`STRING_ARRAY_SQL`). `values` is a
    column that holds the parsed array already (`IngestPlan.value_arrays`); without it the expression parses the
    text wherever it reads the array."""
    values = values or STRING_ARRAY_SQL.format(c=raw)
    ordered = {"SORTED_ARRAY": f"sort_array({values})", "SORTED_SET": f"array_distinct(sort_array({values}))",
               "ARRAY": values}[handling]
    return (f"CASE WHEN startswith({raw}, '[') THEN CASE WHEN {values} IS NULL THEN {raw} "
            f"WHEN size({values}) = 1 THEN {values}[0] WHEN size({values}) > 1 THEN to_json({ordered}) END "
            f"ELSE CAST({raw} AS STRING) END")


#: a JSON array's values as strings (an element that is no string as its JSON text), null for text that is no JSON
#: array. Spark's `from_json` does this too, but without code generation (a CodegenFallback); it also takes single
#: quotes for double ones, which Druid's parser does not.
STRING_ARRAY_SQL = "try_variant_get(try_parse_json({c}), '$', 'array<string>')"
#: whether a typed string dimension's value holds several (`multi_value_sql`): a persist observes it per dimension
IS_MULTI_VALUE_SQL = f"startswith({{c}}, '[') AND {STRING_ARRAY_SQL} IS NOT NULL"
#: a multi-value dimension's segment column, a list of strings, from its typed value
MULTI_VALUE_SQL = (f"CASE WHEN startswith({{c}}, '[') THEN coalesce({STRING_ARRAY_SQL}, array({{c}})) "
                   "WHEN {c} IS NOT NULL THEN array({c}) END")


def json_sql(raw: str) -> str:
    """A json dimension's value from the field's text: JSON text (an object or array, as the readers write them, or a
    number or boolean) as it is, any other text as a JSON string."""
    value = f"to_json(coalesce(try_parse_json({raw}), CAST({raw} AS VARIANT)))"
    return f"CASE WHEN {raw} IS NOT NULL THEN named_struct('{JSON_FIELD}', {value}) END"


def _json_path(steps: list[str | int]) -> str:
    """Spark's get_json_object path: `$['key']` for every key (any characters), `[i]` for an index."""
    return "$" + "".join(f"[{step}]" if isinstance(step, int) else "['" + step.replace("'", "") + "']"
                         for step in steps)


def timestamp_sql(spec: TimestampSpec) -> str:
    """Spark SQL turning the raw timestamp text into a TIMESTAMP; NULL means unparseable."""
    raw = q(spec.column)
    parsed = _parse_timestamp(raw, spec.format)
    if spec.missing_value is None:
        return parsed
    missing = spec.missing_value.isoformat().replace("+00:00", "Z")
    return f"CASE WHEN {raw} IS NULL THEN CAST({string_literal(missing)} AS TIMESTAMP) ELSE {parsed} END"


def _parse_timestamp(raw: str, fmt: str) -> str:
    numeric = {
        "millis": f"timestamp_millis(CAST({raw} AS BIGINT))",
        "posix": f"timestamp_seconds(CAST({raw} AS DECIMAL(20, 6)))",
        "micro": f"timestamp_micros(CAST({raw} AS BIGINT))",
        "nano": f"timestamp_micros(CAST({raw} AS BIGINT) DIV 1000)",
    }
    if fmt in numeric:
        return numeric[fmt]
    if fmt == "iso":
        return f"CAST({raw} AS TIMESTAMP)"
    if fmt == "auto":
        # Druid's auto: digits are epoch millis, anything else is ISO-8601 (with a 'T' or a space); an ISO date's
        # fifth character, a '-', tells it from digits without the regex (a tenth of a batch task's CPU)
        return (f"CASE WHEN substr({raw}, 5, 1) != '-' AND {raw} RLIKE '^-?[0-9]+$' THEN {numeric['millis']} "
                f"ELSE CAST({raw} AS TIMESTAMP) END")
    return f"to_timestamp({raw}, {string_literal(joda_to_spark_pattern(fmt))})"


#: a quoted literal, or a run of one pattern letter
_JODA_TOKEN = re.compile(r"'[^']*'|([A-Za-z])\1*")


def joda_to_spark_pattern(pattern: str) -> str:
    """Joda-Time's pattern in Spark's letters, which agree except for two fields.

    Joda's `Y` is the year of era, Spark's a week-based year it refuses to parse: it becomes `y`. Joda's zone
    reads `Z` (+0800 or Z), `ZZ` (+08:00 or Z) and `ZZZ` and longer (a zone id); Spark's `Z` does not read
    "Z", so they become `XX`, `XXX` and `VV`. Quoted text is literal in both. Letters Spark cannot parse at
    all are refused by TimestampSpec.
    """
    def spark_token(token: re.Match[str]) -> str:
        text = token.group()
        if text[0] == "Y":
            return "y" * len(text)
        if text[0] == "Z":
            return {1: "XX", 2: "XXX"}.get(len(text), "VV")
        return text

    return _JODA_TOKEN.sub(spark_token, pattern)
