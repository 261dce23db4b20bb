"""The Python DSL of stream jobs, in RocketMQ Streams' shape (``StreamBuilder`` → ``RStream`` → ``keyBy`` →
``window`` → an aggregation → a sink)::

    builder = StreamBuilder("page_counts")
    (builder.source("clicks", bootstrap_servers="localhost:9092", columns={"user": "string", "page": "string"},
                    timestamp=("ts", "iso"))
        .key_by("page")
        .window(tumbling("PT1M", lateness="PT10S"))
        .count("cnt")
        .to_data_source("page_counts"))
    job = builder.build()

Filters and maps take a Druid expression (``"page != 'home'"``, ``{"page": "lower(page)"}``), which runs inside
Spark, or a Python function of a row (a dict), which runs in Spark's Python workers. Durations are ISO-8601
periods (``"PT10S"``), ``timedelta`` or seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from sluice.periods import parse_duration
from sluice.stream.topology import (
    Aggregate,
    Aggregator,
    CollectSink,
    ConsoleSink,
    DataSourceSink,
    DataSourceTable,
    Distinct,
    Filter,
    FlatMap,
    Fold,
    Join,
    KafkaSink,
    KafkaSource,
    KeyBy,
    Map,
    Operator,
    Pipeline,
    Sink,
    SourceColumn,
    StreamJob,
    StreamJobError,
    TableJoin,
    Window,
    validate,
)

__all__ = ["GroupedStream", "RStream", "StreamBuilder", "WindowStream", "hopping", "millis", "session", "tumbling"]

Duration = timedelta | str | float


def millis(duration: Duration) -> int:
    """A duration in milliseconds: an ISO-8601 period, a ``timedelta``, or seconds."""
    if isinstance(duration, str):
        duration = parse_duration(duration)
    if isinstance(duration, timedelta):
        return round(duration.total_seconds() * 1000)
    return round(float(duration) * 1000)


def tumbling(size: Duration, *, lateness: Duration = 0, emit: str = "final") -> Window:
    size_ms = millis(size)
    return Window("tumbling", size_ms=size_ms, slide_ms=size_ms, lateness_ms=millis(lateness), emit=emit)  # type: ignore[arg-type]


def hopping(size: Duration, slide: Duration, *, lateness: Duration = 0, emit: str = "final") -> Window:
    """RocketMQ Streams calls these sliding windows (``slidingWindow(size, slide)``)."""
    return Window("hopping", size_ms=millis(size), slide_ms=millis(slide), lateness_ms=millis(lateness),
                  emit=emit)  # type: ignore[arg-type]


def session(gap: Duration, *, lateness: Duration = 0) -> Window:
    return Window("session", gap_ms=millis(gap), lateness_ms=millis(lateness))


def _columns(schema: Mapping[str, str]) -> tuple[SourceColumn, ...]:
    return tuple(SourceColumn(name, kind) for name, kind in schema.items())


class StreamBuilder:
    """One job: one source pipeline (plus the right sides of its joins) and one sink."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self._job: StreamJob | None = None

    def source(self, topic: str, *, bootstrap_servers: str | None = None,
               consumer_properties: Mapping[str, Any] | None = None, columns: Mapping[str, str],
               timestamp: tuple[str, str] | str | None = None, use_earliest_offset: bool = True,
               max_records_per_trigger: int | None = None) -> RStream:
        """A Kafka topic of JSON values with these ``columns`` (name -> string, long, double or boolean);
        ``timestamp`` names the event-time column (and its Druid timestampSpec format, ``auto`` by default),
        else the Kafka message timestamp is the event time."""
        properties = dict(consumer_properties or {})
        if bootstrap_servers is not None:
            properties["bootstrap.servers"] = bootstrap_servers
        column, fmt = (timestamp, "auto") if isinstance(timestamp, str) else timestamp or (None, "auto")
        source = KafkaSource(topic, properties, _columns(columns), column, fmt, use_earliest_offset,
                             max_records_per_trigger)
        return RStream(self, Pipeline(source))

    def table(self, data_source: str, *, columns: Mapping[str, str]) -> RStream:
        """A Sluice data source's ``columns`` (besides ``__time``), to join a stream with (``join_table``); the job
        then runs on a node."""
        return RStream(self, Pipeline(DataSourceTable(data_source, _columns(columns))))

    def _finish(self, pipeline: Pipeline, sink: Sink) -> StreamJob:
        if self._job is not None:
            raise StreamJobError("sink", f"job {self.job_id!r} already has a sink; a job writes to one sink")
        self._job = StreamJob(self.job_id, pipeline, sink)
        return self._job

    def build(self) -> StreamJob:
        """The validated job; raises :class:`StreamJobError` naming the operator at fault."""
        if self._job is None:
            raise StreamJobError("sink", f"job {self.job_id!r} has no sink (print, foreach, sink or to_data_source)")
        validate(self._job)
        return self._job


