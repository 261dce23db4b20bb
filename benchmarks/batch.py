"""Batch ingestion throughput: Sluice's `index_parallel` against the PySpark job a user writes by hand, same files.

Why: a user with files in a directory or a bucket picks Sluice's batch task over twenty lines of PySpark only
if it is about as fast (the issue's target: Sluice ≥ 0.9 × the hand-written job's rows/s) while giving Druid's
API, rollup and queryable segments. So one run, one machine, the same files:

  data:     ≥ 5M wikipedia-like events (ISO timestamp over 3 days, 7 string dimensions, 3 long metrics; seeded,
            time-ordered like logs), cut into ``--files`` files per format — CSV with a header, gzip NDJSON,
            Parquet (a real timestamp column) — in a temp dir and uploaded to moto's S3 server on loopback.
            The generator's own answers (rows, each metric's sum, rows after an hourly rollup by pyarrow)
            check every variant, so a fast wrong run cannot pass: (b) rolls up perfectly and must give those
            rows; Sluice's tasks, Druid's dynamic partitioning (best-effort rollup: no shuffle, each subtask
            rolls up what it read), at least those and fewer than the input's.
  (b) ``pyspark``: each case in its own process (its own memory, its own cold JVM): ``spark.read.csv/json/
            parquet`` with an explicit schema, ``groupBy`` on the hour and the dimensions with sums,
            ``write.parquet``; run cold (the session's first job) and warm (again, ``--warm-runs`` times: the
            fastest counts), on Sluice's session settings (spark_session: local[*], 2 shuffle partitions, no
            AQE), so only the work differs. The installed pyspark has no ``s3a://`` filesystem (no hadoop-aws
            jar, no Maven here): for S3 the job copies the objects to local disk with pyarrow first, and that copy
            is in its time.
  (c) ``sluice``: ``sluice start`` (healthy before any clock), a small warm-up task per format first, then
            an ``index_parallel`` task per case, run as (b) runs its job: cold (the node's first full-size
            task of the case; the JVM has not compiled its hot code yet) and warm (the same task again, a REPLACE,
            once the broker has loaded the last one's rows; ``--warm-runs`` times, the fastest counts, as for (b):
            runs of the same task on this machine differ by up to 25 %);
            each timed from submit to SUCCESS; rows/s = input rows / those seconds. After each, Druid SQL must give
            the generator's answers. Each case at ``maxNumConcurrentSubTasks`` 2 (and the local ones again at 1), with
            ``splitHintSpec`` maxNumFiles 1 so two subtasks have splits to share (Druid's default hint puts up to
            1 GiB into one split: one subtask); one case runs with the default hint to show it.
  profile:  where Sluice's time goes, in one process on Sluice's session and code (local files, a subset):
            the connector read alone (Python readers → Arrow → Spark, to a no-op sink), the same records from
            Spark's built-in readers, and the task's one job (read, parse, roll up, write the segments) over each;
            per job the Spark stage timings from the status store and the CPU of the JVM and the Python workers.

Peak RSS is of each process tree (node: Python + JVM + Spark's Python workers; each yardstick child).

    python benchmarks/batch.py --rows 5000000 --json
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from common import (
    MB,
    RssSampler,
    SluiceNode,
    broker_loaded,
    emit,
    free_port,
    log,
    machine,
    process_role,
    ratio,
    run_child_json,
    run_measured,
    sql_rows,
)

DIMENSIONS = ["channel", "namespace", "page", "user", "countryName", "cityName", "isRobot"]
METRICS = ["added", "deleted", "delta"]
FORMATS = {"csv": "csv", "json": "json.gz", "parquet": "parquet"}  # format -> file suffix
BUCKET = "bench"
S3_KEYS = {"accessKeyId": "test", "secretAccessKey": "test"}
#: what a user writes for these files (Parquet carries its own schema, with a real timestamp)
TEXT_SCHEMA = ", ".join(["timestamp STRING", *(f"{d} STRING" for d in DIMENSIONS), *(f"{m} BIGINT" for m in METRICS)])
START = "2024-03-01T00:00:00"
DAYS = 3


# ---------------------------------------------------------------------------------------------- the data

@dataclass
class Dataset:
    """The files of every format and the answers any correct ingestion of them gives."""

    root: Path
    rows: int
    files: dict[str, list[str]]  # format -> local paths
    bytes: dict[str, int]
    sums: dict[str, int]  # metric -> its sum over the input
    rolled_up_rows: int  # distinct (hour, dimensions): the rows of a perfect hourly rollup

    def describe(self) -> dict[str, Any]:
        return {"rows": self.rows, "files_per_format": len(self.files["csv"]),
                "mb": {f: round(b / MB, 1) for f, b in self.bytes.items()}, "sums": self.sums,
                "rolled_up_rows": self.rolled_up_rows}


def generate(rows: int, files: int, seed: int, root: Path) -> Dataset:
    """Wikipedia-like edits, deterministic for a seed: skewed dimension values (a few channels and pages take
    most edits, as in the real feed), time-ordered so each file holds a stretch of time, as logs do."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pa_csv
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)

    def skewed(prefix: str, cardinality: int) -> pa.Array:
        index = (rng.zipf(1.3, rows) - 1) % cardinality
        names = pa.array([f"{prefix}{i}" for i in range(cardinality)])
        return names.take(pa.array(index))

    start = np.datetime64(START, "s")
    seconds = np.sort(rng.integers(0, DAYS * 86_400, rows))
    times = pa.array(start + seconds.astype("timedelta64[s]"), pa.timestamp("s", tz="UTC"))
    added = rng.integers(0, 1_000, rows) * (rng.random(rows) < 0.8)
    deleted = rng.integers(0, 300, rows) * (rng.random(rows) < 0.4)
    columns = {
        "channel": skewed("#lang", 50), "namespace": skewed("ns", 12), "page": skewed("Page_", 200_000),
        "user": skewed("user", 50_000), "countryName": skewed("Country", 80), "cityName": skewed("City", 1_000),
        "isRobot": pa.array(np.where(rng.random(rows) < 0.3, "true", "false")),
        "added": pa.array(added), "deleted": pa.array(deleted), "delta": pa.array(added - deleted),
    }
    iso = pc.strftime(times, "%Y-%m-%dT%H:%M:%SZ")
    text = pa.table({"timestamp": iso, **columns})
    typed = pa.table({"timestamp": times.cast(pa.timestamp("ms", tz="UTC")), **columns})
    hourly = pa.table({"hour": pc.floor_temporal(times, unit="hour"), **{d: columns[d] for d in DIMENSIONS}})
    rolled_up = hourly.group_by(["hour", *DIMENSIONS]).aggregate([]).num_rows
    # one JSON object per line, built column-wise (the generated values need no escaping)
    parts: list[Any] = [pa.scalar('{"timestamp":"'), iso, pa.scalar('"')]
    for name in [*DIMENSIONS, *METRICS]:
        quote = '"' if name in DIMENSIONS else ""
        parts += [pa.scalar(f',"{name}":{quote}'), columns[name].cast(pa.string()), pa.scalar(quote)]
    parts.append(pa.scalar("}\n"))
    lines = pc.binary_join_element_wise(*parts, "")

    paths: dict[str, list[str]] = {f: [] for f in FORMATS}
    for fmt in FORMATS:
        (root / fmt).mkdir(parents=True, exist_ok=True)
    cuts = np.linspace(0, rows, files + 1).astype(int)
    for n, (lo, hi) in enumerate(itertools.pairwise(cuts)):
        name = f"events-{n:03d}"
        path = root / "csv" / f"{name}.csv"
        pa_csv.write_csv(text.slice(lo, hi - lo), path, pa_csv.WriteOptions(quoting_style="none"))
        paths["csv"].append(str(path))
        path = root / "json" / f"{name}.json.gz"
        chunk = lines.slice(lo, hi - lo)
        with pa.CompressedOutputStream(str(path), "gzip") as out:
            out.write("".join(chunk.to_pylist()).encode())
        paths["json"].append(str(path))
        path = root / "parquet" / f"{name}.parquet"
        pq.write_table(typed.slice(lo, hi - lo), path)
        paths["parquet"].append(str(path))
    sums = {m: int(pc.sum(columns[m]).as_py()) for m in METRICS}
    size = {f: sum(os.path.getsize(p) for p in ps) for f, ps in paths.items()}
    return Dataset(root, rows, paths, size, sums, rolled_up)


