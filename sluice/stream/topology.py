"""A stream job as plain data: a source, a chain of operators, a sink (RocketMQ Streams' topology).

Both front ends build this, the Python DSL (:mod:`sluice.stream.builder`) and the JSON
``{"type": "stream"}`` spec (:mod:`sluice.stream.job_spec`); :func:`validate` checks it without Spark, so a
bad job fails when it is written or submitted (a Python exception, an HTTP 400) and not when its first batch
runs; :mod:`sluice.stream.compiler` turns it into a Spark Structured Streaming query.

Rows are named fields. The source parses each Kafka message into its declared ``columns`` and the event time
``__time`` (Druid's name); filters and maps are Druid expressions (as in a transformSpec) or Python functions.
``key_by`` marks the fields the next stateful operator groups on (RocketMQ Streams' shuffle point; Spark's
shuffle plays the shuffle topic). A windowed aggregation emits ``window_start``, ``window_end``, the key and
one column per aggregator.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Literal

__all__ = [
    "AGGREGATORS",
    "Aggregate",
    "Aggregator",
    "CollectSink",
    "ConsoleSink",
    "DataSourceSink",
    "DataSourceTable",
    "Distinct",
    "Filter",
    "FlatMap",
    "Fold",
    "Join",
    "KafkaSink",
    "KafkaSource",
    "KeyBy",
    "Map",
    "Operator",
    "Pipeline",
    "Sink",
    "Source",
    "SourceColumn",
    "StreamJob",
    "StreamJobError",
    "TableJoin",
    "Window",
    "fingerprint",
    "needs_node",
    "output_fields",
    "source_name",
    "validate",
]

#: the event time of every row, as in Druid
TIME = "__time"
WINDOW_START = "window_start"
WINDOW_END = "window_end"
#: aggregators a window or a keyed stream offers (RocketMQ Streams' count/sum/min/max/avg)
AGGREGATORS = ("count", "sum", "min", "max", "avg")
#: column types a source may declare; `string` is the default, as for Druid dimensions (a field a Druid
#: expression computes has type `any`: Spark knows it, the topology does not)
COLUMN_TYPES = ("string", "long", "double", "boolean")

RowFunction = Callable[[dict[str, Any]], Any]


class StreamJobError(ValueError):
    """A job that cannot run; the message names the operator (and field) at fault."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


@dataclass(frozen=True)
class SourceColumn:
    name: str
    type: str = "string"


@dataclass(frozen=True)
class KafkaSource:
    """A Kafka topic read as a supervisor reads it (``ioConfig``): JSON values parsed into ``columns``.

    ``timestamp_column`` holds the event time in ``timestamp_format`` (Druid's timestampSpec formats); without
    one, the message's Kafka timestamp is the event time.
    """

    topic: str
    consumer_properties: Mapping[str, Any]
    columns: tuple[SourceColumn, ...]
    timestamp_column: str | None = None
    timestamp_format: str = "auto"
    use_earliest_offset: bool = True
    max_records_per_trigger: int | None = None


@dataclass(frozen=True)
class DataSourceTable:
    """A Sluice data source read as a table (Kafka Streams' KTable, Druid's lookup from a data source): the rows its
    published segments show, ``__time`` their event time, the latest row per key winning. It is read again each
    time its segments change (a handoff, a compaction, a re-index); a key none of them holds any more is dropped.
    Only a table join reads one."""

    data_source: str
    columns: tuple[SourceColumn, ...]


Source = KafkaSource | DataSourceTable


@dataclass(frozen=True)
class Filter:
    """Keep rows for which a Druid expression is true, or a Python function returns a true value."""

    condition: str | RowFunction


@dataclass(frozen=True)
class Map:
    """New or replaced fields, each a Druid expression; or a Python function row -> row with a declared schema."""

    assignments: Mapping[str, str] = field(default_factory=dict)
    function: RowFunction | None = None
    schema: tuple[SourceColumn, ...] = ()


@dataclass(frozen=True)
class FlatMap:
    """A Python function row -> iterable of rows of a declared schema (RocketMQ Streams' flatMap)."""

    function: RowFunction
    schema: tuple[SourceColumn, ...]


@dataclass(frozen=True)
class KeyBy:
    fields: tuple[str, ...]


