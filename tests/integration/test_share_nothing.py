"""Sluice's nodes on machines that share nothing but the metadata store (PostgreSQL) and deep storage (an S3-compatible
server, moto's): two overlords, two workers and two brokers, each in a mount namespace of its own
(`sluice.dev.machines`) where /tmp and every other node's folder are empty. A supervisor's two tasks run on the two
workers; both brokers answer exactly while the rows are only in the peons (asked over HTTP) and after the handoff,
from segments downloaded from S3 into their own caches."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer

from sluice.dev.sample_data import generate, produce
from sluice.dev import postgres as pg
from tests.integration.harness import free_port, sql, supervisor_spec, wait_for
from tests.integration.processes import SluiceProcess, start_all, stop_all

TASKS = "/druid/indexer/v1"
BUCKET = "deep-storage"


@pytest.fixture
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                 region_name="us-east-1").create_bucket(Bucket=BUCKET)
    yield endpoint
    server.stop()


def sum_count(broker: httpx.Client, ds: str) -> int | None:
    response = broker.post("/druid/v2/sql", json={"query": f'SELECT SUM("count") AS n FROM {ds}'})
    return response.json()[0]["n"] if response.status_code == 200 else None


@pytest.mark.spark
@pytest.mark.kafka
def test_two_brokers_answer_exactly_from_the_peons_and_from_s3_with_no_folder_shared(
        kafka_broker, postgres_uri: str, s3_endpoint: str, tmp_path: Path) -> None:
    uri = pg.fresh_database(postgres_uri)
    env = {"AWS_ENDPOINT_URL": s3_endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_DEFAULT_REGION": "us-east-1"}
    names = ["overlord-a", "overlord-b", "worker-a", "worker-b", "broker-a", "broker-b"]

    def node(name: str, *args: str) -> SluiceProcess:
        others = tuple(tmp_path / other for other in names if other != name)
        return SluiceProcess(name.split("-")[0], tmp_path, uri, "--deep-storage", f"s3://{BUCKET}/druid/segments",
                             *args, name=name, hidden=others, env=env)

    processes = start_all(node("overlord-a"), node("overlord-b"), node("worker-a", "--capacity", "1"),
                          node("worker-b", "--capacity", "1"), node("broker-a"), node("broker-b"))
    overlord = next(p for p in processes if p.role == "overlord" and p.leads())
    brokers = [p.client() for p in processes if p.role == "broker"]
    topic, ds = "share-nothing", "share_nothing"
    kafka_broker.create_topic(topic, 2)
    records = generate(6_000, seed=18)
    valid = sum(r.kind == "valid" for r in records)
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records, 2)
    try:
        with overlord.client() as client:
            spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=2, taskDuration="PT1H")
            assert client.post(f"{TASKS}/supervisor", json=spec).status_code == 200

            def read_everything() -> list[dict] | None:
                tasks = client.get(f"{TASKS}/supervisor/{ds}/status").json()["payload"]["activeTasks"]
                offsets = {int(p): o for t in tasks for p, o in (t["currentOffsets"] or {}).items()}
                return tasks if len(tasks) == 2 and offsets == end_offsets else None

            tasks = wait_for(read_everything, 300, "both tasks to read every event")
            workers = client.get(f"{TASKS}/workers").json()
            assert sorted(w["currCapacityUsed"] for w in workers) == [1, 1]  # a task on each worker

            for broker in brokers:  # from the peons over HTTP: nothing is published yet
                wait_for(lambda b=broker: sum_count(b, ds) == valid, 60, "the broker to answer from the peons")
                assert sql(broker, "SELECT COUNT(*) AS n FROM sys.segments WHERE is_published = 1") == [{"n": 0}]

            assert client.post(f"{TASKS}/supervisor/{ds}/terminate").status_code == 200
            for task in tasks:
                status = wait_for(lambda t=task["id"]: (s := client.get(f"{TASKS}/task/{t}/status").json()["status"])
                                  ["statusCode"] != "RUNNING" and s, 180, "the task's publish")
                assert status["statusCode"] == "SUCCESS", status

        keys = [o["Key"] for o in boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id="test",
                                               aws_secret_access_key="test", region_name="us-east-1")
                .list_objects_v2(Bucket=BUCKET).get("Contents", [])]
        published = sql(brokers[0], f"SELECT 1 FROM sys.segments WHERE datasource = '{ds}' AND is_published = 1")
        assert published and all(k.startswith(f"druid/segments/{ds}/") for k in keys) and len(keys) >= len(published)
        for broker in brokers:  # from their own caches of the segments in S3
            wait_for(lambda b=broker: sum_count(b, ds) == valid and not sql(
                b, f"SELECT 1 FROM sys.segments WHERE datasource = '{ds}' AND is_realtime = 1"), 60,
                "the broker to answer from the published segments alone")
        for name in ("broker-a", "broker-b"):
            assert list((tmp_path / name).rglob("*.parquet"))  # each broker downloaded the segments itself
    finally:
        for broker in brokers:
            broker.close()
        stop_all(processes)
