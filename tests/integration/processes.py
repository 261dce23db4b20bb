"""Sluice roles as real processes for the tests: `sluice overlord|worker|broker` started the way an
operator starts them, killed the way machines die."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import httpx

from sluice.dev.machines import own_machine
from tests.integration.harness import free_port, wait_for


class SluiceProcess:
    def __init__(self, role: str, work_dir: Path, metadata_uri: str, *args: str, name: str | None = None,
                 hidden: tuple[Path, ...] = (), shared: tuple[Path, ...] = (), env: Mapping[str, str] = {}) -> None:
        """`name`: the node's own folder under `work_dir` (default: the role's), for two nodes of one role. With
        `hidden` (folders of other machines) the node runs on a machine of its own (`sluice.dev.machines`): it sees
        `work_dir`, the `shared` folders (shared mounts) and Sluice's installation, not these folders nor the rest of
        /tmp. `env`: added to the test's environment."""
        self.role = role
        self._env = dict(env)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = work_dir / f"{role}-{self.port}.log"
        self._command = [sys.executable, "-m", "sluice.cli", "--log-level", "INFO", role, "--port", str(self.port),
                         "--work-dir", str(work_dir / (name or role)), "--metadata-uri", metadata_uri,
                         "--deep-storage", (work_dir / "deep-storage").as_uri(), *args]
        if hidden:
            self._command = own_machine(self._command, own=(work_dir, *shared), others=hidden)
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> SluiceProcess:
        self.launch()
        return self.wait_healthy(timeout)

    def launch(self) -> None:
        """No test measures speed, so an all-in-one node skips the warm-up that makes its first task's reads warm:
        healthy about 20 s sooner, its first read a few seconds slower."""
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self._command, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=os.environ | self._env | (
                                                {"sluice_spark_warmUp": "false"} if self.role == "start" else {}))

    def wait_healthy(self, timeout: float = 60.0) -> SluiceProcess:
        assert self.process is not None, "launch() first"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sluice {self.role} exited: {self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/status/health", timeout=2).json() is True:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.kill()  # not left running behind a failed test
        raise RuntimeError(f"sluice {self.role} did not become healthy in {timeout}s: {self.log_path.read_text()[-3000:]}")

    def leads(self) -> bool:
        try:
            return httpx.get(self.url + "/druid/indexer/v1/isLeader", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def leading(self, timeout: float = 60.0) -> SluiceProcess:
        """Once this overlord leads: a successor of a killed leader takes the lease when it expires."""
        wait_for(self.leads, timeout, f"overlord {self.url} to become the leader")
        return self

    def terminate(self) -> None:
        """SIGTERM: the graceful stop, not waited for."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """kill -9: no shutdown hook runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        self.terminate()
        if self.process is not None:
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60)


def start_all(*processes: SluiceProcess, timeout: float = 60.0) -> list[SluiceProcess]:
    """Launch the processes side by side, as an operator's nodes start, then wait for each to be healthy and, where
    overlords start, for one of them to lead: a healthy overlord may still be a standby that refuses tasks."""
    for process in processes:
        process.launch()
    started = [process.wait_healthy(timeout) for process in processes]
    overlords = [process for process in started if process.role == "overlord"]
    if overlords:
        wait_for(lambda: any(overlord.leads() for overlord in overlords), timeout, "one of the overlords to lead")
    return started


def stop_all(processes: Iterable[SluiceProcess]) -> None:
    """Workers first, while the overlord still answers their peons, then the others; each group's graceful stops
    overlap."""
    processes = list(processes)
    for group in ([p for p in processes if p.role == "worker"], [p for p in processes if p.role != "worker"]):
        for process in group:
            process.terminate()
        for process in group:
            process.stop()


class Cluster:
    """Sluice processes sharing one SQLite metadata store and one deep storage under `work_dir`."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.metadata_uri = f"sqlite:///{work_dir / 'metadata.db'}"
        self.processes: list[SluiceProcess] = []

    def start(self, role: str, *args: str) -> SluiceProcess:
        [process] = self.start_all((role, *args))
        return process

    def start_all(self, *commands: Sequence[str]) -> list[SluiceProcess]:
        """A process for each (role, *args), started side by side."""
        processes = [SluiceProcess(role, self.work_dir, self.metadata_uri, *args) for role, *args in commands]
        self.processes += processes
        return start_all(*processes)

    def stop(self) -> None:
        stop_all(self.processes)


def peon_pids(task_id: str) -> list[int]:
    """The peon processes running a task (their command line names the task directory)."""
    found = subprocess.run(["pgrep", "-f", f"sluice.worker.peon .*{task_id}"], capture_output=True, text=True)
    return [int(pid) for pid in found.stdout.split()]


def kill_9(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
