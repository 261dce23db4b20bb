"""SQL rows → Druid's native result JSON, shaped exactly as each query type returns it.

The statements come from `sql` and carry helper columns (bucket starts, first row times, row counts) that
say where Druid's own engine would put a row, which timestamp it would print, and which empty buckets it would fill.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Sequence
from datetime import date, datetime
from typing import Any

from sluice.broker.native import query as q
from sluice.broker.engine import QueryResult
from sluice.broker.native.filters import TIME
from sluice.broker.native.sql import (
    BUCKET, COUNT, DIMENSION, EMPTY_KIND, FIRST, KIND, MILLIS, ROW_KIND, ROWS, TOTAL_KIND, VALUE, DataSourceView,
    scan_columns,
)
from sluice.broker.native.time import QueryGranularity
from sluice.timestamps import EpochInterval, condense, format_instant, to_millis

Row = dict[str, Any]
_HELPERS = {KIND, BUCKET, FIRST, ROWS, MILLIS}


def shape(query: q.NativeQuery, source: DataSourceView, result: QueryResult | None) -> list[dict[str, Any]]:
    """Druid's answer to `query` from the rows of its statement (None: the query needed no statement)."""
    if result is None:
        return []
    rows = [dict(zip(result.columns, row)) for row in result.rows]
    return _SHAPERS[type(query)](query, source, rows, result)


def json_value(value: Any) -> Any:
    """A SQL value as Druid writes it: timestamps in ISO form, non-finite doubles as strings (Jackson's way)."""
    if isinstance(value, datetime):
        return format_instant(to_millis(value))
    if isinstance(value, date):
        return format_instant(to_millis(datetime(value.year, value.month, value.day)))
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, list):
        return [json_value(v) for v in value]
    return value


def _outputs(row: Row) -> dict[str, Any]:
    return {name: json_value(value) for name, value in row.items() if name not in _HELPERS}


def _first_start(intervals: Sequence[EpochInterval]) -> int:
    return intervals[0].start if intervals else 0


def _data_start(intervals: Sequence[EpochInterval], first: datetime | None) -> int:
    """The timestamp of an `all` bucket: where Druid's cursor starts, the later of the query's start and the data's."""
    start = _first_start(intervals)
    return start if first is None else max(start, to_millis(first))


def _timestamp(granularity: QueryGranularity, bucket_start: datetime) -> str:
    return format_instant(to_millis(bucket_start), granularity.zone)


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


# ----------------------------------------------------------------------------------------------------- timeseries


def _timeseries(query: q.TimeseriesQuery, source: DataSourceView, rows: list[Row], _: QueryResult) -> list[Row]:
    by_kind: dict[int, list[Row]] = {}
    for row in rows:
        by_kind.setdefault(row[KIND], []).append(row)
    skip_empty = _truthy(query.context.get("skipEmptyBuckets"))
    buckets = by_kind.get(ROW_KIND, [])
    out: list[Row] = []
    if query.granularity.kind == "all":
        row = buckets[0]  # an aggregate without GROUP BY: always exactly one row
        if not (skip_empty and row[ROWS] == 0):
            out.append({"timestamp": format_instant(_data_start(query.intervals, row[FIRST])), "result": _outputs(row)})
    else:
        present = {to_millis(r[BUCKET]): _outputs(r) for r in buckets if not (skip_empty and r[ROWS] == 0)}
        if not skip_empty:
            empty = _outputs(by_kind[EMPTY_KIND][0])
            spans = _data_spans(source, query.intervals)
            for start in fill_empty_buckets(sorted(present), query.granularity, spans):
                present[start] = dict(empty)
        out = [{"timestamp": format_instant(start, query.granularity.zone), "result": present[start]}
               for start in sorted(present)]
    if query.descending:
        out.reverse()
    if query.limit is not None:
        out = out[: query.limit]
    if TOTAL_KIND in by_kind:
        out.append({"timestamp": None, "result": _outputs(by_kind[TOTAL_KIND][0])})
    return out


def _data_spans(source: DataSourceView, intervals: Sequence[EpochInterval]) -> list[EpochInterval]:
    """Where the query can see data: the visible segments' intervals within the query's intervals."""
    spans = []
    for segment in source.segments:
        start, end = to_millis(segment.interval.start), to_millis(segment.interval.end)
        for interval in intervals:
            if interval.overlaps(start, end):
                spans.append(EpochInterval(max(start, interval.start), min(end, interval.end)))
    return condense(spans)


def fill_empty_buckets(
    starts: Sequence[int], granularity: QueryGranularity, spans: Sequence[EpochInterval]
) -> list[int]:
    """The empty interior buckets Druid fills: between buckets that have rows, overlapping where data can be
    (`spans`, sorted and disjoint); a bucket lying wholly outside the data is not filled."""
    if granularity.kind not in ("period", "duration"):
        return []
    span_ends = [s.end for s in spans]
    step = granularity.fixed_step
    filled = []
    for previous, following in zip(starts, starts[1:]):
        start = granularity.next_bucket(previous)
        while start < following:
            end = granularity.next_bucket(start)
            i = bisect.bisect_right(span_ends, start)
            if i == len(spans) or spans[i].start >= following:
                break
            if spans[i].start >= end:  # no data before the next span: skip to its bucket
                start = start + (spans[i].start - start) // step * step if step else end
                continue
            filled.append(start)
            start = end
    return filled


# ------------------------------------------------------------------------------------------------ topN and groupBy


