"""The emitter: Druid's event JSON, emit never raises, rate-limited warnings, Prometheus names and values,
emitter config, and GET /metrics."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, Counter, generate_latest
from pydantic import ValidationError

from sluice.emitter import (
    AlertEvent,
    ComposingEmitter,
    EmitterConfig,
    HttpPostEmitter,
    LoggingEmitter,
    NoopEmitter,
    PrometheusEmitter,
    RateLimitedLog,
    ServiceEmitter,
    ServiceMetricEvent,
    Severity,
    build_emitter,
)
from sluice.emitter import metrics as m
from sluice.emitter.core import Emitter
from sluice.emitter.events import Event
from sluice.emitter.prometheus import prometheus_name
from sluice.server.api_metrics import metrics_router

AT = datetime(2024, 5, 1, 12, 30, 0, 123000, tzinfo=timezone.utc)


class Recording(Emitter):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.events: list[Event] = []

    def _emit(self, event: Event) -> None:
        self.events.append(event)


class Broken(Emitter):
    def _emit(self, event: Event) -> None:
        raise RuntimeError("receiver exploded")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# ---- events ----

def test_service_emitter_stamps_druids_service_dimensions_on_metric_json() -> None:
    recording = Recording()
    ServiceEmitter("druid/peon", "10.0.0.1:8100", recording, version="0.1.0").emit(
        ServiceMetricEvent(m.INGEST_EVENTS_PROCESSED, 120, {m.DATASOURCE: "wiki", m.TASK_ID: "index_kafka_wiki_1"},
                           created_time=AT))
    assert [e.to_map() for e in recording.events] == [{
        "feed": "metrics", "timestamp": "2024-05-01T12:30:00.123Z", "service": "druid/peon",
        "host": "10.0.0.1:8100", "version": "0.1.0", "metric": "ingest/events/processed", "value": 120,
        "dataSource": "wiki", "taskId": "index_kafka_wiki_1"}]


def test_alert_json_has_druids_feed_severity_and_data() -> None:
    recording = Recording()
    emitter = ServiceEmitter("druid/overlord", "h:8090", recording)
    emitter.alert("offsets no longer available", Severity.ANOMALY, dataSource="wiki", partition=3)
    event = recording.events[0].to_map()
    assert {k: v for k, v in event.items() if k != "timestamp"} == {
        "feed": "alerts", "service": "druid/overlord", "host": "h:8090", "version": "",
        "severity": "anomaly", "description": "offsets no longer available", "data": {"dataSource": "wiki",
                                                                                      "partition": 3}}
    assert AlertEvent("x").severity is Severity.COMPONENT_FAILURE


# ---- emit never raises; warnings are rate limited ----

@pytest.mark.parametrize("event, reason", [
    (ServiceMetricEvent("query/time", float("nan")), "metric [query/time] has a value of nan; NaN and infinite"),
    (ServiceMetricEvent("query/time", float("inf")), "has a value of inf"),
    (ServiceMetricEvent("query/time", "12"), "metric [query/time] has a value that is not a number: '12'"),
    (ServiceMetricEvent("query/time", True), "has a value that is not a number: True"),
    (ServiceMetricEvent("", 1), "a metric event needs a metric name"),
    (AlertEvent(""), "an alert needs a description"),
    ("query/time=12", "str is not an event"),
])
def test_invalid_events_are_counted_and_warned_about_never_raised(event, reason, caplog) -> None:
    recording = Recording()
    with caplog.at_level(logging.WARNING, logger="sluice.emitter"):
        recording.emit(event)
    assert recording.events == []
    assert recording.invalid == 1
    assert reason in caplog.text


def test_an_emitter_that_fails_inside_does_not_fail_the_caller() -> None:
    broken = Broken()
    broken.emit(ServiceMetricEvent("query/time", 3))
    assert broken.invalid == 1


def test_a_flood_of_invalid_events_logs_one_line_per_interval(caplog) -> None:
    clock = FakeClock()
    recording = Recording(warn_interval=60, clock=clock)
    with caplog.at_level(logging.WARNING, logger="sluice.emitter"):
        for second in range(0, 130):
            clock.now = second
            recording.emit(ServiceMetricEvent("query/time", float("nan")))
    assert recording.invalid == 130
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3  # at 0 s, 60 s and 120 s
    assert "more warnings" not in lines[0]
    assert lines[1].endswith("(and 59 more warnings since the last one)")
    assert lines[2].endswith("(and 59 more warnings since the last one)")


@pytest.mark.parametrize("times, logged", [
    ([0, 1, 9.99, 10, 10.5, 25], [True, False, False, True, False, True]),
    ([5, 5, 5], [True, False, False]),
])
def test_rate_limited_log_table(times, logged) -> None:
    clock = FakeClock()
    limited = RateLimitedLog(logging.getLogger("test.rate"), 10, clock)
    results = []
    for t in times:
        clock.now = t
        results.append(limited.warn("x"))
    assert results == logged


# ---- logging and composing ----

def test_logging_emitter_writes_one_json_line_per_event(caplog) -> None:
    emitter = LoggingEmitter(logger=logging.getLogger("test.events"))
    with caplog.at_level(logging.INFO, logger="test.events"):
        emitter.emit(ServiceMetricEvent(m.QUERY_TIME, 15, {m.DATASOURCE: "wiki"}, created_time=AT))
        emitter.emit(AlertEvent("disk full", created_time=AT))
    assert [json.loads(r.getMessage()) for r in caplog.records] == [
        {"feed": "metrics", "timestamp": "2024-05-01T12:30:00.123Z", "service": "", "host": "", "version": "",
         "metric": "query/time", "value": 15, "dataSource": "wiki"},
        {"feed": "alerts", "timestamp": "2024-05-01T12:30:00.123Z", "service": "", "host": "", "version": "",
         "severity": "component-failure", "description": "disk full", "data": {}}]


def test_composing_emitter_reaches_every_emitter_even_past_a_broken_one() -> None:
    first, broken, last = Recording(), Broken(), Recording()
    composing = ComposingEmitter([first, broken, last])
    composing.emit(ServiceMetricEvent(m.QUERY_TIME, 1))
    assert len(first.events) == len(last.events) == 1
    assert broken.invalid == 1
    assert composing.invalid == 0


def test_http_emitter_drops_and_counts_when_its_queue_is_full() -> None:
    emitter = HttpPostEmitter("http://127.0.0.1:9/never", max_queue_size=3)  # not started: nothing drains
    for i in range(5):
        emitter.emit(ServiceMetricEvent(m.QUERY_TIME, i))
    assert emitter.dropped == 2
    emitter.close()
    assert (emitter.dropped, emitter.sent) == (5, 0)
    emitter.emit(ServiceMetricEvent(m.QUERY_TIME, 9))
    assert emitter.dropped == 6


# ---- Prometheus ----

@pytest.mark.parametrize("metric, name", [
    ("ingest/events/processed", "ingest_events_processed"),
    ("ingest/events/processedWithError", "ingest_events_processedwitherror"),
    ("sqlQuery/time", "sqlquery_time"),
    ("ingest/kafka/maxLag", "ingest_kafka_maxlag"),
    ("query/cache/delta/put/ok", "query_cache_delta_put_ok"),
])
def test_prometheus_names_follow_druids_extension(metric, name) -> None:
    assert prometheus_name(metric) == name


def prometheus() -> tuple[PrometheusEmitter, ServiceEmitter]:
    emitter = PrometheusEmitter()
    return emitter, ServiceEmitter("druid/peon", "10.0.0.1:8100", emitter)


def test_counters_add_up_per_data_source_and_labels_are_sanitized_as_druid_does() -> None:
    emitter, service = prometheus()
    service.metric(m.INGEST_EVENTS_PROCESSED, 100, dataSource="wiki-edits", taskId="index_kafka_a")
    service.metric(m.INGEST_EVENTS_PROCESSED, 20, dataSource="wiki-edits", taskId="index_kafka_b")
    service.metric(m.INGEST_EVENTS_PROCESSED, 7, dataSource="clicks")
    service.metric(m.INGEST_EVENTS_UNPARSEABLE, 2)
    value = emitter.registry.get_sample_value
    assert value("druid_ingest_events_processed_total", {"dataSource": "wiki_edits"}) == 120
    assert value("druid_ingest_events_processed_total", {"dataSource": "clicks"}) == 7
    assert value("druid_ingest_events_unparseable_total", {"dataSource": "unknown"}) == 2


def test_gauges_keep_the_last_value_and_timers_are_histograms_in_seconds() -> None:
    emitter, service = prometheus()
    service.metric(m.INGEST_KAFKA_LAG, 500, dataSource="wiki", stream="edits")
    service.metric(m.INGEST_KAFKA_LAG, 30, dataSource="wiki", stream="edits")
    service.metric(m.TASK_RUN_TIME, 1500, dataSource="wiki", taskType="index_kafka")
    value = emitter.registry.get_sample_value
    assert value("druid_ingest_kafka_lag", {"dataSource": "wiki", "stream": "edits"}) == 30
    task = {"dataSource": "wiki", "taskType": "index_kafka"}
    assert value("druid_task_run_time_sum", task) == 1.5
    assert value("druid_task_run_time_count", task) == 1
    assert value("druid_task_run_time_bucket", {**task, "le": "1.0"}) == 0
    assert value("druid_task_run_time_bucket", {**task, "le": "2.5"}) == 1


def test_unmapped_metrics_and_alerts_are_ignored_and_negative_counts_refused() -> None:
    emitter, service = prometheus()
    service.metric("jvm/gc/count", 3)
    service.alert("something broke")
    assert emitter.invalid == 0
    assert "jvm" not in _exposition(emitter.registry)
    service.metric(m.TASK_SUCCESS_COUNT, -1, dataSource="wiki")
    assert emitter.invalid == 1


def test_host_and_service_labels_when_asked_for() -> None:
    emitter = PrometheusEmitter("sluice", add_host_as_label=True, add_service_as_label=True)
    ServiceEmitter("druid/peon", "10.0.0.1:8100", emitter).metric(m.TASK_FAILED_COUNT, 1, dataSource="wiki")
    assert emitter.registry.get_sample_value("sluice_task_failed_count_total", {
        "dataSource": "wiki", "druid_service": "druid/peon", "host_name": "10.0.0.1:8100"}) == 1


# ---- config ----

def test_config_reads_druids_names_and_builds_each_emitter() -> None:
    config = EmitterConfig.model_validate({"type": "composing", "emitters": ["prometheus", "http", "logging"],
                                           "recipientBaseUrl": "http://collector:9000/events",
                                           "flushMillis": 500, "flushCount": 10, "maxQueueSize": 100})
    emitter = build_emitter(config)
    assert isinstance(emitter, ComposingEmitter)
    prom, http, logging_ = emitter.emitters
    assert isinstance(prom, PrometheusEmitter) and isinstance(logging_, LoggingEmitter)
    assert isinstance(http, HttpPostEmitter) and http.url == "http://collector:9000/events"
    assert isinstance(build_emitter(EmitterConfig()), NoopEmitter)


@pytest.mark.parametrize("payload, message", [
    ({"type": "http"}, "recipientBaseUrl: the http emitter needs the URL to POST events to"),
    ({"type": "composing", "emitters": ["logging", "http"]}, "recipientBaseUrl: the http emitter needs"),
    ({"type": "composing"}, "emitters: a composing emitter needs a list of emitters"),
    ({"type": "logging", "emitters": ["http"]}, "only the composing emitter takes a list of emitters"),
    ({"type": "statsd"}, "type"),
    ({"type": "http", "recipientBaseUrl": "http://x", "flushCount": 0}, "flushCount"),
    ({"type": "prometheus", "namespace": "9druid"}, "namespace"),
    ({"type": "logging", "flushMilis": 5}, "flushMilis"),
])
def test_config_errors_name_the_setting(payload, message) -> None:
    with pytest.raises(ValidationError, match=message):
        EmitterConfig.model_validate(payload)


def test_dimension_map_path_replaces_the_default_map(tmp_path) -> None:
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({
        "ingest/events/processed": {"dimensions": ["dataSource", "taskId"], "type": "count", "help": "per task"},
        "query/count": {"dimensions": [], "type": "count", "help": "queries"}}))
    emitter = build_emitter(EmitterConfig(type="prometheus", dimension_map_path=str(path)))
    service = ServiceEmitter("druid/peon", "h", emitter)
    service.metric(m.INGEST_EVENTS_PROCESSED, 5, dataSource="wiki", taskId="t1")
    service.metric("query/count", 2, dataSource="wiki")
    service.metric(m.QUERY_TIME, 5, dataSource="wiki")
    lines = _exposition(emitter.registry).splitlines()
    assert 'druid_ingest_events_processed_total{dataSource="wiki",taskId="t1"} 5.0' in lines
    assert "druid_query_count_total 2.0" in lines
    assert not [line for line in lines if "query_time" in line]


def test_a_metric_map_with_an_unknown_type_is_refused_at_build(tmp_path) -> None:
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps({"query/time": {"dimensions": [], "type": "summary"}}))
    with pytest.raises(ValueError, match=r"metric \[query/time\] has type \[summary\]; expected count, gauge or timer"):
        build_emitter(EmitterConfig(type="prometheus", dimension_map_path=str(path)))


# ---- GET /metrics ----

def _exposition(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def _get_metrics(source, **headers: str):
    app = FastAPI()
    app.include_router(metrics_router(source))
    return TestClient(app).get("/metrics", headers=headers)


def test_metrics_endpoint_serves_the_prometheus_emitter_inside_a_composing_one() -> None:
    prom = PrometheusEmitter()
    service = ServiceEmitter("druid/broker", "h", ComposingEmitter([NoopEmitter(), prom]))
    service.metric(m.SQL_QUERY_BYTES, 2048, dataSource="wiki")
    response = _get_metrics(service)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'druid_sqlquery_bytes_total{dataSource="wiki"} 2048.0' in response.text.splitlines()


def test_metrics_endpoint_serves_the_python_process_metrics_too() -> None:
    """What Druid's JVM monitors tell about a Java process: CPU, memory, file descriptors, the runtime, its GC."""
    lines = _get_metrics(ServiceEmitter("druid/overlord", "h", PrometheusEmitter())).text.splitlines()
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in lines if not line.startswith("#")}
    assert values["process_cpu_seconds_total"] > 0 and values["process_resident_memory_bytes"] > 0
    assert values["process_open_fds"] > 0
    assert any(name.startswith("python_info{") for name in values)
    assert any(name.startswith("python_gc_collections_total{") for name in values)


def test_metrics_endpoint_answers_openmetrics_to_a_scraper_that_asks_for_it() -> None:
    response = _get_metrics(CollectorRegistry(), accept="application/openmetrics-text; version=1.0.0")
    assert response.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert response.text == "# EOF\n"


def test_metrics_endpoint_serves_a_registry_as_is() -> None:
    registry = CollectorRegistry()
    Counter("sluice_up", "up", registry=registry).inc()
    assert "sluice_up_total 1.0" in _get_metrics(registry).text.splitlines()


def test_metrics_endpoint_without_a_prometheus_emitter_says_how_to_get_one() -> None:
    response = _get_metrics(LoggingEmitter())
    assert response.status_code == 404
    assert response.json() == {"error": "no Prometheus emitter is configured; set the emitter type to "
                                        "\"prometheus\" (or list it in a composing emitter's emitters)"}
