"""A stream job as JSON, ``{"type": "stream", …}``, submitted and managed like a supervisor::

    {"type": "stream", "id": "page_counts",
     "spec": {
       "ioConfig": {"type": "kafka", "topic": "clicks", "consumerProperties": {"bootstrap.servers": "localhost:9092"},
                    "inputFormat": {"type": "json"}, "useEarliestOffset": true},
       "timestampSpec": {"column": "ts", "format": "iso"},
       "columns": [{"name": "user"}, {"name": "page"}],
       "operators": [
         {"type": "keyBy", "fields": ["page"]},
         {"type": "window", "windowType": "tumbling", "size": "PT1M", "allowedLateness": "PT10S", "emit": "final"},
         {"type": "count", "name": "cnt"}],
       "sink": {"type": "dataSource", "dataSource": "page_counts"}}}

``ioConfig`` and ``timestampSpec`` are a Kafka supervisor's; ``filter`` and ``map`` take Druid expressions as a
transformSpec does (``{"type": "map", "transforms": [{"type": "expression", "name": …, "expression": …}]}``);
aggregators are Druid-named (``{"type": "sum", "fieldName": "price", "name": "revenue"}``). Every mistake is a
:class:`~sluice.spec.errors.SpecError` naming its field, which the supervisor API answers with HTTP 400.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Discriminator, Field, PlainSerializer, Tag, ValidationError

from sluice.ids import checked
from sluice.periods import format_duration, parse_duration
from sluice.spec.data_schema import TimestampSpec
from sluice.spec.errors import SpecError, from_validation_error
from sluice.spec.model import SpecModel
from sluice.spec.supervisor import JsonInputFormat
from sluice.stream import topology as t
from sluice.stream.builder import millis

__all__ = ["StreamJobSpec", "job_to_json", "parse_stream_job_spec"]


def _period(value: Any) -> Any:
    return parse_duration(value) if isinstance(value, str) else value


#: an ISO-8601 period in the JSON (`PT10S`), a timedelta here
Period = Annotated[timedelta, BeforeValidator(_period), PlainSerializer(format_duration, when_used="json")]


class StreamIOConfig(SpecModel):
    type: Literal["kafka"] = "kafka"
    topic: str = Field(min_length=1)
    consumer_properties: dict[str, str | int | float | bool]
    input_format: JsonInputFormat = JsonInputFormat(type="json")
    use_earliest_offset: bool = False
    max_records_per_trigger: int | None = Field(None, ge=1)


class ColumnSpec(SpecModel):
    name: str = Field(min_length=1)
    type: Literal["string", "long", "double", "boolean"] = "string"


class ExpressionTransform(SpecModel):
    type: Literal["expression"] = "expression"
    name: str = Field(min_length=1)
    expression: str


class FilterOp(SpecModel):
    type: Literal["filter"]
    expression: str


class MapOp(SpecModel):
    type: Literal["map"]
    transforms: list[ExpressionTransform] = Field(min_length=1)


class KeyByOp(SpecModel):
    type: Literal["keyBy"]
    fields: list[str] = Field(min_length=1)


class WindowOp(SpecModel):
    type: Literal["window"]
    window_type: Literal["tumbling", "hopping", "session"]
    size: Period | None = None
    slide: Period | None = None
    gap: Period | None = None
    allowed_lateness: Period = timedelta(0)
    emit: Literal["final", "update"] = "final"


class AggregatorSpec(SpecModel):
    type: Literal["count", "sum", "min", "max", "avg"]
    name: str = Field(min_length=1)
    field_name: str | None = None


class AggregateOp(SpecModel):
    type: Literal["aggregate"]
    aggregators: list[AggregatorSpec] = Field(min_length=1)
    #: without a window: a key's state is dropped after this long without a record
    state_ttl: Period | None = None


class CountOp(SpecModel):
    type: Literal["count"]
    name: str = "count"
    state_ttl: Period | None = None


class FieldAggregateOp(SpecModel):
    type: Literal["sum", "min", "max", "avg"]
    field_name: str
    name: str | None = None
    state_ttl: Period | None = None


class DistinctOp(SpecModel):
    type: Literal["distinct"]
    fields: list[str] = Field(min_length=1)
    within: Period


class JoinOp(SpecModel):
    type: Literal["join"]
    join_type: Literal["inner", "left", "outer"] = "inner"
    right: PipelineSpec
    on: list[str] = Field(min_length=1)
    within: Period
    grace: Period = timedelta(0)


def _table_kind(value: Any) -> str:
    """The union's tags are labels (with parentheses), which error paths leave out."""
    fields = value if isinstance(value, dict) else vars(value)
    return "table(dataSource)" if "dataSource" in fields or "data_source" in fields else "table(kafka)"


