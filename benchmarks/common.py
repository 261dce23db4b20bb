"""What every benchmark script shares: RSS sampling, a Sluice node as a subprocess, the example spec,
driving a supervisor until its rows are queryable, percentiles and the JSON line.

Why these live in one place: the figures of different scripts are compared side by side, so they must
be measured the same way (the same RSS definition, the same notion of "queryable", the same spec).

Memory is measured from outside the measured process, by polling the RSS of its whole process tree with
psutil: a Spark driver is a Python process whose JVM child in turn forks Python workers, and only the sum
says what the machine pays. RSS double-counts pages shared between forked workers, so the figures are an
upper bound (that is what an out-of-memory killer looks at, too).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_SPEC = ROOT / "examples" / "wikipedia-kafka-supervisor.json"
SLUICE_BIN = Path(sys.executable).with_name("sluice")
MB = 1024 * 1024


# ------------------------------------------------------------------------------------------------ output

def log(message: str) -> None:
    """Progress goes to stderr so that stdout stays parseable (its last line is the JSON result)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def emit(result: Mapping[str, Any], as_json: bool) -> None:
    """Print the result: always as the last stdout line with ``--json``, else pretty for a human, after the tables
    `run_all.py` prints of it (on stderr), with the issues' targets it judges."""
    if as_json:
        print(json.dumps(result, default=str), flush=True)
        return
    from rich.console import Console
    from run_all import summarize  # which imports this module

    summarize({result.get("benchmark", ""): dict(result)}, Console(stderr=True))
    print(json.dumps(result, indent=2, default=str), flush=True)


def machine() -> dict[str, Any]:
    """Where the figures come from: they mean little without the machine."""
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gb": round(psutil.virtual_memory().total / 1024**3, 1),
        "python": platform.python_version(),
        # other work on the machine skews every figure here; record it so a reader can tell
        "load_average_1m": round(os.getloadavg()[0], 2),
        "platform": platform.platform(),
    }


# ------------------------------------------------------------------------------------------------ plots

IMAGES = ROOT / "docs" / "img"


def add_plot_arguments(parser: argparse.ArgumentParser, default: Path) -> None:
    parser.add_argument("--plot", type=Path, default=default, help=f"where the PNG goes (default: {default})")
    parser.add_argument("--no-plot", dest="plot", action="store_const", const=None)


