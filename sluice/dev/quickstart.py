"""`sluice quickstart`: the whole path on embedded defaults, for a first look.

Starts the dev Kafka broker and an all-in-one Sluice node, produces the bundled Wikipedia-edits
sample (bad records included) to a 4-partition topic, submits the example supervisor spec over
the real HTTP API, waits with a progress bar until every valid event is queryable, and prints a
few Druid SQL answers. It talks to Sluice only through Druid's REST API, as a user would.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sluice.dev.sample_data import generate, produce
from sluice.dev.tansu import DevKafkaBroker
from sluice.server.node import Node, NodeConfig

EXAMPLE_SPEC = Path(__file__).resolve().parents[2] / "examples" / "wikipedia-kafka-supervisor.json"
TOPIC = "wikipedia"
PARTITIONS = 4

QUERIES = {
    "Edits per channel (top 5)": 'SELECT channel, SUM("count") AS edits, SUM(added) AS added FROM wikipedia '
                                 'GROUP BY channel ORDER BY edits DESC LIMIT 5',
    "Edits per hour (first 6 hours)": "SELECT FLOOR(__time TO HOUR) AS \"hour\", SUM(\"count\") AS edits, "
                                      "SUM(delta) AS delta FROM wikipedia GROUP BY 1 ORDER BY 1 LIMIT 6",
    "Most edited pages by robots": 'SELECT page, SUM("count") AS edits FROM wikipedia WHERE isRobot = \'true\' '
                                   'GROUP BY page ORDER BY edits DESC LIMIT 5',
}


def run(work_dir: Path, port: int, events: int, exit_after: bool) -> None:
    console = Console()
    root = work_dir / "quickstart"
    shutil.rmtree(root, ignore_errors=True)  # the dev broker keeps nothing, so neither may the metadata
    root.mkdir(parents=True)
    with DevKafkaBroker(log_dir=root) as broker:
        broker.create_topic(TOPIC, PARTITIONS)
        records = generate(events)
        valid = sum(r.kind == "valid" for r in records)
        produce(broker.bootstrap_servers, TOPIC, records, PARTITIONS)
        console.print(f"Produced [bold]{len(records):,}[/] Wikipedia edits to topic [bold]{TOPIC}[/] "
                      f"({len(records) - valid:,} of them bad records) on {broker.bootstrap_servers}")
        node = Node(NodeConfig(port=port, work_dir=root))
        with console.status("Starting Sluice (Spark takes a few seconds)…"):
            node.start()
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=base, timeout=60) as http:
                spec = json.loads(EXAMPLE_SPEC.read_text())
                spec["spec"]["ioConfig"]["consumerProperties"]["bootstrap.servers"] = broker.bootstrap_servers
                response = http.post("/druid/indexer/v1/supervisor", json=spec)
                response.raise_for_status()
                console.print(f"Submitted supervisor [bold]{response.json()['id']}[/] "
                              f"(POST {base}/druid/indexer/v1/supervisor)")
                _wait_until_queryable(http, valid, console)
                for title, query in QUERIES.items():
                    _print_query(http, title, query, console)
            console.print(f"\nSluice serves Druid's API on [bold]{base}[/] — try:\n"
                          f"  curl -XPOST -H'Content-Type: application/json' {base}/druid/v2/sql "
                          f"-d '{{\"query\":\"SELECT COUNT(*) FROM wikipedia\"}}'")
            if not exit_after:
                console.print("Press Ctrl-C to stop.")
                node.lifecycle.join()
        finally:
            node.stop()


def _wait_until_queryable(http: httpx.Client, expected: int, console: Console) -> None:
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("Ingesting → queryable", total=expected)
        while True:
            ingested = _sum_count(http)
            progress.update(bar, completed=ingested)
            if ingested >= expected:
                return
            time.sleep(1)


def _sum_count(http: httpx.Client) -> int:
    response = http.post("/druid/v2/sql", json={"query": 'SELECT SUM("count") AS n FROM wikipedia',
                                                "resultFormat": "array"})
    if response.status_code != 200:
        return 0  # the data source appears with its first published segment
    return response.json()[0][0] or 0


def _print_query(http: httpx.Client, title: str, query: str, console: Console) -> None:
    response = http.post("/druid/v2/sql", json={"query": query, "resultFormat": "array", "header": True})
    response.raise_for_status()
    header, *rows = response.json()
    table = Table(title=f"{title}\n[dim]{query}[/]", title_justify="left")
    for column in header:
        table.add_column(column)
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    console.print(table)


def _cell(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)