class JoinTableOp(SpecModel):
    type: Literal["joinTable"]
    join_type: Literal["inner", "left"] = "inner"
    #: a compacted topic (a pipeline with an ``ioConfig``) or a Sluice data source (``{"dataSource": …}``)
    table: Annotated[Annotated[PipelineSpec, Tag("table(kafka)")]
                     | Annotated[DataSourceTableSpec, Tag("table(dataSource)")],
                     Discriminator(_table_kind)]
    on: list[str] = Field(min_length=1)


OperatorSpec = Annotated[
    FilterOp | MapOp | KeyByOp | WindowOp | AggregateOp | CountOp | FieldAggregateOp | DistinctOp | JoinOp
    | JoinTableOp,
    Field(discriminator="type"),
]


class PipelineSpec(SpecModel):
    io_config: StreamIOConfig
    timestamp_spec: TimestampSpec | None = None
    columns: list[ColumnSpec] = Field(min_length=1)
    operators: list[OperatorSpec] = []


class DataSourceTableSpec(SpecModel):
    """A Sluice data source as a join's table: the columns to read besides ``__time``, then filters and maps."""

    data_source: str = Field(min_length=1)
    columns: list[ColumnSpec] = Field(min_length=1)
    operators: list[OperatorSpec] = []


JoinOp.model_rebuild()
JoinTableOp.model_rebuild()


class DataSourceSinkSpec(SpecModel):
    type: Literal["dataSource"]
    data_source: str = Field(min_length=1)
    segment_granularity: str = "HOUR"


class KafkaSinkSpec(SpecModel):
    type: Literal["kafka"]
    topic: str = Field(min_length=1)
    producer_properties: dict[str, str | int | float | bool]
    format: Literal["json", "csv"] = "json"
    key: list[str] = []


class ConsoleSinkSpec(SpecModel):
    type: Literal["console"]


SinkSpec = Annotated[DataSourceSinkSpec | KafkaSinkSpec | ConsoleSinkSpec, Field(discriminator="type")]


class StreamJobBody(PipelineSpec):
    sink: SinkSpec


class StreamJobSpec(SpecModel):
    type: Literal["stream"]
    #: names the job's checkpoint directory, so checked as a task id is
    id: Annotated[str, checked("stream job id")]
    spec: StreamJobBody
    suspended: bool = False
    context: dict[str, Any] | None = None

    def to_job(self) -> t.StreamJob:
        return t.StreamJob(self.id, _pipeline(self.spec), _sink(self.spec.sink))

    @property
    def data_sources(self) -> list[str]:
        """The data source the job writes, if any (what the supervisor list shows)."""
        return [self.spec.sink.data_source] if isinstance(self.spec.sink, DataSourceSinkSpec) else []


def parse_stream_job_spec(payload: dict[str, Any]) -> StreamJobSpec:
    """Validate a submitted stream job down to its operators; raises SpecError naming the field at fault."""
    if "id" not in payload and isinstance(payload.get("spec"), dict):
        sink = payload["spec"].get("sink")
        if isinstance(sink, dict) and sink.get("dataSource"):  # as a Kafka supervisor's id is its data source
            payload = {**payload, "id": sink["dataSource"]}
    try:
        spec = StreamJobSpec.model_validate(payload)
    except ValidationError as err:
        raise from_validation_error(err, payload) from None
    try:
        t.validate(spec.to_job())
    except t.StreamJobError as error:
        raise SpecError(*_place(error)) from None
    return spec


