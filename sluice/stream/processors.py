"""Stateful operators Spark's built-in ones cannot express, on ``transformWithStateInPandas`` (RocksDB state):

- keyed aggregations whose state expires when a key has been quiet for a while (Kafka Streams' and RocketMQ
  Streams' non-windowed aggregations, with a TTL so state does not grow forever);
- a Python fold per key (an accumulator of the user's, pickled in state);
- a stream joined with a table (Kafka Streams' KStream-KTable join, RocketMQ Streams' join without a window):
  each table record replaces its key's row, and each stream record is joined with the row its key has when the
  record arrives (records of one micro-batch in event-time order, table records first on a tie).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pandas as pd
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark import cloudpickle
from pyspark.sql.types import BinaryType, DataType, DoubleType, IntegerType, LongType, StructField, StructType

__all__ = ["EVENT_TIME", "SIDE", "TOMBSTONE", "FoldProcessor", "TableJoinProcessor", "TtlAggregateProcessor"]

#: the column that tells a table record ("T") from a stream record ("S") and a tombstone in a table join's input;
#: the processors' columns have no leading underscores, which pyspark's pandas conversion renames to their position
SIDE = "sluice_side"
TOMBSTONE = "D"
EVENT_TIME = "sluice_event_time"

_ACCUMULATOR = StructType([StructField("n", LongType()), StructField("s", DoubleType()),
                           StructField("lo", DoubleType()), StructField("hi", DoubleType())])


class TtlAggregateProcessor(StatefulProcessor):
    """count / sum / min / max / avg per key, emitting each changed key's values once per batch."""

    def __init__(self, key: Sequence[str], aggregators: Sequence[tuple[str, str, str | None]], output: StructType,
                 ttl_ms: int) -> None:
        self.key, self.aggregators, self.output, self.ttl_ms = list(key), list(aggregators), output, ttl_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.states = [handle.getValueState(f"acc_{name}", _ACCUMULATOR, self.ttl_ms)
                       for _, name, _ in self.aggregators]

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        batch = pd.concat(list(rows), ignore_index=True)
        out: dict[str, Any] = dict(zip(self.key, key))
        for state, (kind, name, field) in zip(self.states, self.aggregators):
            n, total, lo, hi = state.get() if state.exists() else (0, 0.0, math.inf, -math.inf)
            if field is None:  # count: every record
                n += len(batch)
            elif len(values := batch[field].dropna()):
                n += len(values)
                total, lo, hi = total + float(values.sum()), min(lo, float(values.min())), max(hi, float(values.max()))
            state.update((n, total, lo, hi))
            out[name] = _result(kind, n, total, lo, hi)
        yield pd.DataFrame([_typed(out, self.output)])

    def close(self) -> None:
        pass


def _result(kind: str, n: int, total: float, lo: float, hi: float) -> float | int | None:
    if kind == "count":
        return n
    if n == 0:
        return None
    return {"sum": total, "min": lo, "max": hi, "avg": total / n}[kind]


def _typed(row: dict[str, Any], schema: StructType) -> dict[str, Any]:
    """Long columns as ints: the accumulators are doubles, the output keeps the field's type."""
    return {f.name: int(row[f.name]) if isinstance(f.dataType, LongType) and row[f.name] is not None
            else row[f.name] for f in schema.fields}


def _plain(value: Any, kind: DataType) -> Any:
    """A pandas cell as the value state stores for its field: numpy scalars unwrapped, NaN as null, and a long
    that pandas made a float (its column had nulls) an int again."""
    value = value.item() if hasattr(value, "item") else value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value) if isinstance(kind, (LongType, IntegerType)) else value


class FoldProcessor(StatefulProcessor):
    """A user's ``add(accumulator, row)`` per key, the accumulator pickled in state; rows in event-time order."""

    def __init__(self, init: Callable[[], Any], add: Callable[[Any, dict[str, Any]], Any], key: Sequence[str],
                 time_field: str, time_name: str, output: StructType, ttl_ms: int) -> None:
        self.init_value, self.add, self.key, self.output, self.ttl_ms = init, add, list(key), output, ttl_ms
        self.time_field, self.time_name = time_field, time_name

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.accumulator = handle.getValueState("accumulator", StructType([StructField("pickled", BinaryType())]),
                                                self.ttl_ms or None)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        batch = pd.concat(list(rows), ignore_index=True).sort_values(self.time_field, kind="stable")
        accumulator = cloudpickle.loads(self.accumulator.get()[0]) if self.accumulator.exists() else self.init_value()
        for record in batch.rename(columns={self.time_field: self.time_name}).to_dict("records"):
            accumulator = self.add(accumulator, record)
        self.accumulator.update((cloudpickle.dumps(accumulator),))
        result = dict(zip(self.key, key))
        result[self.output.fieldNames()[-1]] = accumulator
        yield pd.DataFrame([result], columns=self.output.fieldNames())

    def close(self) -> None:
        pass


class TableJoinProcessor(StatefulProcessor):
    """Per key: the table's latest row in state; stream records joined with it (inner, or left with nulls)."""

    def __init__(self, time_field: str, table_schema: StructType, output: StructType, how: str) -> None:
        self.time_field, self.table_schema, self.output, self.how = time_field, table_schema, output, how

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.row = handle.getValueState("table_row", self.table_schema)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        batch = pd.concat(list(rows), ignore_index=True)
        tombstone = batch[SIDE] == TOMBSTONE
        # a data source's tombstones: the key's row is gone before the batch's rows of its new segments count
        current = self.row.get() if self.row.exists() and not tombstone.any() else None
        batch = batch[~tombstone].sort_values([self.time_field, SIDE], ascending=[True, False], kind="stable")
        joined: list[dict[str, Any]] = []
        for record in batch.to_dict("records"):
            if record[SIDE] == "T":
                current = tuple(_plain(record[f.name], f.dataType) for f in self.table_schema.fields)
            elif current is not None or self.how == "left":
                names = self.table_schema.fieldNames()
                table = dict(zip(names, current or (None,) * len(names)))
                joined.append({f.name: table[f.name] if f.name in table else record[f.name] for f in self.output})
        if current is not None:
            self.row.update(current)
        elif self.row.exists():
            self.row.clear()
        yield pd.DataFrame(joined, columns=self.output.fieldNames())

    def close(self) -> None:
        pass
