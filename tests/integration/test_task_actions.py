"""Task actions against a real lockbox and a real SQLite metadata store, through Druid's HTTP shapes: how a
streaming task gets its segment ids, publishes exactly once, and asks for a checkpoint."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from sluice.metadata.offsets import StreamOffsets
from sluice.metadata.store import MetadataStore
from sluice.overlord.lockbox import LockTask, TaskLockbox
from sluice.overlord.task_actions import TaskActionToolbox
from sluice.overlord.task_queue import _allocator
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.segment.segment import DataSegment, numbered_shard_spec
from sluice.server.api_task_action import task_action_router

STREAMING = "index_kafka_wiki"
HOUR = "2015-09-12T00:00:00.000Z/2015-09-12T01:00:00.000Z"


class Overlord:
    """A lockbox and a metadata store behind the task-action API, with the tasks it knows."""

    def __init__(self, metadata: MetadataStore) -> None:
        self.metadata = metadata
        self.lockbox = TaskLockbox(metadata, metadata.max_segment_version, allocate_segment=_allocator(metadata))
        self.tasks: dict[str, LockTask] = {}
        self.checkpoints: list[tuple[str, int, StreamOffsets]] = []
        self.deep_storage = LocalDeepStorage(Path(metadata.uri.removeprefix("sqlite:///")).parent / "deep")
        toolbox = TaskActionToolbox(self.lockbox, metadata, self.tasks.get, self._checkpoint,
                                    self.deep_storage.check_load_spec)
        app = FastAPI()
        app.include_router(task_action_router(toolbox))
        self.http = TestClient(app)

    def _checkpoint(self, supervisor: str, group: int, start: StreamOffsets) -> bool:
        self.checkpoints.append((supervisor, group, start))
        return supervisor == "wiki"

    def add(self, task_id: str, group_id: str = STREAMING, priority: int = 75) -> None:
        task = LockTask(task_id, group_id, "wiki", priority)
        self.tasks[task_id] = task
        self.lockbox.add(task)

    def action(self, task_id: str, **action: Any) -> Any:
        response = self.http.post("/druid/indexer/v1/action", json={"task": task_id, "action": action})
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture
def overlord(tmp_path: Path) -> Iterator[Overlord]:
    metadata = MetadataStore(f"sqlite:///{tmp_path}/metadata.db")
    metadata.create_tables()
    yield Overlord(metadata)
    metadata.close()


def allocate(overlord: Overlord, task_id: str, sequence: str, previous: str | None = None) -> Any:
    return overlord.action(task_id, type="segmentAllocate", dataSource="wiki", timestamp="2015-09-12T00:30:00.000Z",
                           queryGranularity="NONE", preferredSegmentGranularity="HOUR", sequenceName=sequence,
                           previousSegmentId=previous)


def segment_of(overlord: Overlord, allocated: dict[str, Any], path: str | None = None) -> dict[str, Any]:
    """A segment of an allocated id, its file in the overlord's deep storage unless `path` says otherwise."""
    path = path or str(overlord.deep_storage.root / "wiki" / "index.parquet")
    return DataSegment.from_payload({**allocated, "dimensions": "channel", "metrics": "count", "num_rows": 3,
                                     "size": 10, "loadSpec": {"type": "local", "path": path}}).to_payload()


def kafka(offsets: dict[int, int], kind: str) -> dict[str, Any]:
    return StreamOffsets("edits", offsets).to_payload(kind)


def test_replicas_get_the_same_segment_ids_and_the_sequence_goes_on_with_the_next_partition(overlord) -> None:
    overlord.add("replica_a")
    overlord.add("replica_b")
    first = allocate(overlord, "replica_a", "seq_0")["result"]
    assert allocate(overlord, "replica_b", "seq_0")["result"] == first  # same sequence and previous id: same id
    assert (first["interval"], first["shardSpec"]) == (HOUR, numbered_shard_spec(0))
    previous = f"wiki_{HOUR.replace('/', '_')}_{first['version']}"
    second = allocate(overlord, "replica_a", "seq_0", previous)["result"]
    assert (second["version"], second["shardSpec"]["partitionNum"]) == (first["version"], 1)
    locks = overlord.action("replica_b", type="lockList")["result"]
    assert [(lock["groupId"], lock["interval"], lock["version"]) for lock in locks] == [
        (STREAMING, HOUR, first["version"])]  # the group's one lock, shared


