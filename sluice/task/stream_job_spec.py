"""A stream job task's payload: what the overlord and its supervisor handle, apart from the task that runs it
(`stream_job_task.py`, with Spark), so that they do not import Spark."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sluice.stream.job_spec import StreamJobSpec, parse_stream_job_spec
from sluice.task.task import TaskFailure, random_id_part

TASK_TYPE = "stream_job"


@dataclass(frozen=True)
class StreamJobTaskSpec:
    id: str
    job: StreamJobSpec
    #: start over: the job's checkpoint is deleted first (the supervisor's reset)
    reset: bool = False

    type = TASK_TYPE
    needs_spark = True
    #: a restarted process starts the query again on the same checkpoint
    can_restore = True
    priority = 75

    @property
    def data_source(self) -> str:
        return (self.job.data_sources or [self.job.id])[0]

    @property
    def group_id(self) -> str:
        return f"{TASK_TYPE}_{self.job.id}"

    def to_json(self) -> dict[str, Any]:
        return {"type": TASK_TYPE, "id": self.id, "groupId": self.group_id, "dataSource": self.data_source,
                "job": self.job.to_json(), "reset": self.reset, "context": {"priority": self.priority}}


def new_task_id(job_id: str) -> str:
    return f"{TASK_TYPE}_{job_id}_{random_id_part()}"


def spec_from_json(payload: dict[str, Any]) -> StreamJobTaskSpec:
    if not isinstance(payload.get("id"), str) or not isinstance(payload.get("job"), dict):
        raise TaskFailure("a stream_job task needs an 'id' and its stream job spec as 'job'")
    return StreamJobTaskSpec(payload["id"], parse_stream_job_spec(payload["job"]), bool(payload.get("reset")))