def upload(dataset: Dataset, endpoint: str) -> float:
    """Every file into the bucket under `<format>/`; returns the seconds it took."""
    import boto3

    started = time.monotonic()
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                          region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    for fmt, paths in dataset.files.items():
        for path in paths:
            client.upload_file(path, BUCKET, f"{fmt}/{Path(path).name}")
    return time.monotonic() - started


# ---------------------------------------------------------------------------------------------- specs

def input_source(location: str, fmt: str, root: Path, endpoint: str) -> dict[str, Any]:
    if location == "local":
        return {"type": "local", "baseDir": str(root / fmt), "filter": f"*.{FORMATS[fmt]}"}
    return {"type": "s3", "prefixes": [f"s3://{BUCKET}/{fmt}/"],
            "endpointConfig": {"url": endpoint, "signingRegion": "us-east-1"},
            "clientConfig": {"protocol": "http", "enablePathStyleAccess": True}, "properties": S3_KEYS}


def task_spec(data_source: str, source: dict[str, Any], fmt: str, subtasks: int, one_file_splits: bool = True
              ) -> dict[str, Any]:
    """The index_parallel task a user writes for these files: hourly rollup into day segments."""
    input_format = {"csv": {"type": "csv", "findColumnsFromHeader": True}, "json": {"type": "json"},
                    "parquet": {"type": "parquet"}}[fmt]
    tuning: dict[str, Any] = {"type": "index_parallel", "maxNumConcurrentSubTasks": subtasks}
    if one_file_splits:
        tuning["splitHintSpec"] = {"type": "maxSize", "maxNumFiles": 1}
    return {"type": "index_parallel", "spec": {
        "dataSchema": {
            "dataSource": data_source, "timestampSpec": {"column": "timestamp", "format": "auto"},
            "dimensionsSpec": {"dimensions": DIMENSIONS},
            "metricsSpec": [{"type": "count", "name": "count"},
                            *({"type": "longSum", "name": m, "fieldName": m} for m in METRICS)],
            "granularitySpec": {"segmentGranularity": "DAY", "queryGranularity": "HOUR", "rollup": True}},
        "ioConfig": {"type": "index_parallel", "inputSource": source, "inputFormat": input_format},
        "tuningConfig": tuning}}


def planned_readers(payload: dict[str, Any]) -> list[dict[str, int]]:
    """How the task's coordinator plans the splits onto its readers (files and MB each): an uneven plan leaves a
    core idle at the end of the read, whatever the readers' speed."""
    from sluice.connectors.api import plan

    _, source, parallelism = task_source(payload)
    splits = plan(source.enumerate_splits(), source.split_assigner(), parallelism)
    return [{"reader": r, "files": sum(len(s.files) for s in splits.get(r, [])),
             "mb": round(sum(s.size_bytes for s in splits.get(r, [])) / MB, 1)} for r in range(parallelism)]


