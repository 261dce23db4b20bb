"""A worker (Druid's MiddleManager with its WorkerTaskManager and ForkingTaskRunner).

It has `capacity` slots and runs each task it is assigned as a peon process in its own directory,
`<base task dir>/<task id>` (task.json, lock, log, status.json). As Druid's TaskStorageDirTracker does with
`druid.worker.baseTaskDirs`, slot i keeps its tasks in base task dir i mod n, and a task takes the lowest free
slot, so tasks spread over the base dirs (a disk each, say) and no dir holds more than its share. It reports every
task's status and location to whoever asks (the overlord polls), and shuts tasks down on request (they end
FAILED). When it stops, its peons stop gracefully: a task that can resume keeps what it read, uncommitted. When it
starts again it finds the tasks it ran before: those whose peon still holds its lock are adopted (such a peon is
stopping, since its worker died; when it exits without a status its task is restored), the finished ones are
reported from their status.json, the ones that can resume are started again in new peons (Druid's
restoreTasksOnRestart; they pick up from their task directory), and the rest are reported failed.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice.emitter import EmitterConfig
from sluice.ids import path_under, validate_id
from sluice.task.task import TaskStatus, task_from_json, write_task_file
from sluice.security.config import AuthConfig
from sluice.worker.peon import (AUTH_PROPERTIES_ENV, METADATA_URI_ENV, SHUTDOWN_SIGNAL, STATUS_FILE, TASK_FILE,
                                read_report, read_status, try_lock)

log = logging.getLogger(__name__)

PEON_FILE = "peon.json"
LOG_FILE = "log"


class WorkerFull(Exception):
    """The worker has no free slot for another task."""


@dataclass(frozen=True)
class PeonConfig:
    """What every peon of this worker is started with."""

    metadata_uri: str
    deep_storage: str
    spark_master: str = "local[2,4]"
    emitter: EmitterConfig = EmitterConfig()
    #: the peon checks its chat API's callers and calls the overlord as the escalator, as its worker does
    auth: AuthConfig = AuthConfig()
    json_logs: bool = False


@dataclass
class _Peon:
    task_id: str
    slot: int
    task_dir: Path
    pid: int
    port: int
    process: subprocess.Popen | None  # None for a peon adopted after a worker restart


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class WorkerTaskManager:
    def __init__(self, base_task_dirs: Sequence[Path], capacity: int, host: str, peon: PeonConfig) -> None:
        if not base_task_dirs:
            raise ValueError("a worker needs at least one base task dir")
        self.base_task_dirs = list(base_task_dirs)
        self.capacity = capacity
        self.host = host
        self._peon = peon
        self._running: dict[str, _Peon] = {}
        self._completed: dict[str, TaskStatus] = {}
        self._shut_down: set[str] = set()  # tasks asked to shut down, so a peon killed early is no mystery
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="peon-monitor", daemon=True)

    def start(self) -> None:
        for base in self.base_task_dirs:
            base.mkdir(parents=True, exist_ok=True)
        self._restore()
        self._monitor.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every peon gracefully (nothing unpublished is committed; tasks that can resume are restored when
        the worker starts again) and wait for them."""
        self._stopped.set()
        for peon in self._peons():
            self._signal(peon, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for peon in self._peons():
            while _alive(peon.pid) and time.monotonic() < deadline:
                self._reap(peon)
                time.sleep(0.1)
            if _alive(peon.pid):
                self._signal(peon, signal.SIGKILL)
            self._reap(peon)
        self._monitor.join(5)

    # ---- what the overlord asks ----

    def assign(self, payload: dict[str, Any]) -> str:
        spec = task_from_json(payload)
        with self._lock:
            if spec.id in self._running or spec.id in self._completed:
                return spec.id  # assignment is idempotent: an overlord retrying must not start a second peon
            slot = self._free_slot()
            if slot is None:
                raise WorkerFull(f"worker has no free slot (capacity {self.capacity})")
            task_dir = path_under(self.slot_dir(slot), spec.id)
            task_dir.mkdir(parents=True, exist_ok=True)
            write_task_file(task_dir, TASK_FILE, spec.to_json())
            self._launch(spec.id, slot, task_dir)
        return spec.id

    def slot_dir(self, slot: int) -> Path:
        return self.base_task_dirs[slot % len(self.base_task_dirs)]

    def _free_slot(self, base: Path | None = None) -> int | None:
        """The lowest slot no running task holds (in `base`, if given); called holding the lock."""
        taken = {p.slot for p in self._running.values()}
        return next((slot for slot in range(self.capacity)
                     if slot not in taken and (base is None or self.slot_dir(slot) == base)), None)

    def _launch(self, task_id: str, slot: int, task_dir: Path) -> None:
        """Start a peon for the task in `task_dir` (its task.json written); called holding the lock."""
        port = _free_port(self.host)
        command = [sys.executable, "-m", "sluice.worker.peon", str(task_dir), "--port", str(port),
                   "--deep-storage", self._peon.deep_storage,
                   "--spark-master", self._peon.spark_master, "--parent-pid", str(os.getpid()),
                   "--emitter", self._peon.emitter.model_dump_json(by_alias=True),
                   *(["--json-logs"] if self._peon.json_logs else [])]
        # the security settings and the metadata URI hold passwords: in the environment, which only this user can
        # read, not in argv
        env = {**os.environ, AUTH_PROPERTIES_ENV: json.dumps(dict(self._peon.auth.properties)),
               METADATA_URI_ENV: self._peon.metadata_uri}
        with (task_dir / LOG_FILE).open("ab") as log_file:
            process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env)
        write_task_file(task_dir, PEON_FILE, {"pid": process.pid, "port": port})
        self._running[task_id] = _Peon(task_id, slot, task_dir, process.pid, port, process)
        log.info("task %s runs in peon pid %d, chat port %d", task_id, process.pid, port)

    def tasks(self) -> list[dict[str, Any]]:
        """Every task this worker knows: Druid's TaskAnnouncement (status and location)."""
        with self._lock:
            running = [{"id": p.task_id, "status": TaskStatus(p.task_id, "RUNNING").to_json(),
                        "location": {"host": self.host, "port": p.port, "tlsPort": -1}}
                       for p in self._running.values()]
            done = [{"id": s.id, "status": s.to_json(), "location": {"host": None, "port": -1, "tlsPort": -1}}
                    for s in self._completed.values()]
        return running + done

    def shutdown(self, task_id: str) -> bool:
        with self._lock:
            peon = self._running.get(task_id)
        if peon is None:
            return False
        self._shut_down.add(task_id)
        self._signal(peon, SHUTDOWN_SIGNAL)
        return True

    def task_dir(self, task_id: str) -> Path | None:
        """The directory of a task this worker runs or ran, in whichever base task dir it was given."""
        try:
            validate_id("task ID", task_id)  # it comes from a URL
        except ValueError:
            return None
        return next((base / task_id for base in self.base_task_dirs if (base / task_id / TASK_FILE).exists()), None)

    def log(self, task_id: str, offset: int = 0) -> bytes | None:
        task_dir = self.task_dir(task_id)
        path = task_dir / LOG_FILE if task_dir else None
        if path is None or not path.exists():
            return None
        with path.open("rb") as handle:
            if offset < 0:
                handle.seek(max(0, path.stat().st_size + offset))
            else:
                handle.seek(offset)
            return handle.read()

    def report(self, task_id: str) -> dict[str, Any] | None:
        task_dir = self.task_dir(task_id)
        return read_report(task_dir) if task_dir else None

    @property
    def used_capacity(self) -> int:
        with self._lock:
            return len(self._running)

    # ---- peons ----

    def _peons(self) -> list[_Peon]:
        with self._lock:
            return list(self._running.values())

    def _signal(self, peon: _Peon, sig: signal.Signals) -> None:
        try:
            os.kill(peon.pid, sig)
        except ProcessLookupError:
            pass

    def _reap(self, peon: _Peon) -> bool:
        """True once the peon has exited: its task completed, stopped with this worker, or restored anew."""
        if peon.process is not None:
            code = peon.process.poll()
            if code is None:
                return False
        elif _alive(peon.pid):
            return False
        else:
            code = None
        status = read_status(peon.task_dir)
        if status is None and self._stopped.is_set() and peon.task_id not in self._shut_down:
            with self._lock:
                self._running.pop(peon.task_id, None)
            return True  # stopped with this worker: restored when it starts again
        if status is None and peon.process is None and peon.task_id not in self._shut_down \
                and self._can_restore(peon.task_dir):
            # adopted from the previous worker process: a peon stops (to be restored) when its worker dies, so one
            # still running at the restart was on its way out; now that it is gone, its task resumes in a new peon
            with self._lock:
                if self._running.get(peon.task_id) is peon:
                    log.info("restoring task %s: its previous peon (pid %d) has exited", peon.task_id, peon.pid)
                    self._launch(peon.task_id, peon.slot, peon.task_dir)
            return True
        if status is None:
            status = TaskStatus.failure(
                peon.task_id, "shut down before the task started" if peon.task_id in self._shut_down else
                f"the peon exited (code {code}) before its task reported a status; nothing was committed unless the "
                "task's publish transaction committed")
            write_task_file(peon.task_dir, STATUS_FILE, status.to_json())  # ended for good: never restored
        with self._lock:
            if self._running.pop(peon.task_id, None) is None:
                return True  # the monitor and stop() both saw it exit
            self._completed[peon.task_id] = status
        log.info("task %s finished: %s %s", status.id, status.status_code, status.error_msg or "")
        return True

    def _watch(self) -> None:
        while not self._stopped.wait(0.2):
            for peon in self._peons():
                self._reap(peon)

    def _restore(self) -> None:
        """After a restart: adopt live peons, report finished tasks, start again those that can resume, and report
        the others failed."""
        task_dirs = sorted(p for base in self.base_task_dirs for p in base.iterdir() if (p / TASK_FILE).exists())
        for task_dir in task_dirs:
            task_id = task_dir.name
            status = read_status(task_dir)
            if status is not None:
                self._completed[task_id] = status
                continue
            lock = try_lock(task_dir)
            if lock is not None:
                lock.close()
            adopt = lock is None and (task_dir / PEON_FILE).exists()
            if not adopt and not self._can_restore(task_dir):
                failed = TaskStatus.failure(task_id, "the worker restarted and this task's peon was gone")
                write_task_file(task_dir, STATUS_FILE, failed.to_json())
                self._completed[task_id] = failed
                continue
            with self._lock:
                # its own base dir's slot if one is free; after a change of capacity or base dirs, any slot (or one
                # past capacity: a task that was running is never dropped for want of a slot)
                slot = self._free_slot(task_dir.parent)
                slot = slot if slot is not None else self._free_slot()
                slot = slot if slot is not None else self.capacity + len(self._running)
                if adopt:
                    peon = json.loads((task_dir / PEON_FILE).read_text())
                    self._running[task_id] = _Peon(task_id, slot, task_dir, peon["pid"], peon["port"], None)
                    log.info("adopted task %s still running in peon pid %d", task_id, peon["pid"])
                else:
                    log.info("restoring task %s", task_id)
                    self._launch(task_id, slot, task_dir)

    @staticmethod
    def _can_restore(task_dir: Path) -> bool:
        return task_from_json(json.loads((task_dir / TASK_FILE).read_text())).can_restore
