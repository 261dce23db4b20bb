"""`sluice dev cluster`: Sluice's scale-out topology on one machine, from the installed packages, to try it as a user.

- the shared services: PostgreSQL as the metadata store (Debian's server binaries; SQLite without them), an
  S3-compatible server as deep storage (moto's; a local folder without it), a Kafka-protocol broker (Tansu) and a
  Spark standalone cluster (a master and its workers);
- Sluice's nodes, each a `sluice <role>` process with a work directory of its own: overlords, workers (their peons
  run every task's Spark jobs on the cluster) and brokers.

With `share_nothing` (Linux, as root) every node and every Spark worker runs as on a machine of its own
(`sluice.dev.machines`): only the shared services connect them. docs/deployment.md runs the same topology on
several machines.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from sluice.dev import free_port, postgres
from sluice.dev.machines import own_machine
from sluice.dev.spark_cluster import SparkCluster
from sluice.dev.tansu import DevKafkaBroker, die_with_parent_hook

__all__ = ["ClusterLayout", "run"]

#: Druid's ports for its roles; a second node of a role takes the port 100 above
_PORTS = {"overlord": 8090, "worker": 8091, "broker": 8082}
_BUCKET = "sluice"


@dataclass(frozen=True)
class ClusterLayout:
    """How many of each, and where: Druid's and Spark's usual ports, or free ones (`free_ports`)."""

    work_dir: Path
    overlords: int = 1
    workers: int = 2
    brokers: int = 2
    spark_workers: int = 2
    worker_capacity: int = 1
    share_nothing: bool = False
    free_ports: bool = False
    kafka_port: int = 9092
    spark_port: int = 7077

    @property
    def names(self) -> list[str]:
        """Each node's name, which is also its folder's and its log's."""
        return [f"{role}-{i}" for role, count in (("overlord", self.overlords), ("worker", self.workers),
                                                 ("broker", self.brokers)) for i in range(count)]

    def port(self, name: str) -> int:
        role, index = name.rsplit("-", 1)
        return 0 if self.free_ports else _PORTS[role] + 100 * int(index)


@dataclass
class _Node:
    name: str
    url: str
    process: subprocess.Popen[bytes]


def run(layout: ClusterLayout) -> int:
    """Start everything, print where it is, and run until Ctrl-C or SIGTERM (exit status 0) or until a process
    exits (1); stop everything on the way out."""
    # the same clean stop on SIGTERM as on Ctrl-C, and on SIGINT also when a shell started it in the background with
    # SIGINT ignored
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    layout = replace(layout, work_dir=layout.work_dir.resolve())
    # what stands in for a missing shared service (a SQLite file, a deep storage folder): every node sees it
    shared = layout.work_dir / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    try:
        with ExitStack() as stack:
            metadata_uri = stack.enter_context(_metadata_store(shared))
            deep_storage, env = stack.enter_context(_deep_storage(shared))
            kafka = stack.enter_context(DevKafkaBroker(None if layout.free_ports else layout.kafka_port,
                                                       log_dir=layout.work_dir))
            folders = {name: layout.work_dir / name for name in layout.names}
            spark = stack.enter_context(SparkCluster(
                layout.work_dir / "spark", layout.spark_workers, port=None if layout.free_ports else layout.spark_port,
                machines=((), tuple(folders.values())) if layout.share_nothing else None))
            env |= {"SPARK_CONF_DIR": str(_spark_conf(shared))}
            nodes: list[_Node] = []
            stack.callback(_stop, nodes)  # also those started before one that failed to
            for name in layout.names:
                nodes.append(_start(layout, name, folders, shared, metadata_uri, deep_storage, spark.master_url, env))
            for node in nodes:
                _wait_healthy(node, layout.work_dir)
            print(_summary(nodes, metadata_uri, deep_storage, env.get("AWS_ENDPOINT_URL"), kafka.bootstrap_servers,
                           spark), flush=True)
            while all(node.process.poll() is None for node in nodes):
                time.sleep(1)
            gone = next(node for node in nodes if node.process.poll() is not None)
            print(f"{gone.name} exited; see {layout.work_dir / gone.name}.log", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        return 0
    except RuntimeError as error:  # a service or node that did not come up
        print(f"{error}; logs in {layout.work_dir}", file=sys.stderr)
        return 1


@contextmanager
def _metadata_store(work_dir: Path) -> Iterator[str]:
    bin_dir = postgres.find_bin_dir()
    if bin_dir is None:
        print(f"{postgres.MISSING_REASON}: the metadata store is SQLite", file=sys.stderr)
        yield f"sqlite:///{work_dir / 'metadata.db'}"
        return
    with postgres.postgres_server(bin_dir) as uri:
        yield uri


@contextmanager
def _deep_storage(work_dir: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """The deep storage URI, and the environment the nodes reach it with."""
    try:
        import boto3
        from moto.server import ThreadedMotoServer
    except ImportError:
        print("no moto (pip install 'moto[server]'): deep storage is a local folder", file=sys.stderr)
        yield (work_dir / "deep-storage").as_uri(), {}
        return
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's server logs every request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "sluice",
               "AWS_SECRET_ACCESS_KEY": "sluice", "AWS_DEFAULT_REGION": "us-east-1"}
        boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="sluice",
                     aws_secret_access_key="sluice", region_name="us-east-1").create_bucket(Bucket=_BUCKET)
        yield f"s3://{_BUCKET}/druid/segments", env
    finally:
        server.stop()