def task_source(payload: dict[str, Any]) -> tuple[Any, Any, int]:
    """The task's ingest plan, its input source as the task builds it, and its maxNumConcurrentSubTasks."""
    from sluice.connectors.sources import create_source
    from sluice.task.batch_index_task import BatchIndexTaskSpec
    from sluice.task.ingest_plan import compile_plan

    spec = BatchIndexTaskSpec.from_json(payload).payload.spec
    io, tuning = spec.io_config, spec.tuning_config
    plan = compile_plan(spec.data_schema)
    source = create_source(io.input_source, io.input_format, plan.fields, tuning.split_hint_spec,
                           druid=None)  # type: ignore[arg-type]
    return plan, source, tuning.max_num_concurrent_sub_tasks


# ---------------------------------------------------------------------------------------------- measuring

class TreeSampler(RssSampler):
    """RssSampler that also knows each process's role, so the CPU a tree used between two moments can be split
    into driver, JVM and Python workers: the split says whether the readers or Spark bound a run."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        super().__init__(pid, interval)
        self._role_by_pid: dict[int, str] = {}

    def sample(self, root: psutil.Process) -> None:
        super().sample(root)
        try:
            for process in [root, *root.children(recursive=True)]:
                if process.pid not in self._role_by_pid:
                    self._role_by_pid[process.pid] = process_role(process, self.pid)
        except psutil.Error:
            pass

    def cpu_by_role(self) -> dict[str, float]:
        self.sample(psutil.Process(self.pid))
        totals: dict[str, float] = {}
        for pid, cpu in list(self._cpu_by_pid.items()):
            role = self._role_by_pid.get(pid, "other")
            totals[role] = totals.get(role, 0.0) + cpu
        return totals


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {role: round(after[role] - before.get(role, 0.0), 1) for role in sorted(after)
            if after[role] - before.get(role, 0.0) >= 0.05}


def stage_timings(spark: Any, group: str) -> list[dict[str, Any]]:
    """Per stage of the jobs of `group`, from Spark's status store (the UI is off, the store is not): wall
    seconds, task seconds, CPU and GC seconds, rows in and out."""
    store = spark.sparkContext._jsc.sc().statusStore()
    tracker = spark.sparkContext.statusTracker()
    stages = []
    for job in sorted(tracker.getJobIdsForGroup(group)):
        info = tracker.getJobInfo(job)
        for stage_id in sorted(info.stageIds if info else []):
            try:
                s = store.lastStageAttempt(stage_id)
            except Exception:  # noqa: BLE001, S112 - a skipped stage has no attempt
                continue
            submitted, completed = s.submissionTime(), s.completionTime()
            wall = ((completed.get().getTime() - submitted.get().getTime()) / 1000
                    if submitted.isDefined() and completed.isDefined() else None)
            stages.append({"job": job, "stage": stage_id, "tasks": s.numTasks(), "wall_s": wall,
                           "task_s": round(s.executorRunTime() / 1000, 2),
                           "cpu_s": round(s.executorCpuTime() / 1e9, 2), "gc_s": round(s.jvmGcTime() / 1000, 2),
                           "rows_in": s.inputRecords(), "rows_out": s.outputRecords(),
                           "shuffle_rows": s.shuffleWriteRecords() or s.shuffleReadRecords()})
    return stages


# ---------------------------------------------------------------------------------------------- (c) Sluice

def run_sluice(dataset: Dataset, warm: Dataset, endpoint: str, cases: list[str], single: list[str],
               default_hint: str | None, work: Path, timeout: float, warm_runs: int) -> dict[str, Any]:
    """One `sluice start`; a warm-up task per format, then each case cold and `warm_runs` times warm (the fastest
    counts) at 2 subtasks, the `single` ones again at 1, and `default_hint` at 2 with Druid's default split hint
    (those two cold and once warm)."""
    results: dict[str, Any] = {"warm_up": {}, "cases": {}}
    node = SluiceNode(work / "sluice")
    try:
        node.start(timeout=600.0)  # a busy machine starts Spark slowly
        with TreeSampler(node.pid) as sampler, httpx.Client(base_url=node.base_url, timeout=60.0) as http:
            log(f"sluice node healthy after {node.start_s:.1f}s")
            results["node_startup_s"] = round(node.start_s or 0, 1)
            sampler.sample(psutil.Process(node.pid))
            results["idle_rss_mb"] = round(sampler.last_before(time.monotonic()) / MB)
            for fmt in sorted({c.split("-")[1] for c in cases}):
                payload = task_spec(f"warm_{fmt}", input_source("local", fmt, warm.root, endpoint), fmt, 2)
                results["warm_up"][fmt] = run_task(http, node, sampler, payload, warm, timeout)
            runs = [(case, 2, True) for case in cases] + [(case, 1, True) for case in single]
            if default_hint:
                runs.append((default_hint, 2, False))
            for case, subtasks, one_file_splits in runs:
                location, fmt = case.split("-")
                key = f"subtasks_{subtasks}" + ("" if one_file_splits else "_default_split_hint")
                payload = task_spec(f"{location}_{fmt}_{key}", input_source(location, fmt, dataset.root, endpoint), fmt,
                                    subtasks, one_file_splits)
                log(f"sluice {case} at maxNumConcurrentSubTasks {subtasks}"
                    + ("" if one_file_splits else " with the default split hint"))
                data_source = payload["spec"]["dataSchema"]["dataSource"]
                try:  # as (b) runs: the first full-size task is cold, the next ones (REPLACEs) warm
                    cold = run_task(http, node, sampler, payload, dataset, timeout)
                    cold["broker_load_s"] = broker_loaded(http, data_source, timeout)
                    warms = []
                    for _ in range(warm_runs if subtasks == 2 and one_file_splits else 1):
                        warms.append(run_task(http, node, sampler, payload, dataset, timeout))
                        broker_loaded(http, data_source, timeout)  # the broker's load must not share the next run
                    figures = min(warms, key=lambda w: w["seconds"])
                    figures["warm_runs_s"] = [w["seconds"] for w in warms]
                    figures["cold"] = {k: cold[k] for k in ("seconds", "rows_per_s", "peak_rss_mb", "cpu_s_by_role",
                                                            "broker_load_s")}
                    figures["answers_correct"] = all(w["answers_correct"] for w in (cold, *warms))
                except RuntimeError as error:  # a failed task must not lose the other cases' figures
                    log(f"sluice {case} {key} failed: {error}")
                    results["cases"].setdefault(case, {})[key] = {"error": str(error)[:3000]}
                    continue
                figures["planned_readers"] = planned_readers(payload)
                log(f"sluice {case} {key}: cold {cold['rows_per_s']:,} rows/s, warm {figures['rows_per_s']:,} rows/s "
                    f"({figures['seconds']} s), peak RSS "
                    f"{figures['peak_rss_mb']} MB, CPU {figures['cpu_s_by_role']}, answers "
                    f"{'ok' if figures['answers_correct'] else 'WRONG'}, readers {figures['planned_readers']}")
                results["cases"].setdefault(case, {})[key] = figures
            results["node"] = sampler.summary()
    finally:
        node.stop()  # also one that never got healthy: it still runs
    return results


def run_task(http: httpx.Client, node: SluiceNode, sampler: TreeSampler, payload: dict[str, Any], dataset: Dataset,
             timeout: float) -> dict[str, Any]:
    """Submit → SUCCESS, timed; then the data source must answer what the generator wrote."""
    data_source = payload["spec"]["dataSchema"]["dataSource"]
    cpu_before = sampler.cpu_by_role()
    started = time.monotonic()
    response = http.post("/druid/indexer/v1/task", json=payload)
    if response.is_error:
        raise RuntimeError(f"{data_source}: submit answered {response.status_code} {response.text[:500]}")
    task_id = response.json()["task"]
    while True:
        status = http.get(f"/druid/indexer/v1/task/{task_id}/status").json()["status"]
        if status["statusCode"] != "RUNNING":
            break
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{task_id} still running after {timeout:.0f}s\n{node.log_tail()}")
        time.sleep(0.1)
    seconds = time.monotonic() - started
    cpu = cpu_delta(cpu_before, sampler.cpu_by_role())
    if status["statusCode"] != "SUCCESS":
        raise RuntimeError(f"{task_id}: {status.get('errorMsg')}\n{node.log_tail()}")
    report = http.get(f"/druid/indexer/v1/task/{task_id}/reports").json()["ingestionStatsAndErrors"]["payload"]
    answers, visible_s = _answers(http, data_source, dataset)
    return {
        "task": task_id, "seconds": round(seconds, 2), "rows_per_s": round(dataset.rows / seconds),
        "peak_rss_mb": round(sampler.peak_between(started, started + seconds) / MB),
        "cpu_s_by_role": cpu, "cpu_s": round(sum(cpu.values()), 1),
        "row_stats": report["rowStats"]["buildSegments"], "segments": report["segmentsPublished"],
        "answers": answers, "answers_correct": best_effort_rollup_of(answers, dataset),
        "queryable_after_success_s": visible_s,
    }


def expected_answers(dataset: Dataset) -> dict[str, int]:
    return {"rows": dataset.rows, **dataset.sums, "rolled_up_rows": dataset.rolled_up_rows}


def best_effort_rollup_of(answers: dict[str, int] | None, dataset: Dataset) -> bool:
    """Whether Sluice's answers are right: rows and sums exact; as many segment rows as perfect rollup's at least,
    and fewer than the rows read where any rows combine. Sluice's tasks partition dynamically, which is Druid's
    best-effort rollup: each subtask rolls up the rows it read, so a key that two subtasks read is a row in each
    one's segment."""
    expected = expected_answers(dataset)
    if answers is None or any(answers[k] != v for k, v in expected.items() if k != "rolled_up_rows"):
        return False
    segment_rows = answers["rolled_up_rows"]
    return dataset.rolled_up_rows <= segment_rows <= dataset.rows and (
        segment_rows < dataset.rows or dataset.rolled_up_rows == dataset.rows)


