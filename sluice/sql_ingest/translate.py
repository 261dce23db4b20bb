"""An INSERT or REPLACE statement as an `index_parallel` task payload (dataSchema, ioConfig, tuningConfig, context).

Columns bind by name: `__time` is the row timestamp (a timestampSpec on the source column, or an expression
transform), other plain columns are dimensions typed from the source's signature, expressions are expression
transforms; with GROUP BY the keys are the dimensions (a TIME_FLOOR of `__time` is the queryGranularity) and the
aggregates the metrics (rollup). INSERT appends; REPLACE overwrites the OVERWRITE range through the context key
`sqlReplaceTimeChunks` ("all", or the intervals), as Druid's SQL layer marks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from sluice.spec.context import as_bool, context_value
from sluice.sql_ingest.expressions import to_druid_expression
from sluice.sql_ingest.filters import (
    TIME,
    conjuncts,
    mentions_time,
    time_bounds,
    to_dim_filter,
)
from sluice.sql_ingest.parse import EXTERNAL, IngestStatement, invalid, parse_statement
from sluice.sql_ingest.sources import Catalog, Source, druid_source, external_source
from sluice.sql_ingest.timing import (
    ETERNITY,
    TimeColumn,
    interval_text,
    partition_granularity,
    time_column,
)

#: MSQ's defaults (docs/multi-stage-query/reference.md, context parameters)
DEFAULT_ROWS_PER_SEGMENT = 3_000_000
DEFAULT_MAX_NUM_TASKS = 2
DEFAULT_MAX_PARSE_EXCEPTIONS = 0
_METRIC_TYPES = {("SUM", "long"): "longSum", ("SUM", "double"): "doubleSum", ("SUM", "float"): "floatSum",
                 ("MIN", "long"): "longMin", ("MIN", "double"): "doubleMin", ("MIN", "float"): "floatMin",
                 ("MAX", "long"): "longMax", ("MAX", "double"): "doubleMax", ("MAX", "float"): "floatMax"}


@dataclass
class _Output:
    """What the SELECT list makes: the dataSchema parts, in the statement's column order."""

    dimensions: list[dict[str, Any]] = field(default_factory=list)
    transforms: list[dict[str, Any]] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    time: TimeColumn | None = None


def translate(sql: str, context: dict[str, Any] | None = None, catalog: Catalog = lambda _: None) -> dict[str, Any]:
    """The `index_parallel` payload of `sql`; raises SqlError (Druid's 400) naming what is wrong or unsupported."""
    return translate_statement(parse_statement(sql), dict(context or {}), catalog)


def translate_statement(statement: IngestStatement, context: dict[str, Any], catalog: Catalog) -> dict[str, Any]:
    select = statement.select
    _refuse_unsupported(select, statement.kind)
    segment_granularity = partition_granularity(statement.partitioned_by or "")
    where = select.args.get("where")
    terms = conjuncts(where.this) if where else []
    time_terms = [t for t in terms if mentions_time(t)]
    source = _source(select, statement, catalog, time_terms)
    if time_terms and not source.is_druid:
        raise invalid("WHERE on __time is supported only when reading a Druid table; filter external rows on their "
                      "source columns")
    other_terms = [t for t in terms if not mentions_time(t)]

    output = _select_list(select, source, _finalize_aggregations(context))
    if output.time is None and segment_granularity != "ALL":
        raise invalid("A query without a __time column must use PARTITIONED BY ALL: every row gets the timestamp "
                      "1970-01-01T00:00:00Z")
    transformed = {t["name"] for t in output.transforms}
    filter_ = None
    if other_terms:
        condition = other_terms[0]
        for term in other_terms[1:]:
            condition = exp.And(this=condition, expression=term)
        types = dict(source.types)
        # the filter runs after the transforms: a source column that a transform shadows is read through a copy
        for column in condition.find_all(exp.Column):
            if column.name in transformed:
                copy = f"__where_{column.name}"
                if copy not in types:
                    output.transforms.append({"type": "expression", "name": copy,
                                              "expression": to_druid_expression(column, source.types.get).text})
                    types[copy] = types.get(column.name, "string")
                column.set("this", exp.to_identifier(copy))
        filter_ = to_dim_filter(condition, types.get)

    if not output.dimensions:  # an empty list would be Druid's schemaless ingestion: every field a dimension
        raise invalid("An ingestion query needs a column besides __time and the aggregates in Sluice: with none, "
                      "the index task would discover every field of the input")
    dimension_names = [d["name"] for d in output.dimensions]
    clustered = _clustered_by(statement, dimension_names)
    replace_intervals = _replace_intervals(statement, segment_granularity)
    time = output.time or TimeColumn.epoch()
    data_schema: dict[str, Any] = {
        "dataSource": statement.data_source,
        "timestampSpec": time.timestamp_spec,
        "dimensionsSpec": {"dimensions": output.dimensions},
        "metricsSpec": output.metrics,
        "granularitySpec": {"type": "uniform", "segmentGranularity": segment_granularity,
                            "queryGranularity": time.query_granularity, "rollup": bool(select.args.get("group")),
                            "intervals": replace_intervals},
        "transformSpec": {"transforms": [*time.transforms, *output.transforms], "filter": filter_},
    }
    io_config: dict[str, Any] = {"type": "index_parallel", "inputSource": source.input_source,
                                 "appendToExisting": statement.kind == "INSERT",
                                 "dropExisting": replace_intervals is not None}
    if source.input_format is not None:
        io_config["inputFormat"] = source.input_format
    return {"type": "index_parallel", "spec": {"dataSchema": data_schema, "ioConfig": io_config,
                                               "tuningConfig": _tuning(context, statement, clustered)},
            "context": _context(context, statement, replace_intervals)}


