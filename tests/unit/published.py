"""A broker over segment files a test wrote with pyarrow, published as ingestion would publish them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from sluice.broker.broker import Broker
from sluice.broker.engine import SqlEngine
from sluice.metadata.store import MetadataStore
from sluice.realtime import RealtimeView
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec


def broker_over(root: Path, deep_storage: Path, data_source: str, files: Sequence[tuple[Path, Interval]],
                dimensions: list[str], aggregators: list[dict[str, Any]],
                realtime: Sequence[RealtimeView] = ()) -> Broker:
    """Each (file, interval) a segment of version v1 in a SQLite metadata store under `root`; `realtime` the views of
    running tasks, whose rows no offsets committed yet."""
    store = MetadataStore(f"sqlite:///{root / 'metadata.db'}")
    store.create_tables()
    for path, interval in files:
        segment = DataSegment(
            id=SegmentId(data_source, interval, "v1", 0), dimensions=dimensions,
            metrics=[a["name"] for a in aggregators], aggregators=aggregators, shard_spec=numbered_shard_spec(0),
            num_rows=pq.read_metadata(path).num_rows, size=path.stat().st_size,
            load_spec={"type": "local", "path": str(path)})
        assert store.commit_segments_and_metadata([segment], data_source, None, None).success
    return Broker(store, LocalDeepStorage(deep_storage), root / "cache", SqlEngine(threads=1), snapshot_ttl_s=60,
                  realtime=lambda: realtime)
