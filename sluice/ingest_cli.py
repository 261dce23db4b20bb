"""`sluice ingest SPEC`: submit a batch ingestion to a running Sluice, follow it, and say how it ended.

A JSON file is a task (`index_parallel`, `index`, `compact`, …) for `POST /druid/indexer/v1/task`; a `.sql` file is
an INSERT or REPLACE statement for `POST /druid/v2/sql/task`. While the task runs, a progress bar shows the rows,
bytes and splits its readers have read (the task report's `progress`); at the end the row stats are printed and
the exit code says whether the task succeeded (0), failed (1) or could not be submitted (2).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

SUCCEEDED, FAILED, REFUSED = 0, 1, 2
_POLL_S = 0.5


def ingest(spec_path: Path, url: str, console: Console | None = None, timeout_s: float | None = None) -> int:
    """The exit code: 0 when the task succeeded, 1 when it failed, 2 when it could not be submitted."""
    console = console or Console()
    with httpx.Client(base_url=url.rstrip("/"), timeout=60) as http:
        try:
            task_id = _submit(http, spec_path)
        except (httpx.HTTPError, OSError, ValueError) as error:
            console.print(f"[red]could not submit {spec_path}:[/red] {error}")
            return REFUSED
        console.print(f"task [bold]{task_id}[/bold] submitted to {http.base_url.copy_with(userinfo=b'')}")
        status = _follow(http, task_id, console, timeout_s)
        report = _report(http, task_id)
    _print_stats(console, report)
    if status.get("statusCode") == "SUCCESS":
        console.print(f"[green]SUCCESS[/green] in {status.get('duration', -1) / 1000:.1f} s")
        return SUCCEEDED
    console.print(f"[red]{status.get('statusCode', 'UNKNOWN')}[/red]: {status.get('errorMsg') or 'no reason given'}")
    return FAILED


def _submit(http: httpx.Client, spec_path: Path) -> str:
    text = spec_path.read_text()
    if spec_path.suffix.lower() == ".sql":
        response = http.post("/druid/v2/sql/task", json={"query": text})
        key = "taskId"
    else:
        response = http.post("/druid/indexer/v1/task", json=json.loads(text))
        key = "task"
    if response.status_code >= 400:
        body = _json(response)
        raise ValueError(f"HTTP {response.status_code}: {body.get('errorMessage') or body.get('error') or response.text}")
    return str(response.json()[key])


def _follow(http: httpx.Client, task_id: str, console: Console, timeout_s: float | None) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s if timeout_s else None
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("splits · {task.fields[rows]:,} rows · {task.fields[bytes]}"), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task("reading", total=None, rows=0, bytes="0 B")
        while True:
            status = http.get(f"/druid/indexer/v1/task/{task_id}/status").json().get("status", {})
            if status.get("statusCode") not in (None, "RUNNING"):
                return status
            report = _report(http, task_id)
            live = report.get("progress") or {}
            progress.update(bar, total=live.get("splitsAssigned") or None, completed=live.get("splitsDone", 0),
                            rows=live.get("rowsRead", 0), bytes=_size(live.get("bytesRead", 0)),
                            description=str(report.get("ingestionState", "reading")).lower())
            if deadline is not None and time.monotonic() > deadline:
                return {"statusCode": "RUNNING", "errorMsg": f"still running after {timeout_s} s (not stopped)"}
            time.sleep(_POLL_S)


def _report(http: httpx.Client, task_id: str) -> dict[str, Any]:
    response = http.get(f"/druid/indexer/v1/task/{task_id}/reports")
    if response.status_code != 200:
        return {}
    return (_json(response).get("ingestionStatsAndErrors") or {}).get("payload") or {}


def _print_stats(console: Console, report: dict[str, Any]) -> None:
    stats = (report.get("rowStats") or {}).get("buildSegments") or {}
    if not stats:
        return
    table = Table(title="rowStats.buildSegments")
    for name in stats:
        table.add_column(name, justify="right")
    table.add_row(*(f"{value:,}" for value in stats.values()))
    console.print(table)


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