def _answers(http: httpx.Client, data_source: str, dataset: Dataset, wait: float = 60.0
             ) -> tuple[dict[str, int] | None, float | None]:
    """SUM("count"), each metric's sum and COUNT(*) over Druid SQL, once the published segments are served."""
    query = (f'SELECT SUM("count"), {", ".join(f"SUM({m})" for m in METRICS)}, COUNT(*) FROM "{data_source}"')
    began = time.monotonic()
    answers = None
    while time.monotonic() - began < wait:
        rows = sql_rows(http, query)
        if rows and rows[0][0]:
            values = [int(v or 0) for v in rows[0]]
            answers = {"rows": values[0], **dict(zip(METRICS, values[1:4])), "rolled_up_rows": values[4]}
            if values[0] >= dataset.rows:
                return answers, round(time.monotonic() - began, 2)
        time.sleep(0.25)
    return answers, None


# ---------------------------------------------------------------------------------------------- (b) PySpark

def run_pyspark(case: str, root: Path, endpoint: str, out: Path, warm_runs: int) -> dict[str, Any]:
    """The hand-written job, cold then `warm_runs` times warm (the fastest counts), in this (child) process. S3 goes
    through ``s3a://`` if this pyspark can; otherwise the objects are copied to local disk with pyarrow inside the
    timed run, then read."""
    began = time.monotonic()
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    from sluice.task import spark_session

    spark = spark_session.get_or_create(app_name="bench-batch-pyspark")
    startup_s = time.monotonic() - began
    location, fmt = case.split("-")
    s3a_error = None
    if location == "s3":
        try:
            spark.read.text(f"s3a://{BUCKET}/{fmt}/").limit(1).collect()
        except Exception as error:  # noqa: BLE001 - the message says what is missing
            s3a_error = next((line for line in str(error).splitlines() if line.strip()), "")[:300]

    def paths(run: int) -> list[str]:
        if location == "local":
            return [str(root / fmt / name) for name in sorted(os.listdir(root / fmt))]
        if s3a_error is None:
            return [f"s3a://{BUCKET}/{fmt}/"]
        import pyarrow.fs as pafs

        local = out / f"download-{run}"
        local.mkdir(parents=True, exist_ok=True)
        s3 = pafs.S3FileSystem(access_key="test", secret_key="test", region="us-east-1", scheme="http",
                               endpoint_override=endpoint.split("://", 1)[1])
        pafs.copy_files(f"{BUCKET}/{fmt}", str(local), source_filesystem=s3,
                        destination_filesystem=pafs.LocalFileSystem(), use_threads=True)
        return [str(local / name) for name in sorted(os.listdir(local))]

    def job(run: int) -> float:
        started = time.monotonic()
        files = paths(run)
        if fmt == "csv":
            events = spark.read.csv(files, schema=TEXT_SCHEMA, header=True)
        elif fmt == "json":
            events = spark.read.json(files, schema=TEXT_SCHEMA)
        else:
            events = spark.read.parquet(*files)
        hour = F.date_trunc("hour", F.col("timestamp").cast("timestamp"))
        (events.groupBy(hour.alias("__time"), *DIMENSIONS)
         .agg(F.count(F.lit(1)).alias("count"), *(F.sum(m).alias(m) for m in METRICS))
         .write.mode("overwrite").parquet(str(out / f"run-{run}")))
        elapsed = time.monotonic() - started
        shutil.rmtree(out / f"download-{run}", ignore_errors=True)  # untimed: the S3 copy is read
        return elapsed

    cold_s = job(0)
    warm_runs_s = [job(run) for run in range(1, warm_runs + 1)]
    warm_s = min(warm_runs_s)
    written = pq.read_table(out / f"run-{warm_runs}", columns=["count", *METRICS])
    rows = int(pc.sum(written["count"]).as_py())
    shutil.rmtree(out, ignore_errors=True)
    return {"case": case, "spark_startup_s": round(startup_s, 2), "cold_s": round(cold_s, 2),
            "warm_s": round(warm_s, 2), "warm_runs_s": [round(w, 2) for w in warm_runs_s],
            "cold_rows_per_s": round(rows / cold_s), "warm_rows_per_s": round(rows / warm_s),
            "reads_s3_through": None if location == "local" else ("s3a" if s3a_error is None else "pyarrow copy"),
            "s3a_error": s3a_error,
            "answers": {"rows": rows, **{m: int(pc.sum(written[m]).as_py()) for m in METRICS},
                        "rolled_up_rows": written.num_rows}}


