"""The one SparkSession of a Sluice process.

A session takes 4–10 s to start on a small machine, so it is created once per process and reused.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import pyspark
from pyspark import SparkContext
from pyspark.sql import SparkSession

import sluice

#: G1 with a fixed young generation and a heap that shrinks to what is live (see get_or_create); and JIT thresholds
#: ten times the default. Every persist is a Spark job, and each job runs Spark's analyser, optimiser and planner
#: once: at default thresholds the JIT kept compiling that code job after job, 5-9 of a warm task's 15 JVM CPU
#: seconds per million events (`jstat -compiler`). Per-row code still reaches the higher thresholds within the first
#: job; a task then reads 10-20 % faster, cold and warm (issue 19's note has the runs).
_JVM_OPTIONS = ("-XX:+UseG1GC -Xmn256m -XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=20 -XX:G1PeriodicGCInterval=5000 "
                "-XX:CompileThresholdScaling=10")


#: Spark's classes as the JVM has them once loaded (a dynamic class-data-sharing archive, JDK 13+), written once per
#: install by `write_class_archive`: a JVM that maps it instead of loading, verifying and linking every class from
#: the jars started its session in 6 s instead of 12 and ran its first persist sooner; a test of peons killed and
#: replaced took 136 s instead of 177. A JDK other than the one that wrote it says so on stderr and runs without.
CLASS_ARCHIVE = Path(sys.prefix) / "share" / "sluice" / f"spark-{pyspark.__version__}.jsa"


#: host names of a master that can only reach a driver on loopback
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def cluster_settings(master: str) -> dict[str, str]:
    """What a driver needs on a cluster (``spark://``, ``k8s://``, …) and not in local mode, where the executors are
    threads of the driver.

    - Python workers are started with ``PYSPARK_PYTHON`` (the driver's interpreter path): every executor machine has
      the same virtualenv at the same path. ``sluice`` is put on their ``PYTHONPATH`` from where the driver imports
      it, for a source checkout that is not installed in that virtualenv.
    - A master on loopback can only reach a driver on loopback; Spark would otherwise advertise the first non-loopback
      address it finds when the host name resolves to 127.0.0.1.

    Executor memory and cores are Spark's (1g; every core of a standalone worker, every worker's cores for one
    application) unless ``SPARK_EXECUTOR_MEMORY`` or a ``spark-defaults.conf`` in ``SPARK_CONF_DIR`` says otherwise.
    """
    if master.startswith("local"):
        return {}
    settings = {"spark.executorEnv.PYTHONPATH": str(Path(sluice.__file__).parents[1])}
    if urlsplit(master.split(",")[0]).hostname in _LOOPBACK:
        settings["spark.driver.host"] = "127.0.0.1"
    return settings


def get_or_create(master: str = "local[*,4]", app_name: str = "sluice") -> SparkSession:
    """Return the process's SparkSession, creating it with Sluice's settings on first use.

    In local mode the master names its task retries, as a cluster's `spark.task.maxFailures` (4) does:
    ``local[2,4]`` runs a failed task up to four times. A batch read relies on it: a reader that fails is run
    again, and the splits it had are read again (`sluice.connectors.spark`).

    ``PYSPARK_PYTHON`` points the Python workers at this interpreter (the one with pyarrow and
    confluent-kafka) instead of whatever ``python3`` is on PATH; session time zone is UTC so
    timestamps never depend on the host; shuffle partitions are few because ingestion batches are
    small; the UI is off to save memory and a port.

    Ingestion semantics depend on three more: non-ANSI casts turn a bad value into NULL (a
    processedWithError row) instead of failing the job; the CORRECTED time parser returns NULL for
    an unparseable timestamp instead of raising; segments store `__time` as Parquet
    TIMESTAMP_MILLIS (UTC-adjusted, Druid's precision) rather than legacy INT96. Column names are
    case-sensitive, as Druid's are. Adaptive execution is off: ingestion jobs are small and fixed in
    shape, and with it on an observed rollup over zero surviving rows fails in `Observation.get`.

    Memory: a task's rows in flight are bounded by maxRowsInMemory, but the JVM's footprint is set by
    its garbage collector. G1 sizes the young generation to the allocation rate and grew the heap to
    its 2 GB cap within a few reads whatever maxRowsInMemory said; a fixed young generation leaves
    the heap at what is live (the reads' aggregation pages and Parquet buffers), the free-ratio
    bounds let it shrink back, and the periodic collection returns memory while tasks are idle. The
    parallel collector, so bounded, used less (770 MB peak against 890-1,120) and ingested a backlog
    5-10 % faster, but its pauses put half a second on the freshness p50 (2.3 s against 1.8 s,
    `benchmarks/freshness.py`): a realtime node keeps G1. The status store keeps a few jobs instead of
    a thousand: a node runs a job per read for days.

    On a cluster, see `cluster_settings`. The driver maps `CLASS_ARCHIVE` where it exists.
    """
    archive = f" -XX:SharedArchiveFile={CLASS_ARCHIVE}" if CLASS_ARCHIVE.exists() else ""
    return _session(master, app_name, _JVM_OPTIONS + archive)


def write_class_archive() -> Path:
    """Write `CLASS_ARCHIVE`: a session's JVM runs a task's warm-up (a read, a persist, a merge) and archives the
    classes it loaded as it exits. About a minute; the archive is some 200 MB."""
    from sluice.task.pipeline import warm_up

    CLASS_ARCHIVE.parent.mkdir(parents=True, exist_ok=True)
    partial = CLASS_ARCHIVE.with_suffix(".partial")
    # the JVM lists every class it cannot archive (generated accessors, signed jars): noise, not failures
    session = _session("local[2]", "sluice-class-archive",
                       f"{_JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial} -Xlog:cds=off -Xlog:cds+dynamic=off")
    with tempfile.TemporaryDirectory() as work_dir:
        warm_up(session, Path(work_dir))
    session.stop()
    jvm = SparkContext._gateway.proc  # type: ignore[union-attr]  # the JVM archives as it exits, on EOF on its stdin
    jvm.stdin.close()
    jvm.wait(timeout=600)
    if not partial.exists():
        raise RuntimeError(f"the JVM exited ({jvm.returncode}) without writing {partial}")
    shutil.move(partial, CLASS_ARCHIVE)
    return CLASS_ARCHIVE


def _session(master: str, app_name: str, java_options: str) -> SparkSession:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config(map=cluster_settings(master))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.ansi.enabled", "false")
        .config("spark.sql.caseSensitive", "true")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.legacy.timeParserPolicy", "CORRECTED")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MILLIS")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.extraJavaOptions", java_options)
        .config("spark.ui.retainedJobs", "50")
        .config("spark.ui.retainedStages", "50")
        .config("spark.sql.ui.retainedExecutions", "20")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # Spark talks to its Python workers over Unix sockets: over TCP on loopback each Spark task that ran Python
        # (a data source's reader, a UDF) stalled some 40 ms; a small job of a Python data source took 83 ms against
        # 40, a mapInArrow job 90 against 52 (README, Performance)
        .config("spark.python.unix.domain.socket.enabled", "true")
        # a malformed JSON record parses to no field at all, never to the fields before the error
        .config("spark.sql.json.enablePartialResults", "false")
        # a persist or a merge is one job writing a task's own directory, which the task drops on failure:
        # committing each file in place (v2) and no _SUCCESS marker spare every small job two renames
        .config("spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version", "2")
        .config("spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs", "false")
        # a union of single-partition branches (a batch task's subtasks) stays one Spark task per branch; Spark's
        # default would run them all in one task, as one partition
        .config("spark.sql.unionOutputPartitioning", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
