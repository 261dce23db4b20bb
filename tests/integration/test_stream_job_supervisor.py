"""The shipped stream job, `examples/stream-page-counts.json`, submitted as a supervisor: Kafka → Spark's windowed
count on RocksDB → segments → Druid SQL, exactly once through suspend and resume and through `kill -9` of the
whole node; and bad specs answered with 400 naming the field."""

from __future__ import annotations

import io
import json
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from rich.console import Console

from sluice import stream_cli
from sluice.dev.sample_data import produce
from sluice.metadata.store import MetadataStore
from tests.integration.harness import wait_for
from tests.integration.processes import SluiceProcess

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stream-page-counts.json"
SUPERVISOR = "/druid/indexer/v1/supervisor"
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
PAGES = ["home", "cart", "search", "help"]


def example_spec(bootstrap: str, topic: str, data_source: str, **io: Any) -> dict[str, Any]:
    """The shipped example as written, but for the broker's address (and a topic and data source of the test's)."""
    text = EXAMPLE.read_text().replace("localhost:9092", bootstrap)
    spec = json.loads(text)
    spec["id"] = data_source
    spec["spec"]["ioConfig"].update(topic=topic, **io)
    spec["spec"]["sink"]["dataSource"] = data_source
    return spec


def clicks(n: int, first_second: int, last_second: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    return [{"ts": (START + timedelta(seconds=rng.uniform(first_second, last_second))).isoformat()
             .replace("+00:00", "Z"), "user": f"u{rng.randrange(50)}", "page": rng.choice(PAGES)} for _ in range(n)]


def send(bootstrap: str, topic: str, events: list[dict[str, str]], partitions: int = 2) -> None:
    """Round-robin over the partitions, each one's last record flushed alone (the dev broker then reports exact
    end offsets)."""
    produce(bootstrap, topic, [SimpleNamespace(value=json.dumps(e).encode()) for e in events], partitions)


def closed_window_counts(events: list[dict[str, str]], lateness_s: int = 10) -> Counter:
    """(window start, page) -> count for every 1-minute window the latest event has closed."""
    stamps = [datetime.fromisoformat(e["ts"].replace("Z", "+00:00")) for e in events]
    watermark = max(stamps) - timedelta(seconds=lateness_s)
    counts: Counter = Counter()
    for event, stamp in zip(events, stamps):
        start = stamp.replace(second=0, microsecond=0)
        if start + timedelta(minutes=1) <= watermark:
            counts[(start.isoformat().replace("+00:00", ".000Z"), event["page"])] += 1
    return counts


def stored_counts(http: httpx.Client, data_source: str) -> Counter:
    """What Druid SQL answers; nothing while the data source has no segment yet."""
    response = http.post("/druid/v2/sql", json={
        "query": f"SELECT __time, page, SUM(cnt) AS cnt FROM {data_source} GROUP BY 1, 2"})
    rows = response.json() if response.status_code == 200 else []
    return Counter({(r["__time"], r["page"]): r["cnt"] for r in rows})


def metric(http: httpx.Client, name: str, data_source: str) -> float:
    """The sum of a Prometheus metric's samples for one data source (-1 when there is none)."""
    samples = [float(line.rsplit(" ", 1)[1]) for line in http.get("/metrics").text.splitlines()
               if line.startswith(name + "{") and f'dataSource="{data_source}"' in line]
    return sum(samples) if samples else -1


def test_page_counts_example_runs_as_a_supervisor_exactly_once_through_suspend_and_resume(node, http,
                                                                                          kafka_broker) -> None:
    kafka_broker.create_topic("clicks", 2)
    events = clicks(3_000, 0, 300, seed=1) + clicks(1, 600, 600, seed=2)  # 5 minutes, then one at minute 10
    send(kafka_broker.bootstrap_servers, "clicks", events)
    spec = example_spec(kafka_broker.bootstrap_servers, "clicks", "page_counts")
    response = http.post(SUPERVISOR, json=spec)
    assert response.status_code == 200, response.text
    assert response.json() == {"id": "page_counts"}

    expected = closed_window_counts(events)
    assert len(expected) == 5 * len(PAGES)
    wait_for(lambda: stored_counts(http, "page_counts") == expected, 120, "the five closed minutes in SQL")
    status = http.get(f"{SUPERVISOR}/page_counts/status").json()["payload"]
    assert (status["state"], status["type"], status["stream"]) == ("RUNNING", "stream", "clicks")
    wait_for(lambda: http.get(f"{SUPERVISOR}/page_counts/status").json()["payload"]["streamJob"].get("processed")
             == len(events), 30, "the status to count every event")
    assert "page_counts" in http.get(SUPERVISOR).json()
    wait_for(lambda: metric(http, "druid_ingest_events_processed_total", "page_counts") == len(events), 30,
             "the job's metrics")
    assert metric(http, "druid_ingest_stream_state_rows", "page_counts") >= 0
    assert metric(http, "druid_ingest_rows_output_total", "page_counts") == len(expected)

    # suspended, the job's task stops; events arriving meanwhile are counted once it resumes, with the open
    # window of minute 10 (its state kept in the checkpoint) counted whole
    assert http.post(f"{SUPERVISOR}/page_counts/suspend").json()["suspended"] is True
    wait_for(lambda: http.get(f"{SUPERVISOR}/page_counts/status").json()["payload"]["activeTasks"] == [], 60,
             "the task to stop")
    more = clicks(1_000, 600, 780, seed=3) + clicks(1, 1200, 1200, seed=4)
    send(kafka_broker.bootstrap_servers, "clicks", more)
    assert http.post(f"{SUPERVISOR}/page_counts/resume").json()["suspended"] is False
    expected = closed_window_counts(events + more)
    assert len(expected) == 8 * len(PAGES)
    wait_for(lambda: stored_counts(http, "page_counts") == expected, 120, "minutes 10 to 12 in SQL")

    history = http.get(f"{SUPERVISOR}/page_counts/history").json()
    assert [entry["spec"]["suspended"] for entry in history] == [False, True, False]
    assert http.post(f"{SUPERVISOR}/page_counts/terminate").status_code == 200
    assert stored_counts(http, "page_counts") == expected


@pytest.mark.parametrize(("change", "status", "error"), [
    (lambda s: s["spec"]["operators"][0].update(fields=["pages"]), 400,
     "spec.operators[0]: field 'pages': no such field"),
    (lambda s: s["spec"]["operators"].insert(2, {"type": "distinct", "fields": ["user"]}), 400,
     "spec.operators[2].within: Field required"),
    (lambda s: s["spec"]["operators"].pop(0), 400, "spec.operators[0]: a window must follow key_by"),
    (lambda s: s["spec"]["operators"][1].update(emit="update"), 400,
     "spec.sink: dataSource 'page_counts_bad' needs rows that are final"),
    (lambda s: s["spec"]["operators"].append({"type": "flatten"}), 400, "spec.operators[3]"),
])
def test_a_bad_stream_job_is_refused_naming_the_field(http, change, status: int, error: str) -> None:
    spec = example_spec("127.0.0.1:1", "clicks-bad", "page_counts_bad")
    change(spec)
    response = http.post(SUPERVISOR, json=spec)
    assert response.status_code == status
    assert response.json()["error"].startswith(error), response.json()


def test_kill_9_of_the_node_mid_stream_loses_and_repeats_no_window(kafka_broker, tmp_path: Path) -> None:
    topic, ds = "clicks-kill9", "page_counts_kill9"
    kafka_broker.create_topic(topic, 2)
    events = clicks(12_000, 0, 1_800, seed=9)
    events.sort(key=lambda e: e["ts"])  # in time order, so every batch closes windows and publishes
    send(kafka_broker.bootstrap_servers, topic, events)
    spec = example_spec(kafka_broker.bootstrap_servers, topic, ds, maxRecordsPerTrigger=1_000)
    uri = f"sqlite:///{tmp_path / 'metadata.db'}"
    metadata = MetadataStore(uri)

    def committed_batches() -> int:
        stored = metadata.get_stream_offsets(ds)
        return stored.offsets.get(0, 0) if stored else 0

    node = SluiceProcess("start", tmp_path, uri, "--spark-master", "local[2,4]").start(timeout=120)
    try:
        with node.client() as http:
            assert http.post(SUPERVISOR, json=spec).status_code == 200
            wait_for(lambda: committed_batches() >= 4, 180, "a few batches published")
        node.kill()  # SIGKILL mid-stream: a batch may be half written, half published, or published but not
        before = committed_batches()  # marked done in Spark's checkpoint
        assert 4 <= before < 12

        node = SluiceProcess("start", tmp_path, uri, "--spark-master", "local[2,4]").start(timeout=120)
        with node.client() as http:
            expected = closed_window_counts(events)
            wait_for(lambda: stored_counts(http, ds) == expected, 240, "every closed window, once")
            assert http.post(f"{SUPERVISOR}/{ds}/terminate").status_code == 200
    finally:
        node.stop()
        metadata.close()


def test_the_same_job_in_the_python_dsl_runs_from_the_cli_on_the_node(node, http, kafka_broker,
                                                                     tmp_path: Path) -> None:
    kafka_broker.create_topic("clicks-dsl", 2)
    events = clicks(500, 0, 120, seed=5) + clicks(1, 300, 300, seed=6)
    send(kafka_broker.bootstrap_servers, "clicks-dsl", events)
    job_file = tmp_path / "page_counts.py"
    job_file.write_text(f'''
from sluice.stream.builder import StreamBuilder, tumbling

builder = StreamBuilder("page_counts_dsl")
(builder.source("clicks-dsl", bootstrap_servers="{kafka_broker.bootstrap_servers}",
                columns={{"ts": "string", "user": "string", "page": "string"}}, timestamp=("ts", "iso"))
    .key_by("page")
    .window(tumbling("PT1M", lateness="PT10S"))
    .count("cnt")
    .to_data_source("page_counts_dsl"))
''')
    console = Console(file=io.StringIO(), width=200)
    url = f"http://127.0.0.1:{node.config.port}"
    assert stream_cli.run(job_file, url=url, checkpoint_dir=tmp_path, duration_s=1, console=console) == 0
    assert "stream job page_counts_dsl submitted" in console.file.getvalue()
    wait_for(lambda: stored_counts(http, "page_counts_dsl") == closed_window_counts(events), 120,
             "the DSL job's windows in SQL")
    assert http.post(f"{SUPERVISOR}/page_counts_dsl/terminate").status_code == 200

    job_file.write_text(job_file.read_text().replace('.key_by("page")', '.filter(lambda row: True).key_by("page")'))
    assert stream_cli.run(job_file, url=url, checkpoint_dir=tmp_path, console=console) == 2
    assert "operator 0 (filter): a Python function cannot go into a JSON spec" in console.file.getvalue()


def users_task(countries: dict[str, str]) -> dict[str, Any]:
    """A batch task that replaces data source `users` with one row per user, all at midnight."""
    data = "\n".join(json.dumps({"ts": "2026-03-01T00:00:00Z", "user": u, "country": c}) for u, c in countries.items())
    return {"type": "index_parallel", "spec": {
        "dataSchema": {"dataSource": "users", "timestampSpec": {"column": "ts", "format": "iso"},
                       "dimensionsSpec": {"dimensions": ["user", "country"]},
                       "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "NONE", "rollup": False}},
        "ioConfig": {"type": "index_parallel", "inputSource": {"type": "inline", "data": data},
                     "inputFormat": {"type": "json"}, "appendToExisting": False}}}


def run_task(http: httpx.Client, payload: dict[str, Any]) -> None:
    task_id = http.post("/druid/indexer/v1/task", json=payload).json()["task"]
    wait_for(lambda: http.get(f"/druid/indexer/v1/task/{task_id}/status").json()["status"]["statusCode"]
             == "SUCCESS", 120, f"task {task_id}")


def clicks_by_country(http: httpx.Client, data_source: str) -> Counter:
    response = http.post("/druid/v2/sql", json={
        "query": f"SELECT country, COUNT(*) AS n FROM {data_source} GROUP BY 1"})
    return Counter({r["country"]: r["n"] for r in response.json()}) if response.status_code == 200 else Counter()


def test_a_stream_joined_with_a_data_source_sees_its_latest_rows(node, http, kafka_broker) -> None:
    """Kafka Streams' stream-table join with a Sluice data source as the table: each click gets its user's country
    as the data source has it; re-indexing the data source changes the country of later clicks, and a user it no
    longer has gets none (a left join)."""
    countries = {f"u{i}": ["de", "fr", "jp"][i % 3] for i in range(50)}
    run_task(http, users_task(countries))
    topic, ds = "clicks-enrich", "clicks_enriched"
    kafka_broker.create_topic(topic, 2)
    spec = {"type": "stream", "id": ds, "spec": {
        "ioConfig": {"topic": topic, "consumerProperties": {"bootstrap.servers": kafka_broker.bootstrap_servers},
                     "useEarliestOffset": True},
        "timestampSpec": {"column": "ts", "format": "iso"},
        "columns": [{"name": "ts"}, {"name": "user"}, {"name": "page"}],
        "operators": [{"type": "joinTable", "joinType": "left", "on": ["user"],
                       "table": {"dataSource": "users", "columns": [{"name": "user"}, {"name": "country"}],
                                 "operators": [{"type": "filter", "expression": "country != 'jp'"}]}}],
        "sink": {"type": "dataSource", "dataSource": ds}}}
    assert http.post(SUPERVISOR, json=spec).status_code == 200

    def expected(events: list[dict[str, str]], table: dict[str, str]) -> Counter:
        return Counter(table.get(e["user"]) if table.get(e["user"]) != "jp" else None for e in events)

    first = clicks(600, 0, 600, seed=11)
    send(kafka_broker.bootstrap_servers, topic, first)
    want = expected(first, countries)
    assert want[None] > 0 and want["de"] > 0  # the filter dropped jp's users: they join with nothing
    wait_for(lambda: clicks_by_country(http, ds) == want, 120, "every click with its user's country")

    # u0 moves, u1 leaves the table, u2 (jp, filtered out) moves to de: tombstones drop u1 and re-add the rest
    moved = {**countries, "u0": "uk", "u2": "de"}
    del moved["u1"]
    run_task(http, users_task(moved))
    later = clicks(600, 900, 1_500, seed=12)
    send(kafka_broker.bootstrap_servers, topic, later)
    want = expected(first, countries) + expected(later, moved)
    assert want["uk"] > 0
    wait_for(lambda: clicks_by_country(http, ds) == want, 120, "later clicks with the re-indexed countries")
    assert http.post(f"{SUPERVISOR}/{ds}/terminate").status_code == 200