# ---------------------------------------------------------------------------------------------- profile

def run_profile(root: Path, warm_root: Path, files: int, work: Path) -> dict[str, Any]:
    """Where a batch task's time goes, on Sluice's own code and session: for each local format, over the first
    `files` files, the task's job (read, parse, roll up, write the segments) and the read alone, each with the
    connector's Python readers and with Spark's built-in reader of the format feeding the same pipeline."""
    from sluice.stream import kafka_ranges
    from sluice.task import spark_session
    from sluice.task import pipeline as pipelines

    spark = spark_session.get_or_create(app_name="bench-batch-profile")
    kafka_ranges.register(spark)
    pipelines.warm_up(spark, work / "warm-up")  # as the node does before its first task
    with TreeSampler(os.getpid()) as sampler:
        formats = {fmt: FormatProfile(spark, sampler, fmt, sorted(str(root / fmt / n) for n in os.listdir(root / fmt))
                                      [:files], warm_root, work / fmt).run() for fmt in FORMATS}
    return {"files": files, "formats": formats}


class FormatProfile:
    """One format's jobs, each timed with its Spark stages and its CPU per process role."""

    def __init__(self, spark: Any, sampler: TreeSampler, fmt: str, paths: list[str], warm_root: Path,
                 work: Path) -> None:
        from sluice.task.ingest_plan import IntervalsWindow
        from sluice.task.pipeline import RowPipeline

        self.spark, self.sampler, self.fmt, self.paths, self.work = spark, sampler, fmt, paths, work
        self.plan, self.source, _ = task_source(task_spec("profile", {"type": "local", "files": paths}, fmt, 2))
        self.warm_source = task_source(task_spec("profile", input_source("local", fmt, warm_root, ""), fmt, 2))[1]
        self.pipeline = RowPipeline(spark, self.plan, IntervalsWindow(()))

    def run(self) -> dict[str, Any]:
        """Each pair as A, B, B, A, the faster of each counting: the JIT compiles on from run to run, and in a fixed
        order the second of a pair took up to 27 % less time for that alone (the same records, read either way,
        took the same time once both ran alternately)."""
        self._connector(self.warm_source, None)  # the format's Python workers, warm (untimed)
        actions = {
            "connector_read": lambda: self._connector(self.source, None),
            "builtin_read": lambda: self._noop(self._builtin()),
            "connector_job": lambda: self._connector(self.source, self.work / "segments-c"),
            "builtin_job": lambda: self._segments(self._builtin_subtasks(), self.work / "segments-b"),
        }
        figures: dict[str, dict[str, Any]] = {}
        for a, b in (("connector_read", "builtin_read"), ("connector_job", "builtin_job")):
            for attempt, name in enumerate((a, b, b, a)):
                measured = self._measured(f"{name.replace('_', '-')}-{attempt}", actions[name])
                if name not in figures or measured["seconds"] < figures[name]["seconds"]:
                    figures[name] = measured
        rows = figures["connector_job"].pop("result").processed
        builtin_rows = figures["builtin_job"].pop("result").processed
        for f in figures.values():
            f.pop("result", None)
            f["rows_per_s"] = round(rows / f["seconds"])
        shutil.rmtree(self.work, ignore_errors=True)
        return {"rows": rows, "builtin_rows_equal": builtin_rows == rows, **figures}

    def _measured(self, name: str, action: Any) -> dict[str, Any]:
        group = f"{self.fmt}-{name}"
        self.spark.sparkContext.setJobGroup(group, group, True)
        before = self.sampler.cpu_by_role()
        started = time.monotonic()
        result = action()
        seconds = time.monotonic() - started
        return {"seconds": round(seconds, 2), "cpu_s_by_role": cpu_delta(before, self.sampler.cpu_by_role()),
                "stages": stage_timings(self.spark, group), "result": result}

    def _connector(self, source: Any, segments_dir: Path | None) -> Any:
        """The task's read: its coordinator on this driver, its readers in Spark's Python workers."""
        from sluice.connectors.spark import ConnectorRead

        with ConnectorRead(self.spark, source, 2) as read:
            if segments_dir is None:
                return self._noop(read.dataframe())
            return self._segments(read.subtasks(), segments_dir)

    def _segments(self, subtasks: list[Any], segments_dir: Path) -> Any:
        """The batch task's one job over its two subtasks' records (dynamic partitioning, DAY segments), its row
        counts."""
        from sluice.spec.granularity import parse_granularity

        return self.pipeline.write_segments(subtasks, parse_granularity("DAY"), 5_000_000, segments_dir)[0].stats

    def _builtin(self) -> Any:
        return builtin_records(self.spark, self.fmt, self.paths, self.plan.fields)

    def _builtin_subtasks(self) -> list[Any]:
        """Half the files each, as the connector's two readers take turns at one-file splits."""
        return [builtin_records(self.spark, self.fmt, self.paths[i::2], self.plan.fields) for i in range(2)]

    @staticmethod
    def _noop(frame: Any) -> None:
        frame.write.format("noop").mode("overwrite").save()


