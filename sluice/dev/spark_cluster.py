"""A Spark standalone cluster on one machine, from the installed pyspark, for trying and testing Sluice on a cluster.

The pip package has `bin/spark-class` and the Master and Worker classes but none of Spark's `sbin/start-*.sh`
scripts, so this starts the JVMs itself: a master and `workers` workers on loopback. Each worker has an address of its
own (127.0.0.2, 127.0.0.3, …: to Spark a host of its own, as on a real cluster, where losing a worker loses only the
shuffle files on its host), its own work directory (where its executors run) and its own `SPARK_LOCAL_DIRS` (their
shuffle files). Point a Sluice node at `master_url` (`--spark-master`). Each JVM leads a process group of its own, so
that stopping a worker also stops the executors it started, and dies with the process that started it (an executor
exits when its worker does), so that a killed test leaves no JVM behind.

Run it alone with ``sluice dev spark-cluster``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import pyspark

from sluice.dev import free_port
from sluice.dev.machines import own_machine
from sluice.dev.tansu import die_with_parent_hook

__all__ = ["SparkCluster", "SparkClusterError", "SparkWorker", "run"]

_HOST = "127.0.0.1"
_SPARK_HOME = Path(pyspark.__file__).parent
_MASTER = "org.apache.spark.deploy.master.Master"
_WORKER = "org.apache.spark.deploy.worker.Worker"


class SparkClusterError(RuntimeError):
    """A JVM of the cluster exited, or the cluster did not come up in time."""


@dataclass
class SparkWorker:
    """One worker JVM, and the executors it runs in its own work directory."""

    host: str
    work_dir: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    def executors(self) -> list[int]:
        """The processes of its executors: their JVMs, and the Python daemons and workers those start (each in a
        process group of its own). Every one of them runs in an executor directory under the worker's work
        directory."""
        return [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if _cwd_under(pid, self.work_dir)]

    def kill_9(self) -> None:
        """Kill the worker and every process of its executors at once, the way a machine dies: no shutdown hook
        runs, and no Python worker reads on after its executor is gone."""
        for pid in [self.process.pid, *self.executors()]:
            _kill(pid)
        self.process.wait(30)


def _cwd_under(pid: int, directory: Path) -> bool:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")).is_relative_to(directory)
    except OSError:  # gone, or not ours
        return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class SparkCluster:
    """A master and `workers` workers of `cores` cores and `memory` each, under `work_dir`; a context manager that
    stops every JVM it started (and their executors) whatever happens inside it."""

    def __init__(self, work_dir: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                 timeout_s: float = 120.0, port: int | None = None, *,
                 machines: tuple[Sequence[Path], Sequence[Path]] | None = None) -> None:
        """`port`: the master's (default: a free one). `machines`: run each worker on a machine of its own
        (`sluice.dev.machines`) that sees its own folders and the first of these (shared mounts), and not the second
        (other machines' folders) nor the other workers'; by default the workers share this host's disk."""
        self.work_dir = work_dir
        self._machines = machines
        self.port = port or free_port(_HOST)
        self.web_ui_port = free_port(_HOST)
        self.master_url = f"spark://{_HOST}:{self.port}"
        self.web_ui_url = f"http://{_HOST}:{self.web_ui_port}"
        self._workers, self._cores, self._memory, self._timeout_s = workers, cores, memory, timeout_s
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[SparkWorker] = []

    def start(self) -> SparkCluster:
        """Start the master, then the workers (at once); return once every worker has registered with the master."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            # no REST submission server: Sluice's drivers are its own processes, and its fixed port 6066 would clash
            self.master = self._spawn(_MASTER, ["--host", _HOST, "--port", str(self.port),
                                                "--webui-port", str(self.web_ui_port)],
                                      {"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"},
                                      self.work_dir / "master.log")
            self._wait(lambda state: state is not None, "the master's web UI to answer", [])
            for _ in range(self._workers):
                self._start_worker()
            self._wait(lambda state: _alive(state, self.workers), f"{self._workers} workers to register", self.workers)
        except BaseException:
            self.stop()
            raise
        return self

    def add_worker(self) -> SparkWorker:
        """Start one more worker (a machine joining, or replacing a dead one); return once it has registered."""
        worker = self._start_worker()
        self._wait(lambda state: _alive(state, [worker]), "the new worker to register", [worker])
        return worker

    def _start_worker(self) -> SparkWorker:
        n = len(self.workers)
        host, work_dir = f"127.0.0.{n + 2}", self.work_dir / f"worker-{n}"
        local_dirs = work_dir / "local"
        local_dirs.mkdir(parents=True, exist_ok=True)
        log_path = work_dir.with_suffix(".log")
        # ports chosen by the worker (0): nothing needs to know them, and no free port can be taken meanwhile
        process = self._spawn(_WORKER, [self.master_url, "--host", host, "--port", "0", "--webui-port", "0",
                                        "--cores", str(self._cores), "--memory", self._memory,
                                        "--work-dir", str(work_dir)],
                              {"SPARK_WORKER_DIR": str(work_dir), "SPARK_LOCAL_DIRS": str(local_dirs)}, log_path,
                              on_a_machine_of_its_own=work_dir)
        self.workers.append(SparkWorker(host, work_dir, process, log_path))
        return self.workers[-1]

    def state(self) -> dict[str, Any] | None:
        """The master's view (its web UI's /json: alive workers, cores, applications), None until it answers."""
        try:
            response = httpx.get(self.web_ui_url + "/json/", timeout=5)
            return response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def stop(self) -> None:
        """Stop the workers (with their executors) and the master: SIGTERM to each process group, then SIGKILL to
        whatever is left of it and of the executors' Python processes."""
        processes = [w.process for w in self.workers] + ([self.master] if self.master else [])
        for process in processes:
            _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for process in processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _signal_group(process.pid, signal.SIGKILL)  # the executors of a stopped worker too
            process.wait()
        for worker in self.workers:  # and their Python daemons, in process groups of their own
            for pid in worker.executors():
                _kill(pid)

    def _spawn(self, main_class: str, args: list[str], env: dict[str, str], log_path: Path,
               on_a_machine_of_its_own: Path | None = None) -> subprocess.Popen[bytes]:
        spark_class = _SPARK_HOME / "bin" / "spark-class"
        environment = {**os.environ, "SPARK_HOME": str(_SPARK_HOME), **env}
        command = [str(spark_class), main_class, *args]
        if on_a_machine_of_its_own and self._machines:
            shared, others = self._machines
            command = own_machine(command, own=(on_a_machine_of_its_own, *shared), others=(*others, self.work_dir))
        with log_path.open("ab") as log:
            # spark-class execs the JVM, as unshare and sh do: the pid is the JVM's, the leader of a new process group
            return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=environment, start_new_session=True,
                                    preexec_fn=die_with_parent_hook())

    def _wait(self, ready: Callable[[dict[str, Any] | None], bool], what: str, workers: list[SparkWorker]) -> None:
        """Until the master's state is `ready`, failing fast if the master or one of `workers` exits."""
        deadline = time.monotonic() + self._timeout_s
        while time.monotonic() < deadline:
            for process in [self.master, *(w.process for w in workers)]:
                if process is not None and process.poll() is not None:
                    jvm = next(arg for arg in process.args if arg in (_MASTER, _WORKER))
                    raise SparkClusterError(f"a Spark JVM exited ({jvm}) while waiting for {what}")
            if ready(self.state()):
                return
            time.sleep(0.5)
        raise SparkClusterError(f"timed out after {self._timeout_s:.0f}s waiting for {what}")

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()


