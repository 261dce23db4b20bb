"""The supervisor's runner against a fake stream and task runner: runs in -> status, metrics and alerts out."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Callable

import pytest
from prometheus_client.exposition import generate_latest

from sluice.emitter import AlertEvent, Emitter, Event, PrometheusEmitter, ServiceEmitter, ServiceMetricEvent, Severity
from sluice.metadata.offsets import StreamOffsets
from sluice.metadata.store import MetadataStore
from sluice.overlord.supervisor.state_manager import SupervisorStateManagerConfig
from sluice.overlord.supervisor.stream_supervisor import StreamSupervisor
from sluice.overlord.task_queue import QueueFull
from sluice.spec.supervisor import parse_supervisor_spec
from sluice.stream.kafka import StreamError
from sluice.task.kafka_index_task import KafkaIndexTaskSpec
from sluice.task.task import TaskStatus

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Recording(Emitter):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[Event] = []

    def _emit(self, event: Event) -> None:
        self.events.append(event)


class FakeStream:
    """One topic's offsets, as the test sets them; `error` makes every call fail as an unreachable broker does."""

    def __init__(self, latest: dict[int, int], earliest: dict[int, int] | None = None) -> None:
        self.latest = latest
        self.earliest = earliest or {p: 0 for p in latest}
        self.error: str | None = None

    def _check(self) -> None:
        if self.error is not None:
            raise StreamError(self.error)

    def partitions(self) -> list[int]:
        self._check()
        return sorted(self.latest)

    def latest_offsets(self, partitions: Any) -> dict[int, int]:
        self._check()
        return {p: self.latest[p] for p in partitions}

    def earliest_offsets(self, partitions: Any) -> dict[int, int]:
        self._check()
        return {p: self.earliest[p] for p in partitions}

    def close(self) -> None:
        pass


class FakeClient:
    """A reading task that has read `current` (set by the test) and never stops on its own."""

    def __init__(self, spec: KafkaIndexTaskSpec) -> None:
        self.spec = spec
        self.current = dict(spec.start_offsets)

    def start_time(self) -> datetime:
        return T0

    def current_offsets(self) -> dict[int, int]:
        return dict(self.current)


class FakeRunner:
    """The TaskQueue as a supervisor sees it; `full` refuses new tasks as a full queue does."""

    def __init__(self) -> None:
        self.clients: dict[str, FakeClient] = {}
        self.full = False

    def run(self, spec: KafkaIndexTaskSpec) -> None:
        if self.full:
            raise QueueFull("Too many tasks are in the queue (Limit = 1), (Current active tasks = 1). Retry later "
                            "or increase the druid.indexer.queue.maxSize")
        self.clients[spec.id] = FakeClient(spec)

    def status(self, task_id: str) -> TaskStatus | None:
        return TaskStatus(task_id, "RUNNING") if task_id in self.clients else None

    def client(self, task_id: str) -> FakeClient | None:
        return self.clients.get(task_id)

    def shutdown(self, task_id: str, reason: str) -> None:
        self.clients.pop(task_id, None)

    def active(self, data_source: str | None = None) -> list[Any]:
        return []

    def add_listener(self, listener: Callable[[TaskStatus], None]) -> None:
        pass

    def remove_listener(self, listener: Callable[[TaskStatus], None]) -> None:
        pass


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def spec_json(**io: Any) -> dict[str, Any]:
    return {"type": "kafka", "spec": {
        "dataSchema": {"dataSource": "wiki", "timestampSpec": {"column": "time"},
                       "dimensionsSpec": {"dimensions": ["page"]}},
        "ioConfig": {"topic": "wiki", "inputFormat": {"type": "json"},
                     "consumerProperties": {"bootstrap.servers": "localhost:9092"},
                     "startDelay": "PT1H", "period": "PT1H", **io},  # runs only when the test asks
        "tuningConfig": {"type": "kafka"}}}


