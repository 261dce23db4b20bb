"""A broker process's view of the overlord (Druid's OverlordClient, as the broker's SystemSchema uses it).

A broker running apart from the overlord finds it through discovery and asks it over HTTP: supervisor
statuses (`GET /druid/indexer/v1/supervisor?system`) and task statuses (`GET /druid/indexer/v1/tasks`) for
the sys tables, and the running streaming tasks, whose peons each tell what they have persisted
(`GET …/chat/{id}/realtime`) for realtime queries, and send those files (`realtime_files.py`: the broker and the
workers share no disk). `None` means no overlord answered: the caller shows what the metadata store holds instead.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from sluice.broker.realtime_files import RealtimeFileCache
from sluice.realtime import CHAT_PREFIX, RealtimeView

log = logging.getLogger(__name__)


class OverlordClient:
    def __init__(self, overlords: Callable[[], list[str]], realtime_dir: Path, timeout_s: float = 5.0,
                 auth: tuple[str, str] | None = None) -> None:
        """`overlords` lists the base URLs of the live overlords; `realtime_dir` keeps the copies of the tasks'
        persist files; `auth`, the escalator's credentials."""
        self._overlords = overlords
        self._http = httpx.Client(timeout=timeout_s, auth=auth, follow_redirects=True)  # a standby sends to the leader
        self._files = RealtimeFileCache(realtime_dir, self._http)

    def supervisor_statuses(self) -> list[dict[str, Any]] | None:
        """SupervisorStatus JSON of every supervisor."""
        return self._get("/druid/indexer/v1/supervisor", {"system": ""})

    def task_statuses(self) -> list[dict[str, Any]] | None:
        """TaskStatusPlus JSON of every task, with where the running ones run."""
        return self._get("/druid/indexer/v1/tasks", {})

    def realtime_views(self) -> list[RealtimeView]:
        """What the running streaming tasks have persisted; a task that does not answer has none to show (a peon
        that just finished: its rows are committed, or never will be)."""
        tasks = self._get("/druid/indexer/v1/tasks", {"state": "running"}) or []
        views = []
        for task in tasks:
            location = task.get("location") or {}
            if (location.get("port") or -1) <= 0:
                continue
            task_url = f"http://{location['host']}:{location['port']}"
            try:
                response = self._http.get(f"{task_url}{CHAT_PREFIX}/{task['id']}/realtime")
            except httpx.HTTPError:
                continue
            if response.status_code == 200:  # a task that holds no realtime rows (batch, noop) answers 404
                server = f"{location['host']}:{location['port']}"
                views += self._files.local_views(task_url, task["id"], [
                    replace(RealtimeView.from_json(view), server=server) for view in response.json()])
        self._files.retain(views)
        return views

    def _get(self, path: str, params: dict[str, str]) -> Any:
        """The answer of the first live overlord that gives one."""
        for overlord in self._overlords():
            try:
                response = self._http.get(f"{overlord}{path}", params=params)
                response.raise_for_status()
                return response.json()
            except (httpx.HTTPError, ValueError) as error:
                log.warning("overlord %s did not answer %s: %s", overlord, path, error)
        return None
