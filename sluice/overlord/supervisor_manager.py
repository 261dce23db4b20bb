"""Druid's SupervisorManager: one running supervisor per data source (or stream job), specs persisted with
history."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Sequence

from sluice.emitter import ServiceEmitter
from sluice.metadata.offsets import StreamOffsets
from sluice.metadata.store import MetadataStore
from sluice.overlord.supervisor.plan import SupervisorState
from sluice.overlord.supervisor.state_manager import SupervisorStateManagerConfig
from sluice.overlord.supervisor.stream_job_supervisor import StreamJobSupervisor
from sluice.overlord.supervisor.stream_supervisor import StreamSupervisor
from sluice.overlord.task_runner import TaskRunner
from sluice.spec.supervisor import KafkaIOConfig, KafkaSupervisorSpec, parse_supervisor_spec
from sluice.stream.job_spec import StreamJobSpec
from sluice.stream.kafka import KafkaStream

log = logging.getLogger(__name__)


class SupervisorConflict(ValueError):
    """An operation that does not apply in the supervisor's current state (HTTP 400)."""


class SupervisorManager:
    def __init__(self, metadata: MetadataStore, runner: TaskRunner,
                 stream_factory: Callable[[KafkaIOConfig], KafkaStream], emitter: ServiceEmitter,
                 supervisor_config: SupervisorStateManagerConfig = SupervisorStateManagerConfig()) -> None:
        """`emitter` takes the supervisors' lag metrics and alerts; `supervisor_config` is druid.supervisor.*."""
        self._metadata = metadata
        self._runner = runner
        self._stream_factory = stream_factory
        self._emitter = emitter
        self._supervisor_config = supervisor_config
        self._supervisors: dict[str, StreamSupervisor | StreamJobSupervisor] = {}
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

    def create_or_update(self, spec: KafkaSupervisorSpec | StreamJobSpec, skip_restart_if_unmodified: bool = False
                         ) -> None:
        """An update stops the old supervisor gracefully (its reading tasks end and publish); the new one
        takes over those publishing groups and starts reading exactly where they end."""
        with self._lock:
            old = self._supervisors.get(spec.id)
            if old is not None and skip_restart_if_unmodified and old.spec == spec:
                return
            self._supervisors.pop(spec.id, None)
        state = old.stop(graceful=True) if old is not None else None
        if state is not None and old.spec.spec.io_config.topic != spec.spec.io_config.topic:
            state = None  # offsets of another stream mean nothing here (and a stream job has its own checkpoint)
        self._metadata.insert_supervisor(spec.id, spec.to_json())
        self._start(spec, state)

    def _start(self, spec: KafkaSupervisorSpec | StreamJobSpec, state: SupervisorState | None = None) -> None:
        supervisor: StreamSupervisor | StreamJobSupervisor
        if isinstance(spec, StreamJobSpec):
            supervisor = StreamJobSupervisor(spec, self._runner)
        else:
            supervisor = StreamSupervisor(spec, self._runner, self._metadata, self._stream_factory, self._emitter,
                                          self._supervisor_config, state=state)
        with self._lock:
            self._supervisors[spec.id] = supervisor
        supervisor.start()

    def set_suspended(self, spec_id: str, suspended: bool) -> dict[str, Any] | None:
        """Druid's suspend/resume: the spec is re-submitted with `suspended` flipped. None if unknown."""
        supervisor = self.get(spec_id)
        if supervisor is None:
            return None
        if supervisor.spec.suspended == suspended:
            raise SupervisorConflict(f"[{spec_id}] is already {'suspended' if suspended else 'running'}")
        spec = supervisor.spec.model_copy(update={"suspended": suspended})
        self.create_or_update(spec)
        return spec.to_json()

    def set_all_suspended(self, suspended: bool, spec_ids: Sequence[str] | None = None) -> None:
        """Suspend or resume every supervisor (or those of `spec_ids`)."""
        for spec_id in self.ids() if spec_ids is None else spec_ids:
            supervisor = self.get(spec_id)
            if supervisor is not None and supervisor.spec.suspended != suspended:
                self.set_suspended(spec_id, suspended)

    def terminate(self, spec_id: str) -> bool:
        with self._lock:
            supervisor = self._supervisors.pop(spec_id, None)
        if supervisor is None:
            return False
        supervisor.stop(graceful=True)
        self._metadata.terminate_supervisor(spec_id, [spec_id])
        return True

    def terminate_all(self) -> None:
        for spec_id in self.ids():
            self.terminate(spec_id)

    def checkpoint(self, spec_id: str, task_group_id: int, start: StreamOffsets) -> bool:
        """A task's checkpoint request (the checkPointDataSourceMetadata task action), for its supervisor."""
        supervisor = self.get(spec_id)
        if supervisor is None or start.stream != supervisor.spec.spec.io_config.topic:
            log.warning("checkpoint for supervisor %s refused: no such supervisor of stream %s", spec_id, start.stream)
            return False
        return supervisor.checkpoint(task_group_id, dict(start.offsets))

    def history(self, spec_id: str | None = None) -> dict[str, list[dict[str, Any]]]:
        return self._metadata.supervisor_history(spec_id)

    def ids(self) -> list[str]:
        with self._lock:
            return sorted(self._supervisors)

    def get(self, spec_id: str) -> StreamSupervisor | StreamJobSupervisor | None:
        with self._lock:
            return self._supervisors.get(spec_id)
