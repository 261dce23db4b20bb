"""The Spark side of a streaming task: read an offset range, parse, transform, roll up, persist;
then, at publish, merge the persists into one Parquet file per segment.

Every row is touched only by Spark (JVM expressions compiled from the spec by `ingest_plan`);
Python only sees the counters Spark observes while the job runs and the names of files it wrote.
"""

from __future__ import annotations

import json
import shutil
import uuid
import weakref
from dataclasses import dataclass, replace
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from sluice.connectors.records import ERROR, LOCATOR, system_field_sql
from sluice.segment.columns import ARRAY_FIELD
from sluice.segment.nested import FIELD_TYPES, JSON_FIELD, path_key, typed_paths
from sluice.spec.expressions import quote_identifier
from sluice.spec.granularity import Granularity
from sluice.task import persists, sketch_udfs
from sluice.task.ingest_plan import (
    BUILT_BY_PYTHON,
    DISCOVERED,
    FIELDS_MAP,
    IS_MULTI_VALUE_SQL,
    MULTI_VALUE_SQL,
    TIME,
    IngestPlan,
    IntervalsWindow,
    MessageWindow,
    json_sql,
)
from sluice.stream.kafka_ranges import KEY_ERROR, MESSAGE, METADATA_PREFIX
from sluice.task.spark_files import read_parquet, write_parquet
from sluice.task.stats import RowStats

if TYPE_CHECKING:
    from sluice.connectors.spark import ConnectorRead

@dataclass(frozen=True)
class PersistResult:
    stats: RowStats
    #: one example of an unparseable row ("partition=P offset=O: text"), for logParseExceptions
    parse_error_sample: str | None
    #: the estimated distinct rollup keys (queryGranularity time and dimensions) of the rows kept, if counted
    rollup_keys: int | None = None
    #: the string dimensions of which a row held several values
    multi_values: tuple[str, ...] = ()


@dataclass(frozen=True)
class SegmentFile:
    bucket_start_millis: int
    path: Path
    num_rows: int
    #: the file's columns, in order (discovered dimensions differ from file to file)
    columns: tuple[str, ...] = ()

    def dimensions(self, metrics: Sequence[str]) -> list[str]:
        return [name for name in self.columns if name != TIME and name not in metrics]


@dataclass(frozen=True)
class _PersistColumns:
    """The columns of a persist job over typed rows (see IngestPipeline.typed_rows)."""

    #: the row counters, observed over every row read
    counters: list[Column]
    #: the estimated distinct rollup keys of the rows kept, observed when asked for
    rollup_keys: Column
    kept: Column
    #: `__time` at queryGranularity
    granular_time: Column
    #: `__time` and the dimensions
    keys: list[Column]
    aggregations: list[Column]
    #: each metric's value of one row, named as the metric (rows not rolled up); None when only an aggregation
    #: makes it (a sketch)
    metric_values: list[Column] | None


