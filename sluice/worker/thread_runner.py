"""Runs tasks as threads of this process, on the process's shared SparkSession.

The all-in-one `sluice start` uses it: no peon start-up and one Spark for every task. Its tasks stop with the
process, gracefully or not; the restarted node's task queue gives it the tasks that were still running and can
resume (`restores`), and each streaming task resumes from what its task directory holds (`sequences.json` and
its persists), so a node restart neither re-reads what was read nor loses what was not published. A task that
cannot resume (a batch task) fails instead, as Druid fails it: it may have published before the process died,
and running it again could append its rows twice.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Callable

from sluice.ids import path_under
from sluice.task.kafka_index_task import KafkaIndexTask
from sluice.task.toolbox import TaskToolbox
from sluice.task.task import RunnableTask, StatusListeners, TaskSpec, TaskStatus, create_task, write_task_file
from sluice.worker.peon import STATUS_FILE, TASK_FILE, read_report

log = logging.getLogger(__name__)


class ThreadTaskRunner(StatusListeners):
    def restores(self, spec: TaskSpec) -> bool:
        return spec.can_restore

    def __init__(self, toolbox_factory: Callable[[str, Path], TaskToolbox], tasks_dir: Path) -> None:
        """`toolbox_factory(task id, task dir)` gives a task what it needs from this process."""
        super().__init__()
        self._toolbox_factory = toolbox_factory
        self._tasks_dir = tasks_dir
        self._tasks: dict[str, RunnableTask] = {}
        self._statuses: dict[str, TaskStatus] = {}
        self._lock = threading.Lock()

    def task_dir(self, task_id: str) -> Path:
        return path_under(self._tasks_dir, task_id)

    def run(self, spec: TaskSpec) -> None:
        task_dir = self.task_dir(spec.id)
        task_dir.mkdir(parents=True, exist_ok=True)
        write_task_file(task_dir, TASK_FILE, spec.to_json())
        task = create_task(spec, self._toolbox_factory(spec.id, task_dir))
        with self._lock:
            self._tasks[spec.id] = task
            self._statuses[spec.id] = TaskStatus(spec.id, "RUNNING")
        threading.Thread(target=self._execute, args=(task,), name=spec.id, daemon=True).start()

    def _execute(self, task: RunnableTask) -> None:
        status = task.run()
        if not status.is_complete:  # stopped gracefully: it resumes when this process restarts
            with self._lock:
                self._tasks.pop(status.id, None)
            return
        write_task_file(self.task_dir(status.id), STATUS_FILE, status.to_json())
        with self._lock:
            self._statuses[status.id] = status
            self._tasks.pop(status.id, None)
        log.info("task %s finished: %s %s", status.id, status.status_code, status.error_msg or "")
        self._notify(status)

    def status(self, task_id: str) -> TaskStatus | None:
        with self._lock:
            return self._statuses.get(task_id)

    def runner_status(self, task_id: str) -> str:
        with self._lock:
            return "RUNNING" if task_id in self._tasks else "NONE"

    def location(self, task_id: str) -> tuple[str, int] | None:
        return None  # in this process: the node's own chat API answers for it

    def task(self, task_id: str) -> RunnableTask | None:
        with self._lock:
            return self._tasks.get(task_id)

    def client(self, task_id: str) -> KafkaIndexTask | None:
        task = self.task(task_id)
        return task if isinstance(task, KafkaIndexTask) else None

    def report(self, task_id: str) -> dict[str, Any] | None:
        task = self.task(task_id)
        if task is not None:
            return task.report()
        try:
            return read_report(self.task_dir(task_id))
        except ValueError:  # not a task id (`..` from a URL): no such task
            return None

    def log(self, task_id: str, offset: int = 0) -> bytes | None:
        return None  # thread-run tasks log to the node's own log

    def shutdown(self, task_id: str, reason: str) -> None:
        task = self.task(task_id)
        if task is not None:
            log.info("shutting down task %s: %s", task_id, reason)
            task.stop()

    def running(self) -> list[RunnableTask]:
        with self._lock:
            return list(self._tasks.values())

    def stop(self, timeout: float = 30.0) -> None:
        """Process shutdown: stop every task gracefully (nothing unpublished is committed, and streaming tasks
        resume when the process restarts) and wait for them."""
        for task in self.running():
            task.stop_gracefully()
        for thread in [t for t in threading.enumerate() if t.name in self._statuses]:
            thread.join(timeout)
