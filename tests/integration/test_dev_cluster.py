"""Sluice's nodes on machines that share nothing but the metadata store (PostgreSQL) and deep storage (an S3-compatible
server, moto's), as `sluice dev cluster --share-nothing` starts them and docs/deployment.md has a user try them: two
overlords, two workers whose peons run on a Spark standalone cluster of two workers, and two brokers, each node and
each Spark worker in a mount namespace of its own where /tmp and every other one's folder are empty.

The example supervisor spec's two tasks run on the two workers, their Spark applications on the cluster. Both brokers
answer exactly while the rows are only in the peons (asked over HTTP), and after the handoff, from segments each
downloads from S3 into its own cache. Ctrl-C stops every process the command started.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import boto3
import httpx
import psutil
import pytest
from confluent_kafka.admin import AdminClient

from sluice.dev.sample_data import generate, produce
from sluice.dev.tansu import create_topic
from tests.integration.harness import sql, wait_for

pytestmark = pytest.mark.kafka

EXAMPLE_SPEC = Path(__file__).parents[2] / "examples" / "wikipedia-kafka-supervisor.json"
TASKS = "/druid/indexer/v1"
DS = "wikipedia"


def started(cluster: subprocess.Popen[str]) -> dict[str, str]:
    """Where each of its parts is, from what it prints once they are all up (and what it prints later is read on,
    so that it never waits on a full pipe)."""
    printed = []
    for line in cluster.stdout:  # type: ignore[union-attr]
        printed.append(line)
        if line.startswith("try it:"):
            break
    threading.Thread(target=cluster.stdout.read, daemon=True).start()  # type: ignore[union-attr]
    text = "".join(printed)
    where = dict(re.findall(r"^  (overlord-\d|broker-\d|Kafka)\s+(\S+)", text, re.MULTILINE))
    assert where.keys() == {"overlord-0", "overlord-1", "broker-0", "broker-1", "Kafka"}, text
    storage = re.search(r"deep storage\s+(s3://\S+) at (http://\S+)", text)
    assert storage and "postgresql" in text, text
    return where | {"s3": storage[2]}


def sum_count(broker: httpx.Client) -> int | None:
    response = broker.post("/druid/v2/sql", json={"query": f'SELECT SUM("count") AS n FROM {DS}'})
    return response.json()[0]["n"] if response.status_code == 200 else None


def test_a_share_nothing_cluster_ingests_exactly_and_both_brokers_answer_before_and_after_the_handoff(
        tmp_path: Path) -> None:
    command = [sys.executable, "-m", "sluice.cli", "dev", "cluster", "--work-dir", str(tmp_path), "--free-ports",
               "--share-nothing", "--overlords", "2"]
    cluster = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        where = started(cluster)
        leader = wait_for(lambda: next((where[o] for o in ("overlord-0", "overlord-1")
                                        if httpx.get(f"{where[o]}{TASKS}/isLeader").status_code == 200), None),
                          60, "an overlord to lead")
        brokers = [httpx.Client(base_url=where[b], timeout=60) for b in ("broker-0", "broker-1")]
        records = generate(6_000, seed=18)
        valid = sum(r.kind == "valid" for r in records)
        create_topic(AdminClient({"bootstrap.servers": where["Kafka"]}), DS, 2)
        end_offsets = produce(where["Kafka"], DS, records, 2)
        spec = json.loads(EXAMPLE_SPEC.read_text())
        spec["spec"]["ioConfig"]["consumerProperties"]["bootstrap.servers"] = where["Kafka"]
        spec["spec"]["ioConfig"]["taskDuration"] = "PT1H"  # nothing is published until the handoff
        assert httpx.post(f"{leader}{TASKS}/supervisor", json=spec).status_code == 200

        def read_everything() -> list[dict] | None:
            tasks = httpx.get(f"{leader}{TASKS}/supervisor/{DS}/status").json()["payload"]["activeTasks"]
            offsets = {int(p): o for t in tasks for p, o in (t["currentOffsets"] or {}).items()}
            return tasks if len(tasks) == 2 and offsets == end_offsets else None

        tasks = wait_for(read_everything, 300, "both tasks to read every event")
        assert sorted(w["currCapacityUsed"] for w in httpx.get(f"{leader}{TASKS}/workers").json()) == [1, 1]
        running = httpx.get(f"{leader}{TASKS}/tasks", params={"state": "running"}).json()
        peons = sorted(f"{t['location']['host']}:{t['location']['port']}" for t in running)
        for broker in brokers:  # from the peons over HTTP: nothing is published yet
            wait_for(lambda b=broker: sum_count(b) == valid, 60, "the broker to answer from the peons")
            assert sql(broker, "SELECT COUNT(*) AS n FROM sys.segments WHERE is_published = 1") == [{"n": 0}]
            # sys.servers and sys.server_segments say which peon serves which realtime segment
            assert [r["server"] for r in sql(broker, "SELECT server FROM sys.servers WHERE server_type = 'peon' "
                                                     "ORDER BY 1")] == peons
            served = sql(broker, "SELECT s.server, COUNT(*) AS n FROM sys.server_segments s JOIN sys.segments g "
                                 "ON s.segment_id = g.segment_id WHERE g.is_realtime = 1 GROUP BY 1 ORDER BY 1")
            assert [r["server"] for r in served] == peons and all(r["n"] == 1 for r in served)

        assert httpx.post(f"{leader}{TASKS}/supervisor/{DS}/terminate").status_code == 200
        for task in tasks:
            status = wait_for(lambda t=task["id"]: (s := httpx.get(f"{leader}{TASKS}/task/{t}/status").json()["status"])
                              ["statusCode"] != "RUNNING" and s, 180, "the task's publish")
            assert status["statusCode"] == "SUCCESS", status
        objects = boto3.client("s3", endpoint_url=where["s3"], aws_access_key_id="sluice",
                               aws_secret_access_key="sluice", region_name="us-east-1").list_objects_v2(Bucket="sluice")
        keys = [o["Key"] for o in objects.get("Contents", [])]
        assert keys and all(k.startswith(f"druid/segments/{DS}/") for k in keys)
        for broker in brokers:  # from their own caches of the segments in S3
            wait_for(lambda b=broker: sum_count(b) == valid and not sql(
                b, f"SELECT 1 FROM sys.segments WHERE datasource = '{DS}' AND is_realtime = 1"), 60,
                "the broker to answer from the published segments alone")
        for name in ("broker-0", "broker-1"):
            assert list((tmp_path / name).rglob("*.parquet"))  # each broker downloaded the segments itself
    finally:
        cluster.send_signal(signal.SIGINT)
        assert cluster.wait(120) == 0
    left = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert not left, left