def _place(error: t.StreamJobError) -> tuple[str, str]:
    """A topology error as (JSON path, message): `operator 2 (window) field 'x'` -> `spec.operators[2]`, with the
    field named in the message."""
    message = str(error).removeprefix(f"{error.where}: ")
    match = re.fullmatch(r"operator (\d+) \(\w+\)(?: (.*))?", error.where)
    if match:
        return f"spec.operators[{match.group(1)}]", f"{match.group(2)}: {message}" if match.group(2) else message
    path = {"sink": "spec.sink", "job": "id", "window": "spec.operators"}.get(error.where)
    if path is None and error.where.startswith("source"):
        path = "spec.ioConfig" if "field" not in error.where else "spec.columns"
    return path or f"spec.{error.where}", message


def _pipeline(spec: PipelineSpec | DataSourceTableSpec) -> t.Pipeline:
    operators = tuple(_operator(op) for op in spec.operators)
    if isinstance(spec, DataSourceTableSpec):
        columns = tuple(t.SourceColumn(c.name, c.type) for c in spec.columns)
        return t.Pipeline(t.DataSourceTable(spec.data_source, columns), operators)
    io = spec.io_config
    stamp = spec.timestamp_spec
    source = t.KafkaSource(io.topic, dict(io.consumer_properties),
                           tuple(t.SourceColumn(c.name, c.type) for c in spec.columns),
                           stamp.column if stamp is not None else None, stamp.format if stamp is not None else "auto",
                           io.use_earliest_offset, io.max_records_per_trigger)
    return t.Pipeline(source, operators)


def _operator(op: Any) -> t.Operator:
    if isinstance(op, FilterOp):
        return t.Filter(op.expression)
    if isinstance(op, MapOp):
        return t.Map(assignments={x.name: x.expression for x in op.transforms})
    if isinstance(op, KeyByOp):
        return t.KeyBy(tuple(op.fields))
    if isinstance(op, WindowOp):
        size = millis(op.size) if op.size is not None else 0
        slide = millis(op.slide) if op.slide is not None else size if op.window_type == "tumbling" else 0
        return t.Window(op.window_type, size_ms=size, slide_ms=slide, gap_ms=millis(op.gap) if op.gap else 0,
                        lateness_ms=millis(op.allowed_lateness), emit=op.emit)
    ttl = millis(op.state_ttl) if getattr(op, "state_ttl", None) is not None else 0
    if isinstance(op, AggregateOp):
        return t.Aggregate(tuple(t.Aggregator(a.type, a.name, a.field_name) for a in op.aggregators), ttl)
    if isinstance(op, CountOp):
        return t.Aggregate((t.Aggregator("count", op.name),), ttl)
    if isinstance(op, FieldAggregateOp):
        return t.Aggregate((t.Aggregator(op.type, op.name or f"{op.type}_{op.field_name}", op.field_name),), ttl)
    if isinstance(op, DistinctOp):
        return t.Distinct(tuple(op.fields), millis(op.within))
    if isinstance(op, JoinOp):
        return t.Join(_pipeline(op.right), tuple(op.on), millis(op.within), op.join_type, millis(op.grace))
    if isinstance(op, JoinTableOp):
        return t.TableJoin(_pipeline(op.table), tuple(op.on), op.join_type)
    raise TypeError(f"unknown operator {op!r}")


def _sink(sink: Any) -> t.Sink:
    if isinstance(sink, DataSourceSinkSpec):
        return t.DataSourceSink(sink.data_source, sink.segment_granularity)
    if isinstance(sink, KafkaSinkSpec):
        return t.KafkaSink(sink.topic, dict(sink.producer_properties), sink.format, tuple(sink.key))
    return t.ConsoleSink()


