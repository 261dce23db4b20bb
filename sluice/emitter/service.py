"""Druid's ServiceEmitter: every event stamped with the process's service, host and version."""

from __future__ import annotations

import dataclasses
from typing import Any

from sluice.emitter.core import Emitter
from sluice.emitter.events import AlertEvent, Event, ServiceMetricEvent, Severity


class ServiceEmitter:
    """What the rest of Sluice holds: callers name only the metric, its value and their own dimensions.

    `service` follows Druid's `druid.service` (druid/overlord, druid/middleManager, druid/peon, druid/broker);
    `host` is host:port.
    """

    def __init__(self, service: str, host: str, emitter: Emitter, version: str = "") -> None:
        self.service = service
        self.host = host
        self.version = version
        self.emitter = emitter

    def emit(self, event: Event) -> None:
        if isinstance(event, (ServiceMetricEvent, AlertEvent)):
            event = dataclasses.replace(event, service=self.service, host=self.host, version=self.version)
        self.emitter.emit(event)

    def metric(self, metric: str, value: float, **dimensions: Any) -> None:
        """Emit one measurement, e.g. `metric(INGEST_EVENTS_PROCESSED, 120, dataSource="wiki", taskId=...)`."""
        self.emit(ServiceMetricEvent(metric, value, dimensions))

    def alert(self, description: str, severity: Severity = Severity.COMPONENT_FAILURE, **data: Any) -> None:
        self.emit(AlertEvent(description, severity, data))

    def start(self) -> None:
        self.emitter.start()

    def flush(self) -> None:
        self.emitter.flush()

    def close(self) -> None:
        self.emitter.close()
