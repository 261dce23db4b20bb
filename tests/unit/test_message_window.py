"""Message rejection settings + a task's creation time in -> the instants it keeps rows between, and the SQL that
throws the rest away (druid-api.md §2.2; the Spark side is in tests/integration/test_pipeline.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from sluice.spec.supervisor import IngestionSpec, parse_supervisor_spec
from sluice.task.ingest_plan import MessageWindow
from sluice.task.kafka_index_task import KafkaIndexTaskSpec, message_window

CREATED = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)


def ingestion(**io: Any) -> IngestionSpec:
    """A spec with taskDuration PT1H and these ioConfig fields."""
    return parse_supervisor_spec({"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "events", "dimensionsSpec": {"dimensions": ["page"]}},
        "ioConfig": {"topic": "events", "inputFormat": {"type": "json"}, "taskDuration": "PT1H",
                     "consumerProperties": {"bootstrap.servers": "localhost:9092"}, **io}}}).spec


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize("io, minimum, maximum", [
    ({}, None, None),
    ({"lateMessageRejectionStartDateTime": "2023-06-01T00:00:00Z"}, at("2023-06-01T00:00"), None),
    # the start date-time is an instant of its own: the task's creation time plays no part
    ({"lateMessageRejectionStartDateTime": "2030-01-01T00:00:00Z"}, at("2030-01-01T00:00"), None),
    ({"lateMessageRejectionPeriod": "PT30M"}, at("2024-01-01T11:30"), None),  # created - period
    ({"lateMessageRejectionPeriod": "P1D"}, at("2023-12-31T12:00"), None),
    ({"earlyMessageRejectionPeriod": "PT10M"}, None, at("2024-01-01T13:10")),  # created + taskDuration + period
    ({"earlyMessageRejectionPeriod": "PT0S"}, None, at("2024-01-01T13:00")),
    ({"lateMessageRejectionPeriod": "PT1H", "earlyMessageRejectionPeriod": "PT1H"},
     at("2024-01-01T11:00"), at("2024-01-01T14:00")),
    ({"lateMessageRejectionStartDateTime": "2024-01-01T00:00:00Z", "earlyMessageRejectionPeriod": "PT1H",
      "taskDuration": "PT2H"}, at("2024-01-01T00:00"), at("2024-01-01T15:00")),
])
def test_the_window_is_fixed_from_the_settings_and_the_task_creation_time(io, minimum, maximum):
    assert message_window(ingestion(**io).io_config, CREATED) == MessageWindow(minimum, maximum)


def test_the_window_belongs_to_the_task_so_replicas_created_together_keep_the_same_rows():
    spec = ingestion(lateMessageRejectionPeriod="PT1H", earlyMessageRejectionPeriod="PT1H")
    replicas = [KafkaIndexTaskSpec(task_id, 0, "seq", spec, {0: 0}, created=CREATED) for task_id in ("a", "b")]
    assert replicas[0].message_window == replicas[1].message_window == MessageWindow(at("2024-01-01T11:00"),
                                                                                     at("2024-01-01T14:00"))
    later = KafkaIndexTaskSpec("c", 0, "seq", spec, {0: 0}, created=CREATED + timedelta(hours=1))
    assert later.message_window == MessageWindow(at("2024-01-01T12:00"), at("2024-01-01T15:00"))


def test_the_task_payload_carries_the_window_as_druid_task_io_config_does():
    spec = KafkaIndexTaskSpec("a", 0, "seq", ingestion(lateMessageRejectionPeriod="PT1H"), {0: 0}, created=CREATED)
    io = spec.to_json()["ioConfig"]
    assert (io["minimumMessageTime"], io["maximumMessageTime"]) == ("2024-01-01T11:00:00.000Z", None)
    assert io["lateMessageRejectionPeriod"] == "PT3600S"


@pytest.mark.parametrize("window, sql", [
    (MessageWindow(), "FALSE"),
    (MessageWindow(minimum=at("2024-01-01T00:00")), "unix_millis(`__time`) < 1704067200000"),
    (MessageWindow(maximum=at("2024-01-01T00:00")), "unix_millis(`__time`) > 1704067200000"),
    (MessageWindow(at("2024-01-01T00:00"), at("2024-01-01T01:00")),
     "unix_millis(`__time`) < 1704067200000 OR unix_millis(`__time`) > 1704070800000"),
    # whole milliseconds, as Druid's instants; another zone is the same instant; no zone is UTC
    (MessageWindow(minimum=at("2024-01-01T00:00:00.000999")), "unix_millis(`__time`) < 1704067200000"),
    (MessageWindow(minimum=datetime(2024, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))),
     "unix_millis(`__time`) < 1704067200000"),
    (MessageWindow(minimum=datetime(2024, 1, 1)), "unix_millis(`__time`) < 1704067200000"),
    (MessageWindow(minimum=datetime(1969, 12, 31, 23, 59, 59, 999500, tzinfo=UTC)), "unix_millis(`__time`) < -1"),
])
def test_rows_outside_the_window_both_ends_inclusive_are_selected_by_their_millisecond_time(window, sql):
    assert window.outside_sql() == sql