def job_to_json(job: t.StreamJob) -> dict[str, Any]:
    """A DSL job as the JSON spec that builds it again, to submit to a node; a job with Python functions has none
    (a node runs specs, not code), and saying so names the operator."""
    return {"type": "stream", "id": job.job_id, "spec": {**_pipeline_json(job.pipeline), "sink": _sink_json(job.sink)}}


def _pipeline_json(pipeline: t.Pipeline) -> dict[str, Any]:
    source = pipeline.source
    operators = [_operator_json(index, op) for index, op in enumerate(pipeline.operators)]
    columns = [{"name": c.name, "type": c.type} for c in source.columns]
    if isinstance(source, t.DataSourceTable):
        return {"dataSource": source.data_source, "columns": columns, "operators": operators}
    io = {"type": "kafka", "topic": source.topic, "consumerProperties": dict(source.consumer_properties),
          "inputFormat": {"type": "json"}, "useEarliestOffset": source.use_earliest_offset,
          "maxRecordsPerTrigger": source.max_records_per_trigger}
    stamp = {"column": source.timestamp_column, "format": source.timestamp_format} \
        if source.timestamp_column is not None else None
    return {"ioConfig": io, "timestampSpec": stamp, "columns": columns, "operators": operators}


def _operator_json(index: int, op: t.Operator) -> dict[str, Any]:
    python = isinstance(op, t.FlatMap) or (isinstance(op, t.Filter) and callable(op.condition)) or \
        (isinstance(op, t.Map) and op.function is not None) or (isinstance(op, t.Aggregate) and op.fold is not None)
    if python:
        raise t.StreamJobError(f"operator {index} ({type(op).__name__.lower()})",
                               "a Python function cannot go into a JSON spec; write it as a Druid expression")
    if isinstance(op, t.Filter):
        return {"type": "filter", "expression": op.condition}
    if isinstance(op, t.Map):
        return {"type": "map", "transforms": [{"type": "expression", "name": name, "expression": expression}
                                              for name, expression in op.assignments.items()]}
    if isinstance(op, t.KeyBy):
        return {"type": "keyBy", "fields": list(op.fields)}
    if isinstance(op, t.Window):
        periods = {"size": op.size_ms, "slide": op.slide_ms if op.kind == "hopping" else 0, "gap": op.gap_ms}
        return {"type": "window", "windowType": op.kind, "allowedLateness": format_duration(timedelta(
            milliseconds=op.lateness_ms)), "emit": op.emit,
            **{k: format_duration(timedelta(milliseconds=v)) for k, v in periods.items() if v}}
    if isinstance(op, t.Aggregate):
        return {"type": "aggregate", "aggregators": [{"type": a.kind, "name": a.name, "fieldName": a.field}
                                                     for a in op.aggregators],
                "stateTtl": format_duration(timedelta(milliseconds=op.ttl_ms)) if op.ttl_ms else None}
    if isinstance(op, t.TableJoin):
        return {"type": "joinTable", "joinType": op.how, "table": _pipeline_json(op.table), "on": list(op.on)}
    if isinstance(op, t.Distinct):
        return {"type": "distinct", "fields": list(op.fields), "within": format_duration(timedelta(
            milliseconds=op.within_ms))}
    assert isinstance(op, t.Join)
    return {"type": "join", "joinType": op.how, "right": _pipeline_json(op.right), "on": list(op.on),
            "within": format_duration(timedelta(milliseconds=op.within_ms)),
            "grace": format_duration(timedelta(milliseconds=op.grace_ms))}


def _sink_json(sink: t.Sink) -> dict[str, Any]:
    if isinstance(sink, t.DataSourceSink):
        return {"type": "dataSource", "dataSource": sink.data_source, "segmentGranularity": sink.segment_granularity}
    if isinstance(sink, t.KafkaSink):
        return {"type": "kafka", "topic": sink.topic, "producerProperties": dict(sink.producer_properties),
                "format": sink.format, "key": list(sink.key)}
    if isinstance(sink, t.ConsoleSink):
        return {"type": "console"}
    raise t.StreamJobError("sink", "a foreach function cannot go into a JSON spec")
