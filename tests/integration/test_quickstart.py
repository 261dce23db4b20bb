"""`sluice quickstart --exit`, run as a user runs it: the printed SQL answers equal those computed from the sample.

The quickstart starts its own dev Kafka broker, Sluice node and Spark in a child process, so this test needs
neither the session's broker nor its SparkSession.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from sluice.dev.quickstart import QUERIES
from sluice.dev.sample_data import generate
from tests.integration.harness import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

EVENTS = 20_000
SLUICE = Path(sys.executable).parent / "sluice"  # the venv's console script, as `make install` makes it
TIMEOUT = 600  # Spark's start, a first cold job and the example's 30 s taskDuration, on a busy 2-core machine


def printed_rows(output: str, title: str) -> list[list[str]]:
    """The body cells of the table printed under `title` (rich's box drawing, one table row per line)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == title)
    rows = []
    for line in lines[start:]:
        if line.startswith("└"):
            return rows
        if line.startswith("│"):
            rows.append([cell.strip() for cell in line.strip("│").split("│")])
    raise AssertionError(f"the table {title!r} has no end:\n{output}")


def number(cell: str) -> int:
    return int(cell.replace(",", ""))


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The standard output of one `sluice quickstart --exit` run, after checking it exited 0."""
    work_dir = tmp_path_factory.mktemp("quickstart")
    command = [str(SLUICE), "quickstart", "--exit", "--work-dir", str(work_dir), "--port", str(free_port()),
               "--events", str(EVENTS)]
    # wide enough that rich wraps no cell; UTF-8 so it draws its usual box characters into a pipe
    env = {**os.environ, "COLUMNS": "250", "PYTHONIOENCODING": "utf-8"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, encoding="utf-8", env=env, timeout=TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as expired:
        raise AssertionError(f"sluice quickstart did not exit within {TIMEOUT}s:\n{expired.stdout}") from None
    assert done.returncode == 0, f"exit code {done.returncode}\n{done.stdout}\n{done.stderr[-5000:]}"
    return done.stdout


def valid_events() -> list[dict]:
    return [r.event for r in generate(EVENTS) if r.kind == "valid"]


def test_the_quickstart_produces_the_sample_and_prints_every_query(quickstart):
    bad = EVENTS - len(valid_events())
    assert f"Produced {EVENTS:,} Wikipedia edits to topic wikipedia ({bad:,} of them bad records)" in quickstart
    assert "Submitted supervisor wikipedia" in quickstart
    for title in QUERIES:
        assert printed_rows(quickstart, title), f"no rows under {title!r}"


def test_edits_per_channel_are_the_top_channels_of_the_sample(quickstart):
    per_channel: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for event in valid_events():
        per_channel[event["channel"]][0] += 1
        per_channel[event["channel"]][1] += event["added"]
    rows = printed_rows(quickstart, "Edits per channel (top 5)")
    assert {channel: [number(edits), number(added)] for channel, edits, added in rows} == {
        channel: per_channel[channel] for channel, _, _ in rows}
    # ties may swap channels of equal counts, never the counts
    assert [number(edits) for _, edits, _ in rows] == sorted((e for e, _ in per_channel.values()), reverse=True)[:5]
    assert number(rows[0][1]) > 0


def test_edits_per_hour_are_the_first_hours_of_the_sample(quickstart):
    per_hour: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for event in valid_events():
        hour = event["time"][:13] + ":00:00.000Z"
        per_hour[hour][0] += 1
        per_hour[hour][1] += event["delta"]
    rows = printed_rows(quickstart, "Edits per hour (first 6 hours)")
    assert [[hour, number(edits), number(delta)] for hour, edits, delta in rows] == [
        [hour, *per_hour[hour]] for hour in sorted(per_hour)[:6]]


def test_most_edited_pages_by_robots_are_those_of_the_sample(quickstart):
    per_page = Counter(event["page"] for event in valid_events() if event["isRobot"])
    rows = printed_rows(quickstart, "Most edited pages by robots")
    assert {page: number(edits) for page, edits in rows} == {page: per_page[page] for page, _ in rows}
    assert [number(edits) for _, edits in rows] == [n for _, n in per_page.most_common(5)]
