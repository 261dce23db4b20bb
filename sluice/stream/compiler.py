"""A :class:`~sluice.stream.topology.StreamJob` as a Spark Structured Streaming query.

Kafka arrives through the ``sluice_kafka`` Python data source (its offsets in the query's checkpoint);
``key_by`` becomes a ``groupBy`` (Spark's shuffle routes every key to one state partition, the role of
RocketMQ Streams' shuffle topic); windows are Spark's ``window`` / ``session_window`` behind a watermark of the
allowed lateness, so Spark's state store (RocksDB, with changelog checkpointing) holds open windows and drops
records later than that; joins are Spark's stream-stream joins with a time range and a watermark of the grace
on both sides.

Final-only windows run in Spark's append mode (a window is written once, when the watermark passes its end);
update-mode windows and keyed aggregations without a window in update mode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sluice.spark_worker import start_task
from sluice.spec.expressions import compile_expression, quote_identifier
from sluice.stream import data_source_table, kafka_ranges
from sluice.stream.data_source_table import DELETED, NodeStorage
from sluice.stream.processors import EVENT_TIME, SIDE, TOMBSTONE, FoldProcessor, TableJoinProcessor, TtlAggregateProcessor
from sluice.stream.topology import (
    TIME,
    WINDOW_END,
    WINDOW_START,
    Aggregate,
    DataSourceTable,
    Distinct,
    Filter,
    FlatMap,
    Fold,
    Join,
    KafkaSource,
    KeyBy,
    Map,
    Pipeline,
    SourceColumn,
    StreamJob,
    StreamJobError,
    TableJoin,
    Window,
    output_fields,
    table_field_name,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["CompiledJob", "INPUT_METRICS", "compile_job", "spark_type"]

#: the name of the observed metrics of a pipeline's source (`processed`, `unparseable`, `thrownAway`)
INPUT_METRICS = "sluice_input"
_CORRUPT = "__corrupt"
#: a window's records, for a Python fold
_RECORDS = "__records"
#: parse-exception messages the task report shows (the latest; each batch gives its first and last)
SAMPLES = 5
_SPARK_TYPES: dict[str, DataType] = {
    "string": StringType(), "long": LongType(), "double": DoubleType(), "boolean": BooleanType(),
    "timestamp": TimestampType(),
}


def spark_type(name: str) -> DataType:
    return _SPARK_TYPES[name]


@dataclass
class CompiledJob:
    """The output rows of a job, and the output mode Spark must write them in."""

    rows: DataFrame
    output_mode: str
    #: state expires by processing time (a TTL): Spark then runs a batch every trigger even without new data
    processing_time: bool = False


def compile_job(spark: SparkSession, job: StreamJob, storage: NodeStorage | None = None) -> CompiledJob:
    """``storage`` is the node's, for a job that reads a data source as a table."""
    kafka_ranges.register(spark)
    operators = job.pipeline.operators
    window = next((op for op in operators if isinstance(op, Window)), None)
    aggregates = any(isinstance(op, Aggregate) for op in operators)
    output_mode = "update" if aggregates and (window is None or window.emit == "update") else "append"
    processing_time = any(isinstance(op, Aggregate) and op.ttl_ms for op in operators)
    return CompiledJob(_pipeline(spark, job.pipeline, INPUT_METRICS, storage), output_mode, processing_time)


def _pipeline(spark: SparkSession, pipeline: Pipeline, observe: str, storage: NodeStorage | None,
              rows: DataFrame | None = None) -> DataFrame:
    """The pipeline's operators over ``rows``, by default its Kafka source's."""
    if rows is None:
        assert isinstance(pipeline.source, KafkaSource)
        rows = _source(spark, pipeline.source, observe)
    key: list[str] = []
    window: Window | None = None
    for index, op in enumerate(pipeline.operators):
        if isinstance(op, Filter):
            rows = rows.filter(F.expr(compile_expression(op.condition).condition)) if isinstance(op.condition, str) \
                else _python_rows(rows, _filter_rows(op.condition), rows.schema)
        elif isinstance(op, Map):
            if op.function is not None:
                rows = _python_rows(rows, _map_rows(op.function), _schema(op.schema))
            for name, expression in op.assignments.items():
                rows = rows.withColumn(name, F.expr(compile_expression(expression).sql))
        elif isinstance(op, FlatMap):
            rows = _python_rows(rows, _flat_map_rows(op.function), _schema(op.schema))
        elif isinstance(op, KeyBy):
            key = list(op.fields)
        elif isinstance(op, Window):
            window = op
        elif isinstance(op, Aggregate):
            rows = _aggregate(rows, op, key, window)
        elif isinstance(op, Distinct):
            rows = rows.withWatermark(TIME, _ms(op.within_ms)).dropDuplicatesWithinWatermark(list(op.fields))
        elif isinstance(op, Join):
            left_fields = output_fields(Pipeline(pipeline.source, pipeline.operators[:index]))
            rows = _join(spark, rows, left_fields, op, observe, storage)
        elif isinstance(op, TableJoin):
            stream_fields = output_fields(Pipeline(pipeline.source, pipeline.operators[:index]))
            rows = _table_join(spark, rows, stream_fields, op, observe, storage)
    return rows


