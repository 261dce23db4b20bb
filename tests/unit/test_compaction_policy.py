"""Druid's automatic compaction as pure decisions: a config in → its Druid form or the field it names out; segments
of a data source in → the chunks to compact newest first, the compacted and the skipped out; slots; and the duty over
a real (SQLite) metadata store with a fake task queue: what it submits, and what the status then says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sluice.coordinator.compaction import (AuditInfo, AutoCompaction, AutoCompactionSnapshot, CompactionStatistics,
                                           DataSourceCompactionConfig, DruidCompactionConfig, compaction_config_history,
                                           compaction_task_payload, compaction_task_slots, find_segments_to_compact,
                                           newest_first, parse_data_source_config, read_compaction_config,
                                           update_compaction_config)
from sluice.metadata.store import MetadataStore
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec
from sluice.spec.errors import SpecError
from sluice.task.compact_task import CompactionTaskSpec
from sluice.task.task import TaskSpec, task_from_json

DS = "wiki"


def day(n: int) -> Interval:
    start = datetime(2024, 3, n, tzinfo=UTC)
    return Interval(start, start + timedelta(days=1))


def hour(n: int, h: int) -> Interval:
    start = datetime(2024, 3, n, h, tzinfo=UTC)
    return Interval(start, start + timedelta(hours=1))


def seg(interval: Interval, partition: int = 0, version: str = "v1", core: int = 0, size: int = 100,
        data_source: str = DS) -> DataSegment:
    """A segment; `core` > 0 makes it one of an overwrite's core partitions, 0 an appended one."""
    return DataSegment(SegmentId(data_source, interval, version, partition), ["channel"], ["count"],
                       [{"type": "count", "name": "count"}], numbered_shard_spec(partition, core), 10, size,
                       {"type": "local", "path": f"/x/{interval.start:%d%H}/{version}/{partition}"})


def appended(interval: Interval, n: int, **kwargs: Any) -> list[DataSegment]:
    return [seg(interval, p, **kwargs) for p in range(n)]


def config(**fields: Any) -> DataSourceCompactionConfig:
    return parse_data_source_config({"dataSource": DS, **fields})


def days(chunks: list[Any]) -> list[str]:
    """Each chunk by its day of March, or first and last day."""
    last = [c.interval.end - timedelta(milliseconds=1) for c in chunks]
    return [f"{c.interval.start:%d}" + ("" if end.date() == c.interval.start.date() else f"-{end:%d}")
            for c, end in zip(chunks, last)]


# -- the config ----------------------------------------------------------------------------------------------------


def test_a_config_needs_only_its_data_source_and_shows_druids_defaults() -> None:
    assert config().to_json() == {
        "dataSource": DS, "taskPriority": 25, "inputSegmentSizeBytes": 100_000_000_000_000, "maxRowsPerSegment": None,
        "skipOffsetFromLatest": "P1D", "tuningConfig": None, "granularitySpec": None, "dimensionsSpec": None,
        "metricsSpec": None, "transformSpec": None, "ioConfig": None, "taskContext": None, "engine": None}
    assert DruidCompactionConfig().to_json() == {
        "compactionConfigs": [], "compactionTaskSlotRatio": 0.1, "maxCompactionTaskSlots": 2**31 - 1,
        "compactionPolicy": {"type": "newestSegmentFirst", "priorityDatasource": None}, "useAutoScaleSlots": False,
        "engine": "native"}


def test_every_field_round_trips_through_its_druid_form() -> None:
    full = config(taskPriority=30, inputSegmentSizeBytes=10**9, maxRowsPerSegment=1000, skipOffsetFromLatest="PT2H",
                  tuningConfig={"type": "index_parallel", "maxNumConcurrentSubTasks": 2},
                  granularitySpec={"segmentGranularity": "DAY", "queryGranularity": "HOUR", "rollup": True},
                  dimensionsSpec={"dimensions": ["channel", {"name": "level", "type": "long"}]},
                  metricsSpec=[{"type": "longSum", "name": "count", "fieldName": "count"}],
                  transformSpec={"filter": {"type": "selector", "dimension": "channel", "value": "#en"}},
                  ioConfig={"dropExisting": True}, taskContext={"useConcurrentLocks": True}, engine="native")
    assert parse_data_source_config(full.to_json()) == full


