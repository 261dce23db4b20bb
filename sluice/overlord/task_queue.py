"""The overlord's TaskQueue: every task is stored before it runs, and its final status after.

`add` validates a task, stores it (druid_tasks), registers it with the lockbox and wakes the management
loop, which hands ready tasks to the task runner and shuts down tasks the runner has that the queue no
longer knows. When the runner reports a task complete, the queue stores the status, releases the task's
locks and tells its listeners (the supervisors). On start the queue syncs from storage: the active tasks
come back, to be found again on the workers (or, with a runner whose tasks died with the process,
failed), and re-acquire their stored locks (a task that cannot is failed).

To the supervisors the queue is a TaskRunner (run = add), so they never reach past it to the runner.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any, Callable, Protocol

from sluice.emitter import ServiceEmitter, metrics
from sluice.metadata.store import MetadataStore
from sluice.overlord.lockbox import LockRequestForNewSegment, LockTask, SegmentAllocator, TaskLockbox
from sluice.segment.segment import SegmentId
from sluice.task.task import StatusListeners, TaskFailure, TaskSpec, TaskStatus, task_from_json

log = logging.getLogger(__name__)

#: Druid's default druid.indexer.queue.maxSize (Integer.MAX_VALUE)
MAX_SIZE = 2**31 - 1


class QueueFull(Exception):
    """The queue holds druid.indexer.queue.maxSize active tasks already (Druid's CAPACITY_EXCEEDED, HTTP 429)."""


def lock_task(spec: TaskSpec) -> LockTask:
    return LockTask(spec.id, spec.group_id, spec.data_source, spec.priority)


def _allocator(metadata: MetadataStore) -> SegmentAllocator:
    """Allocates under the lock the lockbox just granted: the pending segment is keyed by sequence and
    previous id, so replicas of a task group get the same ids."""
    def allocate(request: LockRequestForNewSegment, version: str) -> SegmentId:
        return metadata.allocate_segment(request.data_source, request.interval, request.sequence_name,
                                         request.previous_segment_id, version)

    return allocate


class Runner(Protocol):
    def restores(self, spec: TaskSpec) -> bool:
        """Whether an active task of a restarted overlord is still the runner's (or resumes on it)."""
        ...

    def run(self, spec: TaskSpec) -> None: ...
    def status(self, task_id: str) -> TaskStatus | None: ...
    def runner_status(self, task_id: str) -> str: ...
    def location(self, task_id: str) -> tuple[str, int] | None: ...
    def client(self, task_id: str) -> Any: ...
    def report(self, task_id: str) -> dict[str, Any] | None: ...
    def shutdown(self, task_id: str, reason: str) -> None: ...
    def add_listener(self, listener: Callable[[TaskStatus], None]) -> None: ...


class TaskQueue(StatusListeners):
    def __init__(self, metadata: MetadataStore, runner: Runner, emitter: ServiceEmitter,
                 max_size: int = MAX_SIZE, period: float = 1.0) -> None:
        """`max_size` is druid.indexer.queue.maxSize: the most active (waiting, pending or running) tasks."""
        super().__init__()
        self._metadata = metadata
        self._emitter = emitter
        self.lockbox = TaskLockbox(metadata, metadata.max_segment_version, allocate_segment=_allocator(metadata))
        self.runner = runner
        self._max_size = max_size
        self._period = period
        self._tasks: dict[str, TaskSpec] = {}
        self._given: set[str] = set()  # handed to the runner
        self.counts: Counter[str] = Counter()  # SUCCESS / FAILED since start (Druid's task/success|failed/count)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._manage, name="task-queue", daemon=True)

    def start(self) -> None:
        self.runner.add_listener(self._on_status)
        for record in self._metadata.list_tasks(active=True):
            try:
                spec = task_from_json(record.payload)
            except (TaskFailure, ValueError) as error:  # ValueError: a SpecError of an ingestion spec
                self._store(TaskStatus.failure(record.id, f"stored payload no longer valid: {error}"))
                continue
            if self.runner.restores(spec):
                self._tasks[spec.id] = spec
            else:
                self._store(TaskStatus.failure(spec.id, "the process running this task stopped before it finished"))
        for task in self.lockbox.sync(lock_task(s) for s in self._tasks.values()):
            self._tasks.pop(task.id)
            self._store(TaskStatus.failure(task.id, "could not re-acquire the task's locks after an overlord restart"))
        log.info("task queue started with %d active tasks from storage", len(self._tasks))
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        self._thread.join(10)

    # ---- the queue ----

    def add(self, spec: TaskSpec) -> None:
        with self._lock:
            if len(self._tasks) >= self._max_size:
                raise QueueFull(f"Too many tasks are in the queue (Limit = {self._max_size}), (Current active tasks = "
                                f"{len(self._tasks)}). Retry later or increase the druid.indexer.queue.maxSize")
            self._metadata.insert_task(spec.id, spec.data_source, spec.type, spec.group_id, spec.to_json(),
                                       TaskStatus(spec.id, "RUNNING").to_json())
            self.lockbox.add(lock_task(spec))
            self._tasks[spec.id] = spec
        self._wake.set()

    def shutdown(self, task_id: str, reason: str) -> bool:
        """False if the queue does not have the task (unknown or already complete)."""
        with self._lock:
            if task_id not in self._tasks:
                return False
            given = task_id in self._given
        if given:
            self.runner.shutdown(task_id, reason)
        else:
            self._on_status(TaskStatus.failure(task_id, f"shut down before it ran: {reason}"))
        return True

    def get(self, task_id: str) -> TaskSpec | None:
        """The task, while it is active."""
        with self._lock:
            return self._tasks.get(task_id)

    def lock_holder(self, task_id: str) -> LockTask | None:
        """The active task as the lockbox knows it (what task actions are performed for)."""
        spec = self.get(task_id)
        return lock_task(spec) if spec is not None else None

    def active(self, data_source: str | None = None) -> list[TaskSpec]:
        with self._lock:
            return [s for s in self._tasks.values() if data_source is None or s.data_source == data_source]

    def runner_status(self, task_id: str) -> str:
        """Druid's runnerStatusCode: WAITING in the queue, then what the runner says (PENDING, RUNNING)."""
        with self._lock:
            if task_id not in self._tasks:
                return "NONE"
            if task_id not in self._given:
                return "WAITING"
        return self.runner.runner_status(task_id)

    def _manage(self) -> None:
        while not self._stopped.is_set():
            with self._lock:
                ready = [s for i, s in self._tasks.items() if i not in self._given]
                self._given.update(s.id for s in ready)
            for spec in ready:
                self.runner.run(spec)
            shutdown_unknown = getattr(self.runner, "shutdown_unknown", None)
            if shutdown_unknown is not None:
                shutdown_unknown(lambda task_id: task_id in self._tasks)
            self._wake.wait(self._period)
            self._wake.clear()

    def _on_status(self, status: TaskStatus) -> None:
        if not status.is_complete:
            return
        with self._lock:
            spec = self._tasks.pop(status.id, None)
            if spec is None:
                return
            self._given.discard(status.id)
            self.counts[status.status_code] += 1
        self.lockbox.remove(lock_task(spec))
        self._store(status)
        dimensions = {metrics.DATASOURCE: spec.data_source, metrics.TASK_ID: spec.id, metrics.TASK_TYPE: spec.type}
        self._emitter.metric(metrics.TASK_RUN_TIME, max(status.duration_ms, 0), **dimensions,
                             **{metrics.TASK_STATUS: status.status_code})
        self._emitter.metric(metrics.TASK_SUCCESS_COUNT if status.status_code == "SUCCESS" else metrics.TASK_FAILED_COUNT,
                             1, **dimensions)
        self._notify(status)

    def _store(self, status: TaskStatus) -> None:
        self._metadata.set_task_status(status.id, status.to_json(), active=False)

    # ---- what supervisors see: a TaskRunner ----

    def run(self, spec: TaskSpec) -> None:
        self.add(spec)

    def status(self, task_id: str) -> TaskStatus | None:
        with self._lock:
            if task_id in self._tasks:
                return TaskStatus(task_id, "RUNNING")
        record = self._metadata.get_task(task_id)
        return TaskStatus.from_json({"id": task_id, **record.status}) if record else None

    def client(self, task_id: str) -> Any:
        return self.runner.client(task_id)

    def report(self, task_id: str) -> dict[str, Any] | None:
        """The task's report: live while it runs, its completion report after."""
        return self.runner.report(task_id)



