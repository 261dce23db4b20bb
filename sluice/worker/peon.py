"""A peon: the process that runs one task (Druid's CliPeon with its ExecutorLifecycle).

The worker starts it as `python -m sluice.worker.peon <task dir> …` with the task's payload in
`<task dir>/task.json`. The peon
- takes an exclusive lock on `<task dir>/lock` first, so a task never runs twice (a second peon for the
  same directory exits at once), and holds it until it exits, which tells a restarted worker it still runs;
- serves the chat API for its task on `--port`;
- runs the task and writes `status.json` (and the task's own report) before it exits;
- on SIGTERM (its worker stopping) or when its parent worker dies, stops the task gracefully: an orphaned
  task must not keep reading, and nothing it did is committed unless its publish transaction committed, but
  a task that can resume keeps its state and the peon exits without a status, for the restarted worker to
  restore it (Druid's restoreTasksOnRestart);
- on SIGUSR1 (the overlord shutting the task down), stops the task for good: it ends FAILED.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any, Callable

from fastapi import FastAPI

from sluice.discovery import OVERLORD, live_urls
from sluice.emitter import EmitterConfig, ServiceEmitter, build_emitter
from sluice.logs import configure as configure_logging
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import DeepStorage
from sluice.security.access import Security
from sluice.security.basic import BasicSecurityDb
from sluice.security.config import AuthConfig
from sluice.server.api_chat import chat_router
from sluice.server.auth import install, serve_security
from sluice.server.api_metrics import metrics_router
from sluice.server.http_server import HttpServer
from sluice.stream.kafka import KafkaStream
from sluice.task.actions import RemoteTaskActionClient
from sluice.task.toolbox import TaskToolbox
from sluice.task.task import RunnableTask, TaskStatus, create_task, task_from_json, write_task_file

log = logging.getLogger("sluice.worker.peon")  # its name also when it runs as __main__

LOCK_FILE = "lock"
STATUS_FILE = "status.json"
TASK_FILE = "task.json"
REPORT_FILE = "report.json"
#: what the worker sends a peon whose task the overlord shuts down (SIGTERM means: stop, to be restored)
SHUTDOWN_SIGNAL = signal.SIGUSR1
#: the environment variable a worker hands its druid.auth.* and druid.escalator.* properties to a peon in (JSON)
AUTH_PROPERTIES_ENV = "SLUICE_AUTH_PROPERTIES"
#: the metadata store's URI, which may hold its password: in the environment, not in argv (which `ps` shows)
METADATA_URI_ENV = "SLUICE_METADATA_URI"


def try_lock(task_dir: Path) -> IO[str] | None:
    """The task directory's lock, held open; None when another process holds it."""
    handle = (task_dir / LOCK_FILE).open("a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


class _StopRequests:
    """Stop requests (SIGTERM and the worker's death: stop to be restored; SIGUSR1: shut down for good). Until its
    Spark is up the task has done nothing, and the peon exits at once instead of waiting for a Spark to start only to
    stop it (a cold Spark can take a minute on a loaded machine, all that time holding a worker slot): the worker
    records a shutdown as such, and a task to be restored finds its directory as it was."""

    def __init__(self, task: RunnableTask) -> None:
        self._task = task
        self._lock = threading.Lock()
        self._started = False

    def request(self, shutdown: bool) -> None:
        """Called on a thread of its own (stopping may call into Spark, and a signal handler must not)."""
        with self._lock:
            if not self._started:
                log.info("task %s %s before it started; exiting", self._task.spec.id,
                         "shut down" if shutdown else "stopped")
                os._exit(0)
        (self._task.stop if shutdown else self._task.stop_gracefully)()

    def start(self) -> None:
        """The task can be stopped from now on."""
        with self._lock:
            self._started = True


def _on_signal(stops: _StopRequests, shutdown: bool) -> Callable[..., None]:
    return lambda *_: threading.Thread(target=stops.request, args=(shutdown,), name="stop-request").start()


def _watch_parent(parent_pid: int, task_id: str, stops: _StopRequests) -> None:
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    log.warning("the worker (pid %d) is gone; stopping task %s until it restarts", parent_pid, task_id)
    stops.request(shutdown=False)
    time.sleep(30)
    os._exit(3)  # the task did not stop in time; nothing uncommitted survives a peon's exit anyway


def run_peon(task_dir: Path, port: int, metadata_uri: str, deep_storage: str, spark_master: str,
             parent_pid: int, emitter_config: EmitterConfig, auth: AuthConfig = AuthConfig()) -> int:
    lock = try_lock(task_dir)
    if lock is None:
        log.error("task in %s is already running in another peon", task_dir)
        return 2
    spec = task_from_json(json.loads((task_dir / TASK_FILE).read_text()))
    metadata = MetadataStore(metadata_uri)
    emitter = ServiceEmitter("druid/peon", f"127.0.0.1:{port}", build_emitter(emitter_config))
    emitter.start()
    actions = RemoteTaskActionClient(spec.id, lambda: live_urls(metadata, OVERLORD), auth=auth.escalator.basic_auth)
    toolbox = TaskToolbox(None, metadata, DeepStorage.from_uri(deep_storage), task_dir, KafkaStream.for_io_config,
                          actions, emitter)
    task = create_task(spec, toolbox)
    # the chat API answers from the start (a task starting its Spark is NOT_STARTED, not unreachable)
    app = FastAPI(title=f"Sluice peon {spec.id}")
    install(app, auth)
    serve_security(app, Security(auth, BasicSecurityDb(metadata, auth)))
    app.include_router(chat_router(lambda task_id: task if task_id == spec.id else None))
    app.include_router(metrics_router(emitter))
    app.get("/status/health")(lambda: True)
    stops = _StopRequests(task)
    signal.signal(signal.SIGTERM, _on_signal(stops, shutdown=False))
    signal.signal(SHUTDOWN_SIGNAL, _on_signal(stops, shutdown=True))
    http = HttpServer(app, "127.0.0.1", port)
    http.start()
    threading.Thread(target=_watch_parent, args=(parent_pid, spec.id, stops), name="parent-watch", daemon=True).start()
    spark = None
    if spec.needs_spark:
        from sluice.task import spark_session  # only tasks that read start Spark

        spark = spark_session.get_or_create(spark_master)
        toolbox.spark = spark

    stops.start()
    status = task.run()
    if status.is_complete:
        write_task_file(task_dir, STATUS_FILE, status.to_json())
        log.info("task %s finished: %s%s", spec.id, status.status_code,
                 f" ({status.error_msg})" if status.error_msg else "")
    else:
        log.info("task %s stopped; its worker restores it when it starts again", spec.id)
    http.stop()
    actions.close()
    emitter.close()
    if spark is not None:
        spark.stop()
    metadata.close()
    lock.close()
    return 0


def read_status(task_dir: Path) -> TaskStatus | None:
    path = task_dir / STATUS_FILE
    return TaskStatus.from_json(json.loads(path.read_text())) if path.exists() else None


def read_report(task_dir: Path) -> dict[str, Any] | None:
    path = task_dir / REPORT_FILE
    return json.loads(path.read_text()) if path.exists() else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="sluice-peon")
    parser.add_argument("task_dir", type=Path)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--deep-storage", required=True)
    parser.add_argument("--spark-master", default="local[2,4]")
    parser.add_argument("--parent-pid", type=int, default=os.getppid())
    parser.add_argument("--emitter", type=EmitterConfig.model_validate_json, default=EmitterConfig(),
                        help="the emitter settings as JSON (Druid's names)")
    parser.add_argument("--json-logs", action="store_true", help="its worker's sluice.log.format=json")
    args = parser.parse_args(argv)
    configure_logging("INFO", json_format=args.json_logs)
    auth = AuthConfig.from_properties(json.loads(os.environ.get(AUTH_PROPERTIES_ENV, "{}")))
    sys.exit(run_peon(args.task_dir, args.port, os.environ[METADATA_URI_ENV], args.deep_storage, args.spark_master,
                      args.parent_pid, args.emitter, auth))


if __name__ == "__main__":
    main()