def builtin_records(spark: Any, fmt: str, paths: list[str], fields: tuple[str, ...]) -> Any:
    """The records the connector's readers produce (`sluice.connectors.records`), made by Spark's built-in reader
    of the format instead: what the framework could hand local CSV, JSON and Parquet splits to."""
    from pyspark.sql import functions as F

    locator = F.concat(F.col("_metadata.file_path"), F.lit(":")).alias("__locator")
    if fmt == "json":
        return spark.read.text(paths).select(locator, F.col("value").cast("binary").alias("value"))
    if fmt == "csv":
        rows = spark.read.csv(paths, header=True, schema=", ".join(
            f"{c} STRING" for c in ["timestamp", *DIMENSIONS, *METRICS]))
        text = {f: F.col(f) for f in fields}
    else:
        rows = spark.read.parquet(*paths)
        text = {f: (F.unix_millis(F.col(f)) if f == "timestamp" else F.col(f)).cast("string") for f in fields}
    return rows.select(locator, F.lit(None).cast("string").alias("__error"), *(c.alias(f) for f, c in text.items()))


# ---------------------------------------------------------------------------------------------- orchestration

@dataclass
class Options:
    rows: int
    files: int
    seed: int
    cases: list[str]
    single: list[str] = field(default_factory=list)  # cases run again at maxNumConcurrentSubTasks 1
    default_hint: str | None = None
    profile_files: int = 0  # 0: no profile
    warm_rows: int = 20_000
    timeout: float = 1200.0
    keep: bool = False
    warm_runs: int = 3