class RowPipeline:
    """A task's rows on a shared SparkSession: records in, persists out (each one Spark job), then merges into
    segment files. Streaming and batch tasks differ only in where the records come from."""

    def __init__(self, spark: SparkSession, plan: IngestPlan, window: MessageWindow | IntervalsWindow = MessageWindow()):
        self.spark = spark
        self.plan = plan
        #: the task's message rejection window; rows outside it are thrownAway like rows the filter drops
        self.window = window
        self._typed: tuple[DataFrame, DataFrame] | None = None  # (raw records, their typed rows)
        self._columns: _PersistColumns | None = None
        self._sql_columns: dict[str, Column] = {}
        if any(a.spec.type in BUILT_BY_PYTHON for a in plan.aggregators):
            sketch_udfs.register(spark)

    def typed_rows(self, raw: DataFrame) -> DataFrame:
        """Raw records -> typed rows: `__time`, the dimensions, the metric inputs (`__in_<metric>`), and the
        flags `__unparseable`, `__thrown`, `__perr`, `__bytes` and `__sample`, nothing else.

        The records are a Kafka range's (`partition`, `offset`, `value`), or a connector's (`records.py`: a
        JSON `value`, or one string column per field with a reader's parse `__error`). `__sample` ("partition=P
        offset=O: text", "path:line: text") is built only for unparseable rows: built for every row, its copy of
        the record text cost more than the rest of the parse. Only these columns go on: the row counters are
        observed on them, and an observation copies every column its rows carry.
        """
        plan, sql = self.plan, self._sql
        parsed, text = _parsed_fields(raw, plan)
        corrupt = f"`{plan.corrupt_column}` IS NOT NULL OR " if plan.corrupt_column else ""
        rows = parsed.withColumn(TIME, sql(plan.time_sql)).withColumn(
            "__unparseable", sql(f"__null_record OR {corrupt}`{TIME}` IS NULL"))
        rows = rows.withColumn("__sample", sql(f"CASE WHEN __unparseable THEN concat({LOCATOR}, ': ', "
                                               f"substring(CAST({text} AS STRING), 1, 300)) END"))
        if plan.transforms:
            rows = rows.withColumns({name: sql(expression) for name, expression in plan.transforms.items()})
        # Druid checks the window on the transformed timestamp, like the filter sees transformed columns
        dropped = f"NOT coalesce({plan.filter_sql}, FALSE)" if plan.filter_sql else "FALSE"
        thrown = f"coalesce({self.window.outside_sql()}, FALSE) OR {dropped}"
        perr = " OR ".join(f"({quote_identifier(raw_col)} IS NOT NULL AND {expression} IS NULL)"
                           for raw_col, expression in plan.parse_checks) or "FALSE"
        rows = rows.withColumns({"__thrown": sql(thrown), "__perr": sql(perr)})
        if plan.discovery:
            rows = rows.withColumn(DISCOVERED, sql(plan.discovery.entries_sql()))
        rows = rows.withColumns({name: sql(expression) for name, expression in plan.value_arrays.items()})
        rows = rows.withColumns({name: sql(expression) for name, expression in plan.typed_columns.items()})
        return rows.select(*_columns(TIME, *plan.dimensions, *(f"__in_{m}" for m in plan.metrics)),
                           *([DISCOVERED] if plan.discovery else []),
                           "__unparseable", "__thrown", "__perr", "__bytes", "__sample")

    def _sql(self, expression: str) -> Column:
        """A column of Spark SQL, built once per pipeline: building one costs about ten py4j round trips, and each
        of a batch task's subtasks builds the same typed rows."""
        column = self._sql_columns.get(expression)
        if column is None:
            column = self._sql_columns[expression] = F.expr(expression)
        return column

    def rolled_up(self, rows: DataFrame, rollup: bool | None = None) -> DataFrame:
        """The rows kept (parsed, not thrown away) at queryGranularity, rolled up unless `rollup` is False (then
        each row keeps its own metric values, and the merge at publish rolls them up). Discovered dimensions are
        still their entries (DISCOVERED), which group like the columns they hold."""
        c = self._persist_columns()
        return self._aggregated(rows.where(c.kept).withColumn(TIME, c.granular_time), rollup is not False)

    def _aggregated(self, kept: DataFrame, rollup: bool, *keys: str) -> DataFrame:
        """`kept` rows with their metrics' stored values: rolled up when both the spec and `rollup` say so, else each
        row alone (a sketch of one row is still an aggregation)."""
        c = self._persist_columns()
        if self.plan.discovery:
            keys = (*keys, DISCOVERED)
        if self.plan.rollup and (rollup or c.metric_values is None):
            return kept.groupBy(*keys, *c.keys).agg(*c.aggregations)
        if c.metric_values is None:
            return (kept.withColumn("__row", F.monotonically_increasing_id())
                    .groupBy(*keys, *c.keys, "__row").agg(*c.aggregations).drop("__row"))
        return kept.select(*keys, *c.keys, *c.metric_values)

    def persist(self, raw: DataFrame, persist_dir: Path, rollup: bool = True, count_keys: bool = False) -> PersistResult:
        """One Spark job: the records are read once; the counters are observed while the rows are written.

        `rollup=False` writes the kept rows as they are: when they hardly combine, rolling them up here is a
        shuffle of every row for nothing, and the merge at publish rolls them up anyway. `count_keys` estimates
        how many rows they would roll up into (rollup_policy). Persists are written without Parquet
        dictionaries: they are read once or twice, and dictionary-encoding high-cardinality strings cost more
        than the rest of the write.

        Discovered dimensions are columns of a persist, so their names must be known before it is written: the
        rows are written with their entries first, then (two small jobs over that file) their names found and the
        entries drawn out into columns; a source is read only once.
        """
        rows, observation = self._observed(raw, count_keys)
        target = persist_dir.with_name(f"{persist_dir.name}-entries") if self.plan.discovery else persist_dir
        _write_persist(self.rolled_up(rows, rollup), target)
        discovered: tuple[str, ...] = ()
        if self.plan.discovery:
            entries = read_parquet(self.spark, [target])
            drawn_out, discovered = _drawn_out(entries, len(self._persist_columns().keys),
                                               multi_values=not self.plan.discovery.typed)
            _write_persist(drawn_out, persist_dir)
            shutil.rmtree(target, ignore_errors=True)
        result = self._persist_result(observation)
        if discovered:
            result = replace(result, multi_values=(*result.multi_values, *discovered))
        persists.write_multi_values(persist_dir, result.multi_values)  # for the merge at publish, also after a restore
        return result

    def write_segments(self, subtasks: Sequence[DataFrame], segment_granularity: Granularity,
                       max_rows_per_segment: int, staging_dir: Path, perfect_rollup: bool = False
                       ) -> tuple[PersistResult, list[SegmentFile]]:
        """A batch task's one job (dynamic partitioning): read, parse, roll up and write the segment files at once,
        where a streaming task persists many reads and merges them at publish.

        `subtasks` are the records each of the task's subtasks reads (`ConnectorRead.subtasks`). As Druid's
        parallel subtasks do, each rolls up its own rows and writes its own segments of each time chunk (more where
        one would exceed maxRowsPerSegment), in one Spark task and with no shuffle: dynamic partitioning is Druid's
        best-effort rollup, where a key that two subtasks read is a row in each of their segments, which queries
        add up. A shuffle for perfect rollup moved nearly every row for nothing where rows hardly combine.
        `perfect_rollup` has it anyway (a SQL GROUP BY's rows are its groups): a `groupBy` over every subtask's rows,
        whose shuffle puts all rows of a key in one of as many writers. Discovered and `auto` dimensions take a
        persist and its merge instead: their names and types are known only once the rows are read."""
        if self.plan.discovery or self.plan.auto_dimensions:
            persist_dir = staging_dir.with_name(f"{staging_dir.name}-persist")
            result = self.persist(reduce(DataFrame.union, subtasks), persist_dir)
            return result, self.merge([persist_dir], segment_granularity, max_rows_per_segment, staging_dir)
        c = self._persist_columns()
        if perfect_rollup:  # the groupBy's shuffle puts every row of a key in one writer
            branches = [reduce(DataFrame.union, subtasks)]
        else:  # one Spark partition each: the rollup needs no shuffle to see every row of a key
            branches = [records.coalesce(1) for records in subtasks]
        rolled_up, observations = [], []
        for records in branches:
            rows, observation = self._observed(records, count_keys=False)
            kept = rows.where(c.kept).withColumn(TIME, c.granular_time).withColumn(
                "__bucket", _bucket_millis(segment_granularity))
            rolled_up.append(self._aggregated(kept, True, "__bucket"))
            observations.append(observation)
        aggregated = reduce(DataFrame.union, rolled_up)
        if perfect_rollup:
            aggregated = aggregated.coalesce(len(subtasks))  # a writer per subtask (coalesce never adds Spark tasks)
        _write_buckets(aggregated, max_rows_per_segment, staging_dir)
        result = self._combined([self._persist_result(o) for o in observations])
        # known once the rows are read: which columns hold several values, which paths of a json column hold strings
        # and longs; the files are written again (reading the source again could read other records)
        if result.multi_values or _json_columns(aggregated):
            final = staging_dir.with_name(f"{staging_dir.name}-final")
            rows = _as_lists(read_parquet(self.spark, [staging_dir]), result.multi_values)
            _write_buckets(with_field_columns(rows), max_rows_per_segment, final)
            shutil.rmtree(staging_dir)
            final.rename(staging_dir)
        return result, _segment_files(staging_dir)

    def _observed(self, raw: DataFrame, count_keys: bool) -> tuple[DataFrame, Observation]:
        """The typed rows of `raw` (analysed once per DataFrame), with the row counters observed on them."""
        if self._typed is None or self._typed[0] is not raw:
            self._typed = (raw, self.typed_rows(raw))
        c = self._persist_columns()
        observation = Observation(f"rowStats-{uuid.uuid4().hex}")
        return self._typed[1].observe(observation, *c.counters, *([c.rollup_keys] if count_keys else [])), observation

    def _persist_result(self, observation: Observation) -> PersistResult:
        metrics = observation.get
        stats = RowStats(
            processed=metrics["processed"],
            processed_with_error=metrics["processedWithError"],
            thrown_away=metrics["thrownAway"],
            unparseable=metrics["unparseable"],
            processed_bytes=metrics["processedBytes"],
        )
        multi_values = tuple(name for i, name in enumerate(self.plan.string_dimensions)
                             if (metrics[f"multiValues{i // _MASK_BITS}"] or 0) >> i % _MASK_BITS & 1)
        return PersistResult(stats, metrics["sample"], metrics.get("rollupKeys"), multi_values)

    def _combined(self, results: Sequence[PersistResult]) -> PersistResult:
        """The counters observed on each subtask of a job as one: what one observation of all its rows would give."""
        several = {name for r in results for name in r.multi_values}
        return PersistResult(sum((r.stats for r in results), RowStats()),
                             min((r.parse_error_sample for r in results if r.parse_error_sample), default=None),
                             multi_values=tuple(name for name in self.plan.string_dimensions if name in several))

    def _persist_columns(self) -> _PersistColumns:
        """Built once: each column costs py4j round trips, and building them for every job delayed each job's
        start by about 40 ms more (a small job takes 400 ms)."""
        if self._columns is None:
            plan = self.plan
            keys = _columns(TIME, *plan.dimensions)
            kept = "NOT __unparseable AND NOT __thrown"
            self._columns = _PersistColumns(
                counters=[
                    F.count_if(F.expr("__unparseable")).alias("unparseable"),
                    F.count_if(F.expr("NOT __unparseable AND __thrown")).alias("thrownAway"),
                    F.count_if(F.expr(f"{kept} AND __perr")).alias("processedWithError"),
                    F.count_if(F.expr(f"{kept} AND NOT __perr")).alias("processed"),
                    F.coalesce(F.sum("__bytes"), F.lit(0)).alias("processedBytes"),
                    F.min("__sample").alias("sample"),
                    *(multi_value_mask(kept, plan.string_dimensions[start:start + _MASK_BITS])
                      .alias(f"multiValues{start // _MASK_BITS}")
                      for start in range(0, len(plan.string_dimensions), _MASK_BITS)),
                ],
                rollup_keys=F.approx_count_distinct(F.when(F.expr(kept), F.xxhash64(
                    F.expr(plan.query_granularity_sql), *keys[1:]))).alias("rollupKeys"),
                kept=F.expr(kept),
                granular_time=F.expr(plan.query_granularity_sql),
                keys=keys,
                aggregations=[F.expr(a) for a in plan.rollup_aggregations(False)],
                metric_values=None if (values := plan.row_values()) is None else [F.expr(v) for v in values],
            )
        return self._columns

    @staticmethod
    def bucket_rows(persist_dir: Path, granularity: Granularity) -> dict[int, int]:
        """A persist's rolled-up rows per segmentGranularity bucket (epoch millis): what maxRowsPerSegment is
        compared with. Counted from the `__time` column of the files Spark wrote, by distinct timestamp first, so
        the Python loop runs over distinct times (few, after queryGranularity), not over rows."""
        files = sorted(persist_dir.glob("*.parquet"))
        if not files:
            return {}
        times = pa.concat_arrays([chunk for f in files for chunk in pq.read_table(f, columns=[TIME])[TIME].chunks])
        counts: dict[int, int] = {}
        for item in pc.value_counts(times.cast(pa.timestamp("ms", tz="UTC"))).to_pylist():
            key = int(granularity.bucket_start(item["values"]).timestamp() * 1000)
            counts[key] = counts.get(key, 0) + item["counts"]
        return counts

    def merge(self, persist_dirs: list[Path], segment_granularity: Granularity, max_rows_per_segment: int,
              staging_dir: Path) -> list[SegmentFile]:
        """Combine the persists (rolled-up rows merge again) into files of at most maxRowsPerSegment rows,
        one or more per segmentGranularity bucket."""
        _write_buckets(with_field_columns(self.merged_rows(persist_dirs, segment_granularity)), max_rows_per_segment,
                       staging_dir)
        return _segment_files(staging_dir)

    def merged_rows(self, persist_dirs: list[Path], segment_granularity: Granularity) -> DataFrame:
        """The persists' rows rolled up together (when the spec rolls up), with `__bucket`: the epoch millis of
        their segmentGranularity bucket. Rows of one bucket are in one Spark partition."""
        plan = self.plan
        # persists that discovered different dimensions are read as one table of all of them (null where absent)
        rows = read_parquet(self.spark, persist_dirs, merge_schema=plan.discovery is not None).withColumn(
            "__bucket", _bucket_millis(segment_granularity))
        discovered = sorted(c for c in rows.columns if c not in {TIME, "__bucket", *plan.dimensions, *plan.metrics})
        inferred = [*plan.auto_dimensions, *(discovered if plan.discovery and plan.discovery.typed else [])]
        if inferred:
            rows = _inferred_types(rows, inferred)
        # one shuffle: rows partitioned by bucket are already clustered for a rollup whose keys include it
        rows = rows.repartition("__bucket")
        keys = _columns(TIME, *plan.dimensions, *discovered)
        if plan.rollup:  # persists may hold rows not rolled up, and rows of two persists may combine
            rows = rows.groupBy(F.col("__bucket"), *keys).agg(*(F.expr(a) for a in plan.rollup_aggregations(True)))
        else:
            rows = rows.select("__bucket", *keys, *_columns(*plan.metrics))
        return _as_lists(rows, persists.multi_values(persist_dirs))


