"""Which rows of running tasks a query sees (Druid's realtime queries), without counting any row twice.

A reading task's persists hold the rows it has read; they become segments when its publish commits, in
the same transaction that moves the data source's committed offsets from the task's start to its end.
So a task's persists are visible exactly while the committed offsets of its partitions have not moved past
its start: after that its rows are in segments (which the broker read first, so a publish between the two
reads can only hide rows for a moment, never double them). Replicas of a task group hold the same rows:
only the one that read furthest answers.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Iterable, Mapping

import httpx

from sluice.broker.broker import RealtimePiece
from sluice.segment.segment import ETERNITY
from sluice.server.api_chat import CHAT_PREFIX
from sluice.task.kafka_index_task import TASK_TYPE, RealtimeView

log = logging.getLogger(__name__)


def visible_pieces(views: Iterable[RealtimeView],
                   committed: Callable[[str], Mapping[int, int]]) -> dict[str, list[RealtimePiece]]:
    """Per data source, the files of the furthest replica of every group whose rows are not committed."""
    furthest: dict[tuple[str, str], RealtimeView] = {}
    for view in views:
        key = (view.data_source, view.base_sequence_name)
        if view.files and (key not in furthest or view.progress > furthest[key].progress):
            furthest[key] = view
    stored: dict[str, Mapping[int, int]] = {}
    pieces: dict[str, list[RealtimePiece]] = {}
    for (source, _), view in sorted(furthest.items()):
        offsets = stored.setdefault(source, committed(source))
        if any(offsets.get(p, start) > start for p, start in view.start_offsets.items()):
            continue  # its publish committed: the rows are in segments now
        pieces.setdefault(source, []).extend(RealtimePiece(path, ETERNITY) for path in view.files)
    return pieces


class RemoteRealtimeViews:
    """A broker process's view of the reading tasks in peons: the overlord lists the running tasks and
    where their peons serve, and each peon tells what it has persisted (`GET …/chat/{id}/realtime`).

    Asked at most once per `ttl` seconds, so a burst of queries costs one round of requests.
    """

    def __init__(self, overlords: Callable[[], list[str]], ttl: float = 1.0) -> None:
        self._overlords = overlords
        self._ttl = ttl
        self._http = httpx.Client(timeout=5)
        self._cached: tuple[float, list[RealtimeView]] = (float("-inf"), [])
        self._lock = threading.Lock()

    def __call__(self) -> list[RealtimeView]:
        with self._lock:
            fetched_at, views = self._cached
            if time.monotonic() - fetched_at > self._ttl:
                views = self._fetch()
                self._cached = (time.monotonic(), views)
            return views

    def _fetch(self) -> list[RealtimeView]:
        views = []
        for overlord in self._overlords():
            try:
                tasks = self._http.get(f"{overlord}/druid/indexer/v1/tasks",
                                       params={"state": "running", "type": TASK_TYPE}).json()
            except (httpx.HTTPError, ValueError) as error:
                log.warning("overlord %s did not list its running tasks: %s", overlord, error)
                continue
            for task in tasks:
                location = task.get("location") or {}
                if (location.get("port") or -1) <= 0:
                    continue
                url = f"http://{location['host']}:{location['port']}{CHAT_PREFIX}/{task['id']}/realtime"
                try:
                    response = self._http.get(url)
                except httpx.HTTPError:
                    continue  # a peon that just finished: its rows are committed or were never going to be
                if response.status_code == 200:
                    views.append(RealtimeView.from_json(response.json()))
        return views