def _spark_conf(shared: Path) -> Path:
    """A standalone master gives an application every free core: one core per peon's application, so that every
    task slot gets its own executor instead of waiting for the first application's cores."""
    folder = shared / "spark-conf"
    folder.mkdir(exist_ok=True)
    (folder / "spark-defaults.conf").write_text("spark.cores.max 1\n")
    return folder


def _start(layout: ClusterLayout, name: str, folders: dict[str, Path], shared: Path, metadata_uri: str,
           deep_storage: str, spark_master: str, env: dict[str, str]) -> _Node:
    role = name.rsplit("-", 1)[0]
    port = layout.port(name) or free_port()
    command = [sys.executable, "-m", "sluice.cli", "--log-level", "INFO", role, "--port", str(port),
               "--work-dir", str(folders[name]), "--metadata-uri", metadata_uri, "--deep-storage", deep_storage]
    if role == "worker":
        command += ["--capacity", str(layout.worker_capacity), "--spark-master", spark_master]
    if layout.share_nothing:
        command = own_machine(command, own=(folders[name], shared), others=(
            layout.work_dir / "spark", *(folder for other, folder in folders.items() if other != name)))
    with (layout.work_dir / f"{name}.log").open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=os.environ | env, start_new_session=True, preexec_fn=die_with_parent_hook())
    return _Node(name, f"http://127.0.0.1:{port}", process)


def _wait_healthy(node: _Node, work_dir: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if node.process.poll() is not None:
            raise RuntimeError(f"{node.name} exited as it started (see {work_dir / node.name}.log)")
        try:
            if httpx.get(f"{node.url}/status/health", timeout=2).json() is True:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{node.name} did not answer /status/health in {timeout_s:.0f} s")


def _stop(nodes: list[_Node]) -> None:
    """Workers first (their peons publish or stop while the overlord still answers), then the others."""
    workers = [node for node in nodes if node.name.startswith("worker")]
    for group in (workers, [node for node in nodes if node not in workers]):
        for node in group:
            if node.process.poll() is None:
                os.killpg(node.process.pid, signal.SIGTERM)
        for node in group:
            try:
                node.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(node.process.pid, signal.SIGKILL)
                node.process.wait()


def _summary(nodes: list[_Node], metadata_uri: str, deep_storage: str, s3_endpoint: str | None, kafka: str,
             spark: SparkCluster) -> str:
    lines = ["Sluice cluster ready (Ctrl-C stops it all):", f"  metadata store   {metadata_uri}",
             f"  deep storage     {deep_storage}" + (f" at {s3_endpoint}" if s3_endpoint else ""),
             f"  Kafka            {kafka}",
             f"  Spark master     {spark.master_url} (web UI {spark.web_ui_url}), {len(spark.workers)} workers"]
    lines += [f"  {node.name:<16} {node.url}" for node in nodes]
    overlord = next(node.url for node in nodes if node.name.startswith("overlord"))
    broker = next(node.url for node in nodes if node.name.startswith("broker"))
    lines += ["try it:", f"  sluice dev produce --bootstrap-servers {kafka}",
              f"  curl -XPOST -H 'Content-Type: application/json' -d @examples/wikipedia-kafka-supervisor.json "
              f"{overlord}/druid/indexer/v1/supervisor",
              f"  curl -XPOST -H 'Content-Type: application/json' -d '{{\"query\": \"SELECT COUNT(*) FROM "
              f"wikipedia\"}}' {broker}/druid/v2/sql"]
    return "\n".join(lines)
