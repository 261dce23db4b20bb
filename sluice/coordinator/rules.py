"""Druid's retention rules: which used segments a data source keeps (load rules) and which it drops (drop rules).

Each used segment takes the first rule that applies to its interval, from the data source's rules followed by the
cluster's `_default` rules (`loadForever` unless changed); a drop rule marks it unused, a load rule keeps it, and a
segment no rule applies to is kept. When a rule applies is Druid's (`appliesTo` of each rule class):

- loadByPeriod: the segment ends after now − period (with includeFuture false: it also starts before now)
- loadByInterval: the segment overlaps the interval
- dropByPeriod: the segment starts at or after now − period (includeFuture false: it lies within [now − period, now))
- dropBeforeByPeriod: the segment ends at or before now − period
- dropByInterval: the interval contains the segment
- loadForever, dropForever, broadcast*: always (broadcast rules load, as Sluice has one tier)

Replicas and tiers (`tieredReplicants`) are kept as written and mean nothing here: every broker reads deep storage.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sluice.periods import Period
from sluice.timestamps import EpochInterval, add_period, parse_interval

DEFAULT = "_default"
#: what Druid's coordinator starts with
DEFAULT_RULES: list[dict[str, Any]] = [{"tieredReplicants": {"_default_tier": 2}, "type": "loadForever"}]

_PERIOD = {"loadByPeriod", "dropByPeriod", "dropBeforeByPeriod", "broadcastByPeriod"}
_INTERVAL = {"loadByInterval", "dropByInterval", "broadcastByInterval"}
_FOREVER = {"loadForever", "dropForever", "broadcastForever"}
TYPES = _PERIOD | _INTERVAL | _FOREVER


class InvalidRule(ValueError):
    pass


@dataclass(frozen=True)
class Rule:
    type: str
    period: Period | None = None
    interval: EpochInterval | None = None
    include_future: bool = True

    @property
    def drops(self) -> bool:
        return self.type.startswith("drop")

    @classmethod
    def from_json(cls, document: Any, position: int) -> Rule:
        """One rule of a rules array; InvalidRule names its position and field."""
        where = f"rules[{position}]"
        if not isinstance(document, dict) or document.get("type") not in TYPES:
            raise InvalidRule(f"{where}.type: expected one of {', '.join(sorted(TYPES))}, got "
                              f"{document.get('type') if isinstance(document, dict) else document!r}")
        kind = document["type"]
        include_future = document.get("includeFuture", True)
        if not isinstance(include_future, bool):
            raise InvalidRule(f"{where}.includeFuture: expected true or false")
        replicants = document.get("tieredReplicants")
        if replicants is not None and (not isinstance(replicants, dict) or not all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in replicants.values())):
            raise InvalidRule(f"{where}.tieredReplicants: expected an object of tier to replica count")
        if kind in _FOREVER:
            return cls(kind)
        text = _required(document, "period" if kind in _PERIOD else "interval", where)
        try:
            if kind in _PERIOD:
                return cls(kind, period=Period.parse(text), include_future=include_future)
            return cls(kind, interval=parse_interval(text))
        except ValueError as error:
            raise InvalidRule(f"{where}: {error}") from None

    def applies_to(self, segment: EpochInterval, now: int) -> bool:
        if self.type in _FOREVER:
            return True
        if self.interval is not None:
            if self.type == "dropByInterval":
                return self.interval.start <= segment.start and segment.end <= self.interval.end
            return self.interval.overlaps(segment.start, segment.end)
        assert self.period is not None
        ago = add_period(now, self.period, None, -1)
        if self.type == "dropBeforeByPeriod":
            return segment.end <= ago
        if self.type == "dropByPeriod":
            return segment.start >= ago if self.include_future else ago <= segment.start and segment.end <= now
        return segment.end > ago if self.include_future else segment.end > ago and segment.start < now


def _required(document: dict[str, Any], key: str, where: str) -> str:
    value = document.get(key)
    if not isinstance(value, str):
        raise InvalidRule(f"{where}.{key}: required for {document['type']}")
    return value


def parse_rules(document: Any) -> list[Rule]:
    """A data source's rules array as Druid's API takes it."""
    if not isinstance(document, list):
        raise InvalidRule("rules: expected a JSON array of rules")
    return [Rule.from_json(rule, position) for position, rule in enumerate(document)]


def segments_to_drop(segments: Iterable[tuple[str, EpochInterval]], rules: Sequence[Rule],
                     default_rules: Sequence[Rule], now: int) -> list[str]:
    """The ids of the segments whose first applying rule (the data source's, then the default ones) drops them."""
    chain = [*rules, *default_rules]
    dropped = []
    for segment_id, interval in segments:
        rule = next((r for r in chain if r.applies_to(interval, now)), None)
        if rule is not None and rule.drops:
            dropped.append(segment_id)
    return dropped
