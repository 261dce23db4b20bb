"""Where a stream job's micro-batches go: Spark's ``foreachBatch`` with the batch id.

Spark writes a batch's offsets to the checkpoint before running it and its commit after, and runs a batch
again with the same id and offsets after a crash. A sink that commits the batch id with the rows in one
transaction is therefore exactly once (the data-source sink); one that cannot (a Kafka topic without
transactions, the console) is at least once, and a replayed batch writes the same rows again, with the same
keys to deduplicate on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from sluice.stream.topology import WINDOW_START, CollectSink, ConsoleSink, KafkaSink, Sink

__all__ = ["BatchWriter", "batch_writer", "produce_rows"]

BatchWriter = Callable[[DataFrame, int], None]
_ISO_MILLIS = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"


def batch_writer(sink: Sink) -> BatchWriter:
    """The ``foreachBatch`` function of ``sink``. A stateful query's batch must be consumed whole (Spark checks
    that every state partition committed), so each writer reads every row of its batch."""
    if isinstance(sink, ConsoleSink):
        return _print_batch
    if isinstance(sink, CollectSink):
        return lambda batch, batch_id: sink.function([row.asDict() for row in batch.collect()], batch_id)
    if isinstance(sink, KafkaSink):
        return lambda batch, batch_id: _write_kafka(sink, batch)
    raise TypeError(f"{type(sink).__name__} needs a node to write to (use sluice.stream.datasource_sink)")


def _print_batch(batch: DataFrame, batch_id: int) -> None:
    for row in batch.select(F.to_json(F.struct("*"), {"timestampFormat": _ISO_MILLIS}).alias("v")).collect():
        print(row.v, flush=True)


def _write_kafka(sink: KafkaSink, batch: DataFrame) -> None:
    options = {"timestampFormat": _ISO_MILLIS}
    value = F.to_json(F.struct("*"), options) if sink.format == "json" else F.to_csv(F.struct("*"), options)
    # the key is the sink's key fields and the window's start: what a reader deduplicates a replayed batch on
    key_fields = [*sink.key, *([WINDOW_START] if WINDOW_START in batch.columns and WINDOW_START not in sink.key
                               else [])]
    key = F.to_json(F.struct(*key_fields), options) if key_fields else F.lit(None).cast("string")
    topic, properties = sink.topic, dict(sink.producer_properties)
    batch.select(key.alias("key"), value.alias("value")).foreachPartition(
        lambda rows: produce_rows(topic, properties, rows))


def produce_rows(topic: str, properties: Mapping[str, Any], rows: Iterator[Row]) -> None:
    """Send (key, value) rows to ``topic`` and wait until the broker has them all; raises if any is refused."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            errors.append(error.str())

    producer = Producer({"linger.ms": 20, **properties})
    for row in rows:
        key = None if row.key is None else row.key.encode()
        while True:
            try:
                producer.produce(topic, value=row.value.encode(), key=key, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
    if producer.flush(60.0) or errors:
        raise RuntimeError(f"writing to Kafka topic {topic!r} failed: {errors[:3] or 'flush timed out'}")