def _source(spark: SparkSession, source: KafkaSource, observe: str) -> DataFrame:
    reader = (spark.readStream.format(kafka_ranges.SOURCE_NAME)
              .option("topic", source.topic)
              .option("consumerProperties", json.dumps(dict(source.consumer_properties)))
              .option("startingOffsets", "earliest" if source.use_earliest_offset else "latest")
              # the Kafka timestamp only when it is the event time: it costs a Python call per record
              .option("columns", "value" if source.timestamp_column else "timestamp,value"))
    if source.max_records_per_trigger is not None:
        reader = reader.option("maxRecordsPerTrigger", source.max_records_per_trigger)
    raw = reader.load()
    # the event time's column is parsed from its text with the timestampSpec format, the others by their type
    parse_schema = StructType([
        *(StructField(c.name, StringType() if c.name == source.timestamp_column else spark_type(c.type))
          for c in source.columns),
        StructField(_CORRUPT, StringType()),
    ])
    parsed = raw.select(
        F.from_json(F.col("value").cast("string"), parse_schema,
                    {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT}).alias("r"),
        *([] if source.timestamp_column else [F.col("timestamp").alias("__kafka_time")]),
        F.col("value").isNull().alias("__tombstone"),
        F.col("value").alias("__message"),
    ).select("r.*", "__tombstone", "__message", *([] if source.timestamp_column else ["__kafka_time"]))
    parsed = parsed.withColumn(TIME, F.expr(_event_time_sql(source)))
    bad = ~F.col("__tombstone") & (F.col(_CORRUPT).isNotNull() | F.col(TIME).isNull())
    # Druid's parse-exception message of a bad row (null for the others), made where the raw message is at hand,
    # so that the message is not carried on: the first and last of a batch are its samples
    reason = (F.when(F.col(_CORRUPT).isNotNull(), F.concat(F.lit("Unable to parse row ["), F.col(_CORRUPT), F.lit("]")))
              .when(bad, F.concat(F.lit("Timestamp["), F.coalesce(_raw_time(source), F.lit("null")),
                                  F.lit("] is unparseable! Event: "), F.col("__message").cast("string"))))
    parsed = parsed.select(*(c.name for c in source.columns), TIME, "__tombstone", bad.alias("__bad"),
                           reason.alias("__reason"))
    samples = F.array(F.first("__reason", ignorenulls=True), F.last("__reason", ignorenulls=True))
    parsed = parsed.observe(observe, F.count(F.lit(1)).alias("processed"),
                            F.count(F.when(F.col("__bad"), 1)).alias("unparseable"),
                            F.count(F.when(F.col("__tombstone"), 1)).alias("thrownAway"),
                            F.array_distinct(F.array_compact(samples)).alias("samples"))
    return parsed.filter(~F.col("__tombstone") & ~F.col("__bad")).select(*(c.name for c in source.columns), TIME)


def _data_source_table(spark: SparkSession, source: DataSourceTable, keys: tuple[str, ...],
                       storage: NodeStorage | None) -> DataFrame:
    if storage is None:
        raise StreamJobError("source", f"data source {source.data_source!r} is read where it is stored: submit the "
                                       "job to a Sluice node")
    data_source_table.register(spark)
    return (spark.readStream.format(data_source_table.SOURCE_NAME)
            .option("dataSource", source.data_source)
            .option("metadataUri", storage.metadata_uri)
            .option("deepStorage", storage.deep_storage)
            .option("columns", json.dumps([[c.name, c.type] for c in source.columns]))
            .option("keys", json.dumps(keys))
            .load())


def _raw_time(source: KafkaSource) -> Column:
    return F.col("__kafka_time").cast("string") if source.timestamp_column is None \
        else F.col(quote_identifier(source.timestamp_column))


def _event_time_sql(source: KafkaSource) -> str:
    if source.timestamp_column is None:
        return "`__kafka_time`"
    from sluice.spec.data_schema import TimestampSpec
    from sluice.task.ingest_plan import timestamp_sql

    return timestamp_sql(TimestampSpec(column=source.timestamp_column, format=source.timestamp_format))


