"""Retention rules through Druid's API on an overlord, and the duty that applies them: exactly the segments the rules
drop are marked unused (out of queries), the rest stay; every change is in the audited history."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from sluice.coordinator.duties import KillConfig, KillUnusedSegments
from sluice.segment.segment import ETERNITY, DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.server.node import Node, NodeConfig
from sluice.server.roles import Role
from tests.integration.harness import wait_for

RULES = "/druid/coordinator/v1/rules"
TODAY = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@pytest.fixture
def overlord(tmp_path: Path) -> Iterator[Node]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    node = Node(NodeConfig(port=port, work_dir=tmp_path, role=Role.OVERLORD, coordinator_period_s=0.2))
    node.start()
    yield node
    node.stop()


def add_days(node: Node, data_source: str, days_ago: range) -> dict[int, Path]:
    """One day segment per day, `days_ago` days before today, each with a file in deep storage."""
    segments, files = [], {}
    for ago in days_ago:
        start = TODAY - timedelta(days=ago)
        segment_id = SegmentId(data_source, Interval(start, start + timedelta(days=1)), "v1", 0)
        files[ago] = node.deep_storage.root / data_source / f"{ago}.parquet"
        files[ago].parent.mkdir(parents=True, exist_ok=True)
        files[ago].write_bytes(b"segment")
        segments.append(DataSegment(id=segment_id, dimensions=[], metrics=[], aggregators=[],
                                    shard_spec=numbered_shard_spec(0), num_rows=1, size=7,
                                    load_spec={"type": "local", "path": str(files[ago])}))
    assert node.metadata.commit_segments_and_metadata(segments, data_source, None, None).success
    return files


def used_days_ago(node: Node, data_source: str) -> list[int]:
    return sorted((TODAY - s.interval.start).days for s in node.metadata.used_segments(data_source))


def test_rules_drop_exactly_what_they_say_and_every_change_is_audited(overlord: Node) -> None:
    add_days(overlord, "recent_only", range(0, 10))
    add_days(overlord, "old_dropped", range(0, 10))
    add_days(overlord, "untouched", range(0, 10))
    http = httpx.Client(base_url=overlord.config.url, timeout=30)
    assert http.get(RULES).json() == {"_default": [{"tieredReplicants": {"_default_tier": 2}, "type": "loadForever"}]}

    keep_three_days = [{"type": "loadByPeriod", "period": "P3D", "includeFuture": True}, {"type": "dropForever"}]
    response = http.post(f"{RULES}/recent_only", json=keep_three_days,
                         headers={"X-Druid-Author": "ops", "X-Druid-Comment": "three days is plenty"})
    assert response.status_code == 200
    assert http.post(f"{RULES}/old_dropped", json=[{"type": "dropBeforeByPeriod", "period": "P5D"}]).status_code == 200

    # P3D keeps the segments that end after now - 3 days: the one of 3 days ago ends 2 days ago; P5D drops the
    # segments that end by now - 5 days: the one of 5 days ago ends 4 days ago
    wait_for(lambda: used_days_ago(overlord, "recent_only") == [0, 1, 2, 3]
             and used_days_ago(overlord, "old_dropped") == [0, 1, 2, 3, 4, 5], 30, "the retention duty")
    assert used_days_ago(overlord, "untouched") == list(range(10))  # the default rule loads forever

    assert http.get(f"{RULES}/recent_only").json() == keep_three_days
    assert http.get(f"{RULES}/recent_only?full").json() == keep_three_days + [
        {"tieredReplicants": {"_default_tier": 2}, "type": "loadForever"}]
    assert http.get(f"{RULES}/nothing_here").json() == []
    [entry] = http.get(f"{RULES}/recent_only/history").json()
    assert entry["key"] == "recent_only" and entry["type"] == "rules"
    assert entry["auditInfo"]["author"] == "ops" and entry["auditInfo"]["comment"] == "three days is plenty"
    assert entry["auditInfo"]["ip"] == "127.0.0.1"
    assert [h["key"] for h in http.get(f"{RULES}/history").json()] == ["old_dropped", "recent_only"]
    assert len(http.get(f"{RULES}/history?count=1").json()) == 1

    # a new default applies where a data source's own rules do not
    assert http.post(f"{RULES}/_default", json=[{"type": "dropBeforeByPeriod", "period": "P8D"},
                                                  {"type": "loadForever"}]).status_code == 200
    wait_for(lambda: used_days_ago(overlord, "untouched") == list(range(9)), 30, "the new default")
    assert used_days_ago(overlord, "recent_only") == [0, 1, 2, 3]

    refused = http.post(f"{RULES}/recent_only", json=[{"type": "loadByPeriod"}])
    assert refused.status_code == 400 and refused.json()["error"] == "rules[0].period: required for loadByPeriod"
    assert http.get(f"{RULES}/recent_only").json() == keep_three_days  # nothing stored


def test_the_kill_duty_deletes_unused_segments_past_retention_once_their_buffer_is_over(node: Node,
                                                                                     http: httpx.Client) -> None:
    """On the session's all-in-one node, whose task queue runs the kill tasks the duty submits."""
    files = add_days(node, "kill_duty", range(0, 10))
    assert node.metadata.mark_segments_unused("kill_duty", ETERNITY) == 10
    retain_five_days = KillConfig(on=True, duration_to_retain=timedelta(days=5), buffer_period=timedelta(hours=1))
    buffered = KillUnusedSegments(node.metadata, node.task_queue.add, node.task_queue.active, retain_five_days)
    assert buffered.run_once() == []  # marked unused a moment ago: within the buffer period
    duty = KillUnusedSegments(node.metadata, node.task_queue.add, node.task_queue.active,
                              KillConfig(on=True, duration_to_retain=timedelta(days=5), buffer_period=timedelta(0)))
    [task_id] = duty.run_once()
    status = wait_for(lambda: (s := http.get(f"/druid/indexer/v1/task/{task_id}/status").json()["status"])
                      ["statusCode"] != "RUNNING" and s, 60, "the kill task")
    assert status["statusCode"] == "SUCCESS", status
    # segments that end by now - 5 days (6 to 9 days ago) are gone, rows and files; the others stay, unused
    unused = {(TODAY - s.interval.start).days for s in node.metadata.unused_segments("kill_duty", ETERNITY)}
    assert unused == {0, 1, 2, 3, 4, 5}
    assert sorted(ago for ago, path in files.items() if path.exists()) == [0, 1, 2, 3, 4, 5]
    assert duty.run_once() == []  # nothing left to kill