def test_a_chunk_locked_by_a_task_of_higher_priority_is_not_allocated_in(overlord) -> None:
    overlord.add("compaction", group_id="compact_wiki", priority=100)
    assert overlord.action("compaction", type="timeChunkLockTryAcquire", lockType="EXCLUSIVE",
                           interval=HOUR)["result"] is not None
    overlord.add("reader")
    denied = allocate(overlord, "reader", "seq_0")
    assert denied["result"] is None and "conflicts with locks of the same or higher priority" in denied["reason"]


def test_a_publish_commits_segments_and_offsets_once_and_a_stale_start_writes_nothing(overlord) -> None:
    overlord.add("reader")
    allocated = allocate(overlord, "reader", "seq_0")["result"]
    publish = {"type": "segmentTransactionalInsert", "dataSource": "wiki", "segments": [segment_of(overlord, allocated)],
               "startMetadata": kafka({0: 0}, "start"), "endMetadata": kafka({0: 100}, "end")}
    committed = overlord.action("reader", **publish)["result"]
    assert committed["success"] is True and [s["identifier"] for s in committed["segments"]] == [
        f"wiki_{HOUR.replace('/', '_')}_{allocated['version']}"]
    assert overlord.metadata.get_stream_offsets("wiki") == StreamOffsets("edits", {0: 100})

    again = overlord.action("reader", **publish)["result"]  # the stored offsets are 100 now, not 0
    assert (again["success"], again["segments"]) == (False, [])
    assert again["errorMsg"].startswith("Inconsistency between stored metadata state")  # Druid's message
    assert len(overlord.metadata.used_segments("wiki")) == 1


def test_a_task_whose_lock_was_revoked_cannot_publish(overlord) -> None:
    overlord.add("reader")
    allocated = allocate(overlord, "reader", "seq_0")["result"]
    overlord.add("urgent", group_id="urgent", priority=100)
    assert overlord.action("urgent", type="timeChunkLockTryAcquire", lockType="EXCLUSIVE",
                           interval=HOUR)["result"]["revoked"] is False
    denied = overlord.action("reader", type="segmentTransactionalInsert", dataSource="wiki",
                             segments=[segment_of(overlord, allocated)], startMetadata=kafka({0: 0}, "start"),
                             endMetadata=kafka({0: 100}, "end"))
    assert denied["result"] is None and "are not covered by locks of task [reader]" in denied["reason"]
    assert overlord.metadata.used_segments("wiki") == [] and overlord.metadata.get_stream_offsets("wiki") is None


def test_a_checkpoint_request_reaches_the_tasks_supervisor(overlord) -> None:
    overlord.add("reader")
    start = kafka({0: 0, 2: 10}, "start")
    assert overlord.action("reader", type="checkPointDataSourceMetadata", supervisorId="wiki", taskGroupId=1,
                           checkpointMetadata=start)["result"] is True
    assert overlord.checkpoints == [("wiki", 1, StreamOffsets("edits", {0: 0, 2: 10}))]


@pytest.mark.parametrize("task_id, action, message", [
    ("ghost", {"type": "lockList"}, "task [ghost] is not active in the task queue"),
    ("reader", {"type": "segmentMetadataUpdate"}, "action.type: 'segmentMetadataUpdate' is not supported"),
    ("reader", {"type": "segmentAllocate", "dataSource": "wiki"}, "action.timestamp: required for segmentAllocate"),
    ("reader", {"type": "segmentAllocate", "dataSource": "other", "timestamp": "2015-09-12T00:00:00Z"},
     "dataSource: task [reader] works on [wiki], not [other]"),
])
def test_bad_actions_are_400s_that_say_what_is_wrong(overlord, task_id, action, message) -> None:
    overlord.add("reader")
    response = overlord.http.post("/druid/indexer/v1/action", json={"task": task_id, "action": action})
    assert response.status_code == 400 and message in response.json()["error"]


@pytest.mark.parametrize("path", ["/etc/passwd", "{root}/../metadata.db"])
def test_a_segment_whose_file_is_outside_deep_storage_is_not_published(overlord, path: str) -> None:
    """Else a broker would read (and a kill delete) any file the overlord's process can reach."""
    overlord.add("reader")
    allocated = allocate(overlord, "reader", "seq_0")["result"]
    segment = segment_of(overlord, allocated, path.format(root=overlord.deep_storage.root))
    response = overlord.http.post("/druid/indexer/v1/action", json={"task": "reader", "action": {
        "type": "segmentTransactionalInsert", "dataSource": "wiki", "segments": [segment]}})
    assert response.status_code == 400 and "outside deep storage" in response.json()["error"]
    assert overlord.metadata.used_segments("wiki") == []
