"""Druid's supervisor → task "chat" API (/druid/worker/v1/chat/{taskId}/…), served where the task runs.

A peon serves it for its one task; the all-in-one node serves it for its thread-run tasks, so an operator
reaches a task the same way whichever runner runs it.
"""

from __future__ import annotations

from typing import Any, Callable

from fastapi import APIRouter, Body
from fastapi.responses import FileResponse, JSONResponse

from sluice.realtime import CHAT_PREFIX
from sluice.server.auth import task_guard
from sluice.task.kafka_index_task import KafkaIndexTask, TaskState
from sluice.task.task import RunnableTask, TaskFailure
from sluice.timestamps import format_timestamp

_PAUSABLE = (TaskState.STARTING, TaskState.READING, TaskState.PAUSED)


def chat_router(lookup: Callable[[str], RunnableTask | None]) -> APIRouter:
    # Druid's ChatHandlerResourceFilter: the task's data source, READ to look and WRITE to pause, stop or move offsets
    router = APIRouter(prefix=CHAT_PREFIX + "/{task_id}",
                       dependencies=[task_guard(lambda task_id: t.spec.data_source if (t := lookup(task_id)) else None)])

    def answer(task_id: str, action: Callable[[KafkaIndexTask], Any], streaming: bool = True) -> Any:
        task = lookup(task_id)
        if task is None or (streaming and not isinstance(task, KafkaIndexTask)):
            return JSONResponse({"error": f"Can't find chat handler for task [{task_id}]"}, status_code=404)
        try:
            return action(task)  # type: ignore[arg-type]
        except TaskFailure as failure:
            return JSONResponse({"error": str(failure)}, status_code=400)

    def offsets(values: dict[int, int]) -> dict[str, int]:
        return {str(p): o for p, o in sorted(values.items())}

    def set_end_offsets(task: KafkaIndexTask, end: dict[str, int], finish: bool) -> dict[str, int]:
        task.set_end_offsets({int(p): int(o) for p, o in end.items()}, finish=finish)
        return offsets(task.end_offsets())

    def pause(task: KafkaIndexTask) -> Any:
        if task.state not in _PAUSABLE:
            return JSONResponse({"error": f"Can't pause, task is not in a pausable state (state: [{task.state.value}])"},
                                status_code=409)
        paused = task.pause()
        if paused is None:
            return JSONResponse({"error": "Task is taking too long to pause"}, status_code=202)
        return offsets(paused)

    def resume(task: KafkaIndexTask) -> dict[str, int]:
        task.resume()
        return offsets(task.current_offsets())

    def stop(task: RunnableTask) -> dict[str, str]:
        task.stop()
        return {"task": task.spec.id}

    @router.get("/status")
    def status(task_id: str) -> Any:
        return answer(task_id, lambda t: t.state.value)

    @router.get("/offsets/current")
    def current(task_id: str) -> Any:
        return answer(task_id, lambda t: offsets(t.current_offsets()))

    @router.get("/offsets/end")
    def end(task_id: str) -> Any:
        return answer(task_id, lambda t: offsets(t.end_offsets()))

    @router.post("/offsets/end")
    def set_end(task_id: str, body: dict[str, int] = Body(...), finish: bool = True) -> Any:
        return answer(task_id, lambda t: set_end_offsets(t, body, finish))

    @router.get("/checkpoints")
    def checkpoints(task_id: str) -> Any:
        return answer(task_id, lambda t: {str(i): offsets(c) for i, c in t.checkpoints().items()})

    @router.post("/pause")
    def pause_task(task_id: str) -> Any:
        return answer(task_id, pause)

    @router.post("/resume")
    def resume_task(task_id: str) -> Any:
        return answer(task_id, resume)

    @router.post("/stop")
    def stop_task(task_id: str) -> Any:
        return answer(task_id, stop, streaming=False)

    @router.get("/rowStats")
    def row_stats(task_id: str) -> Any:
        return answer(task_id, lambda t: t.row_stats_report())

    @router.get("/unparseableEvents")
    def unparseable_events(task_id: str) -> Any:
        return answer(task_id, lambda t: t.parse_exceptions.unparseable_events())

    @router.get("/liveReports")
    def live_reports(task_id: str) -> Any:
        return answer(task_id, lambda t: t.report(), streaming=False)

    @router.get("/realtime")
    def realtime(task_id: str) -> Any:
        """Not Druid's: what a broker needs to query the task's unpublished rows (sluice/broker/realtime.py)."""
        return answer(task_id, lambda t: [view.to_json() for view in t.realtime_views()])

    @router.get("/realtime/file")
    def realtime_file(task_id: str, path: str) -> Any:
        """Not Druid's either: one persist file of the task's realtime views, for a broker on another machine (Druid
        sends the query to the peon instead). Only a file a view lists: no other path of the worker can be read."""

        def send(task: KafkaIndexTask) -> Any:
            if path not in {file for view in task.realtime_views() for file in view.files}:
                return JSONResponse({"error": f"[{path}] is not a persist file of task [{task_id}]"}, status_code=404)
            return FileResponse(path, media_type="application/vnd.apache.parquet")

        return answer(task_id, send)

    @router.get("/time/start")
    def start_time(task_id: str) -> Any:
        return answer(task_id, lambda t: format_timestamp(t.started) if t.started else None)

    return router
