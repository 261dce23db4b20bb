"""`sluice dev produce`, as the README has a new user fill the example spec's topic, against the real dev broker;
`sluice dev cluster`, as docs/deployment.md has a user try the scale-out topology."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest
from confluent_kafka.admin import AdminClient

from sluice.cli import main
from sluice.dev.sample_data import generate, produce
from sluice.dev.tansu import DevKafkaBroker
from tests.integration.harness import wait_for

EXAMPLE_SPEC = Path(__file__).parents[2] / "examples" / "wikipedia-kafka-supervisor.json"


def test_dev_produce_creates_the_topic_and_fills_it_with_the_sample(kafka_broker: DevKafkaBroker,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    main(["dev", "produce", "--bootstrap-servers", bootstrap, "--topic", "dev_produce", "--events", "1000"])
    assert "end offsets: 0: 250, 1: 250, 2: 250, 3: 250" in capsys.readouterr().out
    topic = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics["dev_produce"]
    assert len(topic.partitions) == 4
    # again into the topic that now exists: appended, over its own partitions
    main(["dev", "produce", "--bootstrap-servers", bootstrap, "--topic", "dev_produce", "--events", "400",
          "--partitions", "9"])
    assert "end offsets: 0: 350, 1: 350, 2: 350, 3: 350" in capsys.readouterr().out


@pytest.mark.kafka
def test_dev_cluster_runs_a_share_nothing_topology_that_ingests_and_answers_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    """`sluice dev cluster` as a user runs it: the example supervisor spec pointed at its Kafka, on its overlord; both
    brokers answer exactly; Ctrl-C stops every process it started."""
    command = [sys.executable, "-m", "sluice.cli", "dev", "cluster", "--work-dir", str(tmp_path), "--free-ports",
               "--share-nothing", "--workers", "1", "--capacity", "1", "--spark-workers", "1"]
    cluster = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        printed = []
        for line in cluster.stdout:  # type: ignore[union-attr]
            printed.append(line)
            if line.startswith("try it:"):
                break
        where = dict(re.findall(r"^  (overlord-0|broker-0|broker-1|Kafka)\s+(\S+)", "".join(printed), re.MULTILINE))
        assert where.keys() == {"overlord-0", "broker-0", "broker-1", "Kafka"}, "".join(printed)
        assert re.search(r"deep storage\s+s3://", "".join(printed)) and "postgresql" in "".join(printed)

        records = generate(3_000, seed=7)
        produce(where["Kafka"], "wikipedia", records, 2)
        spec = json.loads(EXAMPLE_SPEC.read_text())
        spec["spec"]["ioConfig"]["consumerProperties"]["bootstrap.servers"] = where["Kafka"]
        assert httpx.post(f"{where['overlord-0']}/druid/indexer/v1/supervisor", json=spec).status_code == 200
        valid = sum(r.kind == "valid" for r in records)
        for broker in ("broker-0", "broker-1"):
            wait_for(lambda b=where[broker]: httpx.post(f"{b}/druid/v2/sql", json={
                "query": 'SELECT SUM("count") AS n FROM wikipedia'}).json() == [{"n": valid}], 240,
                f"{broker} to answer with every event")
    finally:
        cluster.send_signal(signal.SIGINT)
        assert cluster.wait(120) == 0
    left = [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(p.info["cmdline"] or [])]
    assert not left, left