@dataclass(frozen=True)
class Window:
    """Tumbling (slide = size), hopping (slide < size) or session (gap) windows on ``__time``.

    ``lateness_ms`` is Kafka Streams' grace: a record whose window ended more than that before the latest event
    time seen is dropped and counted. ``emit`` is ``final`` (one result per window once it closes, as RocketMQ
    Streams fires on the watermark and Kafka Streams' suppress) or ``update`` (a result per batch that changed it).
    """

    kind: Literal["tumbling", "hopping", "session"]
    size_ms: int = 0
    slide_ms: int = 0
    gap_ms: int = 0
    lateness_ms: int = 0
    emit: Literal["final", "update"] = "final"


@dataclass(frozen=True)
class Aggregator:
    kind: str
    name: str
    field: str | None = None


@dataclass(frozen=True)
class Fold:
    """A Python aggregation (RocketMQ Streams' Accumulator, Kafka Streams' ``aggregate(initializer, aggregator)``):
    ``add(accumulator, row)`` over a key's (or window's) records in event-time order, from ``init()``; the result
    is the output column ``name`` of ``type``."""

    init: Callable[[], Any]
    add: Callable[[Any, dict[str, Any]], Any]
    name: str = "aggregate"
    type: str = "double"


@dataclass(frozen=True)
class Aggregate:
    """Aggregators (or one Python fold) over the keyed (and maybe windowed) stream; without a window, an update per
    changed key, and with ``ttl_ms`` a key's state is dropped once the key has had no record for that long
    (processing time)."""

    aggregators: tuple[Aggregator, ...]
    ttl_ms: int = 0
    fold: Fold | None = None


@dataclass(frozen=True)
class Distinct:
    """Drop a row whose ``fields`` equal those of a row seen less than ``within_ms`` earlier in event time."""

    fields: tuple[str, ...]
    within_ms: int


@dataclass(frozen=True)
class Join:
    """A stream-stream join on equal keys whose event times differ by at most ``within_ms`` (Kafka Streams'
    JoinWindows); ``grace_ms`` is how long out-of-order records are still joined. Fields of the right side
    that clash with the left's get the prefix ``right_``."""

    right: Pipeline
    on: tuple[str, ...]
    within_ms: int
    how: Literal["inner", "left", "outer"] = "inner"
    grace_ms: int = 0


@dataclass(frozen=True)
class TableJoin:
    """A stream joined with a table: the latest row per key of another topic (a compacted topic, as Kafka Streams'
    KTable); each stream record meets the row its key has when it arrives. Table fields that clash with the
    stream's get the prefix ``right_``."""

    table: Pipeline
    on: tuple[str, ...]
    how: Literal["inner", "left"] = "inner"


Operator = Filter | Map | FlatMap | KeyBy | Window | Aggregate | Distinct | Join | TableJoin


@dataclass(frozen=True)
class ConsoleSink:
    """Print each output row, as RocketMQ Streams' ``print()``."""


@dataclass(frozen=True)
class CollectSink:
    """Hand each micro-batch's rows (dicts) and batch id to a Python function on the driver (``foreach``)."""

    function: Callable[[list[dict[str, Any]], int], None]


@dataclass(frozen=True)
class KafkaSink:
    """JSON or CSV values on a topic, keyed by ``key`` fields (at least once: a replayed batch writes again,
    with the same key and window, to deduplicate on)."""

    topic: str
    producer_properties: Mapping[str, Any]
    format: Literal["json", "csv"] = "json"
    key: tuple[str, ...] = ()


@dataclass(frozen=True)
class DataSourceSink:
    """Segments of a Sluice data source, committed with the job's batch number in one transaction."""

    data_source: str
    segment_granularity: str = "HOUR"


Sink = ConsoleSink | CollectSink | KafkaSink | DataSourceSink


@dataclass(frozen=True)
class Pipeline:
    source: Source
    operators: tuple[Operator, ...] = ()


@dataclass(frozen=True)
class StreamJob:
    job_id: str
    pipeline: Pipeline
    sink: Sink


def validate(job: StreamJob) -> None:
    """Raise :class:`StreamJobError` naming the operator and field of the first thing that cannot run."""
    if not job.job_id or not job.job_id.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise StreamJobError("job", f"id must be letters, digits, '-', '_' or '.', got {job.job_id!r}")
    fields_out = output_fields(job.pipeline)
    sink = job.sink
    if isinstance(sink, KafkaSink):
        for key in sink.key:
            if key not in fields_out:
                raise StreamJobError("sink", f"key field {key!r} is not in the job's output {sorted(fields_out)}")
    if isinstance(sink, DataSourceSink):
        from sluice.spec.granularity import parse_granularity

        try:
            parse_granularity(sink.segment_granularity)
        except ValueError as exc:
            raise StreamJobError("sink", f"segmentGranularity: {exc}") from exc
    if isinstance(sink, DataSourceSink) and _emits_updates(job.pipeline):
        raise StreamJobError("sink", f"dataSource {sink.data_source!r} needs rows that are final when written: "
                                     "a window with emit 'final', or no aggregation (updates would be summed twice)")