@pytest.mark.parametrize(("fields", "error"), [
    ({"skipIntervals": []}, "skipIntervals: Sluice does not support this field"),
    ({"dataSource": None}, "dataSource:"),
    ({"dataSource": "a/b"}, "dataSource: dataSource cannot contain the '/' character."),
    ({"skipOffsetFromLatest": "1 day"}, "skipOffsetFromLatest: '1 day' is not an ISO-8601 period"),
    ({"skipOffsetFromLatest": "P-1D"}, "skipOffsetFromLatest: 'P-1D' is negative"),
    ({"inputSegmentSizeBytes": 0}, "inputSegmentSizeBytes:"),
    ({"engine": "msq"}, "engine:"),
    ({"ioConfig": {"inputSpec": {}}}, "ioConfig.inputSpec: Sluice does not support this field"),
    ({"tuningConfig": {"maxRowsInMemoryy": 5}}, "tuningConfig.maxRowsInMemoryy: Sluice does not support this field"),
    ({"metricsSpec": [{"type": "longSum", "name": "added"}]}, "metricsSpec[0].fieldName: longSum needs fieldName"),
])
def test_a_config_druid_or_sluice_would_refuse_names_the_field(fields: dict[str, Any], error: str) -> None:
    with pytest.raises(SpecError) as refused:
        config(**fields)
    assert str(refused.value).startswith(error)


def test_the_task_a_config_makes_is_druids_compact_task_at_its_priority() -> None:
    payload = compaction_task_payload(config(maxRowsPerSegment=1000, taskContext={"useConcurrentLocks": True},
                                             granularitySpec={"segmentGranularity": "DAY"}), day(1), "t1")
    assert payload == {"type": "compact", "id": "t1", "dataSource": DS,
                       "ioConfig": {"type": "compact", "dropExisting": False,
                                    "inputSpec": {"type": "interval", "interval": str(day(1))}},
                       "granularitySpec": {"type": None, "segmentGranularity": "DAY", "queryGranularity": None,
                                           "rollup": None},
                       "tuningConfig": {"partitionsSpec": {"type": "dynamic", "maxRowsPerSegment": 1000}},
                       "context": {"useConcurrentLocks": True, "priority": 25}}
    task = task_from_json(payload)
    assert isinstance(task, CompactionTaskSpec) and task.priority == 25


# -- the policy ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("segments", "fields", "to_compact", "compacted", "skipped"), [
    # appends in three days: the newest day is within P1D of the latest end; the others newest first
    ([*appended(day(1), 2), *appended(day(2), 3), *appended(day(3), 2)], {}, ["02", "01"], [], ["03"]),
    # PT0S skips nothing; P2D two days
    ([*appended(day(1), 2), *appended(day(2), 2)], {"skipOffsetFromLatest": "PT0S"}, ["02", "01"], [], []),
    ([*appended(day(1), 2), *appended(day(2), 2), *appended(day(3), 2)], {"skipOffsetFromLatest": "P2D"},
     ["01"], [], ["03", "02"]),
    # an hour's offset reaches into the last day: the whole chunk is skipped
    ([*appended(day(1), 2), *appended(day(2), 2)], {"skipOffsetFromLatest": "PT1H"}, ["01"], [], ["02"]),
    # one segment, or what one overwrite wrote (its core partitions), is compacted already; an append to it is not
    ([seg(day(1)), *[seg(day(2), p, core=3) for p in range(3)], seg(day(3), core=1), seg(day(3), 1), seg(day(4))],
     {"skipOffsetFromLatest": "PT0S"}, ["03"], ["04", "02", "01"], []),
    # overshadowed segments do not count: a newer version over the whole day is the day's only segment
    ([*appended(day(1), 3), seg(day(1), version="v2"), seg(day(2))], {"skipOffsetFromLatest": "PT0S"},
     [], ["02", "01"], []),
    # a newer version over part of a day: two intervals overlap, compacted together
    ([*appended(day(1), 1), seg(hour(1, 5), version="v2"), seg(day(2))], {"skipOffsetFromLatest": "PT0S"},
     ["01"], ["02"], []),
    # heavier than inputSegmentSizeBytes: skipped
    ([*appended(day(1), 2, size=600), *appended(day(2), 2, size=400)],
     {"skipOffsetFromLatest": "PT0S", "inputSegmentSizeBytes": 1000}, ["02"], [], ["01"]),
    # a configured segment granularity: hours are compacted into their day, even one hour alone; the skip's start is
    # floored to a day, so an hour's offset skips the last day
    ([seg(hour(1, 3)), seg(hour(1, 7)), seg(hour(2, 1)), seg(day(3)), seg(hour(4, 23))],
     {"skipOffsetFromLatest": "PT1H", "granularitySpec": {"segmentGranularity": "DAY"}}, ["02", "01"], ["03"],
     ["04"]),
    # a coarser segment than the configured granularity is split: its interval is compacted
    ([seg(Interval(day(1).start, day(3).end)), seg(day(5))],
     {"skipOffsetFromLatest": "PT0S", "granularitySpec": {"segmentGranularity": "DAY"}}, ["01-03"], ["05"], []),
])
def test_newest_segment_first_finds_what_needs_compaction(segments: list[DataSegment], fields: dict[str, Any],
                                                          to_compact: list[str], compacted: list[str],
                                                          skipped: list[str]) -> None:
    found = find_segments_to_compact(segments, config(**fields))
    assert (days(found.to_compact), days(found.compacted), days(found.skipped)) == (to_compact, compacted, skipped)


