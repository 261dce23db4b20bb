"""The supervisor of a stream job (``{"type": "stream"}``): one long-running task, kept running.

A Kafka supervisor plans task groups and offsets; a stream job's offsets and state live in its Spark checkpoint,
so its supervisor only keeps one task of the job alive: it starts one (or adopts the one an overlord restart left
running), starts another when it fails (after a pause that grows with each failure in a row), stops it on
suspend and terminate, and starts it over from an empty checkpoint on reset. Its status shows the task's live
figures: input rate, state size, watermark, late records dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from datetime import UTC, datetime
from typing import Any

from sluice.overlord.task_runner import TaskRunner
from sluice.stream.job_spec import StreamJobSpec
from sluice.task.stream_job_spec import StreamJobTaskSpec, new_task_id
from sluice.task.task import TaskStatus
from sluice.timestamps import format_timestamp

log = logging.getLogger(__name__)

#: the pause before the first restart of a failed job, doubled for each failure in a row, up to the cap
RESTART_BACKOFF_S = 2.0
RESTART_BACKOFF_CAP_S = 60.0
#: failures in a row after which the supervisor reports itself unhealthy (Druid's unhealthinessThreshold)
UNHEALTHY_AFTER = 3
RECENT_ERRORS = 10


class StreamJobSupervisor:
    def __init__(self, spec: StreamJobSpec, runner: TaskRunner, period: float = 1.0) -> None:
        self.spec = spec
        self._runner = runner
        self._period = period
        self._lock = threading.Lock()
        self._task_id: str | None = None
        self._task_started: datetime | None = None
        self._reset_next = False
        self._failures_in_a_row = 0
        self._not_before = 0.0
        self._errors: deque[dict[str, Any]] = deque(maxlen=RECENT_ERRORS)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"stream-job-{spec.id}", daemon=True)

    # ---- lifecycle ----

    def start(self) -> None:
        self._runner.add_listener(self._on_task_status)
        self._thread.start()

    def stop(self, graceful: bool, timeout: float = 60.0) -> None:
        """Stop the job's task either way: its checkpoint keeps its place for the next one."""
        self._stopping.set()
        self._thread.join(timeout)
        self._runner.remove_listener(self._on_task_status)
        self._shutdown("its supervisor stopped")

    def reset(self) -> None:
        """Start over: the next task deletes the checkpoint (offsets and state) before it starts."""
        with self._lock:
            self._reset_next = True
            self._not_before = 0.0
        self._shutdown("its supervisor was reset")

    def _loop(self) -> None:
        while not self._stopping.wait(0 if self._task_id is None else self._period):
            try:
                self._run_once()
            except Exception as error:  # noqa: BLE001 - a run that failed is retried at the next period
                log.exception("stream job supervisor %s", self.spec.id)
                self._record_error(f"{type(error).__name__}: {error}")
                self._stopping.wait(self._period)

    def _run_once(self) -> None:
        if self.spec.suspended:
            return
        with self._lock:
            task_id = self._task_id
        if task_id is None:
            task_id = self._adopt()
        if task_id is not None:
            status = self._runner.status(task_id)
            if status is None or not status.is_complete:
                return
            self._on_task_status(status)
        if time.monotonic() < self._not_before:
            return
        with self._lock:
            reset, self._reset_next = self._reset_next, False
        task = StreamJobTaskSpec(new_task_id(self.spec.id), self.spec, reset=reset)
        with self._lock:
            self._task_id, self._task_started = task.id, datetime.now(UTC)
        self._runner.run(task)
        log.info("stream job supervisor %s started task %s%s", self.spec.id, task.id, " (reset)" if reset else "")

    def _adopt(self) -> str | None:
        """A task of this job still running (after an overlord restart) is kept if it runs this very spec."""
        for task in self._runner.active():
            if not isinstance(task, StreamJobTaskSpec) or task.job.id != self.spec.id:
                continue
            if task.job != self.spec:
                self._runner.shutdown(task.id, "its stream job's spec changed")
                continue
            with self._lock:
                self._task_id, self._task_started = task.id, self._task_started or datetime.now(UTC)
            return task.id
        return None

    def _on_task_status(self, status: TaskStatus) -> None:
        with self._lock:
            if status.id != self._task_id or not status.is_complete:
                return
            self._task_id = None
            if status.status_code == "SUCCESS" or self._stopping.is_set():
                self._failures_in_a_row = 0
                return
            self._failures_in_a_row += 1
            backoff = min(RESTART_BACKOFF_S * 2 ** (self._failures_in_a_row - 1), RESTART_BACKOFF_CAP_S)
            self._not_before = time.monotonic() + backoff
        self._record_error(f"task {status.id} failed: {status.error_msg}")

    def _shutdown(self, reason: str) -> None:
        with self._lock:
            task_id = self._task_id
        if task_id is not None:
            self._runner.shutdown(task_id, reason)

    def _record_error(self, message: str) -> None:
        log.warning("stream job supervisor %s: %s", self.spec.id, message)
        self._errors.append({"timestamp": format_timestamp(datetime.now(UTC)), "exceptionClass": "StreamJobError",
                             "message": message, "streamException": False})

    # ---- what the Kafka supervisor's API also asks ----

    def reset_offsets(self, offsets: dict[int, int]) -> None:
        from sluice.overlord.supervisor_manager import SupervisorConflict

        raise SupervisorConflict(f"[{self.spec.id}] is a stream job: its offsets live in its checkpoint, with its "
                                 "state; reset the whole job instead (POST .../reset)")

    def handoff(self, group_ids: list[int]) -> None:
        """A stream job has no task groups to hand off: each batch is published as it ends."""

    def checkpoint(self, group_id: int, start: dict[int, int]) -> bool:
        return False

    # ---- reporting ----

    def health(self) -> tuple[str, str]:
        if self._stopping.is_set():
            return "STOPPING", "STOPPING"
        if self.spec.suspended:
            return "SUSPENDED", "SUSPENDED"
        if self._failures_in_a_row >= UNHEALTHY_AFTER:
            return "UNHEALTHY_TASKS", "UNHEALTHY_TASKS"
        return ("RUNNING", "RUNNING") if self._task_id is not None else ("PENDING", "PENDING")

    @property
    def healthy(self) -> bool:
        return not self.health()[0].startswith("UNHEALTHY")

    def _figures(self) -> tuple[str | None, dict[str, Any]]:
        with self._lock:
            task_id = self._task_id
        if task_id is None:
            return None, {}
        report = self._runner.report(task_id) or {}
        return task_id, report.get("ingestionStatsAndErrors", {}).get("payload", {}).get("streamJob", {})

    def status_report(self) -> dict[str, Any]:
        state, detailed = self.health()
        task_id, figures = self._figures()
        payload = {
            "dataSource": (self.spec.data_sources or [self.spec.id])[0],
            "stream": self.spec.spec.io_config.topic,
            "type": "stream",
            "activeTasks": [{"id": task_id, "startTime": format_timestamp(self._task_started)
                             if self._task_started else None, "type": "ACTIVE"}] if task_id else [],
            "publishingTasks": [],
            "suspended": self.spec.suspended,
            "healthy": not state.startswith("UNHEALTHY"),
            "state": state,
            "detailedState": detailed,
            "recentErrors": list(self._errors),
            "streamJob": figures,
        }
        return {"id": self.spec.id, "generationTime": format_timestamp(datetime.now(UTC)), "payload": payload}

    def stats(self) -> dict[str, dict[str, Any]]:
        task_id, figures = self._figures()
        if task_id is None:
            return {}
        totals = {k: figures.get(k, 0) for k in ("processed", "unparseable", "thrownAway")}
        return {"0": {task_id: {"totals": {"buildSegments": {**totals, "processedWithError": 0}},
                                "streamJob": figures}}}

    def parse_errors(self) -> list[dict[str, Any]]:
        _, figures = self._figures()
        return [{"message": message} for message in figures.get("parseExceptionMessages", [])]