def output_fields(pipeline: Pipeline, *, table: bool = False) -> dict[str, str]:
    """The fields (name -> type) each row has at the end of ``pipeline`` (the table of a join when ``table``),
    checking every operator on the way."""
    source = pipeline.source
    _check_source(source)
    if isinstance(source, DataSourceTable) and not table:
        raise StreamJobError("source", f"data source {source.data_source!r} can only be the table of a join_table; "
                                       "a stream reads a Kafka topic")
    current = {c.name: c.type for c in source.columns}
    current[TIME] = "timestamp"
    key: tuple[str, ...] | None = None
    window: Window | None = None
    aggregated = False
    for index, op in enumerate(pipeline.operators):
        where = f"operator {index} ({_name(op)})"
        if aggregated and isinstance(op, (KeyBy, Window, Aggregate, Distinct, Join, TableJoin)):
            raise StreamJobError(where, "only filter and map may follow an aggregation (Spark runs one stateful "
                                        "operator per query in update mode)")
        if isinstance(op, Filter):
            _check_expression(where, op.condition, current)
        elif isinstance(op, Map):
            if op.function is not None:
                if not op.schema:
                    raise StreamJobError(where, "a Python map function needs the schema of the rows it returns")
                current = _typed(where, op.schema)
                current.setdefault(TIME, "timestamp")
            for name, expression in op.assignments.items():
                _check_expression(f"{where} field {name!r}", expression, current)
                current[name] = "timestamp" if name == TIME else "any"
        elif isinstance(op, FlatMap):
            if not op.schema:
                raise StreamJobError(where, "a flat_map function needs the schema of the rows it returns")
            current = _typed(where, op.schema)
            current.setdefault(TIME, "timestamp")
        elif isinstance(op, KeyBy):
            _require(where, op.fields, current, "key_by")
            key = op.fields
        elif isinstance(op, Window):
            if key is None:
                raise StreamJobError(where, "a window must follow key_by (RocketMQ Streams: windows are generated "
                                            "from a keyed stream)")
            _check_window(where, op)
            window = op
        elif isinstance(op, Aggregate):
            if key is None:
                raise StreamJobError(where, "an aggregation needs key_by before it")
            current = _aggregate(where, op, key, window, current)
            aggregated, window = True, None
        elif isinstance(op, Distinct):
            _require(where, op.fields, current, "distinct")
            if op.within_ms <= 0:
                raise StreamJobError(where, "distinct needs a positive 'within' bound, or its state grows forever")
        elif isinstance(op, Join):
            current = _join(where, op, current)
        elif isinstance(op, TableJoin):
            current = _table_join(where, op, current)
        if window is not None and not isinstance(op, (Window, Aggregate)):
            raise StreamJobError(where, "a window must be followed by an aggregation (count, sum, min, max, avg)")
    if window is not None:
        raise StreamJobError("window", "a window must be followed by an aggregation (count, sum, min, max, avg)")
    return current


def needs_node(job: StreamJob) -> bool:
    """Whether the job reads or writes a Sluice data source, and so runs on a node."""
    return isinstance(job.sink, DataSourceSink) or any(
        isinstance(op, TableJoin) and isinstance(op.table.source, DataSourceTable) for op in job.pipeline.operators)


def fingerprint(job: StreamJob) -> dict[str, Any]:
    """What a checkpoint's state depends on: the source topic and the operators, with Python functions named by
    their code's hash. A checkpoint written by another fingerprint is refused (its state would not fit)."""
    return _describe(job.pipeline)