class IngestPipeline(RowPipeline):
    """A streaming task's rows: its Kafka partitions read through the connector framework (`KafkaStreamSource`), one
    epoch per persist, over one DataFrame; then merges.

    JSON values go to Spark as bytes and are parsed by `from_json`; any other format is parsed by the source's
    readers in the executors (kafka_ranges' shapes).

    `spark_tasks` bounds the Spark tasks of a persist job (`spark_tasks_per_job`); None: one per partition read."""

    def __init__(self, spark: SparkSession, plan: IngestPlan, stream: ConnectorRead,
                 window: MessageWindow = MessageWindow(), spark_tasks: int | None = None):
        super().__init__(spark, plan, window)
        self.stream = stream
        self.spark_tasks = spark_tasks
        self._records: DataFrame | None = None

    def plan_read(self, end_offsets: Mapping[int, int], max_records: int) -> dict[int, tuple[int, int]]:
        """The next persist's offset ranges, partition -> [start, end), as the source's coordinator plans them from
        the offsets read so far: empty when there is nothing new to read."""
        return self.stream.host.run_in_coordinator(lambda c: c.plan_epoch(dict(end_offsets), max_records))

    def read(self) -> tuple[int, DataFrame]:
        """The planned ranges' records, for the next Spark job this thread starts, and that job's epoch.

        Always the same DataFrame, built and analysed once: the epoch travels with the job as a local property.
        Building and analysing the read, parse and rollup anew took longer than a job over a few thousand records.
        """
        epoch = self.stream.next_epoch()
        if self._records is None:
            records = self.stream.dataframe()
            self._records = records if self.spark_tasks is None else records.coalesce(self.spark_tasks)
        return epoch, self._records

    def read_and_persist(self, persist_dir: Path, rollup: bool = True, count_keys: bool = False
                         ) -> tuple[int, PersistResult]:
        """Read the planned ranges into one persist (`persist`); `commit` its epoch once it is kept."""
        epoch, records = self.read()
        return epoch, self.persist(records, persist_dir, rollup, count_keys)

    def commit(self, epoch: int) -> None:
        """The epoch's persist is kept: the coordinator plans the next read from its ends."""
        self.stream.checkpoint_complete(epoch)


