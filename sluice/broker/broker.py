"""The broker: Druid SQL over the visible segments of every data source."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from sluice.broker.engine import QueryResult, SqlEngine
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import DeepStorage
from sluice.segment.segment import ETERNITY, DataSegment
from sluice.segment.timeline import VersionedIntervalTimeline


class Broker:
    def __init__(self, metadata: MetadataStore, deep_storage: DeepStorage, cache_dir: Path,
                 engine: SqlEngine | None = None) -> None:
        self._metadata = metadata
        self._deep_storage = deep_storage
        self._cache_dir = cache_dir
        self._engine = engine or SqlEngine()

    def visible_segments(self) -> dict[str, list[DataSegment]]:
        """Per data source, the segments the versioned timeline shows (overshadowed ones hidden)."""
        by_source: dict[str, list[DataSegment]] = {}
        for segment in self._metadata.used_segments():
            by_source.setdefault(segment.data_source, []).append(segment)
        visible = {}
        for source, segments in by_source.items():
            holders = VersionedIntervalTimeline.from_segments(segments).lookup(ETERNITY)
            # a partially overshadowed segment shows up in several holders; read it once
            visible[source] = list({s.id: s for holder in holders for s in holder.segments}.values())
        return visible

    def sql(self, query: str, parameters: Sequence[dict[str, Any]] = (),
            context: Mapping[str, Any] | None = None) -> QueryResult:
        tables = {
            source: [str(self._deep_storage.fetch(s.load_spec, self._cache_dir)) for s in segments]
            for source, segments in self.visible_segments().items()
        }
        return self._engine.execute(query, tables, parameters, context)
