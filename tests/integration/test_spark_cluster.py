"""Sluice on a Spark standalone cluster: a master and two 1-core workers on loopback (`sluice.dev.spark_cluster`), and
a `sluice start --spark-master spark://…` node whose every job runs on their executors (a node of its own: a
process has one SparkSession, and the tests' is in local mode). The node and each worker run as on machines that share
no disk (`sluice.dev.machines`): none sees the others' folders nor /tmp, so a file an executor wrote for the task, or
read from the task's folder, would be missing; the task's files come and go as Arrow batches (`task/spark_files.py`).

- Streaming: a Kafka supervisor's task reads on the executors; the committed offsets are the topic's end offsets and
  every valid event is counted once.
- Batch: an index_parallel task over four local files on a shared mount, read by two readers on the executors; exact
  answers per channel, with dynamic and with hashed partitions.
- A worker dies (kill -9 of its JVM, its executor and the executor's Python workers, as when its machine dies) while
  both readers, one on each executor, are half-way through a file: Spark runs the lost reader again on the surviving
  executor, that file is read again from its start, and every row is counted once. Each worker has an address of its
  own, as on two machines: Spark drops the shuffle output of every executor on a lost worker's host, which on one
  shared address would re-run the survivor's reader too.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import sluice
from sluice.dev.sample_data import generate, produce
from sluice.dev.spark_cluster import SparkCluster
from sluice.task.spark_session import cluster_settings
from tests.integration.harness import sql, supervisor_spec, wait_for
from tests.integration.processes import SluiceProcess
from tests.integration.test_batch_faults import write_files
from tests.integration.test_batch_ingestion import by_channel, ndjson, rows, run, task, totals
from tests.integration.test_workers import reading_to, terminate_and_check

TASKS = "/druid/indexer/v1"


@dataclass(frozen=True)
class Machines:
    """Where each machine's folders are: the node's, the Spark cluster's (each worker sees only its own), and a
    shared mount that all of them see (where a local input source's files are, as on a cluster)."""

    node: Path
    spark: Path
    shared_mount: Path


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> Machines:
    root = tmp_path_factory.mktemp("share-nothing")
    return Machines(root / "node", root / "spark", root / "shared-mount")


@pytest.fixture(scope="module")
def spark_cluster(machines: Machines) -> Iterator[SparkCluster]:
    with SparkCluster(machines.spark, machines=((machines.shared_mount,), (machines.node,))) as cluster:
        yield cluster


@dataclass(frozen=True)
class NodeOnCluster:
    process: SluiceProcess
    metadata_uri: str


@pytest.fixture(scope="module")
def cluster_node(spark_cluster: SparkCluster, machines: Machines) -> Iterator[NodeOnCluster]:
    """An all-in-one node whose Spark application runs on the cluster, an executor on each worker; on a machine of
    its own, which does not see the workers' folders, nor they its."""
    uri = f"sqlite:///{machines.node / 'metadata.db'}"
    node = NodeOnCluster(SluiceProcess("start", machines.node, uri, "--spark-master", spark_cluster.master_url,
                                       hidden=(machines.spark,), shared=(machines.shared_mount,)), uri)
    try:
        node.process.start(timeout=300)  # its Spark application, and a warm-up job on the executors
        wait_for(lambda: executors_on_every_worker(spark_cluster), 120, "an executor on each worker")
        yield node
    finally:
        node.process.stop()


def executors_on_every_worker(cluster: SparkCluster) -> bool:
    """Each live worker runs an executor of the node's application."""
    return all(worker.executors() for worker in cluster.workers if worker.process.poll() is None)


@pytest.mark.parametrize(("master", "driver_host"), [
    ("local[2,4]", None), ("spark://127.0.0.1:7077", "127.0.0.1"), ("spark://localhost:7077", "127.0.0.1"),
    ("spark://spark-a:7077,spark-b:7077", None), ("k8s://https://10.0.0.1:6443", None)])
def test_a_driver_on_loopback_is_on_loopback_and_local_mode_gets_no_cluster_settings(master, driver_host) -> None:
    settings = cluster_settings(master)
    assert settings.get("spark.driver.host") == driver_host
    assert settings.get("spark.executorEnv.PYTHONPATH") == (None if master.startswith("local") else
                                                             str(Path(sluice.__file__).parents[1]))


@pytest.mark.spark
@pytest.mark.kafka
def test_a_supervisor_on_the_cluster_counts_every_event_once(cluster_node, kafka_broker) -> None:
    topic, ds = "spark-cluster-stream", "spark_cluster_stream"
    kafka_broker.create_topic(topic, 2)
    records = generate(4_000, seed=41)
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records, 2)
    with cluster_node.process.client() as http:
        spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT1H")
        spec["spec"]["tuningConfig"]["maxRowsInMemory"] = 1_000
        assert http.post(f"{TASKS}/supervisor", json=spec).status_code == 200

        tasks = wait_for(lambda: reading_to(http, ds, end_offsets), 240, "the task to read every event")
        terminate_and_check(http, http, cluster_node.metadata_uri, ds, [t["id"] for t in tasks], end_offsets,
                            sum(r.kind == "valid" for r in records))