def _topn(query: q.TopNQuery, _source: DataSourceView, rows: list[Row], __: QueryResult) -> list[Row]:
    out: list[Row] = []
    for bucket_rows in _by_bucket(rows):
        first = bucket_rows[0]
        if query.granularity.kind == "all":
            timestamp = format_instant(_data_start(query.intervals, first[FIRST]))
        else:
            timestamp = _timestamp(query.granularity, first[BUCKET])
        out.append({"timestamp": timestamp, "result": [_outputs(r) for r in bucket_rows]})
    return out


def _by_bucket(rows: Iterable[Row]) -> list[list[Row]]:
    """Rows ordered by bucket, split into one list per bucket."""
    groups: list[list[Row]] = []
    for row in rows:
        if groups and groups[-1][0][BUCKET] == row[BUCKET]:
            groups[-1].append(row)
        else:
            groups.append([row])
    return groups


def _group_by(query: q.GroupByQuery, _source: DataSourceView, rows: list[Row], __: QueryResult) -> list[Row]:
    """Granularity `all` stamps every row with the start of the first interval (Druid's universal timestamp)."""
    universal = format_instant(_first_start(query.intervals))
    return [
        {
            "version": "v1",
            "timestamp": universal if query.granularity.kind == "all" else _timestamp(query.granularity, row[BUCKET]),
            "event": _outputs(row),
        }
        for row in rows
    ]


# ----------------------------------------------------------------------------------------------------------- scan


def _scan(query: q.ScanQuery, source: DataSourceView, rows: list[Row], result: QueryResult) -> list[Row]:
    """Events in batches of at most `batchSize`, each batch from one segment, as Druid's scan returns them."""
    columns = scan_columns(query, source)
    types = dict(zip(result.columns, result.druid_types))
    signature = [{"name": name, "type": "LONG" if name == TIME else types.get(name, "STRING")} for name in columns]
    locate = _segment_locator(source)
    batches: list[Row] = []
    for row in rows:
        segment_id = locate(row[MILLIS])
        if not batches or batches[-1]["segmentId"] != segment_id or len(batches[-1]["events"]) >= query.batch_size:
            batches.append({"segmentId": segment_id, "columns": columns, "events": [], "rowSignature": signature})
        values = [json_value(row[name]) for name in columns]
        batches[-1]["events"].append(dict(zip(columns, values)) if query.result_format == "list" else values)
    return batches


def _segment_locator(source: DataSourceView) -> Callable[[int], str | None]:
    """The id of the visible segment holding a row's time. Partitions of one time chunk cannot be told apart in the
    query's rows, so a row is given to the chunk's first partition."""
    chunks: dict[tuple[int, int], str] = {}
    for segment in sorted(source.segments, key=lambda s: s.id):
        key = (to_millis(segment.interval.start), to_millis(segment.interval.end))
        chunks.setdefault(key, str(segment.id))
    ordered = sorted(chunks.items())
    starts = [start for (start, _), _ in ordered]

    def locate(millis: int) -> str | None:
        i = bisect.bisect_right(starts, millis) - 1
        while i >= 0:
            (start, end), segment_id = ordered[i]
            if start <= millis < end:
                return segment_id
            i -= 1
        return None

    return locate


# ------------------------------------------------------------------------------------------- boundaries and search


def _time_boundary(query: q.TimeBoundaryQuery, _source: DataSourceView, rows: list[Row], __: QueryResult) -> list[Row]:
    bounds = rows[0]
    if bounds["minTime"] is None:
        return []
    wanted = [query.bound] if query.bound else ["minTime", "maxTime"]
    result = {name: json_value(bounds[name]) for name in wanted}
    return [{"timestamp": json_value(bounds[query.bound or "minTime"]), "result": result}]


def _data_source_metadata(_query: q.DataSourceMetadataQuery, _source: DataSourceView, rows: list[Row],
                          __: QueryResult) -> list[Row]:
    latest = rows[0]["maxIngestedEventTime"]
    if latest is None:
        return []
    return [{"timestamp": json_value(latest), "result": {"maxIngestedEventTime": json_value(latest)}}]


def _search_key(sort: str) -> Callable[[Row], tuple]:
    if sort == "strlen":
        return lambda hit: (len(hit[VALUE]), hit[VALUE], hit[DIMENSION])
    if sort == "numeric":
        return lambda hit: (_number(hit[VALUE]), hit[VALUE], hit[DIMENSION])
    return lambda hit: (hit[VALUE], hit[DIMENSION])


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.inf


def _search(query: q.SearchQuery, _source: DataSourceView, rows: list[Row], __: QueryResult) -> list[Row]:
    rows.sort(key=lambda r: (r[BUCKET] is not None, r[BUCKET] or datetime.min))
    out: list[Row] = []
    for hits in _by_bucket(rows):
        if query.granularity.kind == "all":
            timestamp = format_instant(min(to_millis(h[FIRST]) for h in hits))
        else:
            timestamp = _timestamp(query.granularity, hits[0][BUCKET])
        ranked = sorted(hits, key=_search_key(query.sort.type))[: query.limit]
        result = [{"dimension": h[DIMENSION], "value": h[VALUE], "count": h[COUNT]} for h in ranked]
        out.append({"timestamp": timestamp, "result": result})
    return out


_SHAPERS: dict[type, Callable[..., list[Row]]] = {
    q.TimeseriesQuery: _timeseries,
    q.TopNQuery: _topn,
    q.GroupByQuery: _group_by,
    q.ScanQuery: _scan,
    q.TimeBoundaryQuery: _time_boundary,
    q.DataSourceMetadataQuery: _data_source_metadata,
    q.SearchQuery: _search,
}
