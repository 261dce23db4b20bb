"""What every task is to the queue, the runners and the peon: a JSON payload with an id, a group and a data
source, that runs to a TaskStatus. Druid's `Task` and `TaskStatus`, and its `noop` task (which tests the
machinery of queue, workers and peons without Spark).
"""

from __future__ import annotations

import importlib
import logging
import json
import secrets
import string
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal, Protocol

from pydantic import Field, StrictBool, StrictInt, ValidationError

from sluice.ids import validate_id
from sluice.spec.context import TaskContext
from sluice.spec.errors import from_validation_error
from sluice.spec.model import SpecModel

if TYPE_CHECKING:
    from sluice.task.toolbox import TaskToolbox


log = logging.getLogger(__name__)


class TaskFailure(Exception):
    """Ends the task as FAILED with this message as its errorMsg."""


@dataclass(frozen=True)
class TaskStatus:
    id: str
    status_code: str  # RUNNING, SUCCESS, FAILED
    error_msg: str | None = None
    duration_ms: int = -1

    @property
    def is_complete(self) -> bool:
        return self.status_code != "RUNNING"

    @classmethod
    def failure(cls, task_id: str, message: str) -> TaskStatus:
        return cls(task_id, "FAILED", message)

    @classmethod
    def from_json(cls, payload: dict[str, Any]) -> TaskStatus:
        return cls(payload["id"], payload.get("statusCode") or payload["status"], payload.get("errorMsg"),
                   payload.get("duration", -1))

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status_code, "statusCode": self.status_code,
                "duration": self.duration_ms, "errorMsg": self.error_msg}


class TaskSpec(Protocol):
    """A task's payload: what is stored, sent to a worker, and written to the peon's task.json."""

    id: str

    @property
    def type(self) -> str: ...
    @property
    def group_id(self) -> str: ...
    @property
    def data_source(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def needs_spark(self) -> bool: ...
    @property
    def can_restore(self) -> bool:
        """Whether a task stopped with its process resumes when the process (or its worker) restarts."""
        ...
    def to_json(self) -> dict[str, Any]: ...


class RunnableTask(Protocol):
    spec: TaskSpec

    def run(self) -> TaskStatus:
        """The final status; or RUNNING when it was stopped gracefully and resumes in a restarted process."""
        ...
    def stop(self) -> None: ...
    def stop_gracefully(self) -> None:
        """Its process is going down: a task that can resume (Druid's canRestore) keeps its state for the restarted
        process and ends without a final status; any other task just stops."""
        ...
    def report(self, status: TaskStatus | None = None) -> dict[str, Any]: ...


def run_to_status(task_id: str, work: Callable[[], None],
                  reason: Callable[[Exception], str] = lambda error: f"{type(error).__name__}: {error}") -> TaskStatus:
    """`work` run to a final status with its duration: SUCCESS, a TaskFailure's message, or any other error's
    `reason` (logged with its stack), so that a task always ends with a status its queue can act on."""
    started = time.monotonic()
    try:
        work()
        code, message = "SUCCESS", None
    except TaskFailure as failure:
        code, message = "FAILED", str(failure)
    except Exception as error:  # noqa: BLE001 - see the docstring
        log.exception("task %s failed", task_id)
        code, message = "FAILED", reason(error)
    return TaskStatus(task_id, code, message, int((time.monotonic() - started) * 1000))


def random_id_part() -> str:
    """The 8 random letters Druid puts in the ids it makes for tasks."""
    return "".join(secrets.choice(string.ascii_lowercase) for _ in range(8))


class PayloadTaskSpec:
    """What a task spec built around a validated Druid payload (with `groupId` and `context`) shares: its group is
    its own id unless the payload names one, and its priority is the context's, else its type's default."""

    id: str
    payload: Any
    default_priority: ClassVar[int]

    @property
    def group_id(self) -> str:
        return self.payload.group_id or self.id

    @property
    def priority(self) -> int:
        priority = self.payload.context.priority
        return self.default_priority if priority is None else priority


class StatusListeners:
    """Who hears that a task finished (the queue hears its runner, supervisors hear the queue): a base of
    the task runners and the task queue. Listeners are called outside any lock of the notifier."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[TaskStatus], None]] = []
        self._listeners_lock = threading.Lock()

    def add_listener(self, listener: Callable[[TaskStatus], None]) -> None:
        with self._listeners_lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[TaskStatus], None]) -> None:
        with self._listeners_lock:
            self._listeners.remove(listener)

    def _notify(self, status: TaskStatus) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(status)


@dataclass(frozen=True)
class NoopTaskSpec:
    """Druid's `noop` task: sleeps `runTime` ms, then succeeds (or fails, with `fail`)."""

    id: str
    data_source: str = "none"
    run_time_ms: int = 2500
    fail: bool = False
    group_id_: str | None = None
    priority_: int = 0

    type = "noop"
    needs_spark = False
    can_restore = False

    @property
    def group_id(self) -> str:
        return self.group_id_ or self.id

    @property
    def priority(self) -> int:
        return self.priority_

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "id": self.id, "groupId": self.group_id, "dataSource": self.data_source,
                "runTime": self.run_time_ms, "fail": self.fail, "context": {"priority": self.priority}}