def _aggregate(rows: DataFrame, op: Aggregate, key: list[str], window: Window | None) -> DataFrame:
    if op.fold is not None:
        return _fold(rows, op.fold, key, window, op.ttl_ms)
    measures = [_aggregator(a.kind, a.field).alias(a.name) for a in op.aggregators]
    names = [a.name for a in op.aggregators]
    if window is None and op.ttl_ms:
        return _ttl_aggregate(rows, op, key)
    if window is None:
        return rows.groupBy(*key).agg(*measures)
    bucket, end = _window_columns(window)
    return (rows.withWatermark(TIME, _ms(window.lateness_ms)).groupBy(bucket.alias("__window"), *key).agg(*measures)
            .select(F.col("__window.start").alias(WINDOW_START), end.alias(WINDOW_END), *key, *names))


def _window_columns(window: Window) -> tuple[Column, Column]:
    """The window to group on (as `__window`), and the end its results report."""
    end = F.col("__window.end")
    if window.kind == "session":
        bucket = F.session_window(TIME, _ms(window.gap_ms))
        end = end - F.expr(f"INTERVAL {window.gap_ms} MILLISECONDS")  # Kafka's session end: its last record
    else:
        bucket = F.window(TIME, _ms(window.size_ms), _ms(window.slide_ms))
    return bucket, end


