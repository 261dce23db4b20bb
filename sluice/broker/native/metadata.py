"""Metadata about data sources: the segmentMetadata query, and the JSON of the broker's and coordinator's data source
endpoints (`/druid/v2/datasources…`, `/druid/coordinator/v1/datasources…`), all from the visible segments.

segmentMetadata analyses one time chunk per entry: partitions of a chunk share one interval and the query's rows
cannot be told apart by partition, so an entry covers all of a chunk's partitions and is named after the first.
With `merge` (what tools use) this makes no difference.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from sluice.broker.native import query as q
from sluice.broker.engine import QueryResult
from sluice.broker.native.filters import TIME, Columns, intervals_condition
from sluice.broker.native.sql import HIDDEN, DataSourceView
from sluice.periods import Period
from sluice.segment.segment import DataSegment
from sluice.timestamps import EpochInterval, add_period, condense, format_instant, format_interval, to_millis

DEFAULT_HISTORY = Period.parse("P1W")  # Druid's druid.query.segmentMetadata.defaultHistory
CHUNK = HIDDEN + "chunk"
_DRUID_FIELDS = ("dataSource", "interval", "version", "loadSpec", "dimensions", "metrics", "shardSpec",
                 "binaryVersion", "size", "identifier")


def segment_json(segment: DataSegment) -> dict[str, Any]:
    """Druid's DataSegment JSON (without the fields Sluice adds to the stored payload for itself)."""
    payload = segment.to_payload()
    return {name: payload[name] for name in _DRUID_FIELDS}


def segment_interval(segment: DataSegment) -> EpochInterval:
    return EpochInterval(to_millis(segment.interval.start), to_millis(segment.interval.end))


# ------------------------------------------------------------------------------------------------ segmentMetadata


@dataclass(frozen=True)
class Chunk:
    """The visible segments of one time chunk, and the columns the query reports for them."""

    interval: EpochInterval
    segments: list[DataSegment]
    columns: list[str]


def metadata_chunks(query: q.SegmentMetadataQuery, source: DataSourceView) -> list[Chunk]:
    """The chunks the query covers. Without intervals: the week before the end of the latest segment, as Druid."""
    if not source.segments:
        return []
    intervals = query.intervals
    if intervals is None:
        end = max(segment_interval(s).end for s in source.segments)
        intervals = (EpochInterval(add_period(end, DEFAULT_HISTORY, None, -1), end),)
    by_interval: dict[EpochInterval, list[DataSegment]] = {}
    for segment in sorted(source.segments, key=lambda s: s.id):
        interval = segment_interval(segment)
        if any(i.overlaps(interval.start, interval.end) for i in intervals):
            by_interval.setdefault(interval, []).append(segment)
    return [Chunk(interval, segments, _included(query.to_include, segments)) for interval, segments in
            sorted(by_interval.items(), key=lambda item: (item[0].start, item[0].end))]


def _included(to_include: q.ToInclude, segments: Sequence[DataSegment]) -> list[str]:
    columns = DataSourceView("", segments).columns
    if to_include.type == "none":
        return []
    return columns if to_include.type == "all" else [c for c in columns if c in to_include.columns]


def segment_metadata_sql(chunks: Sequence[Chunk], source: DataSourceView, multi_value: Collection[str]) -> str | None:
    """Per chunk: its row count and, per column, min, max, distinct count and non-null count; for the `multi_value`
    columns, which the chunks' files hold as multi-value strings, their values and whether a row has several."""
    if not chunks:
        return None
    case = exp.case()
    for i, chunk in enumerate(chunks):
        case = case.when(intervals_condition([chunk.interval]) or exp.true(), exp.Literal.number(i))
    columns, sql_types = Columns(source.columns), dict(source.schema)
    outputs: list[exp.Expr] = [exp.alias_(case, CHUNK, quoted=True),
                               exp.alias_(exp.Count(this=exp.Star()), HIDDEN + "rows", quoted=True)]
    for i, name in enumerate(_analysed(chunks)):
        value = columns.sql(name)
        if name in multi_value:
            outputs += _multi_value_statistics(value, f"{HIDDEN}{i}_")
            continue
        # Druid counts the distinct values of strings only; those of a complex column (sketches…) are not counted
        complex_column = sql_types.get(name, "").startswith("COMPLEX<")
        distinct = exp.cast(exp.null(), exp.DType.BIGINT) if complex_column else exp.Count(
            this=exp.Distinct(expressions=[value.copy()]))
        outputs += [
            exp.alias_(exp.Min(this=value.copy()), f"{HIDDEN}{i}_min", quoted=True),
            exp.alias_(exp.Max(this=value.copy()), f"{HIDDEN}{i}_max", quoted=True),
            exp.alias_(distinct, f"{HIDDEN}{i}_distinct", quoted=True),
            exp.alias_(exp.Count(this=value.copy()), f"{HIDDEN}{i}_count", quoted=True),
        ]
    where = intervals_condition([c.interval for c in chunks])
    table = exp.Table(this=exp.to_identifier(source.name, quoted=True))
    statement = exp.select(*outputs).from_(table)
    if where is not None:
        statement = statement.where(where)
    return statement.group_by(case.copy()).sql(dialect="druid")


