"""The supervisor's side of the chat API: a TaskClient for a task running in a peon, over HTTP.

As in Druid's SeekableStreamIndexTaskClient, a task that cannot be reached is retried a few times (a peon's
server may still be starting) and then reported as unreachable, never as a made-up answer: a pause that
could not be delivered is None, an end-offsets call that could not be delivered raises, so the supervisor
kills that replica instead of assuming it will publish.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from sluice.realtime import CHAT_PREFIX
from sluice.task.kafka_index_task import KafkaIndexTaskSpec, TaskState
from sluice.task.meters import BUILD_SEGMENTS, ParseExceptionReport
from sluice.task.task import TaskFailure, TaskSpec
from sluice.timestamps import parse_timestamp

log = logging.getLogger(__name__)


class HttpTaskClient:
    """`http` is the overlord's pooled client, shared by every task's client: a client per call loaded the CA bundle
    each time, and that was most of a busy overlord's CPU."""

    def __init__(self, spec: KafkaIndexTaskSpec | TaskSpec, host: str, port: int, http: httpx.Client,
                 retries: int = 4, timeout: float = 10.0, pause_timeout: float = 30.0) -> None:
        self.spec = spec
        self._http = http
        self._base = f"http://{host}:{port}{CHAT_PREFIX}/{spec.id}"
        self._retries = retries
        self._timeout = timeout
        self._pause_timeout = pause_timeout

    def _call(self, method: str, path: str, timeout: float | None = None, **kwargs: Any) -> httpx.Response | None:
        """The response (any status), or None when the task could not be reached after the retries."""
        try:
            return Retrying(retry=retry_if_exception_type(httpx.TransportError), stop=stop_after_attempt(self._retries + 1),
                            wait=wait_exponential(multiplier=0.2, max=2.0), reraise=True)(
                self._http.request, method, self._base + path, timeout=timeout or self._timeout, **kwargs)
        except httpx.TransportError as error:
            log.warning("task %s unreachable: %s %s: %s", self.spec.id, method, path, error)
            return None

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._call(method, path, **kwargs)
        return response.json() if response is not None and response.status_code == 200 else None

    @property
    def state(self) -> TaskState | None:
        answer = self._json("GET", "/status")
        return TaskState(answer) if answer else None

    def row_stats_report(self) -> dict[str, Any] | None:
        return self._json("GET", "/rowStats")

    def parse_errors(self) -> list[ParseExceptionReport]:
        answer = self._json("GET", "/unparseableEvents") or {}
        return [ParseExceptionReport.from_json(r) for r in answer.get(BUILD_SEGMENTS, [])]

    def start_time(self) -> datetime | None:
        answer = self._json("GET", "/time/start")
        return parse_timestamp(answer) if answer else None

    def current_offsets(self) -> dict[int, int] | None:
        answer = self._json("GET", "/offsets/current")
        return {int(p): o for p, o in answer.items()} if answer is not None else None

    def end_offsets(self) -> dict[int, int] | None:
        answer = self._json("GET", "/offsets/end")
        return {int(p): o for p, o in answer.items()} if answer is not None else None

    def checkpoints(self) -> dict[int, dict[int, int]]:
        """The task's sequences' start offsets by sequence id; empty when it cannot be reached."""
        answer = self._json("GET", "/checkpoints") or {}
        return {int(i): {int(p): o for p, o in c.items()} for i, c in answer.items()}

    def pause(self, timeout: float | None = None) -> dict[int, int] | None:
        answer = self._json("POST", "/pause", timeout=(timeout or self._pause_timeout) + self._timeout)
        return {int(p): o for p, o in answer.items()} if answer is not None else None

    def resume(self) -> None:
        self._call("POST", "/resume")

    def set_end_offsets(self, end: dict[int, int], finish: bool = True) -> None:
        response = self._call("POST", "/offsets/end", params={"finish": str(finish).lower()},
                              json={str(p): o for p, o in end.items()})
        if response is None:
            raise TaskFailure(f"task {self.spec.id} could not be reached to set its end offsets")
        if response.status_code != 200:
            raise TaskFailure(response.json().get("error", response.text))

    def stop(self) -> None:
        self._call("POST", "/stop")

    def report(self) -> dict[str, Any]:
        return self._json("GET", "/liveReports") or {}