@dataclass(frozen=True)
class _Stream:
    builder: StreamBuilder
    pipeline: Pipeline

    def _then(self, op: Operator) -> Pipeline:
        return replace(self.pipeline, operators=(*self.pipeline.operators, op))

    # sinks, on every kind of stream

    def print(self) -> StreamJob:
        return self.builder._finish(self.pipeline, ConsoleSink())

    def foreach(self, function: Callable[[list[dict[str, Any]], int], None]) -> StreamJob:
        """Call ``function(rows, batch_id)`` on the driver with each micro-batch's output rows."""
        return self.builder._finish(self.pipeline, CollectSink(function))

    def sink(self, topic: str, *, bootstrap_servers: str | None = None,
             producer_properties: Mapping[str, Any] | None = None, format: str = "json",
             key: Iterable[str] = ()) -> StreamJob:
        properties = dict(producer_properties or {})
        if bootstrap_servers is not None:
            properties["bootstrap.servers"] = bootstrap_servers
        if not properties.get("bootstrap.servers"):
            raise StreamJobError("sink", "a Kafka sink needs bootstrap_servers")
        if format not in ("json", "csv"):
            raise StreamJobError("sink", f"format must be json or csv, got {format!r}")
        return self.builder._finish(self.pipeline, KafkaSink(topic, properties, format, tuple(key)))  # type: ignore[arg-type]

    def to_data_source(self, data_source: str, *, segment_granularity: str = "HOUR") -> StreamJob:
        """Write to a Sluice data source, exactly once, queryable with Druid SQL."""
        return self.builder._finish(self.pipeline, DataSourceSink(data_source, segment_granularity))


