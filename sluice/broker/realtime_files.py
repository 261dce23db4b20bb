"""A broker's copies of the persist files of tasks that run on other machines.

A peon lists its unpublished rows' persist files by their paths on its worker (`RealtimeView.files`); a broker
that shares no disk with that worker fetches each file once over the task's chat API
(`GET …/chat/{id}/realtime/file?path=…`) and queries its copy. A persist file is written once under a name of its
own and deleted after its sequence is published, so a copy never goes stale: it is kept while a view lists the
file and deleted once none does.

A file the peon no longer has was deleted after its sequence's publish committed. The broker reads the committed
state after it fetched the views (sluice/broker/broker.py), so that state holds the publish, and the view, which
would not count anyway, is left out. A peon that cannot be reached for a file is taken as one that cannot be reached
for its views: a peon that just finished, whose rows are committed or never will be.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import httpx

from sluice.realtime import CHAT_PREFIX, RealtimeView

log = logging.getLogger(__name__)


class RealtimeFileCache:
    def __init__(self, directory: Path, http: httpx.Client) -> None:
        self.directory = directory
        self._http = http

    def local_views(self, task_url: str, task_id: str, views: list[RealtimeView]) -> list[RealtimeView]:
        """The task's views with each file replaced by a local copy; a view with a file the peon no longer has is
        left out."""
        local = []
        for view in views:
            try:
                files = tuple(str(self._copy(task_url, task_id, path)) for path in view.files)
            except _Gone as gone:
                log.info("task %s no longer has %s: its sequence %s was published", task_id, gone, view.sequence_name)
                continue
            except httpx.HTTPError as error:
                log.warning("task %s did not send its persist files: %s", task_id, error)
                continue
            local.append(replace(view, files=files))
        return local

    def retain(self, views: list[RealtimeView]) -> None:
        """Delete the copies no view lists any more (their sequences were published)."""
        listed = {Path(file) for view in views for file in view.files}
        for copy in self.directory.glob("*/*.parquet"):
            if copy not in listed:
                copy.unlink(missing_ok=True)
        for folder in self.directory.glob("*"):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()

    def _copy(self, task_url: str, task_id: str, path: str) -> Path:
        target = self.directory / task_id / (hashlib.sha256(path.encode()).hexdigest()[:32] + ".parquet")
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        url = f"{task_url}{CHAT_PREFIX}/{task_id}/realtime/file"
        with self._http.stream("GET", url, params={"path": path}) as response:
            if response.status_code != 200:
                raise _Gone(path)
            # written aside and renamed, so that a query never reads half a copy
            handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".part")
            try:
                with os.fdopen(handle, "wb") as out:
                    for chunk in response.iter_bytes():
                        out.write(chunk)
                shutil.move(temporary, target)
            finally:
                Path(temporary).unlink(missing_ok=True)
        return target


class _Gone(Exception):
    """The peon no longer lists or has the file."""
