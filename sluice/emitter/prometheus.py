"""Druid's prometheus-emitter: metric events become Prometheus collectors on the emitter's own registry.

Names follow the extension: `<namespace>_` + the metric lower-cased, each run that starts with a character
Prometheus does not allow turned into `_` (`ingest/events/processed` -> `druid_ingest_events_processed`,
exposed as `druid_ingest_events_processed_total`). Which metrics exist, their labels and their type come
from a metric map (Druid's `defaultMetrics.json` format); events for unmapped metrics are ignored. Timers
become histograms in seconds (the value divided by `conversionFactor`).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping

from prometheus_client import (
    CollectorRegistry, Counter, Gauge, GCCollector, Histogram, PlatformCollector, ProcessCollector,
)

from sluice.emitter import metrics as m
from sluice.emitter.core import ComposingEmitter, Emitter
from sluice.emitter.events import Event, ServiceMetricEvent
from sluice.emitter.service import ServiceEmitter

log = logging.getLogger(__name__)

_NAME_PATTERN = re.compile(r"[^a-zA-Z_:][^a-zA-Z0-9_:]*")
_LABEL_VALUE_PATTERN = re.compile(r"[^a-zA-Z0-9_][^a-zA-Z0-9_]*")
#: Druid's timer buckets, in seconds
_BUCKETS = (.1, .25, .5, .75, 1, 2.5, 5, 7.5, 10, 30, 60, 120, 300)
HOST_LABEL = "host_name"
SERVICE_LABEL = "druid_service"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class MetricSpec:
    """One entry of the metric map. Labels are few on purpose: a label per task id would make a new series
    for every task, which is why Druid's map labels ingestion counters by dataSource only."""

    dimensions: tuple[str, ...]
    type: Literal["count", "gauge", "timer"]
    help: str
    conversion_factor: float = 1.0

    @classmethod
    def from_json(cls, payload: Mapping[str, Any]) -> MetricSpec:
        return cls(tuple(payload.get("dimensions", ())), payload["type"], payload.get("help", ""),
                   float(payload.get("conversionFactor") or 1.0))


def _spec(type_: Literal["count", "gauge", "timer"], help_: str, *dimensions: str) -> MetricSpec:
    return MetricSpec(dimensions, type_, help_, 1000.0 if type_ == "timer" else 1.0)


#: Druid's defaultMetrics.json entries for the metrics Sluice emits
DEFAULT_METRICS: Mapping[str, MetricSpec] = {
    m.QUERY_TIME: _spec("timer", "Seconds taken to complete a query.", m.DATASOURCE, m.TYPE),
    m.QUERY_BYTES: _spec("count", "Number of bytes returned in query response.", m.DATASOURCE, m.TYPE),
    m.SQL_QUERY_TIME: _spec("timer", "Seconds taken to complete a SQL query.", m.DATASOURCE),
    m.SQL_QUERY_BYTES: _spec("count", "Number of bytes returned in the SQL query response.", m.DATASOURCE),
    m.INGEST_EVENTS_PROCESSED: _spec("count", "Number of events successfully processed per emission period.",
                                     m.DATASOURCE),
    m.INGEST_EVENTS_PROCESSED_WITH_ERROR: _spec(
        "count", "Number of events processed with some partial errors per emission period.", m.DATASOURCE),
    m.INGEST_EVENTS_UNPARSEABLE: _spec("count", "Number of events rejected because the events are unparseable.",
                                       m.DATASOURCE),
    m.INGEST_EVENTS_THROWN_AWAY: _spec("count", "Number of events rejected because they are outside the windowPeriod.",
                                       m.DATASOURCE),
    m.INGEST_INPUT_BYTES: _spec("count", "Number of bytes read from input sources, prior to parsing.", m.DATASOURCE),
    m.INGEST_ROWS_OUTPUT: _spec("count", "Number of Druid rows persisted.", m.DATASOURCE),
    m.INGEST_PERSISTS_COUNT: _spec("count", "Number of times persist occurred.", m.DATASOURCE),
    m.INGEST_HANDOFF_COUNT: _spec("count", "Number of handoffs that happened.", m.DATASOURCE),
    m.INGEST_KAFKA_LAG: _spec("gauge", "Total lag between the offsets consumed by the Kafka indexing tasks and "
                              "latest offsets in Kafka brokers across all partitions.", m.DATASOURCE, m.STREAM),
    m.INGEST_KAFKA_MAX_LAG: _spec("gauge", "Max lag between the offsets consumed by the Kafka indexing tasks and "
                                  "latest offsets in Kafka brokers across all partitions.", m.DATASOURCE, m.STREAM),
    m.INGEST_KAFKA_AVG_LAG: _spec("gauge", "Average lag between the offsets consumed by the Kafka indexing tasks and "
                                  "latest offsets in Kafka brokers across all partitions.", m.DATASOURCE, m.STREAM),
    m.INGEST_KAFKA_PARTITION_LAG: _spec("gauge", "Partition-wise lag between the offsets consumed by the Kafka "
                                        "indexing tasks and latest offsets in Kafka brokers.",
                                        m.DATASOURCE, m.STREAM, m.PARTITION),
    m.INGEST_STREAM_LATE_DROPPED: _spec("count", "Records a stream job dropped for arriving after their window "
                                        "closed (allowed lateness passed).", m.DATASOURCE),
    m.INGEST_STREAM_STATE_ROWS: _spec("gauge", "Rows in a stream job's state store.", m.DATASOURCE),
    m.INGEST_STREAM_STATE_BYTES: _spec("gauge", "Bytes of memory a stream job's state store uses.", m.DATASOURCE),
    m.INGEST_STREAM_BATCH_TIME: _spec("timer", "Seconds a stream job's micro-batch took, checkpoint included.",
                                      m.DATASOURCE),
    m.TASK_RUN_TIME: _spec("timer", "Seconds taken to run a task.", m.DATASOURCE, m.TASK_TYPE),
    m.TASK_SUCCESS_COUNT: _spec("count", "Number of successful tasks per emission period.", m.DATASOURCE),
    m.TASK_FAILED_COUNT: _spec("count", "Number of failed tasks per emission period.", m.DATASOURCE),
    m.SEGMENT_ADDED_BYTES: _spec("count", "Size in bytes of new segments created.", m.DATASOURCE, m.TASK_TYPE),
}