class Harness:
    def __init__(self, metadata: MetadataStore, stream: FakeStream, emitter: Emitter, payload: dict[str, Any],
                 config: SupervisorStateManagerConfig = SupervisorStateManagerConfig()) -> None:
        self.runner, self.clock, self.stream = FakeRunner(), Clock(), stream
        self.supervisor = StreamSupervisor(parse_supervisor_spec(payload), self.runner, metadata, lambda io: stream,
                                           ServiceEmitter("druid/overlord", "localhost:8090", emitter), config,
                                           clock=self.clock)
        self.supervisor.start()

    def run(self) -> dict[str, Any]:
        """One RunNotice, done once the notice thread has handled it; the status report afterwards."""
        self.supervisor.request_run()
        self.supervisor.submit(lambda: None)
        return self.status()

    def status(self) -> dict[str, Any]:
        return self.supervisor.status_report()["payload"]

    def read_to(self, offsets: dict[int, int]) -> None:
        for client in self.runner.clients.values():
            client.current = {p: o for p, o in offsets.items() if p in client.spec.start_offsets}


@pytest.fixture
def harnesses() -> Iterator[list[Harness]]:
    started: list[Harness] = []
    yield started
    for harness in started:
        harness.supervisor.stop(graceful=False)


def harness(harnesses: list[Harness], *args: Any, **kwargs: Any) -> Harness:
    made = Harness(*args, **kwargs)
    harnesses.append(made)
    return made


def state(status: dict[str, Any]) -> tuple[str, str]:
    return status["state"], status["detailedState"]


def test_offsets_reset_automatically_send_druids_alert(metadata, harnesses):
    metadata.reset_stream_offsets("wiki", StreamOffsets("wiki", {0: 500, 1: 20}))  # the topic was re-created
    emitter = Recording()
    h = harness(harnesses, metadata, FakeStream(latest={0: 100, 1: 100}), emitter,
                {**spec_json(), "spec": {**spec_json()["spec"], "tuningConfig": {
                    "type": "kafka", "resetOffsetAutomatically": True}}})
    status = h.run()
    alerts = [e for e in emitter.events if isinstance(e, AlertEvent)]
    assert [(a.description, a.severity, dict(a.data), a.service) for a in alerts] == [
        ("Offsets were reset automatically, potential data duplication or loss", Severity.COMPONENT_FAILURE,
         {"dataSource": "wiki", "stream": "wiki", "partitions": [0], "offsets": {"0": 100}}, "druid/overlord")]
    assert metadata.get_stream_offsets("wiki").offsets == {0: 100, 1: 20}
    assert [t["startingOffsets"] for t in status["activeTasks"]] == [{"0": 100, "1": 20}]
    assert any("reset automatically" in e["message"] for e in status["recentErrors"])


def test_offsets_gone_without_reset_offset_automatically_alert_nothing_and_turn_unhealthy(metadata, harnesses):
    metadata.reset_stream_offsets("wiki", StreamOffsets("wiki", {0: 500}))
    emitter = Recording()
    h = harness(harnesses, metadata, FakeStream(latest={0: 100}), emitter, spec_json())
    statuses = [h.run() for _ in range(3)]
    assert [state(s) for s in statuses] == [("RUNNING", "CREATING_TASKS")] * 2 + [
        ("UNHEALTHY_SUPERVISOR", "UNABLE_TO_CONNECT_TO_STREAM")]  # Druid: its "no longer available" is a stream error
    assert not [e for e in emitter.events if isinstance(e, AlertEvent)]
    assert metadata.get_stream_offsets("wiki").offsets == {0: 500}


def test_lag_is_emitted_every_run_from_the_latest_offsets_minus_what_the_tasks_read(metadata, harnesses):
    prometheus = PrometheusEmitter()
    recording = Recording()

    class Both(Emitter):
        def _emit(self, event: Event) -> None:
            prometheus.emit(event)
            recording.emit(event)

    h = harness(harnesses, metadata, FakeStream(latest={0: 100, 1: 50}), Both(), spec_json(useEarliestOffset=True))
    h.run()  # starts the task at the earliest offsets
    h.read_to({0: 60, 1: 50})
    h.run()
    emitted = {(e.metric, e.dimensions.get("partition")): (e.value, e.dimensions["dataSource"], e.dimensions["stream"])
               for e in recording.events if isinstance(e, ServiceMetricEvent)}
    assert emitted == {
        ("ingest/kafka/partitionLag", 0): (40, "wiki", "wiki"), ("ingest/kafka/partitionLag", 1): (0, "wiki", "wiki"),
        ("ingest/kafka/lag", None): (40, "wiki", "wiki"), ("ingest/kafka/maxLag", None): (40, "wiki", "wiki"),
        ("ingest/kafka/avgLag", None): (20, "wiki", "wiki")}
    text = generate_latest(prometheus.registry).decode()
    assert 'druid_ingest_kafka_lag{dataSource="wiki",stream="wiki"} 40.0' in text
    assert 'druid_ingest_kafka_partitionlag{dataSource="wiki",partition="0",stream="wiki"} 40.0' in text