#: string dimensions per multi-value mask (a BIGINT)
_MASK_BITS = 62


def multi_value_mask(kept: str, names: Sequence[str]) -> Column:
    """Which of these string dimensions (at most _MASK_BITS) a kept row holds several values of, as the bits of one
    BIGINT or-ed over the rows: one aggregate instead of a count per dimension costs half as much
    (benchmarks/multi_value_detection.py)."""
    bits = " | ".join(f"IF({IS_MULTI_VALUE_SQL.format(c=quote_identifier(name))}, {1 << i}, 0)"
                      for i, name in enumerate(names))
    return F.expr(f"bit_or(CASE WHEN {kept} THEN {bits} ELSE 0 END)")


def _write_persist(rows: DataFrame, persist_dir: Path) -> None:
    write_parquet(rows, persist_dir, dictionary=False)


def _drawn_out(rows: DataFrame, keys: int, multi_values: bool) -> tuple[DataFrame, tuple[str, ...]]:
    """Rows with their discovered entries (DISCOVERED) as columns, in name order, after the first `keys` other
    columns (`__time` and the listed dimensions); with `multi_values`, the names of those a row holds several values
    of (a JSON array, `Discovery.entries_sql`), found by the same job."""
    entry = F.explode(F.col(DISCOVERED)).alias("entry")
    several = F.expr(IS_MULTI_VALUE_SQL.format(c="entry.value")) if multi_values else F.lit(False)
    found = rows.select(entry).groupBy(F.col("entry.key").alias("name")).agg(F.bool_or(several).alias("several"))
    names = sorted((r.name, r.several) for r in found.collect())
    fields = F.map_from_entries(DISCOVERED)
    rest = [name for name in rows.columns if name != DISCOVERED]
    drawn_out = rows.select(*map(_column, rest[:keys]), *(fields[name].alias(name) for name, _ in names),
                            *map(_column, rest[keys:]))
    return drawn_out, tuple(name for name, several in names if several)


