"""Druid's SupervisorManager: one running supervisor per data source, specs persisted with history."""

from __future__ import annotations

import logging
import threading
from typing import Callable

from sluice.metadata.store import MetadataStore
from sluice.overlord.supervisor.stream_supervisor import StreamSupervisor
from sluice.overlord.task_runner import TaskRunner
from sluice.spec.supervisor import KafkaIOConfig, KafkaSupervisorSpec, parse_supervisor_spec
from sluice.stream.kafka import KafkaStream

log = logging.getLogger(__name__)

class SupervisorManager:
    def __init__(self, metadata: MetadataStore, runner: TaskRunner,
                 stream_factory: Callable[[KafkaIOConfig], KafkaStream]) -> None:
        self._metadata = metadata
        self._runner = runner
        self._stream_factory = stream_factory
        self._supervisors: dict[str, StreamSupervisor] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start a supervisor for every spec whose latest history entry is not a tombstone."""
        for spec_id, payload in self._metadata.active_supervisors().items():
            try:
                self._start(parse_supervisor_spec(payload))
            except Exception:
                log.exception("could not restart supervisor %s from its stored spec", spec_id)

    def stop(self) -> None:
        with self._lock:
            supervisors, self._supervisors = list(self._supervisors.values()), {}
        for supervisor in supervisors:
            supervisor.stop(graceful=False)

    def create_or_update(self, spec: KafkaSupervisorSpec) -> None:
        """An update stops the old supervisor gracefully (its tasks publish) and starts the new spec,
        which continues from the offsets those tasks end at (they are the stored offsets it waits for)."""
        with self._lock:
            old = self._supervisors.pop(spec.id, None)
        if old is not None:
            old.stop(graceful=True)
        self._metadata.insert_supervisor(spec.id, spec.to_json())
        self._start(spec)

    def _start(self, spec: KafkaSupervisorSpec) -> None:
        supervisor = StreamSupervisor(spec, self._runner, self._metadata, self._stream_factory)
        with self._lock:
            self._supervisors[spec.id] = supervisor
        supervisor.start()

    def terminate(self, spec_id: str) -> bool:
        with self._lock:
            supervisor = self._supervisors.pop(spec_id, None)
        if supervisor is None:
            return False
        supervisor.stop(graceful=True)
        self._metadata.terminate_supervisor(spec_id, [spec_id])
        return True

    def ids(self) -> list[str]:
        with self._lock:
            return sorted(self._supervisors)

    def get(self, spec_id: str) -> StreamSupervisor | None:
        with self._lock:
            return self._supervisors.get(spec_id)