def new_figure(columns: int = 1, size: tuple[float, float] = (7, 4.5)) -> tuple[Any, Any]:
    """A matplotlib figure and its axes, drawn without a display (benchmarks run headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(1, columns, figsize=size)


def save_figure(fig: Any, path: Path, measured_on: Mapping[str, Any], note: str = "") -> None:
    """The PNG, with the machine the figures were measured on written below the plot (they mean little without)."""
    about = f"{measured_on.get('cpus')} CPUs, {measured_on.get('cpu_model', '')}, {measured_on.get('memory_gb')} GB"
    fig.suptitle(f"{note}; {about}" if note else about, fontsize=8, y=0.01, va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


# ------------------------------------------------------------------------------------------------ numbers

def ms(seconds: float | None) -> float | None:
    """Seconds as milliseconds to 0.1 ms, as the figures are printed."""
    return None if seconds is None else round(seconds * 1000, 1)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation, as numpy's default; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def weighted_percentile(pairs: Iterable[tuple[float, int]], q: float) -> float | None:
    """The q-th percentile of values each repeated ``weight`` times (latency per event from per-batch sightings)."""
    ordered = sorted((value, weight) for value, weight in pairs if weight > 0)
    total = sum(weight for _, weight in ordered)
    if not total:
        return None
    target, seen = total * q / 100, 0
    for value, weight in ordered:
        seen += weight
        if seen >= target:
            return value
    return ordered[-1][0]


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, 3)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------------------------------------ memory

def process_role(process: psutil.Process, root_pid: int) -> str:
    """Which part of a Spark process tree a process is: the driver, the JVM, or Spark's Python workers.

    Read from the command line, which stays put, where a process's name can read differently mid-exit.
    """
    if process.pid == root_pid:
        return "driver"
    try:
        command = process.cmdline()
    except psutil.Error:
        return "other"
    if command and Path(command[0]).name == "java":
        return "jvm"
    if any("pyspark.daemon" in part or "pyspark.worker" in part for part in command):
        return "python_workers"
    return "other"


class RssSampler:
    """Polls the RSS of a process and all its descendants in a background thread.

    Keeps the peak of the tree's total, the peak of each role (driver / jvm / python_workers) on its
    own, a timeline of totals (so a phase's peak can be read afterwards), and the CPU seconds each
    process used (user + system, the last value seen before it exited).
    """

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid = pid
        self.interval = interval
        self.timeline: list[tuple[float, int]] = []  # (monotonic time, total RSS bytes)
        self.peak_total = 0
        self.peak_by_role: dict[str, int] = {}
        self.peak_count_by_role: dict[str, int] = {}  # processes of a role alive at once
        self._cpu_by_pid: dict[int, float] = {}
        self.large_other: dict[str, int] = {}  # command line -> peak RSS, for processes of no known role
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"rss-{pid}", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._stop.is_set():
            self.sample(root)
            self._stop.wait(self.interval)

    def sample(self, root: psutil.Process) -> None:
        try:
            processes = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        by_role: dict[str, int] = {}
        count_by_role: dict[str, int] = {}
        for process in processes:
            try:
                with process.oneshot():
                    rss = process.memory_info().rss
                    cpu = process.cpu_times()
                    self._cpu_by_pid[process.pid] = cpu.user + cpu.system
            except psutil.Error:
                continue
            role = process_role(process, self.pid)
            by_role[role] = by_role.get(role, 0) + rss
            count_by_role[role] = count_by_role.get(role, 0) + 1
            if role == "other" and rss > 100 * MB:
                self._note_other(process, rss)
        total = sum(by_role.values())
        if not total:
            return
        self.timeline.append((time.monotonic(), total))
        self.peak_total = max(self.peak_total, total)
        for role, rss in by_role.items():
            self.peak_by_role[role] = max(self.peak_by_role.get(role, 0), rss)
            self.peak_count_by_role[role] = max(self.peak_count_by_role.get(role, 0), count_by_role[role])

    def _note_other(self, process: psutil.Process, rss: int) -> None:
        """Remember what a big process outside the known roles is, so the figures can be explained."""
        try:
            what = " ".join(process.cmdline())[:160] or process.name()
        except psutil.Error:
            return
        self.large_other[what] = max(self.large_other.get(what, 0), rss)

    def peak_between(self, start: float, end: float) -> int:
        """Peak total RSS among the samples taken in ``[start, end]`` (monotonic times)."""
        return max((rss for t, rss in self.timeline if start <= t <= end), default=0)

    def last_before(self, when: float) -> int:
        """Total RSS of the last sample taken at or before ``when``."""
        before = [rss for t, rss in self.timeline if t <= when]
        return before[-1] if before else 0

    def summary(self) -> dict[str, Any]:
        return {
            "peak_rss_mb": round(self.peak_total / MB),
            "peak_rss_by_role_mb": {role: round(rss / MB) for role, rss in sorted(self.peak_by_role.items())},
            "peak_processes_by_role": dict(sorted(self.peak_count_by_role.items())),
            "cpu_s": round(sum(self._cpu_by_pid.values()), 1),
            **({"large_other_processes_mb": {k: round(v / MB) for k, v in self.large_other.items()}}
               if self.large_other else {}),
        }


def run_measured(command: Sequence[str], timeout: float, cwd: Path = ROOT) -> dict[str, Any]:
    """Run a benchmark child that prints its JSON result as the last stdout line; add its tree's RSS."""
    log(f"running {' '.join(Path(c).name if i == 0 else c for i, c in enumerate(command))}")
    with subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, text=True) as child, RssSampler(child.pid) as rss:
        try:
            stdout, _ = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise RuntimeError(f"{command} did not finish within {timeout:.0f}s") from None
    if child.returncode != 0:
        raise RuntimeError(f"{command} exited with {child.returncode}")
    lines = [line for line in stdout.splitlines() if line.strip()]
    result = json.loads(lines[-1])
    result.update(rss.summary())
    return result


# ------------------------------------------------------------------------------------------------ Sluice

