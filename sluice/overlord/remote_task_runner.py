"""Runs tasks on worker processes (Druid's HttpRemoteTaskRunner).

Workers are found through their announcements. Every `period` the runner asks each live worker which
tasks it has (status and location), completes the tasks that finished, attaches to tasks a worker runs
that the runner had only as pending (how an overlord restart finds its tasks again), fails the tasks of
workers that went silent, and assigns pending tasks to workers chosen by the select strategy.

A worker that goes away is given `task_cleanup_timeout` (Druid's taskCleanupTimeout), counted from its last
heartbeat, to come back before its tasks are failed. A worker killed outright is already that silent when its
announcement times out, so its tasks fail then; a worker restarted gracefully withdraws its announcement at
once, and its restored tasks (same ids, new peons) carry on if it is back within the timeout.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Callable

import httpx

from sluice.discovery import HEARTBEAT_PERIOD, MISSED_HEARTBEATS, WORKER, WORKER_PREFIX, live_nodes
from sluice.metadata.store import MetadataStore
from sluice.overlord.task_client import HttpTaskClient
from sluice.overlord.worker_select import WorkerInfo, strategy
from sluice.task.kafka_index_task import KafkaIndexTaskSpec
from sluice.task.task import StatusListeners, TaskSpec, TaskStatus
from sluice.timestamps import format_timestamp

log = logging.getLogger(__name__)


@dataclass
class _Assigned:
    spec: TaskSpec
    worker: WorkerInfo
    location: tuple[str, int] | None = None  # the peon's chat address, once the worker reports it
    assigned_at: float = field(default_factory=time.monotonic)


class HttpRemoteTaskRunner(StatusListeners):
    def restores(self, spec: TaskSpec) -> bool:
        """Tasks live in peons on workers, so they outlive an overlord restart (a worker that restarts resumes the
        ones that can, and reports the others failed)."""
        return True

    def __init__(self, metadata: MetadataStore, select_strategy: str = "equalDistribution",
                 period: float = 0.5, heartbeat_period: float = HEARTBEAT_PERIOD,
                 task_cleanup_timeout: float | None = None, auth: tuple[str, str] | None = None) -> None:
        """`auth`: the escalator's credentials, for the workers' and peons' APIs."""
        super().__init__()
        self._metadata = metadata
        self._select = strategy(select_strategy)
        self._period = period
        self._heartbeat_period = heartbeat_period
        #: how long a worker may be silent (no new heartbeat, or no announcement at all) before its tasks fail;
        #: by default as long as discovery waits before it takes a node for dead
        self._cleanup_timeout = heartbeat_period * MISSED_HEARTBEATS if task_cleanup_timeout is None \
            else task_cleanup_timeout
        #: worker id → (its last heartbeat seen, when this runner first saw it): silence is measured on this
        #: runner's clock, so the workers' clocks do not matter
        self._heard: dict[str, tuple[int, float]] = {}
        self._pending: dict[str, TaskSpec] = {}
        self._running: dict[str, _Assigned] = {}
        self._complete: dict[str, TaskStatus] = {}
        self._workers: dict[str, WorkerInfo] = {}
        self._last_completed: dict[str, float] = {}
        self._ran_on: dict[str, WorkerInfo] = {}  # task id → the worker it was given to (for logs and reports)
        self._unknown: dict[str, set[str]] = {}  # worker id → running task ids the runner never gave it
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="remote-task-runner", daemon=True)
        self._http = httpx.Client(timeout=10, auth=auth)

    def start(self) -> None:
        self._sync_workers()  # know what already runs before anything is assigned
        self._thread.start()

    def stop(self) -> None:
        """The overlord stops; the tasks keep running on their workers for the next overlord to find."""
        self._stopped.set()
        self._wake.set()
        self._thread.join(10)
        self._http.close()

    # ---- TaskRunner ----

    def run(self, spec: TaskSpec) -> None:
        with self._lock:
            if spec.id not in self._running and spec.id not in self._complete:
                self._pending[spec.id] = spec
        self._wake.set()

    def status(self, task_id: str) -> TaskStatus | None:
        with self._lock:
            if task_id in self._complete:
                return self._complete[task_id]
            if task_id in self._running or task_id in self._pending:
                return TaskStatus(task_id, "RUNNING")
        return None

    def runner_status(self, task_id: str) -> str:
        """Druid's runnerStatusCode: PENDING until a worker has the task, then RUNNING."""
        with self._lock:
            return "PENDING" if task_id in self._pending else "RUNNING" if task_id in self._running else "NONE"

    def location(self, task_id: str) -> tuple[str, int] | None:
        with self._lock:
            assigned = self._running.get(task_id)
            return assigned.location if assigned else None

    def client(self, task_id: str) -> HttpTaskClient | None:
        with self._lock:
            assigned = self._running.get(task_id)
        if assigned is None or assigned.location is None or not isinstance(assigned.spec, KafkaIndexTaskSpec):
            return None
        return HttpTaskClient(assigned.spec, *assigned.location, self._http)

    def shutdown(self, task_id: str, reason: str) -> None:
        with self._lock:
            pending = self._pending.pop(task_id, None)
            assigned = self._running.get(task_id)
        if pending is not None:
            self._complete_task(TaskStatus.failure(task_id, f"shut down before it ran: {reason}"))
        elif assigned is not None:
            log.info("shutting down task %s on %s: %s", task_id, assigned.worker.id, reason)
            self._post(assigned.worker, f"/task/{task_id}/shutdown")

    def report(self, task_id: str) -> dict[str, Any] | None:
        """Live from the peon while the task runs (any task's chat handler answers liveReports), then the completion
        report the worker keeps."""
        with self._lock:
            assigned = self._running.get(task_id)
        if assigned is not None and assigned.location is not None and \
                (live := HttpTaskClient(assigned.spec, *assigned.location, self._http).report()):
            return live
        response = self._ask_ran_on(task_id, "reports")
        return response.json() if response is not None else None

    def log(self, task_id: str, offset: int = 0) -> bytes | None:
        response = self._ask_ran_on(task_id, "log", params={"offset": offset})
        return response.content if response is not None else None

    def _ask_ran_on(self, task_id: str, what: str, **kwargs: Any) -> httpx.Response | None:
        with self._lock:
            worker = self._ran_on.get(task_id)
        if worker is None:
            return None
        try:
            response = self._http.get(f"http://{worker.id}{WORKER_PREFIX}/task/{task_id}/{what}", **kwargs)
        except httpx.HTTPError:
            return None
        return response if response.status_code == 200 else None

    def shutdown_unknown(self, known: Callable[[str], bool]) -> None:
        """Shut down tasks workers run that `known` disowns (the queue no longer has them)."""
        with self._lock:
            orphans = [(w, t) for w, tasks in self._unknown.items() for t in tasks if not known(t)]
        for worker_id, task_id in orphans:
            worker = self._workers.get(worker_id)
            if worker is not None:
                log.info("shutting down task %s on %s: the task queue does not know it", task_id, worker_id)
                self._post(worker, f"/task/{task_id}/shutdown")

    def workers(self) -> list[dict[str, Any]]:
        """Druid's GET /druid/indexer/v1/workers shape."""
        with self._lock:
            running = {w: [t for t, a in self._running.items() if a.worker.id == w] for w in self._workers}
            return [{"worker": {"scheme": "http", "host": f"{w.host}:{w.port}", "ip": w.host, "capacity": w.capacity,
                                "version": w.version, "category": w.category},
                     "currCapacityUsed": len(running[w.id]), "availabilityGroups": [],
                     "runningTasks": running[w.id], "lastCompletedTaskTime": self._last_completed_iso(w.id),
                     "blacklistedUntil": None}
                    for w in self._workers.values()]

    def _last_completed_iso(self, worker_id: str) -> str | None:
        when = self._last_completed.get(worker_id)
        return format_timestamp(datetime.fromtimestamp(when, UTC)) if when else None

    # ---- the loop ----

    def _loop(self) -> None:
        while not self._stopped.is_set():
            try:
                self._sync_workers()
                self._assign_pending()
            except Exception:
                log.exception("remote task runner loop failed; retrying")
            self._wake.wait(self._period)
            self._wake.clear()

    def _sync_workers(self) -> None:
        live = {f"{a.host}:{a.port}": a for a in live_nodes(self._metadata, WORKER, self._heartbeat_period)}
        now = time.monotonic()
        with self._lock:
            for worker_id, announcement in live.items():
                if self._heard.get(worker_id, (None,))[0] != announcement.heartbeat_millis:
                    self._heard[worker_id] = (announcement.heartbeat_millis, now)
            for worker_id in set(self._workers) - set(live):
                log.warning("worker %s stopped announcing; its tasks fail unless it is back within %.0f s of its "
                            "last heartbeat", worker_id, self._cleanup_timeout)
                self._workers.pop(worker_id)
                self._unknown.pop(worker_id, None)
            silent = {w for w, (_, seen) in self._heard.items()
                      if w not in live and now - seen >= self._cleanup_timeout}
            for worker_id in silent:
                self._heard.pop(worker_id)
            gone = [t for t, a in self._running.items()
                    if a.worker.id in silent or (a.worker.id not in live and a.worker.id not in self._heard)]
        if silent:
            log.warning("workers %s silent for %.0f s; failing their tasks", sorted(silent), self._cleanup_timeout)
        for task_id in gone:
            self._complete_task(TaskStatus.failure(task_id, "the worker running this task disappeared"))
        for worker_id, announcement in live.items():
            try:
                reported = self._http.get(f"http://{worker_id}{WORKER_PREFIX}/tasks").json()
            except (httpx.HTTPError, ValueError) as error:
                log.warning("worker %s did not answer: %s", worker_id, error)
                continue
            payload = announcement.payload
            self._update_worker(WorkerInfo(announcement.host, announcement.port, int(payload.get("capacity", 1)),
                                           payload.get("version", ""), payload.get("category", "_default_worker_category")),
                                reported)

    def _update_worker(self, worker: WorkerInfo, reported: list[dict[str, Any]]) -> None:
        finished: list[TaskStatus] = []
        with self._lock:
            self._workers[worker.id] = worker
            unknown: set[str] = set()
            for item in reported:
                task_id, status = item["id"], TaskStatus.from_json(item["status"])
                location = item.get("location") or {}
                if task_id in self._pending and not status.is_complete:
                    self._running[task_id] = _Assigned(self._pending.pop(task_id), worker)
                    self._ran_on[task_id] = worker
                assigned = self._running.get(task_id)
                if assigned is None:
                    if not status.is_complete:
                        unknown.add(task_id)
                    continue
                if status.is_complete:
                    finished.append(status)
                elif location.get("port", -1) > 0:
                    assigned.location = (location["host"], location["port"])
            self._unknown[worker.id] = unknown
            done = {s.id for s in finished}
            self._workers[worker.id] = replace(worker, used=sum(
                1 for t, a in self._running.items() if a.worker.id == worker.id and t not in done))
        for status in finished:
            self._complete_task(status, worker.id)

    def _assign_pending(self) -> None:
        with self._lock:
            pending = list(self._pending.values())
        for spec in pending:
            with self._lock:
                worker = self._select(list(self._workers.values()))
                if worker is None or spec.id not in self._pending:
                    return
                # count the slot now, so the next pick in this round sees it taken
                self._workers[worker.id] = replace(worker, used=worker.used + 1)
            response = self._post(worker, "/task", json=spec.to_json())
            if response is None or response.status_code != 200:
                log.warning("worker %s did not take task %s: %s", worker.id, spec.id,
                            response.text if response is not None else "unreachable")
                continue
            with self._lock:
                if self._pending.pop(spec.id, None) is not None:
                    self._running[spec.id] = _Assigned(spec, worker)
                    self._ran_on[spec.id] = worker
            log.info("task %s assigned to worker %s", spec.id, worker.id)

    def _post(self, worker: WorkerInfo, path: str, **kwargs: Any) -> httpx.Response | None:
        try:
            return self._http.post(f"http://{worker.id}{WORKER_PREFIX}{path}", **kwargs)
        except httpx.HTTPError as error:
            log.warning("worker %s unreachable: %s", worker.id, error)
            return None

    def _complete_task(self, status: TaskStatus, worker_id: str | None = None) -> None:
        with self._lock:
            if status.id in self._complete:
                return
            self._running.pop(status.id, None)
            self._complete[status.id] = status
            if worker_id:
                self._last_completed[worker_id] = time.time()
        log.info("task %s finished: %s %s", status.id, status.status_code, status.error_msg or "")
        self._notify(status)
