"""The clean-up duty against a real SQLite metadata store and a real local deep storage: files no segment names and
pending segments no task can publish any more are deleted; everything a segment or a running task needs stays."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from sluice.coordinator.duties import CleanUp, KillConfig
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec

DAY = Interval(datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 2, tzinfo=UTC))


def store(tmp_path: Path) -> MetadataStore:
    metadata = MetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    metadata.create_tables()
    return metadata


def segment(storage: LocalDeepStorage, tmp_path: Path, partition: int) -> DataSegment:
    file = tmp_path / f"local-{partition}.parquet"
    file.write_bytes(b"PAR1")
    segment_id = SegmentId("wiki", DAY, "v1", partition)
    return DataSegment(id=segment_id, dimensions=[], metrics=[], aggregators=[],
                       shard_spec=numbered_shard_spec(partition), num_rows=1, size=4,
                       load_spec=storage.push(file, segment_id, unique_path=True))


def in_days(days: float) -> float:
    return time.time() + days * 86_400


def test_files_no_segment_names_are_deleted_once_they_are_a_day_old(tmp_path: Path) -> None:
    metadata, storage = store(tmp_path), LocalDeepStorage(tmp_path / "deep")
    used, unused, orphan = (segment(storage, tmp_path, p) for p in range(3))
    assert metadata.commit_segments_and_metadata([used, unused], "wiki", None, None).success
    metadata.set_segment_used("wiki", str(unused.id), False)  # unused: a kill task's to delete, not this duty's
    crashed = Path(used.load_spec["path"]).parent.parent / "dead" / ".index.parquet.0a1b.tmp"
    crashed.parent.mkdir(parents=True)
    crashed.write_bytes(b"half a segment")
    checkpoint = tmp_path / "deep" / "_stream_jobs" / "job" / "offsets" / "0"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_text("v1")

    config = KillConfig()
    assert CleanUp(metadata, storage, config).run_once() == (0, 0)  # a fresh push may still be committed
    assert CleanUp(metadata, storage, config, clock=lambda: in_days(1.5)).run_once() == (0, 2)
    assert not Path(orphan.load_spec["path"]).exists() and not crashed.exists()
    assert Path(used.load_spec["path"]).exists() and Path(unused.load_spec["path"]).exists()
    assert checkpoint.exists()
    assert not crashed.parent.exists()  # the folders it emptied went with it
    off = KillConfig(orphan_files_on=False, pending_segments_on=False)
    assert CleanUp(metadata, storage, off, clock=lambda: in_days(9)).run_once() == (0, 0)


def test_pending_segments_are_kept_for_running_tasks_and_deleted_when_none_can_publish_them(tmp_path: Path) -> None:
    metadata, storage = store(tmp_path), LocalDeepStorage(tmp_path / "deep")
    for data_source in ("running", "abandoned"):
        previous = None
        for _ in range(2):
            previous = str(metadata.allocate_segment(data_source, DAY, f"{data_source}_seq_0", previous, "v1"))
    metadata.insert_task("index_kafka_running_1", "running", "index_kafka", "index_kafka_running",
                         {"type": "index_kafka"}, {"id": "index_kafka_running_1", "status": "RUNNING"})
    three_days_on = CleanUp(metadata, storage, KillConfig(), clock=lambda: in_days(3))
    assert three_days_on.run_once() == (2, 0)
    assert metadata.pending_segment_data_sources() == ["running"]
    assert three_days_on.run_once() == (0, 0)