def orchestrate(options: Options) -> dict[str, Any]:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    work = Path(tempfile.mkdtemp(prefix="sluice-bench-batch-"))
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    moto.start()
    endpoint = f"http://127.0.0.1:{moto._port}"
    try:
        log(f"generating {options.rows:,} rows into {options.files} files per format")
        started = time.monotonic()
        dataset = generate(options.rows, options.files, options.seed, work / "data")
        warm = generate(options.warm_rows, 2, options.seed + 1, work / "warm-up")
        generate_s = time.monotonic() - started
        upload_s = upload(dataset, endpoint)
        log(f"generated in {generate_s:.0f}s, uploaded to moto in {upload_s:.0f}s: {dataset.describe()}")
        variants: dict[str, Any] = {"pyspark": {}}
        for case in options.cases:
            try:
                child = ["--child", "pyspark", "--case", case, "--root", str(dataset.root), "--endpoint", endpoint,
                         "--out", str(work / "pyspark" / case), "--warm-runs", str(options.warm_runs), "--json"]
                variants["pyspark"][case] = b = run_measured(run_child_json(child), options.timeout)
                log(f"pyspark {case}: cold {b['cold_rows_per_s']:,} rows/s, warm {b['warm_rows_per_s']:,} rows/s, "
                    f"peak RSS {b['peak_rss_mb']} MB")
            except Exception as error:  # noqa: BLE001 - one failed variant must not lose the others' figures
                log(f"pyspark {case} failed: {error}")
                variants["pyspark"][case] = {"error": f"{type(error).__name__}: {error}"[:2000]}
        try:
            variants["sluice"] = run_sluice(dataset, warm, endpoint, options.cases, options.single,
                                            options.default_hint, work, options.timeout, options.warm_runs)
        except Exception as error:  # noqa: BLE001
            log(f"sluice failed: {error}")
            variants["sluice"] = {"error": f"{type(error).__name__}: {error}"[:3000]}
        if options.profile_files:
            try:
                child = ["--child", "profile", "--root", str(dataset.root), "--warm-root", str(warm.root),
                         "--profile-files", str(options.profile_files), "--out", str(work / "profile"), "--json"]
                variants["profile"] = run_measured(run_child_json(child), options.timeout)
            except Exception as error:  # noqa: BLE001
                log(f"profile failed: {error}")
                variants["profile"] = {"error": f"{type(error).__name__}: {error}"[:2000]}
    finally:
        moto.stop()
        if options.keep:
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return summarize(options, dataset, variants, generate_s, upload_s)


def summarize(options: Options, dataset: Dataset, variants: dict[str, Any], generate_s: float,
              upload_s: float) -> dict[str, Any]:
    """Each case's figures side by side, its ratio to the target, and whether every answer was right."""
    expected = expected_answers(dataset)
    sluice = variants.get("sluice", {})
    cases: dict[str, Any] = {}
    for case in options.cases:
        b = variants["pyspark"].get(case, {})
        c = sluice.get("cases", {}).get(case, {})
        two, one = c.get("subtasks_2", {}), c.get("subtasks_1", {})
        cases[case] = {
            "pyspark": b, "sluice": c,
            "sluice_vs_pyspark_warm": ratio(two.get("rows_per_s"), b.get("warm_rows_per_s")),
            "sluice_vs_pyspark_cold": ratio(two.get("cold", {}).get("rows_per_s"), b.get("cold_rows_per_s")),
            "subtasks_2_vs_1": ratio(two.get("rows_per_s"), one.get("rows_per_s")),
            "pyspark_answers_correct": b.get("answers") == expected if b and "error" not in b else None,
        }
    misses = [case for case, f in cases.items() if (f["sluice_vs_pyspark_warm"] or 0) < 0.9]
    wrong = [f"{case} {variant}" for case, f in cases.items()
             for variant, ok in [("pyspark", f["pyspark_answers_correct"]),
                                 *((f"sluice {k}", v.get("answers_correct")) for k, v in f["sluice"].items())]
             if ok is False]
    return {
        "benchmark": "batch", "dataset": dataset.describe(), "warm_runs": options.warm_runs,
        "generate_s": round(generate_s, 1),
        "upload_to_moto_s": round(upload_s, 1), "expected_answers": expected,
        "s3a_available": next((b.get("s3a_error") is None for c, b in variants["pyspark"].items()
                               if c.startswith("s3") and "error" not in b), None),
        "cases": cases, "warm_up": sluice.get("warm_up"), "node": sluice.get("node"),
        "node_startup_s": sluice.get("node_startup_s"), "idle_node_rss_mb": sluice.get("idle_rss_mb"),
        "misses_0_9_target": misses, "wrong_answers": wrong,
        **({"sluice_error": sluice["error"]} if "error" in sluice else {}),
        "profile": variants.get("profile"), "machine": machine(),
    }


# ---------------------------------------------------------------------------------------------- the tables

