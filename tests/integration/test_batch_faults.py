"""Batch ingestion under faults: nothing a failed or killed task read becomes visible, and running it again gives
exact answers. The whole `sluice start` process is killed with SIGKILL while the task writes; an input that keeps
failing fails the task after bounded retries, with the input named."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.integration.harness import sql, wait_for
from tests.integration.processes import SluiceProcess
from tests.integration.test_batch_ingestion import by_channel, rows, run, task, totals

TASKS = "/druid/indexer/v1"


def write_files(directory: Path, files: int, per_file: int) -> list[dict[str, Any]]:
    directory.mkdir(parents=True)
    events = []
    for i in range(files):
        part = rows(per_file, seed=i)
        events += part
        (directory / f"part-{i:02d}.json").write_text("\n".join(json.dumps(e) for e in part) + "\n")
    return events


def test_kill_9_while_a_batch_task_writes_publishes_nothing_and_a_rerun_is_exact(tmp_path: Path) -> None:
    events = write_files(tmp_path / "input", files=8, per_file=40_000)
    payload = task("batch_kill9", {"type": "local", "baseDir": str(tmp_path / "input"), "filter": "*.json"},
                   {"type": "json"}, io={"appendToExisting": True})
    uri = f"sqlite:///{tmp_path / 'metadata.db'}"
    node = SluiceProcess("start", tmp_path, uri, "--spark-master", "local[2,4]")
    try:
        node.start(timeout=300)
        with node.client() as http:
            task_id = http.post(f"{TASKS}/task", json=payload).json()["task"]

            def progress() -> int:
                """Rows read so far; 0 until the task runs (its report answers 404 while it waits to start)."""
                report = http.get(f"{TASKS}/task/{task_id}/reports").json()
                return report.get("ingestionStatsAndErrors", {}).get("payload", {}).get("progress", {}).get(
                    "rowsRead", 0)

            wait_for(lambda: progress() > 0, 120, "the readers to hand rows to Spark")
        node.kill()  # SIGKILL: the read, the persist or the merge is half done

        node = SluiceProcess("start", tmp_path, uri, "--spark-master", "local[2,4]")
        node.start(timeout=300)
        with node.client() as http:
            status = http.get(f"{TASKS}/task/{task_id}/status").json()["status"]
            assert status["statusCode"] == "FAILED" and "stopped before it finished" in status["errorMsg"]
            assert sql(http, "SELECT COUNT(*) AS n FROM sys.segments WHERE datasource = 'batch_kill9'") == [{"n": 0}]
            run(http, payload)  # the same append, run again: every row once
            assert by_channel(http, "batch_kill9") == totals(events)
    finally:
        node.stop()


class _AlwaysFailing(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(503)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def failing_url() -> Any:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _AlwaysFailing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/events.json"
    server.shutdown()


def test_an_input_that_keeps_failing_fails_the_task_naming_it_and_publishes_nothing(http, failing_url) -> None:
    good = rows(50)
    result = run(http, task("batch_http_fail", {"type": "combining", "delegates": [
        {"type": "inline", "data": "\n".join(json.dumps(e) for e in good)},
        {"type": "http", "uris": [failing_url]}]}, {"type": "json"}), expect="FAILED")

    assert failing_url in result["status"]["errorMsg"]
    assert sql(http, "SELECT COUNT(*) AS n FROM sys.segments WHERE datasource = 'batch_http_fail'") == [{"n": 0}]
