"""The columns of a Druid data source and their types, for `INSERT … SELECT … FROM other_ds`: Druid's broker knows
them from segment metadata; here they come from the published segments (metrics typed by their aggregators,
dimensions by the segment file's schema)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from sluice.metadata.store import MetadataStore
from sluice.segment.columns import parquet_column_types

#: the Druid type of a metric column, by its aggregator (first/last columns read as their values' type)
_AGGREGATOR_TYPES = {"count": "long", "HLLSketchBuild": "COMPLEX<HLLSketch>", "HLLSketchMerge": "COMPLEX<HLLSketch>",
                     "hyperUnique": "COMPLEX<HLLSketch>", "thetaSketch": "COMPLEX<thetaSketch>",
                     "quantilesDoublesSketch": "COMPLEX<quantilesDoublesSketch>",
                     "tDigestSketch": "COMPLEX<tDigestSketch>"}


def data_source_columns(metadata: MetadataStore, data_source: str) -> dict[str, str] | None:
    """Column -> Druid type (`__time` first, as long millis), from the newest segment; None without segments."""
    segments = [s for s in metadata.used_segments(data_source) if s.num_rows]
    if not segments:
        return None
    newest = max(segments, key=lambda s: (s.id.version, s.id.interval.start))
    file_types = _file_types(newest.load_spec)
    columns = {"__time": "long"}
    for name in newest.dimensions:
        columns[name] = file_types.get(name, "string")
    for aggregator in newest.aggregators:
        kind = str(aggregator.get("type", ""))
        columns[aggregator["name"]] = _AGGREGATOR_TYPES.get(kind) or \
            next((t for t in ("long", "double", "float") if kind.startswith(t)), "double")
    return columns


def _file_types(load_spec: dict[str, Any]) -> dict[str, str]:
    """The segment file's column types when it is on local deep storage (else dimensions read as strings)."""
    path = load_spec.get("path") if load_spec.get("type") == "local" else None
    if not path or not Path(path).exists():
        return {}
    return parquet_column_types(pq.read_schema(path))