def example_spec(
    bootstrap_servers: str,
    topic: str,
    data_source: str,
    *,
    io_config: Mapping[str, Any] | None = None,
    tuning_config: Mapping[str, Any] | None = None,
    granularity_spec: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``examples/wikipedia-kafka-supervisor.json`` pointed at our broker, with the given overrides.

    Starting from the shipped example keeps the benchmark honest: it measures the spec a user starts
    from, and every deviation is visible in the call.
    """
    spec = copy.deepcopy(json.loads(EXAMPLE_SPEC.read_text()))
    body = spec["spec"]
    body["dataSchema"]["dataSource"] = data_source
    body["dataSchema"]["granularitySpec"].update(granularity_spec or {})
    body["ioConfig"]["topic"] = topic
    body["ioConfig"]["consumerProperties"]["bootstrap.servers"] = bootstrap_servers
    body["ioConfig"].update(io_config or {})
    body["tuningConfig"].update(tuning_config or {})
    return spec


class SluiceNode:
    """``sluice start`` as a subprocess: the product exactly as a user runs it, measured from outside.

    Running it in its own process keeps the benchmark's own Python (producer, pollers) off the node's
    GIL and makes the node's process tree, and so its RSS, its own.
    """

    def __init__(self, work_dir: Path, port: int | None = None, args: Sequence[str] = ()) -> None:
        """`args`: more of `sluice start`'s flags (--spark-master…)."""
        self.work_dir = work_dir
        self.args = list(args)
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = work_dir / "sluice-node.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.start_s: float | None = None

    def start(self, timeout: float = 180.0) -> SluiceNode:
        """Start the node and return once ``/status/health`` is true (Spark is up by then)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        began = time.monotonic()
        with open(self.log_path, "ab") as node_log:
            self.process = subprocess.Popen(
                [str(SLUICE_BIN), "--log-level", "INFO", "start", "--port", str(self.port),
                 "--work-dir", str(self.work_dir), *self.args],
                cwd=self.work_dir, stdin=subprocess.DEVNULL, stdout=node_log, stderr=subprocess.STDOUT,
            )
        deadline = began + timeout
        with httpx.Client(base_url=self.base_url, timeout=2.0) as http:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"sluice start exited with {self.process.returncode}:\n{self.log_tail()}")
                try:
                    if http.get("/status/health").json() is True:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sluice start not healthy within {timeout}s:\n{self.log_tail()}")
                time.sleep(0.2)
        self.start_s = time.monotonic() - began
        return self

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError("node not started")
        return self.process.pid

    def log_tail(self, size: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError as error:
            return f"(no log: {error})"

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM: the node's Lifecycle stops tasks, HTTP and Spark in order."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def __enter__(self) -> SluiceNode:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


_CLUSTER_WORKERS, _CLUSTER_CORES = 2, 1
#: the Spark cluster `spark_cluster` starts, as the figures measured on it say
CLUSTER = f"standalone cluster, {_CLUSTER_WORKERS} workers of {_CLUSTER_CORES} core"


@contextmanager
def spark_cluster(work_dir: Path) -> Iterator[list[str]]:
    """A Spark standalone cluster on loopback (the installed pyspark's master and workers, `CLUSTER`), and the flag
    that makes `sluice start` run its tasks' Spark jobs there (one application, the node's, with every core of the
    cluster)."""
    from sluice.dev.spark_cluster import SparkCluster

    with SparkCluster(work_dir / "spark", workers=_CLUSTER_WORKERS, cores=_CLUSTER_CORES, memory="3g") as cluster:
        log(f"spark cluster up: {cluster.master_url}, {CLUSTER}")
        yield ["--spark-master", cluster.master_url]


def sql_rows(http: httpx.Client, query: str) -> list[list[Any]] | None:
    """Rows of a Druid SQL query in array format; None while the data source does not exist yet."""
    response = http.post("/druid/v2/sql", json={"query": query, "resultFormat": "array"})
    if response.status_code == 400 and "not found" in response.text:
        return None
    if response.is_error:
        raise RuntimeError(f"{query}: HTTP {response.status_code} {response.text[:500]}")
    return response.json()


def queryable_count(http: httpx.Client, data_source: str) -> int:
    rows = sql_rows(http, f'SELECT SUM("count") FROM "{data_source}"')
    return int(rows[0][0] or 0) if rows else 0


def broker_loaded(http: httpx.Client, data_source: str, timeout: float) -> float:
    """Seconds until Druid's loadstatus says the broker holds every segment of `data_source`: it loads a task's
    published rows into DuckDB after the task (answering from the files meanwhile), and that load would otherwise
    share the two cores with the next task, which a hand-written job, writing files only, never pays."""
    began = time.monotonic()
    while http.get("/druid/coordinator/v1/loadstatus").json().get(data_source) != 100:
        if time.monotonic() - began > timeout:
            raise RuntimeError(f"the broker has not loaded {data_source} after {timeout:.0f}s")
        time.sleep(0.25)
    return round(time.monotonic() - began, 2)


@dataclass
class IngestTimeline:
    """What happened between supervisor submit and all rows queryable, in seconds after the submit.

    ``read`` is sampled from the supervisor status (tasks' currentOffsets, which move after each Spark
    read job), so it shows the reading rate; ``jobs`` are the offset steps of single tasks (one step is
    one read-and-persist Spark job), which show the per-job cost.
    """

    total_offsets: int
    expected_rows: int
    read: list[tuple[float, int]] = field(default_factory=list)
    jobs: list[tuple[str, float, int]] = field(default_factory=list)  # (task id, seconds, offsets read)
    first_read_s: float | None = None
    all_read_s: float | None = None
    first_publishing_s: float | None = None
    queryable_s: float | None = None
    queryable_rows: int = 0
    submitted_at: float = 0.0  # monotonic
    task_rows: dict[str, int] = field(default_factory=dict)

    def steady_events_per_s(self, low: float = 0.1, high: float = 0.9) -> float | None:
        """Reading rate between ``low`` and ``high`` of the offsets read: excludes the cold first job and the tail."""
        def first_at(fraction: float) -> float | None:
            return next((t for t, n in self.read if n >= fraction * self.total_offsets), None)

        start, end = first_at(low), first_at(high)
        if start is None or end is None or end <= start:
            return None
        read_start = next(n for t, n in self.read if t == start)
        read_end = next(n for t, n in self.read if t == end)
        return (read_end - read_start) / (end - start)

    def job_stats(self) -> dict[str, Any]:
        """Per-task read jobs seen back to back: how many rows one job reads and how long it takes."""
        by_task: dict[str, list[tuple[float, int]]] = {}
        for task_id, t, n in self.jobs:
            by_task.setdefault(task_id, []).append((t, n))
        durations, sizes = [], []
        for steps in by_task.values():
            for (t0, _), (t1, n1) in zip(steps, steps[1:]):
                durations.append(t1 - t0)
                sizes.append(n1)
        return {
            "read_jobs_seen": len(self.jobs),
            "mean_rows_per_job": round(sum(sizes) / len(sizes)) if sizes else None,
            "mean_job_s": round(sum(durations) / len(durations), 3) if durations else None,
        }

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("read")
        data.pop("jobs")
        data.pop("submitted_at")
        data["read_samples"] = len(self.read)
        return data


def ingest_until_queryable(
    node: SluiceNode,
    spec: Mapping[str, Any],
    total_offsets: int,
    expected_rows: int,
    timeout: float,
    poll: float = 0.25,
) -> IngestTimeline:
    """Submit ``spec`` and poll until ``SUM("count")`` equals ``expected_rows``.

    Until every offset is read only the supervisor status is polled (SQL cannot be complete before
    that, and each SQL poll costs the node a DuckDB query); afterwards both are.
    """
    data_source = spec["spec"]["dataSchema"]["dataSource"]
    timeline = IngestTimeline(total_offsets, expected_rows)
    read_by_partition: dict[str, int] = {}
    start_by_partition: dict[str, int] = {}
    last_by_task: dict[str, int] = {}
    with httpx.Client(base_url=node.base_url, timeout=30.0) as http:
        timeline.submitted_at = submitted = time.monotonic()
        http.post("/druid/indexer/v1/supervisor", json=spec).raise_for_status()
        while True:
            now = time.monotonic() - submitted
            status = http.get(f"/druid/indexer/v1/supervisor/{data_source}/status").json()["payload"]
            if status["publishingTasks"] and timeline.first_publishing_s is None:
                timeline.first_publishing_s = now
            for task in status["activeTasks"] + status["publishingTasks"]:
                current = task.get("currentOffsets") or {}
                for partition, offset in task["startingOffsets"].items():
                    start_by_partition[partition] = min(start_by_partition.get(partition, offset), offset)
                for partition, offset in current.items():
                    read_by_partition[partition] = max(read_by_partition.get(partition, 0), offset)
                done = sum(current.get(p, o) - o for p, o in task["startingOffsets"].items())
                if done > last_by_task.get(task["id"], 0):
                    timeline.jobs.append((task["id"], now, done - last_by_task.get(task["id"], 0)))
                    last_by_task[task["id"]] = done
            read = sum(o - start_by_partition.get(p, 0) for p, o in read_by_partition.items())
            timeline.read.append((now, read))
            if read > 0 and timeline.first_read_s is None:
                timeline.first_read_s = now
            if read >= total_offsets and timeline.all_read_s is None:
                timeline.all_read_s = now
            if timeline.all_read_s is not None:
                timeline.queryable_rows = queryable_count(http, data_source)
                if timeline.queryable_rows >= expected_rows:
                    timeline.queryable_s = time.monotonic() - submitted
                    break
            if now > timeout:
                raise RuntimeError(f"not all rows queryable after {timeout}s: read {read}/{total_offsets}, "
                                   f"queryable {timeline.queryable_rows}/{expected_rows}\n{node.log_tail()}")
            time.sleep(poll)
        timeline.task_rows = task_row_stats(http, data_source)
    return timeline


def terminate_supervisor(node: SluiceNode, data_source: str, timeout: float = 120.0) -> float:
    """Terminate a supervisor and wait until its tasks have published (their segments committed) and exited,
    so that whatever is measured next on the node does not share the CPU with them; return the seconds that
    took. Like Druid's, a terminated supervisor's tasks stop reading and publish at once."""
    began = time.monotonic()
    with httpx.Client(base_url=node.base_url, timeout=30.0) as http:
        http.post(f"/druid/indexer/v1/supervisor/{data_source}/terminate").raise_for_status()
        while True:
            tasks = http.get("/druid/indexer/v1/tasks", params={"datasource": data_source}).json()
            if not any(task["statusCode"] == "RUNNING" for task in tasks):
                break
            if time.monotonic() - began > timeout:
                raise RuntimeError(f"the tasks of {data_source} still run {timeout}s after terminate\n{node.log_tail()}")
            time.sleep(0.1)
    # each task's own error first: a result file keeps only the head of an error, and the log's tail is long
    failed = {task["id"]: task.get("errorMsg") for task in tasks if task["statusCode"] != "SUCCESS"}
    if failed:
        raise RuntimeError(f"tasks of {data_source} failed to publish: {failed}\n{node.log_tail()}")
    return time.monotonic() - began


def task_row_stats(http: httpx.Client, data_source: str) -> dict[str, int]:
    """Druid's rowStats summed over the data source's tasks (from their reports), and the task count per
    status: a processed total above the events read means a task was killed and its range read again."""
    totals: dict[str, int] = {}
    for task in http.get("/druid/indexer/v1/tasks", params={"datasource": data_source}).json():
        key = f"tasks_{task['statusCode'].lower()}"
        totals[key] = totals.get(key, 0) + 1
        report = http.get(f"/druid/indexer/v1/task/{task['id']}/reports")
        if report.status_code != 200:
            continue
        stats = report.json()["ingestionStatsAndErrors"]["payload"]["rowStats"]
        build = stats.get("buildSegments") or stats.get("totals", {}).get("buildSegments", {})
        for name, value in build.items():
            totals[name] = totals.get(name, 0) + int(value)
    return totals


def run_child_json(args: Sequence[str]) -> list[str]:
    """The command that re-runs the current script with ``args`` under this interpreter."""
    return [sys.executable, str(Path(sys.argv[0]).resolve()), *args]