@pytest.mark.spark
@pytest.mark.parametrize("partitions_spec", [{"type": "dynamic"}, {"type": "hashed", "numShards": 2}])
def test_a_batch_task_on_the_cluster_gives_exact_answers(cluster_node, machines: Machines,
                                                         partitions_spec: dict[str, Any]) -> None:
    """Its files on a shared mount, as a local input source's must be on a cluster; hashed partitions are written
    as shards (`partitioning.write_shards`), dynamic ones as buckets."""
    ds = f"spark_cluster_{partitions_spec['type']}"
    input_dir = machines.shared_mount / ds
    events = write_files(input_dir, files=4, per_file=1_500)
    payload = task(ds, {"type": "local", "baseDir": str(input_dir), "filter": "*.json"}, {"type": "json"},
                   tuning={"partitionsSpec": partitions_spec,
                           "forceGuaranteedRollup": partitions_spec["type"] != "dynamic"})
    with cluster_node.process.client() as http:
        result = run(http, payload)
        assert result["report"]["payload"]["rowStats"]["buildSegments"]["processed"] == len(events)
        assert by_channel(http, ds) == totals(events)
        segments = sql(http, f"SELECT shard_spec FROM sys.segments WHERE datasource = '{ds}'")
        kind = "numbered" if partitions_spec["type"] == "dynamic" else "hashed"
        assert {json.loads(s["shard_spec"])["type"] for s in segments} == {kind}


class _GatedFiles(ThreadingHTTPServer):
    """Serves `files` over HTTP: the first half of each file at once, the rest once `gate` is set; counts the GETs of
    each file and how many are half-served, waiting at the gate."""

    daemon_threads = True

    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__(("127.0.0.1", 0), _GatedHandler)
        self.files = files
        self.gate = threading.Event()
        self.gets: Counter[str] = Counter()
        self.waiting = 0
        self.lock = threading.Lock()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{name}"


class _GatedHandler(BaseHTTPRequestHandler):
    server: _GatedFiles
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # http.server's name
        name = self.path.lstrip("/")
        body = self.server.files[name]
        half = body.index(b"\n", len(body) // 2) + 1  # whole lines: the reader parses the first half before the gate
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body[:half])
            self.wfile.flush()
            with self.server.lock:
                self.server.gets[name] += 1
                self.server.waiting += 1
            self.server.gate.wait(240)
            with self.server.lock:
                self.server.waiting -= 1
            self.wfile.write(body[half:])
        except (BrokenPipeError, ConnectionResetError):  # the reader's executor was killed
            pass

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.spark
def test_a_worker_killed_mid_read_loses_nothing_and_counts_nothing_twice(spark_cluster, cluster_node) -> None:
    parts = [rows(2_000, seed=i) for i in range(4)]
    server = _GatedFiles({f"part-{i}.json": (ndjson(part) + "\n").encode() for i, part in enumerate(parts)})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    events = [e for part in parts for e in part]
    payload = task("spark_cluster_kill", {"type": "http", "uris": [server.url(name) for name in server.files]},
                   {"type": "json"})  # maxNumConcurrentSubTasks 2: two readers, one on each 1-core executor
    doomed = spark_cluster.workers[0]
    try:
        with cluster_node.process.client() as http:
            task_id = http.post(f"{TASKS}/task", json=payload).json()["task"]
            # two readers half-way through a file each: one runs on each worker's executor (each has one core)
            wait_for(lambda: server.waiting == 2, 180, "both readers to be half-way through a file")
            assert doomed.executors()
            doomed.kill_9()  # its JVM, its executor's and the executor's Python workers: a machine dying
            wait_for(lambda: not doomed.executors(), 60, "the dead worker's executor to be gone")
            server.gate.set()

            status = wait_for(lambda: (s := http.get(f"{TASKS}/task/{task_id}/status").json()["status"])
                              ["statusCode"] != "RUNNING" and s, 240, f"task {task_id}")
            assert status["statusCode"] == "SUCCESS", status
            # the dead executor's reader ran again: its file was read again from its start, every other file once
            assert sorted(server.gets.values()) == [1, 1, 1, 2], server.gets
            report = http.get(f"{TASKS}/task/{task_id}/reports").json()["ingestionStatsAndErrors"]
            assert report["payload"]["rowStats"]["buildSegments"]["processed"] == len(events)
            assert by_channel(http, "spark_cluster_kill") == totals(events)
    finally:
        server.gate.set()
        server.shutdown()
        server.server_close()
        if doomed.process.poll() is not None:  # the cluster gets its second worker back, the node an executor on it
            spark_cluster.add_worker()
        wait_for(lambda: executors_on_every_worker(spark_cluster), 120, "an executor on the new worker")
