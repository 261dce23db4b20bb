"""`sluice stream run JOB`: run a stream job (``job.json``, or ``job.py`` building one with the DSL), with a live
status line.

A job that writes to a data source, or reads one as a table, runs where data sources are: it is submitted to a Sluice node (``--url``) as a
supervisor, and the line follows its status there (Ctrl-C stops following; the job runs on until it is suspended
or terminated). Any other job runs here, in this process's Spark, its checkpoint under ``--checkpoint-dir``, until
Ctrl-C or ``--duration``.

Exit codes: 0 when the job ran (or was submitted) and stopped as asked, 1 when it failed, 2 when it could not
start (a bad job, a changed job on an old checkpoint without ``--reset``, a node that refused it).
"""

from __future__ import annotations

import json
import runpy
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.live import Live

from sluice.spec.errors import SpecError
from sluice.stream.builder import StreamBuilder
from sluice.stream.topology import StreamJob, StreamJobError, needs_node

RAN, FAILED, REFUSED = 0, 1, 2
SUPERVISOR = "/druid/indexer/v1/supervisor"


def load_job(path: Path) -> StreamJob:
    """The job a ``.json`` spec describes, or the one a ``.py`` file builds (a ``StreamJob`` or a ``StreamBuilder``
    at module level)."""
    if path.suffix.lower() == ".json":
        from sluice.stream.job_spec import parse_stream_job_spec

        return parse_stream_job_spec(json.loads(path.read_text())).to_job()
    namespace = runpy.run_path(str(path))
    jobs = [v for v in namespace.values() if isinstance(v, StreamJob)] or \
        [v.build() for v in namespace.values() if isinstance(v, StreamBuilder)]
    if len(jobs) != 1:
        raise StreamJobError("job", f"{path} must define exactly one StreamJob or StreamBuilder, found {len(jobs)}")
    return jobs[0]


def run(path: Path, *, url: str, checkpoint_dir: Path, reset: bool = False, duration_s: float | None = None,
        spark_master: str = "local[*,4]", console: Console | None = None) -> int:
    console = console or Console()
    try:
        job = load_job(path)
    except (StreamJobError, SpecError, OSError, ValueError) as error:
        console.print(f"[red]{path}:[/red] {error}")
        return REFUSED
    if needs_node(job):
        return _submit_and_follow(job, url, reset, duration_s, console)
    return _run_here(job, checkpoint_dir, reset, duration_s, spark_master, console)


def _run_here(job: StreamJob, checkpoint_dir: Path, reset: bool, duration_s: float | None, spark_master: str,
              console: Console) -> int:
    from sluice.stream.runner import start_job
    from sluice.task.spark_session import get_or_create

    spark = get_or_create(spark_master)
    try:
        running = start_job(spark, job, checkpoint_dir / job.job_id, reset=reset)
    except StreamJobError as error:
        console.print(f"[red]{error}[/red]")
        return REFUSED
    console.print(f"stream job [bold]{job.job_id}[/bold] running; checkpoint in {checkpoint_dir / job.job_id}")
    deadline = time.monotonic() + duration_s if duration_s is not None else None
    try:
        with Live(console=console, auto_refresh=False, transient=False) as live:
            while running.query.isActive and (deadline is None or time.monotonic() < deadline):
                live.update(status_line(running.status().to_report()), refresh=True)
                time.sleep(1.0)
            live.update(status_line(running.status().to_report()), refresh=True)
    except KeyboardInterrupt:
        pass
    error = running.exception()
    running.stop()
    if error:
        console.print(f"[red]FAILED[/red]: {error}")
        return FAILED
    return RAN


def _submit_and_follow(job: StreamJob, url: str, reset: bool, duration_s: float | None, console: Console) -> int:
    from sluice.stream.job_spec import job_to_json

    try:
        spec = job_to_json(job)
    except StreamJobError as error:
        console.print(f"[red]{error}[/red] (a job writing to a data source runs in a Sluice node)")
        return REFUSED
    with httpx.Client(base_url=url.rstrip("/"), timeout=60) as http:
        shown = http.base_url.copy_with(userinfo=b"")  # credentials in the URL are not for the screen
        try:
            response = http.post(SUPERVISOR, json=spec)
            if response.status_code == 200 and reset:
                response = http.post(f"{SUPERVISOR}/{job.job_id}/reset")
        except httpx.HTTPError as error:
            console.print(f"[red]could not reach {shown}:[/red] {error}")
            return REFUSED
        if response.status_code != 200:
            console.print(f"[red]HTTP {response.status_code}:[/red] {response.json().get('error', response.text)}")
            return REFUSED
        console.print(f"stream job [bold]{job.job_id}[/bold] submitted to {shown} (Ctrl-C stops following; "
                      f"POST {SUPERVISOR}/{job.job_id}/terminate stops the job)")
        deadline = time.monotonic() + duration_s if duration_s is not None else None
        try:
            with Live(console=console, auto_refresh=False) as live:
                while deadline is None or time.monotonic() < deadline:
                    payload = http.get(f"{SUPERVISOR}/{job.job_id}/status").json().get("payload", {})
                    live.update(f"{payload.get('state', '?')} · " + status_line(payload.get("streamJob") or {}),
                                refresh=True)
                    time.sleep(1.0)
        except KeyboardInterrupt:
            pass
    return RAN


def status_line(figures: dict[str, Any]) -> str:
    """One line of a job's report: what it read, how fast, what it dropped, how big its state is."""
    return (f"batch {figures.get('lastBatchId', '-')} · {figures.get('processed', 0):,} read "
            f"({figures.get('inputRowsPerSecond', 0):,.0f}/s) · {figures.get('unparseable', 0):,} unparseable · "
            f"{figures.get('lateRecordsDropped', 0):,} late · state {figures.get('stateRows', 0):,} rows "
            f"{figures.get('stateBytes', 0) / 1e6:.1f} MB · watermark {figures.get('watermark') or '-'}")