def _multi_value_statistics(value: exp.Expr, prefix: str) -> list[exp.Expr]:
    """A multi-value string column's distinct values (sorted, NULL first when a row has a null value), the rows with
    a value, and whether a row has several: Druid's column capabilities then say it has multiple values."""
    values = exp.Anonymous(this="ARRAY_CONCAT_AGG", expressions=[
        exp.Distinct(expressions=[exp.Anonymous(this="MV_TO_ARRAY", expressions=[value.copy()])])])
    length = exp.Anonymous(this="MV_LENGTH", expressions=[value.copy()])
    some = exp.Case(ifs=[exp.If(this=exp.GT(this=length, expression=exp.Literal.number(0)), true=exp.true())])
    several = exp.GT(this=exp.Max(this=length.copy()), expression=exp.Literal.number(1))
    return [exp.alias_(values, f"{prefix}values", quoted=True),
            exp.alias_(exp.Count(this=some), f"{prefix}count", quoted=True),  # an empty row has no value: null
            exp.alias_(several, f"{prefix}multiple", quoted=True)]


def _analysed(chunks: Sequence[Chunk]) -> list[str]:
    return [c for c in dict.fromkeys(c for chunk in chunks for c in chunk.columns) if c != TIME]


def segment_metadata_result(query: q.SegmentMetadataQuery, chunks: Sequence[Chunk],
                            result: QueryResult | None) -> list[dict[str, Any]]:
    if result is None:
        return []
    analysed = _analysed(chunks)
    types = dict(zip(result.columns, result.druid_types))
    stats = {row[0]: dict(zip(result.columns, row)) for row in result.rows}
    analyses = []
    for i, chunk in enumerate(chunks):
        row = stats.get(i)
        if row is None:  # a chunk whose rows all fall outside the query's intervals
            continue
        columns = {}
        for name in chunk.columns:
            index = analysed.index(name) if name != TIME else -1
            columns[name] = _column_analysis(query, name, row, index, types)
        analyses.append(_analysis(query, str(chunk.segments[0].id), [chunk.interval], columns,
                                  sum(s.size for s in chunk.segments), row[HIDDEN + "rows"], chunk.segments))
    if query.merge and analyses:
        return [_merge(query, analyses, chunks)]
    return analyses


def _column_analysis(query: q.SegmentMetadataQuery, name: str, row: dict[str, Any], index: int,
                     types: dict[str, str]) -> dict[str, Any]:
    prefix = f"{HIDDEN}{index}_"
    multiple = bool(row.get(prefix + "multiple"))
    if name == TIME:
        kind, has_nulls, cardinality, low, high = "LONG", False, None, None, None
    elif prefix + "values" in row:  # a multi-value string: its values, not its rows, make its dictionary
        found = row[prefix + "values"] or []
        values = [value for value in found if value is not None]
        kind, has_nulls = "STRING", row[prefix + "count"] < row[HIDDEN + "rows"] or len(values) < len(found)
        cardinality = len(values) + has_nulls if "cardinality" in query.analysis_types else None
        minmax = values and "minmax" in query.analysis_types
        low, high = (values[0], values[-1]) if minmax else (None, None)
    else:
        kind = types[prefix + "min"]
        has_nulls = row[prefix + "count"] < row[HIDDEN + "rows"]
        string = kind == "STRING"
        cardinality = row[prefix + "distinct"] + has_nulls if string and "cardinality" in query.analysis_types else None
        minmax = string and "minmax" in query.analysis_types
        low, high = (row[prefix + "min"], row[prefix + "max"]) if minmax else (None, None)
    # a complex column (a first/last pair, a sketch) is typed COMPLEX<HLLSketch>, its type named HLLSketch
    name_of_type = kind.removeprefix("COMPLEX<").removesuffix(">") if kind.startswith("COMPLEX<") else kind
    return {"typeSignature": kind, "type": name_of_type, "hasMultipleValues": multiple, "hasNulls": has_nulls,
            "size": 0, "cardinality": cardinality, "minValue": low, "maxValue": high, "errorMessage": None}


def _analysis(query: q.SegmentMetadataQuery, analysis_id: str, intervals: list[EpochInterval],
              columns: dict[str, Any], size: int, rows: int, segments: Sequence[DataSegment]) -> dict[str, Any]:
    wanted = set(query.analysis_types)
    aggregators = None
    if "aggregators" in wanted:
        aggregators = {a["name"]: a for s in segments for a in s.aggregators}
    return {
        "id": analysis_id,
        "intervals": [format_interval(i) for i in intervals] if "interval" in wanted else None,
        "columns": columns,
        "size": size if "size" in wanted else 0,
        "numRows": rows,
        "aggregators": aggregators,
        "timestampSpec": None,
        "queryGranularity": None,
        "rollup": None,
    }