def _refuse_unsupported(select: exp.Select, kind: str) -> None:
    if select.args.get("order"):
        raise invalid(f"Cannot use an ORDER BY clause on a Query of type [{kind}], use CLUSTERED BY instead")
    named = {"joins": "JOIN", "limit": "LIMIT", "offset": "OFFSET", "having": "HAVING", "distinct": "SELECT DISTINCT",
             "windows": "WINDOW", "qualify": "QUALIFY", "with": "WITH"}
    for key, construct in named.items():
        if select.args.get(key):
            raise invalid(f"{construct} is not supported in {kind} yet")
    if any(isinstance(node, exp.Window) for node in select.find_all(exp.Window)):
        raise invalid(f"Window functions (OVER) are not supported in {kind} yet")
    if any(node is not select for node in select.find_all(exp.Select)):
        raise invalid(f"Subqueries are not supported in {kind} yet")
    if any(isinstance(node, exp.Lateral | exp.Unnest) for node in select.walk()):
        raise invalid(f"UNNEST and LATERAL are not supported in {kind} yet")


def _source(select: exp.Select, statement: IngestStatement, catalog: Catalog,
            time_terms: list[exp.Expression]) -> Source:
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None or not isinstance(from_.this, exp.Table) or not isinstance(from_.this.this, exp.Identifier):
        raise invalid(f"{statement.kind} needs FROM TABLE(EXTERN(…)), a table function or a Druid table")
    table = from_.this
    if table.name == EXTERNAL and statement.external is not None:
        return external_source(statement.external)
    if table.db and table.db.lower() != "druid":
        raise invalid(f"Cannot read [{table.db}.{table.name}] in {statement.kind}; read a Druid table or EXTERN")
    start, end = time_bounds(time_terms, "WHERE") if time_terms else (None, None)
    return druid_source(table.name, catalog, interval_text(start, end))


def _select_list(select: exp.Select, source: Source, finalize: bool) -> _Output:
    output = _Output()
    grouped = select.args.get("group")
    items = _expand_star(select.expressions, source)
    keys = _group_keys(grouped.expressions, items) if grouped else set()
    seen: set[str] = set()
    for index, item in enumerate(items):
        name = item.alias_or_name
        node = item.this if isinstance(item, exp.Alias) else item
        if not name or (not isinstance(item, exp.Alias) and not isinstance(node, exp.Column)):
            raise invalid(f"Expression [{item.sql(dialect='druid')}] needs a name: add AS <column>")
        if name in seen:
            raise invalid(f"Duplicate field in SELECT: [{name}]")
        seen.add(name)
        if name == TIME:
            output.time = time_column(node, source.types.get)
            if grouped and index not in keys:
                raise invalid("__time must be a GROUP BY key of an ingestion with GROUP BY")
            continue
        if grouped and index not in keys:
            output.metrics.append(_metric(name, node, source, output, finalize))
            continue
        if isinstance(node, exp.AggFunc):
            raise invalid(f"Aggregate [{node.sql(dialect='druid')}] needs GROUP BY in an ingestion query")
        _dimension(name, node, source, output)
    return output


def _expand_star(items: list[exp.Expression], source: Source) -> list[exp.Expression]:
    expanded: list[exp.Expression] = []
    for item in items:
        if isinstance(item, exp.Star):
            expanded += [exp.column(name) for name in source.types if name != TIME or source.is_druid]
        else:
            expanded.append(item)
    return expanded