def test_eternity_cannot_be_compacted() -> None:
    """Segment granularity ALL: Druid's auto-compaction skips such a data source."""
    eternity = Interval(datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC))
    found = find_segments_to_compact(appended(eternity, 2), config(skipOffsetFromLatest="PT0S"))
    assert (found.to_compact, found.compacted, [c.interval for c in found.skipped]) == ([], [], [eternity])


def test_busy_intervals_are_skipped_and_a_chunk_without_bytes_is_left_out() -> None:
    segments = [*appended(day(1), 2), *appended(day(2), 2), *appended(day(3), 2, size=0), *appended(day(4), 2)]
    found = find_segments_to_compact(segments, config(skipOffsetFromLatest="PT0S"), busy=[hour(2, 12)])
    assert (days(found.to_compact), days(found.skipped)) == (["04", "01"], ["02"])
    assert found.to_compact[0].reason == "2 segments, 2 of them appended"
    assert CompactionStatistics.of(found.to_compact) == CompactionStatistics(bytes=400, segments=4, intervals=2)


@pytest.mark.parametrize(("ratio", "max_slots", "capacity", "running", "slots"), [
    (0.1, 2**31 - 1, 2, 0, 1),  # 0.2 slots: Druid keeps one
    (0.1, 2**31 - 1, 50, 0, 5),
    (0.1, 2**31 - 1, 50, 3, 2),
    (0.1, 2**31 - 1, 50, 7, 0),
    (0.5, 3, 50, 1, 2),  # maxCompactionTaskSlots bounds the ratio's
    (1.0, 0, 10, 0, 1),  # at least one, as Druid
])
def test_compaction_task_slots(ratio: float, max_slots: int, capacity: int, running: int, slots: int) -> None:
    cluster = DruidCompactionConfig(compaction_task_slot_ratio=ratio, max_compaction_task_slots=max_slots)
    assert compaction_task_slots(cluster, capacity, running) == slots


def test_newest_first_over_data_sources_and_the_priority_data_source_before_all() -> None:
    a = find_segments_to_compact([*appended(day(1), 2), *appended(day(3), 2)], config(skipOffsetFromLatest="PT0S"))
    b = find_segments_to_compact([*appended(day(2), 2, data_source="b")], config(skipOffsetFromLatest="PT0S"))
    both = [("a", c) for c in a.to_compact] + [("b", c) for c in b.to_compact]
    assert [(ds, f"{c.interval.start:%d}") for ds, c in newest_first(both)] == [("a", "03"), ("b", "02"), ("a", "01")]
    assert [(ds, f"{c.interval.start:%d}") for ds, c in newest_first(both, "b")] == [("b", "02"), ("a", "03"),
                                                                                      ("a", "01")]


def test_a_snapshot_has_druids_fields() -> None:
    snapshot = AutoCompactionSnapshot(DS, "RUNNING", awaiting=CompactionStatistics(10, 2, 1),
                                      compacted=CompactionStatistics(30, 3, 3))
    assert snapshot.to_json() == {
        "dataSource": DS, "scheduleStatus": "RUNNING", "message": None, "bytesAwaitingCompaction": 10,
        "segmentCountAwaitingCompaction": 2, "intervalCountAwaitingCompaction": 1, "bytesCompacted": 30,
        "segmentCountCompacted": 3, "intervalCountCompacted": 3, "bytesSkipped": 0, "segmentCountSkipped": 0,
        "intervalCountSkipped": 0}


# -- the duty, over a real metadata store --------------------------------------------------------------------------


class FakeQueue:
    """The task queue and lockbox as the duty sees them: submitted tasks stay active until `finish`."""

    def __init__(self) -> None:
        self.tasks: list[TaskSpec] = []
        self.locks: dict[str, list[Any]] = {}

    def add(self, spec: TaskSpec) -> None:
        self.tasks.append(spec)

    def active(self, data_source: str | None = None) -> list[TaskSpec]:
        return [t for t in self.tasks if data_source in (None, t.data_source)]

    def finish(self) -> None:
        self.tasks.clear()


class Lock:
    def __init__(self, interval: Interval, type: str = "EXCLUSIVE", revoked: bool = False) -> None:
        self.interval, self.type, self.revoked = interval, type, revoked


class StreamTask:
    """A streaming task as the duty sees it: priority 75, holding its locks."""

    type, data_source, priority, id = "index_kafka", DS, 75, "index_kafka_wiki_1"