def run(work_dir: Path, workers: int, cores: int, memory: str, port: int) -> int:
    """`sluice dev spark-cluster`: run a cluster until Ctrl-C or SIGTERM (exit status 0), or until one of its JVMs
    exits (1), saying how to point Sluice at it."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop() runs on SIGTERM as on Ctrl-C
    cluster = SparkCluster(work_dir, workers, cores, memory, port=port)
    try:
        with cluster:
            print(f"Spark master {cluster.master_url} (web UI {cluster.web_ui_url}), {workers} workers of {cores} "
                  f"core(s) and {memory}; logs and work directories in {work_dir}\n"
                  f"run Sluice on it: sluice start --spark-master {cluster.master_url}   (Ctrl-C to stop)", flush=True)
            while all(p.poll() is None for p in [cluster.master, *(w.process for w in cluster.workers)] if p):
                time.sleep(1)
    except KeyboardInterrupt:
        return 0
    except SparkClusterError as error:
        print(f"{error}; see the logs in {work_dir}", file=sys.stderr)
        return 1
    print(f"a Spark JVM exited; see the logs in {work_dir}", file=sys.stderr)
    return 1


def _alive(state: dict[str, Any] | None, workers: list[SparkWorker]) -> bool:
    """Whether the master counts each of these workers alive."""
    alive = {w["host"] for w in (state or {}).get("workers", []) if w["state"] == "ALIVE"}
    return {w.host for w in workers} <= alive


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