def _group_keys(keys: list[exp.Expression], items: list[exp.Expression]) -> set[int]:
    """The positions of the SELECT items that the GROUP BY keys name (by ordinal, alias or expression)."""
    found = set()
    for key in keys:
        if isinstance(key, exp.Literal) and not key.is_string:
            position = int(key.this) - 1
            if not 0 <= position < len(items):
                raise invalid(f"GROUP BY ordinal [{key.this}] is out of range")
            found.add(position)
            continue
        match = next((i for i, item in enumerate(items)
                      if (isinstance(key, exp.Column) and item.alias_or_name == key.name)
                      or (item.this if isinstance(item, exp.Alias) else item) == key), None)
        if match is None:
            raise invalid(f"GROUP BY key [{key.sql(dialect='druid')}] must also be a column of the SELECT")
        found.add(match)
    return found


def _dimension(name: str, node: exp.Expression, source: Source, output: _Output) -> None:
    expression = to_druid_expression(node, source.types.get)
    if not (isinstance(node, exp.Column) and node.name == name):
        output.transforms.append({"type": "expression", "name": name, "expression": expression.text})
    output.dimensions.append({"type": expression.type, "name": name})


#: sketch functions at ingestion: the aggregator type, and its size argument after the input (name, default)
_SKETCHES = {"DS_HLL": ("HLLSketchBuild", "lgK"), "APPROX_COUNT_DISTINCT_DS_HLL": ("HLLSketchBuild", "lgK"),
             "APPROXDISTINCT": ("HLLSketchBuild", None), "DS_THETA": ("thetaSketch", "size"),
             "APPROX_COUNT_DISTINCT_DS_THETA": ("thetaSketch", "size"),
             "DS_QUANTILES_SKETCH": ("quantilesDoublesSketch", "k"),
             "TDIGEST_GENERATE_SKETCH": ("tDigestSketch", "compression")}
#: aggregates whose finalized value (an estimate, the earliest value) is not what a segment can roll up further:
#: Druid stores them combinable only under finalizeAggregations: false
_FINALIZED = {"EARLIEST", "LATEST", "APPROX_COUNT_DISTINCT_DS_HLL", "APPROXDISTINCT", "APPROX_COUNT_DISTINCT_DS_THETA"}


def _metric(name: str, node: exp.Expression, source: Source, output: _Output, finalize: bool) -> dict[str, Any]:
    if isinstance(node, exp.Count):
        if isinstance(node.this, exp.Star) and not node.args.get("distinct"):
            return {"type": "count", "name": name}
        raise invalid(f"[{node.sql(dialect='druid')}] is not supported at ingestion yet; use COUNT(*)")
    function = (node.name if isinstance(node, exp.Anonymous) else type(node).__name__).upper()
    if function not in ("SUM", "MIN", "MAX", "EARLIEST", "LATEST", *_SKETCHES):
        if isinstance(node, (exp.AggFunc, exp.Anonymous)):
            raise invalid(f"Aggregation [{node.sql(dialect='druid')}] is not supported at ingestion yet; use COUNT(*), "
                          "SUM, MIN, MAX, EARLIEST, LATEST or a DataSketches function (AVG: SUM and COUNT at "
                          "ingestion, the quotient at query time)")
        raise invalid(f"[{node.sql(dialect='druid')}] is neither a GROUP BY key nor an aggregate")
    if function in _FINALIZED and finalize:
        raise invalid(f"[{node.sql(dialect='druid')}] is stored rolled up only with the context parameter "
                      "finalizeAggregations: false, as Druid stores it; or use DS_HLL, DS_THETA or DS_QUANTILES_SKETCH")
    arguments = [node.this] if not isinstance(node, exp.Anonymous) else node.expressions
    argument = arguments[0]
    expression = to_druid_expression(argument, source.types.get)
    field_name = argument.name if isinstance(argument, exp.Column) else f"__{name}_input"
    if not isinstance(argument, exp.Column):
        output.transforms.append({"type": "expression", "name": field_name, "expression": expression.text})
    metric = {"name": name, "fieldName": field_name}
    if function in _SKETCHES:
        kind, size = _SKETCHES[function]
        if str(source.types.get(field_name, "")).startswith("COMPLEX<"):  # a sketch column: merged, not hashed
            kind, metric = {"HLLSketchBuild": ("HLLSketchMerge", metric),
                            "thetaSketch": ("thetaSketch", {**metric, "isInputThetaSketch": True})}.get(kind, (kind, metric))
        if size is not None and len(arguments) > 1:
            metric[size] = _integer(arguments[1], node)
        if function.endswith("_HLL") and len(arguments) > 2:
            metric["tgtHllType"] = arguments[2].name
        return {"type": kind, **metric}
    if function in ("EARLIEST", "LATEST"):
        first_last = f"{expression.type}{'First' if function == 'EARLIEST' else 'Last'}"
        if expression.type == "string" and len(arguments) > 1:
            metric["maxStringBytes"] = _integer(arguments[1], node)
        return {"type": first_last, **metric}
    if expression.type == "string":
        raise invalid(f"Cannot apply '{function}' to a VARCHAR in [{node.sql(dialect='druid')}]")
    return {"type": _METRIC_TYPES[(function, expression.type)], **metric}