def print_tables(result: dict[str, Any], console: Any) -> None:
    """The figures as `run_all.py` and a direct run print them (rich tables)."""
    from rich.table import Table

    def n(value: Any, digits: int = 0) -> str:
        if value is None:
            return "–"
        return f"{value:,.{digits}f}" if isinstance(value, int | float) else str(value)

    data = result["dataset"]
    table = Table(title=f"Batch ingestion: {data['rows']:,} rows, {data['files_per_format']} files per format "
                        f"(MB: {', '.join(f'{f} {mb}' for f, mb in data['mb'].items())}); rows/s", title_justify="left")
    for column in ("case", "(b) PySpark cold", "(b) warm", "(c) Sluice, 2 subtasks: cold", "(c) warm", "(c)/(b) cold",
                   "(c)/(b) warm", "(c) 1 subtask",
                   "2 vs 1", "peak RSS MB (b) / (c)", "(c) CPU s: JVM / py workers / driver", "answers"):
        table.add_column(column, justify="left" if column in ("case", "answers") else "right")
    for case, f in result["cases"].items():
        b, two, one = f["pyspark"], f["sluice"].get("subtasks_2", {}), f["sluice"].get("subtasks_1", {})
        cpu = two.get("cpu_s_by_role", {})
        ok = [f["pyspark_answers_correct"], two.get("answers_correct"), *([one.get("answers_correct")] if one else [])]
        judged = ["–" if r is None else (f"[green]{r:.2f}[/]" if r >= 0.9 else f"[red]{r:.2f}[/]")
                  for r in (f["sluice_vs_pyspark_cold"], f["sluice_vs_pyspark_warm"])]
        table.add_row(
            case + (" (b: pyarrow copy)" if b.get("reads_s3_through") == "pyarrow copy" else ""),
            n(b.get("cold_rows_per_s")), n(b.get("warm_rows_per_s")), n(two.get("cold", {}).get("rows_per_s")),
            n(two.get("rows_per_s")), *judged,
            n(one.get("rows_per_s")), n(f["subtasks_2_vs_1"], 2),
            f"{n(b.get('peak_rss_mb'))} / {n(two.get('peak_rss_mb'))}",
            f"{n(cpu.get('jvm'), 0)} / {n(cpu.get('python_workers'), 0)} / {n(cpu.get('driver'), 0)}",
            "ok" if all(x is not False for x in ok) else "[red]WRONG[/]")
        for key, figures in f["sluice"].items():
            if key.endswith("default_split_hint"):
                table.add_row(f"  {case}, default splitHintSpec", "", "", n(figures.get("cold", {}).get("rows_per_s")),
                              n(figures.get("rows_per_s")), "", "", "", "",
                              f"/ {n(figures.get('peak_rss_mb'))}", "", "ok" if figures.get("answers_correct") else
                              "[red]WRONG[/]")
    console.print(table)
    warm = result.get("warm_up") or {}
    cold = ", ".join(f"{fmt} {figures['seconds']} s" for fmt, figures in warm.items())
    runs = result.get("warm_runs", 1)
    lines = [("  (c) each case's task run on one node after a small warm-up task per format (its times: "
              f"{cold}): cold = the first, warm = the fastest of the {runs} next (REPLACEs of the first); node "
              f"start-up {n(result.get('node_startup_s'), 1)} s, idle RSS "
              f"{n(result.get('idle_node_rss_mb'))} MB"),
             ("  (b) each case in its own process on Sluice's Spark settings; cold = its first job, warm = the fastest "
              f"of the {runs} next")
             + ("" if result.get("s3a_available") in (None, True) else
                "; no s3a:// in this pyspark (hadoop-aws missing): S3 objects copied to local disk with pyarrow "
                "inside the timed run"),
             (f"  below 0.9 x: {', '.join(result['misses_0_9_target']) or 'none'}; wrong answers: "
              f"{', '.join(result['wrong_answers']) or 'none'}")]
    for case, f in result["cases"].items():
        readers = f["sluice"].get("subtasks_2", {}).get("planned_readers")
        if readers:
            lines.append(f"  {case}: splits planned per reader (files / MB): "
                         + ", ".join(f"{r['files']} / {r['mb']}" for r in readers))
    console.print("\n".join(lines))
    profile = result.get("profile") or {}
    if "formats" in profile:
        table = Table(title=f"Where Sluice's time goes (local, first {profile['files']} files, one process, Sluice's "
                            "session): s (rows/s)", title_justify="left")
        for column in ("format", "rows", "connector read → noop", "built-in read → noop", "task job (connector)",
                       "task job (built-in)", "task job CPU s: JVM / py workers"):
            table.add_column(column, justify="left" if column == "format" else "right")
        for fmt, f in profile["formats"].items():
            cells = [f"{f[name]['seconds']:.1f} ({f[name]['rows_per_s']:,})" for name in
                     ("connector_read", "builtin_read", "connector_job", "builtin_job")]
            cpu = f["connector_job"]["cpu_s_by_role"]
            table.add_row(fmt, n(f["rows"]), *cells, f"{n(cpu.get('jvm'), 0)} / {n(cpu.get('python_workers'), 0)}")
        console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=12, help="files per format")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cases", default="local-csv,local-json,local-parquet,s3-csv,s3-json,s3-parquet")
    parser.add_argument("--single", default="local-csv",
                        help="cases run again at maxNumConcurrentSubTasks 1")
    parser.add_argument("--default-hint", default="local-parquet",
                        help="a case run again with Druid's default splitHintSpec ('' for none)")
    parser.add_argument("--profile-files", type=int, default=4, help="files of each format the profile reads; 0: none")
    parser.add_argument("--warm-runs", type=int, default=3,
                        help="warm runs of each case, each variant; the fastest counts (runs differ by up to 25 %%)")
    parser.add_argument("--smoke", action="store_true",
                        help="~20k rows, one format per location, no profile: proves the script works")
    parser.add_argument("--timeout", type=float, default=1200.0, help="per task or child, seconds")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (data, node log, task dirs)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line (last line)")
    parser.add_argument("--child", choices=["pyspark", "profile"], help=argparse.SUPPRESS)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--warm-root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", default="", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "pyspark":
        emit(run_pyspark(args.case, args.root, args.endpoint, args.out, args.warm_runs), True)
        return
    if args.child == "profile":
        emit(run_profile(args.root, args.warm_root, args.profile_files, args.out), True)
        return
    split = lambda text: [c.strip() for c in text.split(",") if c.strip()]
    if args.smoke:
        options = Options(rows=20_000, files=4, seed=args.seed, cases=["local-csv", "s3-json"], single=["local-csv"],
                          default_hint=None, profile_files=0, warm_rows=2_000, timeout=args.timeout, warm_runs=1)
    else:
        options = Options(args.rows, args.files, args.seed, split(args.cases), split(args.single),
                          args.default_hint or None, args.profile_files, timeout=args.timeout, keep=args.keep,
                          warm_runs=args.warm_runs)
    result = orchestrate(options)
    from rich.console import Console

    print_tables(result, Console(stderr=args.json, width=160))
    emit(result, args.json)


if __name__ == "__main__":
    main()