def load_metric_map(path: str | Path) -> dict[str, MetricSpec]:
    """Read a metric map in Druid's format (`dimensionMapPath`); it replaces the default map, as in Druid."""
    metric_map = {name: MetricSpec.from_json(entry) for name, entry in json.loads(Path(path).read_text()).items()}
    for name, spec in metric_map.items():
        if spec.type not in ("count", "gauge", "timer"):
            raise ValueError(f"{path}: metric [{name}] has type [{spec.type}]; expected count, gauge or timer")
    return metric_map


def prometheus_name(metric: str) -> str:
    return _NAME_PATTERN.sub("_", metric.lower())


@dataclass(frozen=True)
class _Registered:
    labels: tuple[str, ...]
    collector: Counter | Gauge | Histogram
    conversion_factor: float


class PrometheusEmitter(Emitter):
    """Records metric events into `registry`, which `GET /metrics` serves (see sluice.server.api_metrics).

    The registry also holds the Python process's own metrics (process_cpu_seconds_total, process_resident_memory_bytes,
    open file descriptors, python_info, python_gc_*): what Druid's JVM monitors tell about a Java process.
    """

    def __init__(self, namespace: str = "druid", metric_map: Mapping[str, MetricSpec] = DEFAULT_METRICS, *,
                 add_host_as_label: bool = False, add_service_as_label: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self._add_host = add_host_as_label
        self._add_service = add_service_as_label
        extra = [label for label, wanted in ((HOST_LABEL, add_host_as_label), (SERVICE_LABEL, add_service_as_label))
                 if wanted]
        self._metrics = {name: self._register(namespace, name, spec, tuple(sorted({*spec.dimensions, *extra})))
                         for name, spec in metric_map.items()}

    def _register(self, namespace: str, name: str, spec: MetricSpec, labels: tuple[str, ...]) -> _Registered:
        common = {"name": prometheus_name(name), "documentation": spec.help or name, "labelnames": labels,
                  "namespace": namespace, "registry": self.registry}
        collector: Counter | Gauge | Histogram
        if spec.type == "count":
            collector = Counter(**common)
        elif spec.type == "gauge":
            collector = Gauge(**common)
        else:
            collector = Histogram(**common, buckets=_BUCKETS)
        return _Registered(labels, collector, spec.conversion_factor)

    def _emit(self, event: Event) -> None:
        if not isinstance(event, ServiceMetricEvent):
            return  # alerts have no Prometheus form
        registered = self._metrics.get(event.metric)
        if registered is None:
            log.debug("unmapped metric [%s]", event.metric)
            return
        collector = registered.collector
        if registered.labels:
            collector = collector.labels(*(self._label_value(event, label) for label in registered.labels))
        if isinstance(collector, Counter):
            collector.inc(event.value)
        elif isinstance(collector, Gauge):
            collector.set(event.value)
        else:
            collector.observe(event.value / registered.conversion_factor)

    def _label_value(self, event: ServiceMetricEvent, label: str) -> str:
        value = event.dimensions.get(label)
        if value is not None:
            return _LABEL_VALUE_PATTERN.sub("_", str(value))
        if self._add_host and label == HOST_LABEL:
            return event.host
        if self._add_service and label == SERVICE_LABEL:
            return event.service
        return UNKNOWN


def prometheus_registry(emitter: Emitter | ServiceEmitter) -> CollectorRegistry | None:
    """The registry of the Prometheus emitter inside `emitter` (itself, or one it composes), if any."""
    if isinstance(emitter, ServiceEmitter):
        return prometheus_registry(emitter.emitter)
    if isinstance(emitter, PrometheusEmitter):
        return emitter.registry
    if isinstance(emitter, ComposingEmitter):
        return next((r for e in emitter.emitters if (r := prometheus_registry(e)) is not None), None)
    return None
