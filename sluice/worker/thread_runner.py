"""Runs tasks as threads of this process, on the process's shared SparkSession.

The all-in-one `sluice start` uses it; it is the TaskRunner a worker process will wrap later. Task
rows in the metadata store (druid_tasks) follow every task from RUNNING to its final status.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable

from sluice.metadata.store import MetadataStore
from sluice.task.kafka_index_task import TASK_TYPE, KafkaIndexTask, KafkaIndexTaskSpec, TaskStatus, TaskToolbox

log = logging.getLogger(__name__)


class ThreadTaskRunner:
    def __init__(self, toolbox_factory: Callable[[Path], TaskToolbox], metadata: MetadataStore, tasks_dir: Path) -> None:
        self._toolbox_factory = toolbox_factory
        self._metadata = metadata
        self._tasks_dir = tasks_dir
        self._tasks: dict[str, KafkaIndexTask] = {}
        self._statuses: dict[str, TaskStatus] = {}
        self._listeners: list[Callable[[TaskStatus], None]] = []
        self._lock = threading.Lock()

    def fail_orphans(self) -> None:
        """Tasks the metadata store thinks are running died with a previous process: say so."""
        for record in self._metadata.list_tasks(active=True):
            status = TaskStatus(record.id, "FAILED", "the process running this task stopped before it finished")
            self._metadata.set_task_status(record.id, status.to_json(), active=False)

    def task_dir(self, task_id: str) -> Path:
        return self._tasks_dir / task_id

    def run(self, spec: KafkaIndexTaskSpec) -> None:
        task = KafkaIndexTask(spec, self._toolbox_factory(self.task_dir(spec.id)))
        status = TaskStatus(spec.id, "RUNNING")
        self._metadata.insert_task(spec.id, spec.data_source, TASK_TYPE, spec.group_id, spec.to_json(), status.to_json())
        with self._lock:
            self._tasks[spec.id] = task
            self._statuses[spec.id] = status
        threading.Thread(target=self._execute, args=(task,), name=spec.id, daemon=True).start()

    def _execute(self, task: KafkaIndexTask) -> None:
        status = task.run()
        self._metadata.set_task_status(status.id, status.to_json(), active=False)
        with self._lock:
            self._statuses[status.id] = status
            self._tasks.pop(status.id, None)
            listeners = list(self._listeners)
        log.info("task %s finished: %s %s", status.id, status.status_code, status.error_msg or "")
        for listener in listeners:
            listener(status)

    def status(self, task_id: str) -> TaskStatus | None:
        with self._lock:
            return self._statuses.get(task_id)

    def client(self, task_id: str) -> KafkaIndexTask | None:
        with self._lock:
            return self._tasks.get(task_id)

    def shutdown(self, task_id: str, reason: str) -> None:
        task = self.client(task_id)
        if task is not None:
            log.info("shutting down task %s: %s", task_id, reason)
            task.stop()

    def running(self) -> list[KafkaIndexTask]:
        with self._lock:
            return list(self._tasks.values())

    def add_listener(self, listener: Callable[[TaskStatus], None]) -> None:
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[TaskStatus], None]) -> None:
        with self._lock:
            self._listeners.remove(listener)

    def stop(self, timeout: float = 30.0) -> None:
        """Process shutdown: stop every task (nothing unpublished is committed) and wait for them."""
        for task in self.running():
            task.stop()
        for thread in [t for t in threading.enumerate() if t.name in self._statuses]:
            thread.join(timeout)