#: a text column's value as an array of JSON values (null unless it is a JSON array), and its elements' types
_ARRAY = "try_variant_get(try_parse_json({c}), '$', 'array<variant>')"
_ELEMENTS_ARE = "forall({a}, e -> schema_of_variant(e) IN ({kinds}){more})"
_LONG, _NUMBER = "{c} RLIKE '^-?[0-9]{{1,18}}$'", "TRY_CAST({c} AS DOUBLE) IS NOT NULL"
#: Druid's `auto` types in the order they are tried, and the test that a column's values all fit one
_AUTO_TYPES = {
    "BIGINT": f"count({{c}}) > 0 AND bool_and({{c}} IS NULL OR {_LONG})",
    "DOUBLE": f"count({{c}}) > 0 AND bool_and({{c}} IS NULL OR {_NUMBER})",
    "JSON": "coalesce(bool_or({c} LIKE '{{%' AND try_parse_json({c}) IS NOT NULL)"
            " OR bool_or(exists({a}, e -> schema_of_variant(e) LIKE 'OBJECT%' OR schema_of_variant(e) LIKE 'ARRAY%'))"
            ", FALSE)",
    "ARRAY<BIGINT>": "bool_or({a} IS NOT NULL) AND bool_and("
                     + _ELEMENTS_ARE.format(a="{a}", kinds="'BIGINT', 'VOID'", more="")
                     + f" OR {{a}} IS NULL AND ({{c}} IS NULL OR {_LONG}))",
    "ARRAY<DOUBLE>": "bool_or({a} IS NOT NULL) AND bool_and("
                     + _ELEMENTS_ARE.format(a="{a}", kinds="'BIGINT', 'DOUBLE', 'FLOAT', 'VOID'",
                                            more=" OR schema_of_variant(e) LIKE 'DECIMAL%'")
                     + f" OR {{a}} IS NULL AND ({{c}} IS NULL OR {_NUMBER}))",
    "ARRAY<STRING>": "coalesce(bool_or({a} IS NOT NULL), FALSE)",
}