def test_a_stream_error_turns_the_supervisor_unhealthy_only_after_the_threshold_and_back_after_good_runs(
        metadata, harnesses):
    emitter = Recording()
    stream = FakeStream(latest={0: 10})
    h = harness(harnesses, metadata, stream, emitter, spec_json())
    assert state(h.status()) == ("PENDING", "PENDING")
    stream.error = "Kafka brokers localhost:9092 unreachable"
    assert [state(h.run()) for _ in range(3)] == [("RUNNING", "CONNECTING_TO_STREAM")] * 2 + [
        ("UNHEALTHY_SUPERVISOR", "UNABLE_TO_CONNECT_TO_STREAM")]
    errors = h.status()["recentErrors"]
    assert [(e["exceptionClass"], e["message"], e["streamException"]) for e in errors] == [
        ("StreamException", "Kafka brokers localhost:9092 unreachable", True)] * 3
    assert not h.supervisor.healthy

    stream.error = None
    assert [state(h.run()) for _ in range(3)] == [("UNHEALTHY_SUPERVISOR", "UNABLE_TO_CONNECT_TO_STREAM")] * 2 + [
        ("RUNNING", "RUNNING")]

    stream.error = "Kafka brokers localhost:9092 unreachable"
    assert [state(h.run()) for _ in range(3)][-1] == ("UNHEALTHY_SUPERVISOR", "LOST_CONTACT_WITH_STREAM")


def test_thresholds_and_stack_traces_follow_the_overlords_settings(metadata, harnesses):
    stream = FakeStream(latest={0: 10})
    stream.error = "Kafka brokers localhost:9092 unreachable"
    config = SupervisorStateManagerConfig(unhealthiness_threshold=1, store_stack_trace=True)
    h = harness(harnesses, metadata, stream, Recording(), spec_json(), config)
    assert state(h.run()) == ("UNHEALTHY_SUPERVISOR", "UNABLE_TO_CONNECT_TO_STREAM")
    message = h.status()["recentErrors"][0]["message"]
    assert message.startswith("Traceback (most recent call last):")
    assert message.rstrip().endswith("StreamError: Kafka brokers localhost:9092 unreachable")


def test_an_idle_supervisor_reports_idle_and_running_again_when_data_arrives(metadata, harnesses):
    stream = FakeStream(latest={0: 100})
    emitter = Recording()
    h = harness(harnesses, metadata, stream, emitter,
                spec_json(useEarliestOffset=True, idleConfig={"enabled": True, "inactiveAfterMillis": 60_000}))
    assert state(h.run()) == ("RUNNING", "RUNNING")
    h.read_to({0: 100})
    h.clock.now += timedelta(seconds=30)
    assert state(h.run()) == ("RUNNING", "RUNNING")
    h.clock.now += timedelta(seconds=31)
    assert state(h.run()) == ("IDLE", "IDLE")
    assert state(h.run()) == ("IDLE", "IDLE")
    lags = [e.value for e in emitter.events if isinstance(e, ServiceMetricEvent) and e.metric == "ingest/kafka/lag"]
    assert lags[-1] == 0  # Druid emits lag while idle too

    stream.latest = {0: 120}
    assert state(h.run()) == ("RUNNING", "RUNNING")


def test_the_cluster_idle_config_applies_to_specs_without_their_own(metadata, harnesses):
    stream = FakeStream(latest={0: 100})
    config = SupervisorStateManagerConfig(idle_config_enabled=True, idle_config_inactive_after_millis=1_000)
    h = harness(harnesses, metadata, stream, Recording(), spec_json(useEarliestOffset=True), config)
    h.run()
    h.read_to({0: 100})
    h.clock.now += timedelta(seconds=2)
    assert state(h.run()) == ("IDLE", "IDLE")


def test_a_task_the_queue_refuses_is_not_waited_for(metadata, harnesses):
    h = harness(harnesses, metadata, FakeStream(latest={0: 100}), Recording(), spec_json())
    h.runner.full = True
    status = h.run()
    assert status["activeTasks"] == []
    assert "Too many tasks are in the queue (Limit = 1)" in status["recentErrors"][-1]["message"]
    h.runner.full = False
    assert [t["startingOffsets"] for t in h.run()["activeTasks"]] == [{"0": 100}]