def _fold(rows: DataFrame, fold: Fold, key: list[str], window: Window | None, ttl_ms: int) -> DataFrame:
    """A Python fold: over a window, Spark keeps the window's records (in its state, until the window closes)
    and the fold runs on them when the window is written; without a window, the accumulator itself is the
    key's state."""
    result = StructField(fold.name, spark_type(fold.type))
    if window is None:
        inputs = rows.withColumnRenamed(TIME, EVENT_TIME)
        output = StructType([*(rows.schema[k] for k in key), result])
        processor = FoldProcessor(fold.init, fold.add, key, EVENT_TIME, TIME, output, ttl_ms)
        return inputs.groupBy(*key).transformWithStateInPandas(
            processor, output, "Update", "ProcessingTime" if ttl_ms else "None")
    bucket, end = _window_columns(window)
    records = F.sort_array(F.collect_list(F.struct(TIME, *(c for c in rows.columns if c != TIME))))  # by time
    windows = (rows.withWatermark(TIME, _ms(window.lateness_ms)).groupBy(bucket.alias("__window"), *key)
               .agg(records.alias(_RECORDS))
               .select(F.col("__window.start").alias(WINDOW_START), end.alias(WINDOW_END), *key, _RECORDS))
    output = StructType([windows.schema[WINDOW_START], windows.schema[WINDOW_END], *(windows.schema[k] for k in key),
                         result])
    init, add = fold.init, fold.add

    def fold_rows(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        folded = []
        for row in batch:
            accumulator = init()
            for record in row.pop(_RECORDS):
                accumulator = add(accumulator, record)
            folded.append({**row, fold.name: accumulator})
        return folded

    return _python_rows(windows, fold_rows, output)


def _ttl_aggregate(rows: DataFrame, op: Aggregate, key: list[str]) -> DataFrame:
    """Keyed aggregation whose state a key loses after ``ttl_ms`` without records (transformWithState's TTL,
    which counts processing time)."""
    def kind_of(agg: Any) -> DataType:
        if agg.kind == "count":
            return LongType()
        field_type = rows.schema[agg.field].dataType
        return DoubleType() if agg.kind == "avg" or not isinstance(field_type, LongType) else LongType()

    output = StructType([*(rows.schema[k] for k in key), *(StructField(a.name, kind_of(a)) for a in op.aggregators)])
    processor = TtlAggregateProcessor(key, [(a.kind, a.name, a.field) for a in op.aggregators], output, op.ttl_ms)
    inputs = rows.select(*key, *{a.field for a in op.aggregators if a.field is not None})
    return inputs.groupBy(*key).transformWithStateInPandas(processor, output, "Update", "ProcessingTime")


def _table_join(spark: SparkSession, stream: DataFrame, stream_fields: dict[str, str], op: TableJoin,
                observe: str, storage: NodeStorage | None) -> DataFrame:
    """The stream's records, the table's and a data source's tombstones in one input keyed on ``on``, told apart
    by SIDE (a tombstone bypasses the table's filters: its key is gone whatever its row was)."""
    table_fields = [n for n in output_fields(op.table, table=True) if n not in op.on and n != TIME]
    renamed = {n: table_field_name(n, stream_fields) for n in table_fields}
    keys = [F.col(quote_identifier(n)) for n in op.on]
    tombstones = None
    if isinstance(op.table.source, DataSourceTable):
        changes = _data_source_table(spark, op.table.source, op.on, storage)
        table = _pipeline(spark, op.table, observe, storage, rows=changes.filter(~F.col(DELETED)).drop(DELETED))
        tombstones = changes.filter(F.col(DELETED)).select(*keys, F.col(TIME), F.lit(TOMBSTONE).alias(SIDE))
    else:
        table = _pipeline(spark, op.table, f"{observe}_table", storage)
    table = table.select(*keys, F.col(TIME), *(F.col(quote_identifier(n)).alias(renamed[n]) for n in table_fields))
    both = stream.withColumn(SIDE, F.lit("S")).unionByName(table.withColumn(SIDE, F.lit("T")),
                                                             allowMissingColumns=True)
    if tombstones is not None:
        both = both.unionByName(tombstones, allowMissingColumns=True)
    both = both.withColumnRenamed(TIME, EVENT_TIME)
    table_schema = StructType([both.schema[renamed[n]] for n in table_fields])
    output = StructType([*(both.schema[n if n != TIME else EVENT_TIME] for n in stream_fields), *table_schema.fields])
    processor = TableJoinProcessor(EVENT_TIME, table_schema, output, op.how)
    return (both.groupBy(*op.on).transformWithStateInPandas(processor, output, "Append", "None")
            .withColumnRenamed(EVENT_TIME, TIME))


def _aggregator(kind: str, field: str | None) -> Column:
    if kind == "count":
        return F.count(F.lit(1))
    return {"sum": F.sum, "min": F.min, "max": F.max, "avg": F.avg}[kind](F.col(quote_identifier(field or "")))


def _join(spark: SparkSession, left: DataFrame, left_fields: dict[str, str], op: Join, observe: str,
          storage: NodeStorage | None) -> DataFrame:
    right_fields = output_fields(op.right)
    renamed = {name: table_field_name(name, left_fields) for name in right_fields if name not in op.on}
    right = _pipeline(spark, op.right, f"{observe}_right", storage)
    right = right.select(*(F.col(quote_identifier(n)).alias(f"__right_key_{n}") for n in op.on),
                         *(F.col(quote_identifier(n)).alias(renamed[n]) for n in renamed))
    # Kafka Streams closes a join window once stream time reaches the record's time + within + grace; Spark keeps
    # a row until the watermark is past that strictly, so its delay is a millisecond short of the grace
    grace = _ms(max(op.grace_ms - 1, 0))
    left, right = left.withWatermark(TIME, grace), right.withWatermark(renamed[TIME], grace)
    right_time = F.col(quote_identifier(renamed[TIME]))
    within = F.expr(f"INTERVAL {op.within_ms} MILLISECONDS")
    condition = right_time.between(F.col(TIME) - within, F.col(TIME) + within)
    for name in op.on:
        condition = condition & (F.col(quote_identifier(name)) == F.col(f"__right_key_{name}"))
    how = {"inner": "inner", "left": "left_outer", "outer": "full_outer"}[op.how]
    joined = left.join(right, condition, how)
    keys = [F.coalesce(F.col(quote_identifier(n)), F.col(f"__right_key_{n}")).alias(n) for n in op.on]
    others = [F.col(quote_identifier(n)) for n in left_fields if n not in op.on]
    return joined.select(*keys, *others, *(F.col(quote_identifier(n)) for n in renamed.values()))


def _ms(milliseconds: int) -> str:
    return f"{milliseconds} milliseconds"


def _schema(columns: tuple[SourceColumn, ...]) -> StructType:
    schema = StructType([StructField(c.name, spark_type(c.type)) for c in columns])
    return schema if TIME in schema.fieldNames() else schema.add(TIME, TimestampType())


RowsFunction = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


def _filter_rows(function: Callable[[dict[str, Any]], Any]) -> RowsFunction:
    return lambda rows: [row for row in rows if function(row)]


def _map_rows(function: Callable[[dict[str, Any]], Any]) -> RowsFunction:
    return lambda rows: [{TIME: row[TIME], **function(row)} for row in rows]


def _flat_map_rows(function: Callable[[dict[str, Any]], Any]) -> RowsFunction:
    return lambda rows: [{TIME: row[TIME], **out} for row in rows for out in function(row)]


def _python_rows(rows: DataFrame, function: RowsFunction, schema: StructType) -> DataFrame:
    """Run a user's Python function over the rows, in the executors' Python workers, batch by batch."""

    def apply(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        start_task()
        arrow_schema = to_arrow_schema(schema, timezone="UTC")
        for batch in batches:
            out = function(batch.to_pylist())
            yield pa.RecordBatch.from_pylist([{f: row.get(f) for f in arrow_schema.names} for row in out],
                                             schema=arrow_schema)

    return rows.mapInArrow(apply, schema)