def _inferred_types(rows: DataFrame, columns: list[str]) -> DataFrame:
    """Druid's `auto` typing of text columns, from their values (one Spark job): the least restrictive type that
    holds every value (long, then double, then string); json as soon as one value is a JSON object or an array
    holding one; else, when a value is a JSON array, an array of the least restrictive type of the elements and the
    other values (a value that is not an array is an array of one). A column without a value stays string."""
    def sql(template: str, name: str) -> str:
        c = quote_identifier(name)
        return template.format(c=c, a=_ARRAY.format(c=c))

    checks = [(name, kind, F.expr(sql(test, name))) for name in columns for kind, test in _AUTO_TYPES.items()]
    found = rows.select(*(check.alias(f"c{i}") for i, (_, _, check) in enumerate(checks))).first()
    holds = {(name, kind): bool(value) for (name, kind, _), value in zip(checks, found)}
    typed: dict[str, Column] = {}
    for name in columns:
        kind = next((k for k in _AUTO_TYPES if holds[name, k]), None)
        if kind == "JSON":
            typed[name] = F.expr(json_sql(quote_identifier(name)))
        elif kind is not None and kind.startswith("ARRAY<"):
            element = kind[len("ARRAY<"):-1]
            array = sql(f"CASE WHEN {{a}} IS NOT NULL THEN transform({{a}}, e -> variant_get(e, '$', '{element}'))"
                        f" WHEN {{c}} IS NOT NULL THEN array(CAST({{c}} AS {element})) END", name)
            if element == "STRING":  # in a struct, not to be read as a multi-value string (segment/columns.py)
                present = f"{quote_identifier(name)} IS NOT NULL"
                array = f"CASE WHEN {present} THEN named_struct('{ARRAY_FIELD}', {array}) END"
            typed[name] = F.expr(array)
        elif kind is not None:
            typed[name] = _column(name).cast(kind)
    return rows.withColumns(typed)


def _as_lists(rows: DataFrame, dimensions: Sequence[str]) -> DataFrame:
    """`rows` with the multi-value `dimensions` as lists of strings: their segment columns."""
    return rows.withColumns({name: F.expr(MULTI_VALUE_SQL.format(c=quote_identifier(name))) for name in dimensions})


def _bucket_millis(segment_granularity: Granularity) -> Column:
    """`__bucket`: the epoch millis of a row's segmentGranularity bucket."""
    return F.expr(f"unix_millis({segment_granularity.spark_sql(f'`{TIME}`')})")


def write_segment_files(rows: DataFrame, segment_granularity: Granularity, max_rows_per_segment: int,
                        staging_dir: Path) -> list[SegmentFile]:
    """Rows already final (`__time`, dimensions, metrics) as segment files, one or more per bucket: a stream job's
    micro-batch."""
    rows = rows.withColumn("__bucket", _bucket_millis(segment_granularity)).repartition("__bucket")
    _write_buckets(rows, max_rows_per_segment, staging_dir)
    return _segment_files(staging_dir)


def _write_buckets(rows: DataFrame, max_rows_per_segment: int, staging_dir: Path) -> None:
    """One directory per `__bucket`, files of at most maxRowsPerSegment rows sorted by time: the segments."""
    write_parquet(rows.sortWithinPartitions("__bucket", TIME), staging_dir, partition_by=["__bucket"],
                  max_rows_per_file=max_rows_per_segment)