#: the longest a noop task can sleep: what a thread can wait for
MAX_NOOP_RUN_TIME_MS = int(threading.TIMEOUT_MAX * 1000)


class NoopTaskPayload(SpecModel):
    """Druid's noop task JSON (`fail` is Sluice's: it makes the task fail, to try failure handling)."""

    type: Literal["noop"]
    id: str
    group_id: str | None = None
    data_source: str = "none"
    run_time: StrictInt = Field(2500, ge=0, le=MAX_NOOP_RUN_TIME_MS)
    fail: StrictBool = False
    context: TaskContext = Field(default_factory=TaskContext)


class NoopTask:
    def __init__(self, spec: NoopTaskSpec, task_dir: Path) -> None:
        self.spec = spec
        self.task_dir = task_dir
        self._stopped = threading.Event()

    def run(self) -> TaskStatus:
        started = time.monotonic()
        stopped = self._stopped.wait(self.spec.run_time_ms / 1000)
        duration = int((time.monotonic() - started) * 1000)
        if stopped or self.spec.fail:
            return TaskStatus(self.spec.id, "FAILED", "stopped" if stopped else "noop task told to fail", duration)
        return TaskStatus(self.spec.id, "SUCCESS", None, duration)

    def stop(self) -> None:
        self._stopped.set()

    def stop_gracefully(self) -> None:
        self.stop()  # a noop task cannot resume

    def report(self, status: TaskStatus | None = None) -> dict[str, Any]:
        return {}


#: task type -> the module that runs it. A module has `spec_from_json(payload) -> TaskSpec` (raising TaskFailure or
#: SpecError naming what is wrong) and `create(spec, toolbox) -> RunnableTask`; it is imported when a task of its
#: type is first seen, so a process imports only what it runs (and Spark only where a task needs it).
TASK_MODULES = {
    "noop": "sluice.task.task",
    "index_kafka": "sluice.task.kafka_index_task",
    "index_parallel": "sluice.task.batch_index_task",
    "index": "sluice.task.batch_index_task",
    "compact": "sluice.task.compact_task",
    "kill": "sluice.task.kill_task",
    "query_controller": "sluice.sql_ingest.task",
    "stream_job": "sluice.task.stream_job_task",
}
#: task type -> the module that parses its payload: the one that runs it, but where that imports Spark. The overlord
#: parses every task's payload and runs none.
SPEC_MODULES = {**TASK_MODULES, "stream_job": "sluice.task.stream_job_spec"}


def task_from_json(payload: Any) -> TaskSpec:
    """Parse a stored or submitted task payload; raises TaskFailure (or SpecError, for an ingestion spec) naming
    what is wrong."""
    if not isinstance(payload, dict):
        raise TaskFailure("a task must be a JSON object")
    module = SPEC_MODULES.get(payload.get("type"))  # type: ignore[arg-type]
    if module is None:
        raise TaskFailure(f"task type {payload.get('type')!r} is not supported; Sluice runs "
                          f"{', '.join(repr(t) for t in TASK_MODULES)}")
    spec: TaskSpec = importlib.import_module(module).spec_from_json(payload)
    try:  # they become directory names
        validate_id("task ID", spec.id)
        validate_id("dataSource", spec.data_source)
    except ValueError as error:
        raise TaskFailure(str(error)) from None
    return spec


def create_task(spec: TaskSpec, toolbox: TaskToolbox) -> RunnableTask:
    return importlib.import_module(TASK_MODULES[spec.type]).create(spec, toolbox)


def spec_from_json(payload: dict[str, Any]) -> NoopTaskSpec:
    if not isinstance(payload.get("id"), str) or not payload["id"]:
        raise TaskFailure("a task needs a JSON object with a non-empty string 'id'")
    try:
        parsed = NoopTaskPayload.model_validate(payload)
    except ValidationError as error:
        raise from_validation_error(error, payload) from None
    return NoopTaskSpec(parsed.id, parsed.data_source, parsed.run_time, parsed.fail, parsed.group_id,
                        parsed.context.priority or 0)


def create(spec: NoopTaskSpec, toolbox: TaskToolbox) -> NoopTask:
    return NoopTask(spec, toolbox.task_dir)


def write_task_file(task_dir: Path, name: str, payload: Any) -> None:
    """Atomically (write, then rename), so a reader never sees half a status or report."""
    path = task_dir / name
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str))
    tmp.replace(path)