def _merge(query: q.SegmentMetadataQuery, analyses: list[dict[str, Any]], chunks: Sequence[Chunk]) -> dict[str, Any]:
    """Druid's merged analysis: the largest cardinality, the overall min and max, nulls if any chunk has them."""
    columns: dict[str, dict[str, Any]] = {}
    for analysis in analyses:
        for name, column in analysis["columns"].items():
            merged = columns.get(name)
            if merged is None:
                columns[name] = dict(column)
                continue
            if merged["type"] != column["type"]:
                merged["errorMessage"] = f"error:cannot_merge_diff_types: [{merged['type']}] and [{column['type']}]"
            merged["hasNulls"] = merged["hasNulls"] or column["hasNulls"]
            merged["hasMultipleValues"] = merged["hasMultipleValues"] or column["hasMultipleValues"]
            if column["cardinality"] is not None:
                merged["cardinality"] = max(merged["cardinality"] or 0, column["cardinality"])
            for key, pick in (("minValue", min), ("maxValue", max)):
                present = [v for v in (merged[key], column[key]) if v is not None]
                merged[key] = pick(present) if present else None
    segments = [s for chunk in chunks for s in chunk.segments]
    merged_analysis = _analysis(query, "merged", condense([c.interval for c in chunks]), columns,
                                sum(a["size"] for a in analyses), sum(a["numRows"] for a in analyses), segments)
    if merged_analysis["aggregators"] is not None and not _aggregators_agree(segments):
        merged_analysis["aggregators"] = None
    return merged_analysis


def _aggregators_agree(segments: Sequence[DataSegment]) -> bool:
    """Strict merging: any segment without aggregators, or two specs for one name, and the merged list is null."""
    seen: dict[str, dict[str, Any]] = {}
    for segment in segments:
        if not segment.aggregators:
            return False
        for spec in segment.aggregators:
            if seen.setdefault(spec["name"], spec) != spec:
                return False
    return True


# ---------------------------------------------------------------------------------------------- data source info


def dimensions_and_metrics(segments: Sequence[DataSegment], interval: EpochInterval) -> dict[str, list[str]]:
    """`GET /druid/v2/datasources/{ds}`: the dimensions and metrics of the segments overlapping `interval`."""
    overlapping = [s for s in segments if interval.overlaps(*_bounds(s))]
    return {
        "dimensions": sorted({d for s in overlapping for d in s.dimensions}),
        "metrics": sorted({m for s in overlapping for m in s.metrics}),
    }


def _bounds(segment: DataSegment) -> tuple[int, int]:
    interval = segment_interval(segment)
    return interval.start, interval.end


def simple_properties(segments: Sequence[DataSegment]) -> dict[str, Any]:
    """The coordinator's simple data source view: segment count, sizes and time range, in one default tier."""
    size = sum(s.size for s in segments)
    intervals = [segment_interval(s) for s in segments]
    return {
        "tiers": {"_default_tier": {"segmentCount": len(segments), "size": size, "replicatedSize": size}},
        "segments": {
            "count": len(segments),
            "size": size,
            "replicatedSize": size,
            "minTime": format_instant(min(i.start for i in intervals)) if intervals else None,
            "maxTime": format_instant(max(i.end for i in intervals)) if intervals else None,
        },
    }


def full_data_source(name: str, segments: Sequence[DataSegment]) -> dict[str, Any]:
    """Druid's ImmutableDruidDataSource JSON."""
    return {"name": name, "properties": {}, "segments": [segment_json(s) for s in sorted(segments, key=lambda s: s.id)]}


def served_intervals(segments: Sequence[DataSegment], interval: EpochInterval) -> dict[str, dict[str, list[str]]]:
    """`GET /druid/v2/datasources/{ds}?full`: per served interval (clipped to `interval`), its dimensions and
    metrics; abutting intervals with the same columns are collapsed into one, as Druid's ClientInfoResource does."""
    chunks: dict[tuple[int, int], list[DataSegment]] = {}
    for segment in segments:
        start, end = _bounds(segment)
        if interval.overlaps(start, end):
            chunks.setdefault((max(start, interval.start), min(end, interval.end)), []).append(segment)
    collapsed: list[tuple[EpochInterval, dict[str, list[str]]]] = []
    for (start, end), chunk in sorted(chunks.items()):
        columns = dimensions_and_metrics(chunk, EpochInterval(start, end))
        if collapsed and collapsed[-1][0].end == start and collapsed[-1][1] == columns:
            collapsed[-1] = (EpochInterval(collapsed[-1][0].start, end), columns)
        else:
            collapsed.append((EpochInterval(start, end), columns))
    return {format_interval(i): columns for i, columns in collapsed}