def with_field_columns(rows: DataFrame) -> DataFrame:
    """The json dimensions of `rows` in Druid's nested-column layout (segment/nested.py): beside each one's text, a
    field column per path that holds a string or a long in every row, the paths found by one Spark job (so `rows`
    must be read again: from files, not from a source)."""
    columns = _json_columns(rows)
    if not columns:
        return rows
    texts = {name: f"{quote_identifier(name)}.{JSON_FIELD}" for name in columns}
    objects = "schema_of_variant_agg(try_parse_json({t})) FILTER (WHERE startswith({t}, '{{'))"
    schemas = rows.select(*(F.expr(objects.format(t=text)) for text in texts.values())).first()
    typed = {}
    for (name, text), schema in zip(texts.items(), schemas):
        fields = [f"'{path_key(parts)}', variant_get(try_parse_json({text}), '{_variant_path(parts)}', "
                  f"'{FIELD_TYPES[kind]}')" for parts, kind in typed_paths(schema or "")]
        if fields:
            typed[name] = F.expr(f"CASE WHEN {text} IS NOT NULL THEN named_struct('{JSON_FIELD}', {text}, "
                                 f"{', '.join(fields)}) END")
    return rows.withColumns(typed)


def _json_columns(rows: DataFrame) -> list[str]:
    """The json dimensions of `rows` not yet in the nested layout: a struct of their text alone."""
    return [field.name for field in rows.schema.fields
            if isinstance(field.dataType, StructType) and field.dataType.fieldNames() == [JSON_FIELD]]


def _variant_path(parts: list[str]) -> str:
    """Spark's variant path to a field (names never hold a quote: typed_paths leaves those out)."""
    return "$" + "".join(f'["{part}"]' for part in parts)


def _segment_files(staging_dir: Path) -> list[SegmentFile]:
    files = []
    for path in sorted(staging_dir.glob("__bucket=*/*.parquet")):
        metadata = pq.ParquetFile(path).metadata
        files.append(SegmentFile(int(path.parent.name.split("=", 1)[1]), path, metadata.num_rows,
                                 tuple(metadata.schema.to_arrow_schema().names)))
    return files


def _parsed_fields(raw: DataFrame, plan: IngestPlan) -> tuple[DataFrame, str]:
    """The record's raw fields as strings, next to `__locator`, `__bytes` and `__null_record` (nothing could be
    parsed), then the input source's system fields; and the SQL of the record's text for samples. The text is an
    expression over those columns, not a column: only an unparseable row computes it (a reader's fields joined
    again)."""
    parsed, text = _record_fields(raw, plan)
    if not plan.system_fields:
        return parsed, text
    return parsed.withColumns({name: F.expr(system_field_sql(name)) for name in plan.system_fields}), text


def _record_fields(raw: DataFrame, plan: IngestPlan) -> tuple[DataFrame, str]:
    if plan.discovery and (ERROR in raw.columns or KEY_ERROR in raw.columns):
        raise ValueError("dimensions are discovered in JSON records only; list the dimensions for this inputFormat")
    if ERROR in raw.columns:  # a reader parsed the records: one string column per field
        # one SQL projection: built from Columns, its hundred-odd py4j round trips took 0.2 s of every subtask
        q = quote_identifier
        fields = [q(f) if f in raw.columns else f"CAST(NULL AS STRING) AS {q(f)}" for f in plan.fields]
        if MESSAGE in raw.columns:  # Kafka messages: samples and processedBytes are of the message, as for JSON
            text, size = q(MESSAGE), f"coalesce(octet_length({q(MESSAGE)}), 0)"
            carried = MESSAGE
        else:
            read = [q(f) for f in plan.fields if f in raw.columns]
            joined = ", ".join(["NULL", *(f"coalesce({f}, '')" for f in read)])
            text = f"coalesce({ERROR}, concat_ws(',', {joined}))"
            size = " + ".join(["0", *(f"coalesce(octet_length({f}), 0)" for f in read)])
            carried = ERROR
        return raw.selectExpr(LOCATOR, carried, f"CAST({size} AS BIGINT) AS __bytes",
                              f"{ERROR} IS NOT NULL AS __null_record", *fields), text
    if KEY_ERROR in raw.columns:
        return _blended_json_fields(raw, plan), "__value"
    locator = F.col(LOCATOR) if LOCATOR in raw.columns else F.concat(
        F.lit("partition="), F.col("partition"), F.lit(" offset="), F.col("offset"))
    parsed = raw.select(
        locator.alias(LOCATOR),
        F.col("value").alias("__value"),
        F.coalesce(F.octet_length("value"), F.lit(0)).cast("bigint").alias("__bytes"),
        *_json_parse(plan),
    ).select(LOCATOR, "__value", "__bytes", F.col("__r").isNull().alias("__null_record"), "__r.*",
             *(F.col(f"__path_{i}").alias(name) for i, (name, _) in enumerate(plan.json_paths)),
             *([FIELDS_MAP] if plan.discovery else []))
    if plan.json_absent:
        parsed = parsed.withColumns({name: F.lit(None).cast("string") for name in plan.json_absent})
    return parsed, "__value"


