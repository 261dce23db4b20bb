"""Druid's `query_controller` task for SQL-based ingestion: the batch task that the statement was translated into,
with the SQL text and its context kept in the payload, and Druid's `multiStageQuery` report next to
`ingestionStatsAndErrors`.

The translation is done once, when the statement is submitted (`api_sql_task`); the stored payload holds the
generated `index_parallel` spec, so a task restored or moved to a worker runs exactly what was validated.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from sluice.spec.errors import SpecError
from sluice.task.batch_index_task import BatchIndexTask, BatchIndexTaskSpec
from sluice.task.task import TaskFailure, TaskStatus
from sluice.task.toolbox import TaskToolbox

TASK_TYPE = "query_controller"


def new_query_id() -> str:
    """Druid's shape: `query-<uuid>`."""
    return f"query-{uuid.uuid4()}"


@dataclass(frozen=True)
class QueryControllerTaskSpec(BatchIndexTaskSpec):
    sql_query: str = ""
    sql_query_context: dict[str, Any] = field(default_factory=dict)

    @property
    def type(self) -> str:
        return TASK_TYPE

    def to_json(self) -> dict[str, Any]:
        batch = super().to_json()
        return {"type": TASK_TYPE, "id": self.id, "groupId": self.group_id, "dataSource": self.data_source,
                "resource": batch["resource"], "sqlQuery": self.sql_query, "sqlQueryContext": self.sql_query_context,
                "spec": {"type": self.payload.type, "spec": batch["spec"], "context": batch["context"]},
                "context": batch["context"]}


def spec_from_json(payload: dict[str, Any]) -> QueryControllerTaskSpec:
    """A stored or submitted `query_controller` payload: `spec` holds the generated `index_parallel` task."""
    task_id, inner = payload.get("id"), payload.get("spec")
    if not isinstance(task_id, str) or not task_id:
        raise TaskFailure("a query_controller task needs a non-empty string 'id'")
    if not isinstance(inner, dict):
        raise TaskFailure("a query_controller task needs its generated 'spec' (an index_parallel task)")
    try:
        batch = BatchIndexTaskSpec.from_json({**inner, "id": task_id})
    except SpecError as error:
        raise SpecError(f"spec.{error.path}" if error.path else "spec", error.message) from None
    return QueryControllerTaskSpec(task_id, batch.payload, str(payload.get("sqlQuery") or ""),
                                   dict(payload.get("sqlQueryContext") or {}))


def create(spec: QueryControllerTaskSpec, toolbox: TaskToolbox) -> QueryControllerTask:
    return QueryControllerTask(spec, toolbox)


class QueryControllerTask(BatchIndexTask):
    #: a GROUP BY's rows are its groups, as MSQ's shuffle makes them, whichever worker read a group's rows
    perfect_rollup = True

    def report(self, status: TaskStatus | None = None) -> dict[str, Any]:
        return {**super().report(status), **multi_stage_query_report(self.spec.id, status)}


def multi_stage_query_report(task_id: str, status: TaskStatus | None) -> dict[str, Any]:
    """Druid's `multiStageQuery` report: the query's status and, when it failed, its errorReport."""
    state = status.status_code if status is not None else "RUNNING"
    query_status: dict[str, Any] = {"status": state, "pendingTasks": 0, "runningTasks": 1 if state == "RUNNING" else 0}
    if status is not None:
        query_status["durationMs"] = status.duration_ms
    if state == "FAILED":
        message = status.error_msg if status is not None else None
        code = "TooManyWarnings" if message and message.startswith("Max parse exceptions") else "UnknownError"
        query_status["errorReport"] = {"taskId": task_id, "host": None,
                                       "error": {"errorCode": code, "errorMessage": message}}
    return {"multiStageQuery": {"type": "multiStageQuery", "taskId": task_id,
                                "payload": {"status": query_status, "stages": [], "counters": {}}}}