def _integer(value: exp.Expression, node: exp.Expression) -> int:
    if not (isinstance(value, exp.Literal) and value.is_int):
        raise invalid(f"[{node.sql(dialect='druid')}] needs an integer literal as its size argument")
    return int(value.this)


def _clustered_by(statement: IngestStatement, dimensions: list[str]) -> list[str]:
    names = []
    for node in statement.clustered_by:
        if isinstance(node, exp.Ordered) and node.args.get("desc"):
            raise invalid("Invalid CLUSTERED BY clause: DESCENDING order is not supported; cluster ascending")
        node = node.this if isinstance(node, exp.Ordered) else node
        if isinstance(node, exp.Literal) and not node.is_string:
            position = int(node.this) - 1
            node = exp.column(dimensions[position]) if 0 <= position < len(dimensions) else node
        if not isinstance(node, exp.Column) or (node.name not in dimensions and node.name != TIME):
            raise invalid(f"CLUSTERED BY [{node.sql(dialect='druid')}] must name a dimension column of the SELECT")
        if node.name != TIME:
            names.append(node.name)
    return names


def _replace_intervals(statement: IngestStatement, granularity: str) -> list[str] | None:
    if statement.kind != "REPLACE" or statement.overwrite_all:
        return None
    start, end = time_bounds(conjuncts(statement.overwrite_where), "OVERWRITE WHERE")
    if start is None or end is None:
        raise invalid("OVERWRITE WHERE needs both a lower and an upper bound on __time")
    if granularity != "ALL":
        from sluice.spec.granularity import parse_granularity

        chunks = parse_granularity(granularity)
        if chunks.bucket_start(start) != start or chunks.bucket_start(end) != end:
            raise invalid(f"OVERWRITE WHERE clause identified interval [{interval_text(start, end)}] which is not "
                          f"aligned with PARTITIONED BY granularity [{granularity}]")
    return [interval_text(start, end)]


def _tuning(context: dict[str, Any], statement: IngestStatement, clustered: list[str]) -> dict[str, Any]:
    rows = int(context.get("rowsPerSegment", DEFAULT_ROWS_PER_SEGMENT))
    max_tasks = int(context.get("maxNumTasks", context.get("numTasks", DEFAULT_MAX_NUM_TASKS)))
    parse_exceptions = int(context.get("maxParseExceptions", DEFAULT_MAX_PARSE_EXCEPTIONS))
    tuning: dict[str, Any] = {"type": "index_parallel", "maxNumConcurrentSubTasks": max(1, max_tasks - 1),
                              "maxParseExceptions": parse_exceptions if parse_exceptions >= 0 else -1,
                              "maxRowsInMemory": int(context.get("rowsInMemory", 100_000))}
    if clustered and statement.kind == "REPLACE":
        tuning.update(forceGuaranteedRollup=True, partitionsSpec={
            "type": "range", "partitionDimensions": clustered, "targetRowsPerSegment": rows})
    else:  # INSERT appends, which cannot be perfectly rolled up: its segments are cut at rowsPerSegment
        tuning["partitionsSpec"] = {"type": "dynamic", "maxRowsPerSegment": rows}
    return tuning


def _finalize_aggregations(context: dict[str, Any]) -> bool:
    try:
        return context_value(context, "finalizeAggregations", True, as_bool)
    except ValueError as e:
        raise invalid(str(e)) from None


def _context(context: dict[str, Any], statement: IngestStatement, intervals: list[str] | None) -> dict[str, Any]:
    out = {**context, "finalizeAggregations": _finalize_aggregations(context)}
    if statement.kind == "REPLACE":
        out["sqlReplaceTimeChunks"] = "all" if statement.overwrite_all else ",".join(intervals or [])
    return out


__all__ = ["ETERNITY", "translate", "translate_statement"]