def post(metadata: MetadataStore, **fields: Any) -> None:
    parsed = config(**fields)
    update_compaction_config(metadata, lambda current: current.with_config(parsed), AuditInfo("ops", "why", "1.2.3.4"))


def interval_of(task: TaskSpec) -> str:
    assert isinstance(task, CompactionTaskSpec)
    return task.io_config.input_spec.interval[8:10]  # type: ignore[union-attr]


def test_the_duty_submits_newest_first_within_its_slots_never_twice_and_reports(metadata: MetadataStore) -> None:
    segments = [*appended(day(1), 2), *appended(day(2), 3), *appended(day(3), 2), seg(day(4))]
    assert metadata.commit_segments_and_metadata(segments, DS, None, None).success
    queue = FakeQueue()
    duty = AutoCompaction(metadata, queue.add, queue.active, lambda task_id: queue.locks.get(task_id, []), lambda: 20)
    assert duty.run_once() == []  # no config, no compaction
    post(metadata, skipOffsetFromLatest="P1D", taskPriority=25)

    [first, second] = duty.run_once()  # 20 slots × 0.1: two tasks, the newest days that need compaction
    assert first.startswith(f"coordinator-issued_compact_{DS}_") and f"_{day(3).start:%Y-%m-%dT}" in first
    assert [interval_of(t) for t in queue.tasks] == ["03", "02"]
    assert [t.priority for t in queue.tasks] == [25, 25]
    assert duty.snapshots()[DS].to_json() == {
        "dataSource": DS, "scheduleStatus": "RUNNING", "message": None,
        "bytesAwaitingCompaction": 200, "segmentCountAwaitingCompaction": 2, "intervalCountAwaitingCompaction": 1,
        "bytesCompacted": 500, "segmentCountCompacted": 5, "intervalCountCompacted": 2,
        "bytesSkipped": 100, "segmentCountSkipped": 1, "intervalCountSkipped": 1}  # day 4: the latest, skipped

    assert duty.run_once() == []  # both slots taken by the tasks still running, and their days are busy
    queue.finish()  # as the tasks would have: one newer segment over each of their days
    assert metadata.commit_segments_and_metadata([seg(day(3), version="v2"), seg(day(2), version="v2")], DS,
                                                 None, None).success
    queue.tasks.append(StreamTask())  # type: ignore[arg-type]
    queue.locks[StreamTask.id] = [Lock(day(1))]
    assert duty.run_once() == []  # the streaming task's lock on day 1 is of a higher priority: compaction waits
    assert duty.snapshots()[DS].skipped == CompactionStatistics(300, 3, 2)  # days 1 and 4
    assert duty.snapshots()[DS].compacted == CompactionStatistics(200, 2, 2)  # days 2 and 3

    queue.locks[StreamTask.id] = [Lock(day(1), "APPEND")]
    assert duty.run_once() == []  # an APPEND lock conflicts with the compaction's EXCLUSIVE one
    post(metadata, skipOffsetFromLatest="P1D", taskContext={"useConcurrentLocks": True})
    assert len(duty.run_once()) == 1  # but it shares the chunk with a REPLACE lock
    assert interval_of(queue.tasks[-1]) == "01" and queue.tasks[-1].priority == 25

def test_configs_are_stored_under_druids_key_and_every_change_is_in_the_history(metadata: MetadataStore) -> None:
    post(metadata, skipOffsetFromLatest="PT1H")
    post(metadata, dataSource="other")
    update_compaction_config(metadata, lambda current: current.model_copy(update={"max_compaction_task_slots": 3}),
                             AuditInfo("ops"))
    update_compaction_config(metadata, lambda current: current.without(DS), AuditInfo("ops", "gone"))
    stored = metadata.get_config("coordinator.compaction.config")
    assert stored is not None and [c["dataSource"] for c in stored["compactionConfigs"]] == ["other"]
    assert read_compaction_config(metadata).max_compaction_task_slots == 3
    history = compaction_config_history(metadata, DS)
    # added; the slots changed while it had a config; deleted. Adding "other" changed nothing of wiki's.
    assert [(h["compactionConfig"] or {}).get("skipOffsetFromLatest") for h in history] == ["PT1H", "PT1H", None]
    assert [h["globalConfig"]["maxCompactionTaskSlots"] for h in history] == [2**31 - 1, 3, 3]
    assert history[0]["auditInfo"] == {"author": "ops", "comment": "why", "ip": "1.2.3.4"}
    assert history[-1]["auditInfo"]["comment"] == "gone"
    assert compaction_config_history(metadata, DS, count=1) == history[-1:]
    assert compaction_config_history(metadata, "never") == []
