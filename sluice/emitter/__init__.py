"""Druid's emitter: metric and alert events, and where they go (a log, an HTTP collector, Prometheus).

Hold a `ServiceEmitter` and call `metric(name, value, **dimensions)` with a name from
`sluice.emitter.metrics`; `emit` never blocks and never raises.
"""

from sluice.emitter.config import EmitterConfig, build_emitter
from sluice.emitter.core import ComposingEmitter, Emitter, LoggingEmitter, NoopEmitter, RateLimitedLog
from sluice.emitter.events import AlertEvent, Event, ServiceMetricEvent, Severity
from sluice.emitter.http_post import HttpPostEmitter
from sluice.emitter.prometheus import MetricSpec, PrometheusEmitter, prometheus_registry
from sluice.emitter.service import ServiceEmitter

__all__ = [
    "AlertEvent", "ComposingEmitter", "Emitter", "EmitterConfig", "Event", "HttpPostEmitter", "LoggingEmitter",
    "MetricSpec", "NoopEmitter", "PrometheusEmitter", "RateLimitedLog", "ServiceEmitter", "ServiceMetricEvent",
    "Severity", "build_emitter", "prometheus_registry",
]
