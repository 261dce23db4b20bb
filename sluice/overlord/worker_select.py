"""Which worker gets a pending task (Druid's WorkerSelectStrategy); pure, so every rule is unit-tested."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence


@dataclass(frozen=True)
class WorkerInfo:
    host: str
    port: int
    capacity: int
    version: str = ""
    category: str = "_default_worker_category"
    used: int = 0

    @property
    def id(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def available(self) -> int:
        return self.capacity - self.used


Strategy = Callable[[Sequence[WorkerInfo]], "WorkerInfo | None"]


def equal_distribution(workers: Sequence[WorkerInfo]) -> WorkerInfo | None:
    """The worker with the most free slots, so load spreads evenly (Druid's default)."""
    free = [w for w in workers if w.available > 0]
    return min(free, key=lambda w: (-w.available, w.id), default=None)


def fill_capacity(workers: Sequence[WorkerInfo]) -> WorkerInfo | None:
    """The busiest worker that still has a free slot, so whole workers stay idle (and can be scaled away)."""
    free = [w for w in workers if w.available > 0]
    return min(free, key=lambda w: (-w.used, w.id), default=None)


STRATEGIES: dict[str, Strategy] = {"equalDistribution": equal_distribution, "fillCapacity": fill_capacity}


def strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"unknown worker select strategy {name!r}; use one of {sorted(STRATEGIES)}")
    return STRATEGIES[name]
