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

from sluice.spec.data_schema import AggregatorSpec, DataSchema, TimestampSpec
from sluice.spec.expressions import quote_identifier as q
from sluice.spec.expressions import string_literal
from sluice.spec.input_format import FlattenSpec
from sluice.timestamps import to_millis

#: raw JSON text that Spark could not parse lands in this column (from_json's corrupt-record option)
CORRUPT_COLUMN = "__corrupt"
TIME = "__time"

_DIMENSION_SQL_TYPE = {"string": "STRING", "long": "BIGINT", "float": "FLOAT", "double": "DOUBLE"}


@dataclass(frozen=True)
class Aggregator:
    """How one metricsSpec entry is computed at ingestion and combined across persists and segments."""

    spec: AggregatorSpec

    @property
    def sql_type(self) -> str:
        if self.spec.type == "count" or self.spec.type.startswith("long"):
            return "BIGINT"
        return "DOUBLE" if self.spec.type.startswith("double") else "FLOAT"

    @property
    def function(self) -> str:
        """sum / min / max: also the combining function, so rolled-up rows merge with the same rule."""
        return "sum" if self.spec.type == "count" else self.spec.type.removeprefix("long").removeprefix(
            "double").removeprefix("float").lower()

    def input_sql(self) -> str:
        """The typed per-row input value (nulls are ignored by the aggregation, as in SQL-compatible Druid)."""
        if self.spec.type == "count":
            return "CAST(1 AS BIGINT)"
        return f"CAST({q(self.spec.field_name)} AS {self.sql_type})"

    def aggregate_sql(self, column: str) -> str:
        return f"CAST({self.function}({q(column)}) AS {self.sql_type}) AS {q(self.spec.name)}"


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
    #: output column -> typed SQL; a non-null raw value that fails its cast makes the row processedWithError
    typed_columns: dict[str, str]
    #: typed columns whose raw input is checked for parse errors: output name -> raw input column
    checked_inputs: dict[str, str]
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

    @property
    def metrics(self) -> list[str]:
        return [a.spec.name for a in self.aggregators]

    def rollup_aggregations(self, combining: bool) -> list[str]:
        """Aggregations over typed rows (ingest) or over rolled-up rows (merge of persists)."""
        return [a.aggregate_sql(a.spec.name if combining else f"__in_{a.spec.name}") for a in self.aggregators]


def compile_plan(schema: DataSchema, flatten: FlattenSpec | None = None) -> IngestPlan:
    """`flatten` is a JSON inputFormat's flattenSpec (other formats flatten in their reader)."""
    transforms = {t.name: t.compiled() for t in schema.transform_spec.transforms}
    transform_inputs = set().union(*(t.columns for t in transforms.values())) if transforms else set()
    dimensions = schema.dimensions_spec.dimensions
    aggregators = [Aggregator(m) for m in schema.metrics_spec]
    filter_ = schema.transform_spec.filter

    referenced = {d.name for d in dimensions} | {a.spec.field_name for a in aggregators if a.spec.field_name}
    referenced |= filter_.columns() if filter_ else set()
    # `__time` in an expression means the row timestamp, not a JSON field (unless it is the timestamp column)
    fields = ((referenced - set(transforms)) | transform_inputs) - {TIME} | {schema.timestamp_spec.column}
    paths = {f.name: _json_path(f.path()) for f in flatten.fields if f.name in fields} if flatten else {}
    absent = sorted(fields - set(paths)) if flatten and not flatten.use_field_discovery else []
    json_fields = fields - set(paths) - set(absent)
    corrupt = CORRUPT_COLUMN if schema.timestamp_spec.missing_value is not None else None
    # from_json needs a field to parse into: a record read only through paths still parses (and fails) as a whole
    ddl = ", ".join([*(f"{q(name)} STRING" for name in sorted(json_fields or {"__any"})),
                     *([f"{q(corrupt)} STRING"] if corrupt else [])])

    typed = {d.name: f"CAST({q(d.name)} AS {_DIMENSION_SQL_TYPE[d.type]})" for d in dimensions}
    checked = {d.name: d.name for d in dimensions if d.type != "string"}
    for aggregator in aggregators:
        typed[f"__in_{aggregator.spec.name}"] = aggregator.input_sql()
        if aggregator.spec.field_name:
            checked[f"__in_{aggregator.spec.name}"] = aggregator.spec.field_name

    return IngestPlan(
        json_schema_ddl=ddl,
        corrupt_column=corrupt,
        time_sql=timestamp_sql(schema.timestamp_spec),
        transforms={
            name: f"timestamp_millis(CAST({t.sql} AS BIGINT))" if name == TIME else t.sql for name, t in transforms.items()
        },
        filter_sql=filter_.to_spark_sql() if filter_ else None,
        typed_columns=typed,
        checked_inputs=checked,
        query_granularity_sql=schema.granularity_spec.query_granularity.spark_sql(q(TIME)),
        dimensions=[d.name for d in dimensions],
        aggregators=aggregators,
        rollup=schema.granularity_spec.rollup,
        fields=tuple(sorted(fields)),
        json_paths=tuple(sorted(paths.items())),
        json_absent=tuple(absent),
    )


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
        # Druid's auto: digits are epoch millis, anything else is ISO-8601 (with a 'T' or a space)
        return f"CASE WHEN {raw} RLIKE '^-?[0-9]+$' THEN {numeric['millis']} ELSE CAST({raw} AS TIMESTAMP) END"
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