def _describe(value: Any) -> Any:
    if callable(value) and not is_dataclass(value):
        code = getattr(value, "__code__", None)
        digest = hashlib.sha1(code.co_code if code is not None else repr(value).encode()).hexdigest()[:12]
        return f"python:{getattr(value, '__name__', 'function')}:{digest}"
    if is_dataclass(value):
        described = {f.name: _describe(getattr(value, f.name)) for f in fields(value)}
        if isinstance(value, Pipeline):
            return {"source": source_name(value.source), "operators": described["operators"]}
        return {"type": _name(value), **described}
    if isinstance(value, Mapping):
        return {str(k): _describe(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_describe(v) for v in value]
    return value


def _emits_updates(pipeline: Pipeline) -> bool:
    window = next((op for op in pipeline.operators if isinstance(op, Window)), None)
    aggregates = any(isinstance(op, Aggregate) for op in pipeline.operators)
    return aggregates and (window is None or window.emit == "update")


def _name(op: Any) -> str:
    names = {KeyBy: "key_by", FlatMap: "flat_map"}
    return names.get(type(op), type(op).__name__.lower())


def source_name(source: Source) -> str:
    """A topic's name, or ``dataSource:<name>``."""
    return source.topic if isinstance(source, KafkaSource) else f"dataSource:{source.data_source}"


def _check_source(source: Source) -> None:
    if isinstance(source, DataSourceTable):
        if not source.data_source:
            raise StreamJobError("source", "needs a data source name")
        _typed("source", source.columns)
        if TIME in {c.name for c in source.columns}:
            raise StreamJobError(f"source field {TIME!r}", "a data source's __time is always read; do not declare it")
        return
    if not source.topic:
        raise StreamJobError("source", "needs a Kafka topic")
    if not source.consumer_properties.get("bootstrap.servers"):
        raise StreamJobError("source", "consumerProperties must contain 'bootstrap.servers'")
    _typed("source", source.columns)
    if source.timestamp_column is not None and source.timestamp_column not in {c.name for c in source.columns}:
        raise StreamJobError("source", f"timestamp column {source.timestamp_column!r} is not one of its columns")
    if source.max_records_per_trigger is not None and source.max_records_per_trigger <= 0:
        raise StreamJobError("source", "maxRecordsPerTrigger must be positive")


def _typed(where: str, columns: Sequence[SourceColumn]) -> dict[str, str]:
    typed: dict[str, str] = {}
    for column in columns:
        if column.type not in COLUMN_TYPES:
            raise StreamJobError(f"{where} field {column.name!r}",
                                 f"type must be one of {', '.join(COLUMN_TYPES)}, got {column.type!r}")
        if column.name in typed:
            raise StreamJobError(f"{where} field {column.name!r}", "declared twice")
        typed[column.name] = column.type
    return typed


def _check_expression(where: str, expression: str | RowFunction, current: Mapping[str, str]) -> None:
    if callable(expression):
        return
    from sluice.spec.expressions import compile_expression

    try:
        compiled = compile_expression(expression)
    except ValueError as exc:
        raise StreamJobError(where, f"invalid expression {expression!r}: {exc}") from exc
    if unknown := sorted(compiled.columns - set(current)):
        raise StreamJobError(where, f"expression {expression!r} reads {unknown}, not fields of the rows "
                                    f"{sorted(current)}")


def _require(where: str, names: Sequence[str], current: Mapping[str, str], what: str) -> None:
    if not names:
        raise StreamJobError(where, f"{what} needs at least one field")
    for name in names:
        if name not in current:
            raise StreamJobError(f"{where} field {name!r}", f"no such field; the rows have {sorted(current)}")


def _check_window(where: str, window: Window) -> None:
    if window.kind == "session":
        if window.gap_ms <= 0:
            raise StreamJobError(where, "a session window needs a positive gap")
        if window.emit == "update":
            raise StreamJobError(where, "a session window emits final results only (Spark merges sessions when "
                                        "they close and has no update mode for them)")
    elif window.kind in ("tumbling", "hopping"):
        if window.size_ms <= 0:
            raise StreamJobError(where, f"a {window.kind} window needs a positive size")
        if window.slide_ms <= 0 or window.slide_ms > window.size_ms:
            raise StreamJobError(where, "the slide of a hopping window must be positive and at most its size")
    else:
        raise StreamJobError(where, f"unknown window type {window.kind!r}; expected tumbling, hopping or session")
    if window.lateness_ms < 0:
        raise StreamJobError(where, "allowed lateness cannot be negative")
    if window.emit not in ("final", "update"):
        raise StreamJobError(where, f"emit must be 'final' or 'update', got {window.emit!r}")


def _aggregate(where: str, op: Aggregate, key: tuple[str, ...], window: Window | None,
               current: Mapping[str, str]) -> dict[str, str]:
    if bool(op.aggregators) == (op.fold is not None):
        raise StreamJobError(where, "needs aggregators, or one Python fold (init, add), not both")
    if op.ttl_ms < 0:
        raise StreamJobError(where, "the state TTL cannot be negative")
    if op.ttl_ms and window is not None:
        raise StreamJobError(where, "a state TTL is for aggregations without a window: a window's state ends when "
                                    "the window closes")
    out = dict.fromkeys((WINDOW_START, WINDOW_END), "timestamp") if window is not None else {}
    out.update({k: current[k] for k in key})
    if op.fold is not None:
        _typed(f"{where} aggregate", (SourceColumn(op.fold.name, op.fold.type),))
        if op.fold.name in out:
            raise StreamJobError(where, f"the fold's name {op.fold.name!r} is already an output field")
        out[op.fold.name] = op.fold.type
    for agg in op.aggregators:
        at = f"{where} aggregator {agg.name!r}"
        if agg.kind not in AGGREGATORS:
            raise StreamJobError(at, f"unknown aggregator {agg.kind!r}; expected one of {', '.join(AGGREGATORS)}")
        if agg.kind != "count":
            if agg.field is None:
                raise StreamJobError(at, f"{agg.kind} needs a field")
            if agg.field not in current:
                raise StreamJobError(f"{at} field {agg.field!r}", f"no such field; the rows have {sorted(current)}")
            numeric_only = ("sum", "avg", "min", "max") if op.ttl_ms else ("sum", "avg")
            if agg.kind in numeric_only and current[agg.field] not in ("long", "double", "any"):
                raise StreamJobError(f"{at} field {agg.field!r}",
                                     f"{agg.kind} needs a long or double field, it is {current[agg.field]}")
        if agg.name in out:
            raise StreamJobError(at, "the name is already an output field")
        out[agg.name] = {"count": "long", "avg": "double"}.get(agg.kind) or current[agg.field or ""]
    return out


def _table_join(where: str, op: TableJoin, current: Mapping[str, str]) -> dict[str, str]:
    if op.how not in ("inner", "left"):
        raise StreamJobError(where, f"a table join is inner or left, got {op.how!r}")
    if any(not isinstance(o, (Filter, Map)) for o in op.table.operators):
        raise StreamJobError(where, "a table's pipeline may only filter and map")
    table = _inner_fields(where, "table", op.table)
    if not op.on:
        raise StreamJobError(where, "a table join needs at least one key field ('on')")
    for name in op.on:
        if name not in current or name not in table:
            raise StreamJobError(f"{where} field {name!r}", "a join key must be a field of the stream and the table")
    return {**current, **{table_field_name(name, current): kind for name, kind in table.items()
                          if name not in op.on and name != TIME}}


def _inner_fields(where: str, side: str, pipeline: Pipeline) -> dict[str, str]:
    """A join's other pipeline's output fields; its errors name the join and the side (``table``, ``right``)."""
    try:
        return output_fields(pipeline, table=side == "table")
    except StreamJobError as error:
        message = str(error).removeprefix(f"{error.where}: ")
        raise StreamJobError(f"{where} {side} {error.where}", message) from None


def table_field_name(name: str, stream_fields: Mapping[str, str]) -> str:
    """A table field's name in the joined rows: its own, or ``right_<name>`` where the stream has one."""
    return f"right_{name}" if name in stream_fields else name


def _join(where: str, op: Join, current: Mapping[str, str]) -> dict[str, str]:
    if op.within_ms <= 0:
        raise StreamJobError(where, "a stream-stream join needs a positive time bound ('within'): without one its "
                                    "state would grow forever")
    if op.how not in ("inner", "left", "outer"):
        raise StreamJobError(where, f"join type must be inner, left or outer, got {op.how!r}")
    if op.grace_ms < 0:
        raise StreamJobError(where, "grace cannot be negative")
    right = _inner_fields(where, "right", op.right)
    if any(isinstance(o, Aggregate) for o in op.right.operators):
        raise StreamJobError(where, "the right side of a join cannot aggregate")
    for name in op.on:
        if name not in current or name not in right:
            raise StreamJobError(f"{where} field {name!r}", "a join key must be a field of both sides")
    if not op.on:
        raise StreamJobError(where, "a join needs at least one key field ('on')")
    joined = dict(current)
    for name, kind in right.items():
        if name in op.on:
            continue
        joined[table_field_name(name, current)] = kind
    return joined
