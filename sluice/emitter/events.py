"""Druid's emitter events: ServiceMetricEvent (feed "metrics") and AlertEvent (feed "alerts").

Their JSON is what Druid's emitters send, so a receiver built for Druid (an HTTP collector, a Kafka
emitter's consumer, a dashboard) reads Sluice's events unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from numbers import Real
from typing import Any, Mapping, Protocol

from sluice.timestamps import format_timestamp


class Event(Protocol):
    """What every emitter accepts: a feed name and a JSON-ready map."""

    @property
    def feed(self) -> str: ...

    def to_map(self) -> dict[str, Any]: ...


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class ServiceMetricEvent:
    """One measurement. `service`, `host` and `version` are Druid's service dimensions (ServiceEmitter stamps
    them); `dimensions` are Druid's user dimensions (dataSource, taskId, ...), flattened into the JSON."""

    metric: str
    value: float
    dimensions: Mapping[str, Any] = field(default_factory=dict)
    service: str = ""
    host: str = ""
    version: str = ""
    created_time: datetime = field(default_factory=_now)
    feed: str = "metrics"

    def to_map(self) -> dict[str, Any]:
        return {"feed": self.feed, "timestamp": format_timestamp(self.created_time), "service": self.service,
                "host": self.host, "version": self.version, "metric": self.metric, "value": self.value,
                **{k: v for k, v in self.dimensions.items() if k is not None}}


class Severity(str, Enum):
    ANOMALY = "anomaly"
    COMPONENT_FAILURE = "component-failure"
    SERVICE_FAILURE = "service-failure"
    DEPRECATED = "deprecated"


@dataclass(frozen=True)
class AlertEvent:
    """Something an operator should look at (Druid's default severity is component-failure)."""

    description: str
    severity: Severity = Severity.COMPONENT_FAILURE
    data: Mapping[str, Any] = field(default_factory=dict)
    service: str = ""
    host: str = ""
    version: str = ""
    created_time: datetime = field(default_factory=_now)

    @property
    def feed(self) -> str:
        return "alerts"

    def to_map(self) -> dict[str, Any]:
        return {"feed": self.feed, "timestamp": format_timestamp(self.created_time), "service": self.service,
                "host": self.host, "version": self.version, "severity": self.severity.value,
                "description": self.description, "data": dict(self.data)}


def invalid_reason(event: object) -> str | None:
    """Why an event cannot be emitted, or None. Druid refuses NaN and infinite values when the event is built;
    here building never fails, so the emitter checks and warns instead of raising into the caller."""
    if isinstance(event, ServiceMetricEvent):
        if not event.metric:
            return "a metric event needs a metric name"
        if isinstance(event.value, bool) or not isinstance(event.value, Real):
            return f"metric [{event.metric}] has a value that is not a number: {event.value!r}"
        if not math.isfinite(event.value):
            return f"metric [{event.metric}] has a value of {event.value}; NaN and infinite values are not allowed"
        return None
    if isinstance(event, AlertEvent):
        return None if event.description else "an alert needs a description"
    if not callable(getattr(event, "to_map", None)) or not isinstance(getattr(event, "feed", None), str):
        return f"{type(event).__name__} is not an event (it needs a feed and to_map())"
    return None