class RStream(_Stream):
    """A stream of rows (RocketMQ Streams' ``RStream``)."""

    def filter(self, condition: str | Callable[[dict[str, Any]], Any]) -> RStream:
        return RStream(self.builder, self._then(Filter(condition)))

    def map(self, assignments: Mapping[str, str] | Callable[[dict[str, Any]], dict[str, Any]], *,
            schema: Mapping[str, str] | None = None) -> RStream:
        """Fields computed by Druid expressions, or a Python function returning a new row of ``schema``."""
        if callable(assignments):
            return RStream(self.builder, self._then(Map(function=assignments, schema=_columns(schema or {}))))
        return RStream(self.builder, self._then(Map(assignments=dict(assignments))))

    def flat_map(self, function: Callable[[dict[str, Any]], Iterable[dict[str, Any]]], *,
                 schema: Mapping[str, str]) -> RStream:
        return RStream(self.builder, self._then(FlatMap(function, _columns(schema))))

    def key_by(self, *fields: str) -> GroupedStream:
        return GroupedStream(self.builder, self._then(KeyBy(tuple(fields))))

    def distinct(self, *fields: str, within: Duration) -> RStream:
        return RStream(self.builder, self._then(Distinct(tuple(fields), millis(within))))

    def join(self, other: RStream, *, on: str | Iterable[str], within: Duration, grace: Duration = 0,
             how: str = "inner") -> RStream:
        """Rows of both streams with equal ``on`` fields whose event times are at most ``within`` apart."""
        if other.builder is not self.builder:
            raise StreamJobError("join", "both sides of a join must come from the same StreamBuilder")
        keys = (on,) if isinstance(on, str) else tuple(on)
        op = Join(other.pipeline, keys, millis(within), how, millis(grace))  # type: ignore[arg-type]
        return RStream(self.builder, self._then(op))

    def left_join(self, other: RStream, **kwargs: Any) -> RStream:
        return self.join(other, how="left", **kwargs)

    def join_table(self, table: RStream, *, on: str | Iterable[str], how: str = "inner") -> RStream:
        """Each record with the latest row of ``table`` (a stream read as a table: the last record per key) whose
        ``on`` fields are equal; ``how="left"`` keeps records whose key has no row yet."""
        if table.builder is not self.builder:
            raise StreamJobError("join_table", "the table must come from the same StreamBuilder")
        keys = (on,) if isinstance(on, str) else tuple(on)
        return RStream(self.builder, self._then(TableJoin(table.pipeline, keys, how)))  # type: ignore[arg-type]


class _Aggregating(_Stream):
    """``ttl`` (keyed streams without a window): a key's state is dropped after that long without a record."""

    def count(self, name: str = "count", *, ttl: Duration | None = None) -> RStream:
        return self.aggregate(**{name: ("count", None)}, ttl=ttl)

    def sum(self, field: str, name: str | None = None, *, ttl: Duration | None = None) -> RStream:
        return self.aggregate(**{name or f"sum_{field}": ("sum", field)}, ttl=ttl)

    def min(self, field: str, name: str | None = None, *, ttl: Duration | None = None) -> RStream:
        return self.aggregate(**{name or f"min_{field}": ("min", field)}, ttl=ttl)

    def max(self, field: str, name: str | None = None, *, ttl: Duration | None = None) -> RStream:
        return self.aggregate(**{name or f"max_{field}": ("max", field)}, ttl=ttl)

    def avg(self, field: str, name: str | None = None, *, ttl: Duration | None = None) -> RStream:
        return self.aggregate(**{name or f"avg_{field}": ("avg", field)}, ttl=ttl)

    def aggregate(self, init: Callable[[], Any] | None = None, add: Callable[[Any, dict[str, Any]], Any] | None = None,
                  *, name: str = "aggregate", type: str = "double", ttl: Duration | None = None,
                  **aggregators: tuple[str, str | None]) -> RStream:
        """Several aggregators at once, ``aggregate(cnt=("count", None), total=("sum", "price"))``; or a Python fold,
        ``aggregate(lambda: 0.0, lambda acc, row: acc + row["price"], name="total")`` (RocketMQ Streams'
        Accumulator: ``add`` sees the records in event-time order; the result is a ``type`` column)."""
        ttl_ms = millis(ttl) if ttl is not None else 0
        if init is not None or add is not None:
            if init is None or add is None or aggregators:
                raise StreamJobError("aggregate", "a fold needs both init and add, and no other aggregator")
            return RStream(self.builder, self._then(Aggregate((), ttl_ms, Fold(init, add, name, type))))
        op = Aggregate(tuple(Aggregator(kind, agg_name, field) for agg_name, (kind, field) in aggregators.items()),
                       ttl_ms)
        return RStream(self.builder, self._then(op))


class GroupedStream(_Aggregating):
    """A keyed stream: aggregations without a window emit an update per batch for every key that changed."""

    def window(self, window: Window) -> WindowStream:
        return WindowStream(self.builder, self._then(window))


class WindowStream(_Aggregating):
    """A keyed, windowed stream; its aggregations emit ``window_start``, ``window_end``, the key and the values."""
