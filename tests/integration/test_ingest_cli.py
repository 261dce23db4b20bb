"""`sluice ingest`: a spec file submitted to a running node, followed to its end; the exit code says how it ended."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from sluice.ingest_cli import ingest
from tests.integration.test_batch_ingestion import by_channel, ndjson, rows, task, totals


def run_cli(spec: dict | str, tmp_path: Path, url: str, suffix: str = ".json") -> tuple[int, str]:
    path = tmp_path / f"spec{suffix}"
    path.write_text(spec if isinstance(spec, str) else json.dumps(spec))
    out = io.StringIO()
    code = ingest(path, url, console=Console(file=out, width=200), timeout_s=240)
    return code, out.getvalue()


def test_a_spec_file_is_ingested_and_its_row_stats_printed(http, node, tmp_path):
    events = rows(250)
    code, out = run_cli(task("cli_ingest", {"type": "inline", "data": ndjson(events)}, {"type": "json"}),
                        tmp_path, str(http.base_url))

    assert code == 0, out
    assert "SUCCESS" in out and "processed" in out and "250" in out
    assert by_channel(http, "cli_ingest") == totals(events)


def test_a_failed_task_exits_1_with_its_reason_and_a_refused_spec_exits_2(http, tmp_path):
    failing = task("cli_fail", {"type": "inline", "data": "{bad\n"}, {"type": "json"},
                   tuning={"maxParseExceptions": 0})
    code, out = run_cli(failing, tmp_path, str(http.base_url))
    assert code == 1 and "Max parse exceptions[0] exceeded" in out

    bad = task("cli_bad", {"type": "inline", "data": "{}"}, {"type": "csv"})
    code, out = run_cli(bad, tmp_path, str(http.base_url))
    assert code == 2 and "columns are required" in out