def _json_parse(plan: IngestPlan) -> list[Column]:
    """`__r` (the fields from_json reads) and `__path_<i>` (each flattenSpec path) of a JSON `value`."""
    text = F.col("value").cast("string")
    return [F.from_json(text, plan.json_schema_ddl,
                        {"columnNameOfCorruptRecord": plan.corrupt_column} if plan.corrupt_column else {}).alias("__r"),
            *(F.get_json_object(text, path).alias(f"__path_{i}") for i, (_, path) in enumerate(plan.json_paths)),
            *([F.from_json(text, "map<string,string>").alias(FIELDS_MAP)] if plan.discovery else [])]


def _blended_json_fields(raw: DataFrame, plan: IngestPlan) -> DataFrame:
    """A kafka inputFormat's JSON values (kafka_ranges): parsed as plain JSON values are, then each field the
    metadata supplies (`kafka:<field>`) fills in where the payload has no value. A tombstone (no value) is a row
    of the metadata; a key that did not parse makes the record unparseable, its sample the key's error."""
    metadata = {c[len(METADATA_PREFIX):]: c for c in raw.columns if c.startswith(METADATA_PREFIX)}
    parsed = raw.select(
        F.concat(F.lit("partition="), F.col("partition"), F.lit(" offset="), F.col("offset")).alias(LOCATOR),
        F.coalesce(F.col(KEY_ERROR), F.col("value").cast("string")).alias("__value"),
        F.coalesce(F.octet_length("value"), F.lit(0)).cast("bigint").alias("__bytes"),
        F.col("value").isNotNull().alias("__has_value"), KEY_ERROR, *_columns(*metadata.values()), *_json_parse(plan),
    ).select(LOCATOR, "__value", "__bytes",
             ((F.col("__r").isNull() & F.col("__has_value")) | F.col(KEY_ERROR).isNotNull()).alias("__null_record"),
             "__r.*", *(F.col(f"__path_{i}").alias(name) for i, (name, _) in enumerate(plan.json_paths)),
             *_columns(*metadata.values()))
    if plan.json_absent:
        parsed = parsed.withColumns({name: F.lit(None).cast("string") for name in plan.json_absent})
    parsed = parsed.withColumns({field: F.coalesce(_column(field), _column(column)) for field, column in metadata.items()})
    return parsed.drop(*_columns(*metadata.values()))


def _column(name: str) -> Column:
    """A column by its exact name: Druid names may contain dots, which Spark would read as struct access."""
    return F.col(quote_identifier(name))


def _columns(*names: str) -> list[Column]:
    return [_column(name) for name in names]


#: sessions `warm_up` has run in: their JVM and Python workers stay warm for every node of the process
_WARM: weakref.WeakSet[SparkSession] = weakref.WeakSet()


def warm_up(spark: SparkSession, work_dir: Path) -> None:
    """Run a small connector read, persist and merge once per session, so that the first read of the first task is
    not the one that starts Spark's Python workers and compiles its code: a cold first job took ten times a warm
    one."""
    if spark in _WARM:
        return
    from sluice.connectors.sources.inline import InlineSource
    from sluice.connectors.spark import ConnectorRead
    from sluice.spec.data_schema import DataSchema
    from sluice.spec.granularity import parse_granularity
    from sluice.spec.input_format import JsonInputFormat
    from sluice.spec.input_source import InlineInputSource
    from sluice.task.ingest_plan import compile_plan

    schema = DataSchema.model_validate({
        "dataSource": "warm_up", "timestampSpec": {"column": "time", "format": "iso"},
        "dimensionsSpec": {"dimensions": ["page", "flag"]},
        "metricsSpec": [{"type": "count", "name": "count"}, {"type": "longSum", "name": "added", "fieldName": "added"}],
        "granularitySpec": {"segmentGranularity": "HOUR", "queryGranularity": "MINUTE"}})
    lines = [json.dumps({"time": f"2024-01-01T00:{i % 60:02d}:00Z", "page": f"p{i % 7}", "flag": i % 2 == 0,
                         "added": i}) for i in range(200)] + ["not json"]
    plan = compile_plan(schema)
    pipeline = RowPipeline(spark, plan)
    source = InlineSource(InlineInputSource(type="inline", data="\n".join(lines)), JsonInputFormat(type="json"),
                          plan.fields)
    for rollup in (True, False):  # through the connector data source's Python workers, as a task reads
        with ConnectorRead(spark, source, 1) as read:
            pipeline.persist(read.dataframe(), work_dir / f"persist-{rollup}", rollup, count_keys=not rollup)
    pipeline.merge([work_dir / "persist-True", work_dir / "persist-False"], parse_granularity("HOUR"), 1000,
                   work_dir / "staging")
    _WARM.add(spark)
