"""Where an ingested event's CPU goes: the persist job of a Sluice task taken apart, stage by stage.

Why: issue 6 asks Sluice's steady reading rate to be 1.2 × one plain Python thread (confluent-kafka +
``json.loads``). On 2 cores that leaves Sluice 2 / 1.2 of the thread's time per event for everything it
does: fetch, hand the records to the JVM, parse, type, count, write. This script measures what each step
costs in CPU-microseconds per event, for every process involved (the JVM, Spark's Python workers that
read Kafka, the dev broker that serves it, the driver), by running the task's own ``IngestPipeline`` on
1M sample events, one step more each time:

  read     the task's Kafka source alone (``KafkaStreamSource`` through the connector framework → noop)
  parse    + ``from_json`` of the fields the example spec reads
  parse_in_worker
           the alternative: the source's Python worker parses with pyarrow's JSON reader, ``from_json``
           only gets the records pyarrow cannot take (see ``ParsedInWorkerSource``)
  json_reader
           for comparison, no Kafka: Spark's own JSON reader on the same values in a local text file, one per
           line, read into the same fields. ``from_json`` makes a Jackson parser over a ``java.io.Reader`` for
           every value (an 8 KiB buffer each, chars decoded from bytes), where the reader parses each line's
           bytes in place; ``parse`` minus ``read`` against this is what that costs
  typed    + timestamp, transforms, filter, casts and the row flags (``IngestPipeline.typed_rows``)
  persist  + row counters and the Parquet write of a persist that does not roll up (``read_and_persist``)
  rollup   a persist that rolls up (a shuffle of every row)

Each job reads every offset of the 4 partitions at once (the cheapest case: no per-job overhead) and is
run twice; the second run is reported.

    python benchmarks/stages.py --events 1000000 --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from common import emit, example_spec, log, machine, process_role
from ingest import consume_python
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import BooleanType, StringType, StructField, StructType

from sluice.stream.kafka_ranges import KafkaRangeDataSource

TOPIC = "wikipedia"
PARTITIONS = 4


def cpu_seconds_by_role() -> dict[str, float]:
    """CPU seconds used so far by this process and its descendants, by role; the dev broker is "broker"."""
    me = psutil.Process()
    totals: dict[str, float] = {}
    for process in [me, *me.children(recursive=True)]:
        try:
            cpu = process.cpu_times()
            role = process_role(process, me.pid)
            if role == "other" and "tansu" in process.name():
                role = "broker"
        except psutil.Error:
            continue
        totals[role] = totals.get(role, 0.0) + cpu.user + cpu.system
    return totals


def measure(events: int, job: Callable[[], object]) -> dict[str, Any]:
    job()  # the first run compiles and warms up
    before, started = cpu_seconds_by_role(), time.monotonic()
    job()
    wall, after = time.monotonic() - started, cpu_seconds_by_role()
    per_event = {role: (after[role] - before.get(role, 0.0)) / events * 1e6 for role in sorted(after)}
    return {"wall_s": round(wall, 2), "events_per_s": round(events / wall),
            "core_us_per_event": {role: round(us, 2) for role, us in per_event.items() if us >= 0.005},
            "core_us_per_event_total": round(sum(per_event.values()), 2)}


#: the types pyarrow's JSON reader infers whose text is what from_json gives a STRING field (a double is not:
#: 1.50 would come back as "1.5", and an integer column that met a fraction turns double)
_TEXT_TYPES = (pa.string(), pa.int64(), pa.bool_(), pa.null())
_ERROR_ROW = re.compile(r" in row (\d+)$")
#: records per read: a failed read is read again up to its bad record, so short runs waste little work
_RUN_RECORDS = 1_000


def read_json_lines(values: list[bytes]) -> pa.Table:
    """One table row per record; raises ArrowInvalid, naming the row, at the first record pyarrow cannot take."""
    text = b"\n".join(values)
    if text.count(b"\n") != len(values) - 1:
        raise pa.ArrowInvalid("a record spans lines")
    # one block, so that the row an error names counts from the first record
    table = pj.read_json(pa.BufferReader(text), read_options=pj.ReadOptions(use_threads=False, block_size=len(text) + 1))
    if table.num_rows != len(values):
        raise pa.ArrowInvalid("an empty record")
    return table


def parse_in_worker(values: list[bytes], fields: list[str]) -> tuple[pa.Array, list[pa.Array]]:
    """(parsed, one STRING column per field) for a batch of records. pyarrow fails a whole read at its first bad
    record, so the batch is read in short runs, and a failed run again up to its bad record; a bad record, and
    any record with a field of another type, is left unparsed, for from_json (so is a run whose error names no
    row)."""
    parsed: list[pa.Array] = []
    columns: list[list[pa.Array]] = [[] for _ in fields]

    def take(table: pa.Table) -> None:
        ok = pa.array([True] * table.num_rows)
        for field, column in zip(fields, columns, strict=True):
            value = table.column(field).combine_chunks() if field in table.column_names else None
            if value is None or value.type in _TEXT_TYPES:
                column.append(value.cast(pa.string()) if value is not None else pa.nulls(table.num_rows, pa.string()))
            else:
                ok = pc.and_(ok, pc.is_null(value))
                column.append(pa.nulls(table.num_rows, pa.string()))
        parsed.append(ok)

    def leave(count: int) -> None:
        parsed.append(pa.array([False] * count))
        for column in columns:
            column.append(pa.nulls(count, pa.string()))

    start = 0
    while start < len(values):
        end = min(start + _RUN_RECORDS, len(values))
        try:
            take(read_json_lines(values[start:end]))
            start = end
        except pa.ArrowInvalid as error:
            row = _ERROR_ROW.search(str(error))
            bad = start + int(row.group(1)) if row else end - 1
            if row and bad > start:
                take(read_json_lines(values[start:bad]))
            leave(bad + 1 - start if row is None else 1)
            start = bad + 1
    return pa.concat_arrays(parsed), [pa.concat_arrays(column) for column in columns]


class ParsedInWorkerSource(KafkaRangeDataSource):
    """``sluice_kafka`` whose Python worker also parses the records: the lever left on issue 6, measured. Its
    rows carry ``parsed`` and the option ``fields`` as STRING columns, filled where ``parsed`` is true."""

    @classmethod
    def name(cls) -> str:
        return "sluice_kafka_parsed_in_worker"

    def schema(self) -> StructType:
        fields = [StructField("parsed", BooleanType()), *(StructField(f, StringType()) for f in self._fields())]
        return StructType([*super().schema().fields, *fields])

    def reader(self, schema: StructType) -> DataSourceReader:
        return _ParsedInWorkerReader(super().reader(schema), self._fields(), schema)

    def _fields(self) -> list[str]:
        return json.loads(self.options["fields"])


class _ParsedInWorkerReader(DataSourceReader):
    def __init__(self, records: DataSourceReader, fields: list[str], schema: StructType) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.records, self.fields, self.arrow_schema = records, fields, to_arrow_schema(schema, timezone="UTC")

    def partitions(self) -> list[InputPartition]:
        return self.records.partitions()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        for batch in self.records.read(partition):
            parsed, columns = parse_in_worker(batch.column("value").to_pylist(), self.fields)
            yield pa.RecordBatch.from_arrays([*batch.columns, parsed, *columns], schema=self.arrow_schema)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from pyspark.sql import functions as F

    from sluice.connectors.sources.kafka_stream import KafkaStreamSource
    from sluice.connectors.spark import ConnectorRead
    from sluice.dev.sample_data import generate, produce
    from sluice.dev.tansu import DevKafkaBroker
    from sluice.spec.data_schema import DataSchema
    from sluice.stream.kafka import KafkaStream
    from sluice.task import spark_session
    from sluice.task.ingest_plan import compile_plan
    from sluice.task.pipeline import IngestPipeline, warm_up

    work = Path(tempfile.mkdtemp(prefix="sluice-bench-stages-"))
    try:
        with DevKafkaBroker(log_dir=work) as broker, contextlib.ExitStack() as reads:
            broker.create_topic(TOPIC, PARTITIONS)
            log(f"producing {args.events:,} events")
            sample = generate(args.events, seed=args.seed)
            ends = produce(broker.bootstrap_servers, TOPIC, sample, PARTITIONS)
            lines = work / "values.json"
            lines.write_bytes(b"".join(record.value + b"\n" for record in sample if b"\n" not in record.value))
            events = sum(ends.values())
            ranges = {p: (0, end) for p, end in ends.items()}
            stages: dict[str, Any] = {
                "python": measure(events, lambda: consume_python(broker.bootstrap_servers, TOPIC, ends))}

            spark = spark_session.get_or_create(app_name="bench-stages")
            spark.dataSource.register(ParsedInWorkerSource)
            warm_up(spark, work / "warm-up")
            spec = example_spec(broker.bootstrap_servers, TOPIC, TOPIC)
            plan = compile_plan(DataSchema.model_validate(spec["spec"]["dataSchema"]))
            consumer = {"bootstrap.servers": broker.bootstrap_servers}
            source = KafkaStreamSource(TOPIC, consumer, {p: 0 for p in ends}, lambda: KafkaStream(consumer, TOPIC))
            stream = reads.enter_context(ConnectorRead(spark, source, source.parallelism))
            pipeline = IngestPipeline(spark, plan, stream)

            def records() -> Any:
                """Every offset, as the task's next persist reads them: no epoch is committed, so each job reads
                the same ranges again."""
                pipeline.plan_read(ends, events)
                return pipeline.read()[1]

            def noop(df: Any) -> None:
                df.write.format("noop").mode("overwrite").save()

            fields = [field.name for field in StructType.fromDDL(plan.json_schema_ddl).fields]

            def parsed_in_worker() -> Any:
                rows = (spark.read.format(ParsedInWorkerSource.name())
                        .options(topic=TOPIC, consumerProperties=json.dumps({"bootstrap.servers": broker.bootstrap_servers}),
                                 ranges=json.dumps({str(p): list(r) for p, r in ranges.items()}), fields=json.dumps(fields))
                        .load())
                left = F.when(~F.col("parsed"), F.from_json(F.col("value").cast("string"), plan.json_schema_ddl))
                rows = rows.select(*fields, left.alias("__left"))
                return rows.select(*(F.coalesce(F.col(f), F.col("__left").getField(f)).alias(f) for f in fields))

            def parsed_in_jvm() -> Any:
                return records().select(
                    F.from_json(F.col("value").cast("string"), plan.json_schema_ddl).alias("r")).select("r.*")

            jobs: dict[str, Callable[[], object]] = {
                "read": lambda: noop(records()),
                "parse": lambda: noop(parsed_in_jvm()),
                "parse_in_worker": lambda: noop(parsed_in_worker()),
                "json_reader": lambda: noop(spark.read.schema(plan.json_schema_ddl).json(str(lines))),
                "typed": lambda: noop(pipeline.typed_rows(records())),
                "persist": lambda: pipeline.persist(records(), work / "persist", rollup=False),
                "rollup": lambda: pipeline.persist(records(), work / "rollup", rollup=True),
            }
            for name, job in jobs.items():
                log(f"stage {name}")
                stages[name] = measure(events, job)
            # the alternative is only worth its figure if it parses exactly as from_json does
            parse_in_worker_differs = parsed_in_worker().exceptAll(parsed_in_jvm()).count() + parsed_in_jvm().exceptAll(
                parsed_in_worker()).count()
            reads.close()  # the read ends before its Spark does
            spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the broker's log and a persist of every offset, twice
    python_us = stages["python"]["wall_s"] / events * 1e6
    return {
        "benchmark": "stages", "events": events, "partitions": PARTITIONS, "stages": stages,
        "parse_in_worker_rows_differing_from_parse": parse_in_worker_differs,
        # what Sluice may spend on both cores for its reading rate to be 1.2 x the Python thread's
        "core_us_per_event_budget_for_1.2x_python": round(os.cpu_count() * python_us / 1.2, 2),
        "machine": machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    args = parser.parse_args()
    result = run(args)
    if not args.json:
        for name, figures in result["stages"].items():
            log(f"{name:8s} {figures['events_per_s']:>9,}/s  {figures['core_us_per_event_total']:6.2f} core-µs/event  "
                f"{json.dumps(figures['core_us_per_event'])}")
        log(f"budget for 1.2 x python: {result['core_us_per_event_budget_for_1.2x_python']} core-µs/event")
    emit(result, args.json)


if __name__ == "__main__":
    main()
