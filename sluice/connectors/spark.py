"""A source read by Spark: the coordinator on the driver, the readers in executors.

The coordinator (a `CoordinatorHost`) is served over HTTP from the driver's process; the read is a Python data
source, ``sluice_connector``, whose input partitions are the reader indexes. Each Spark task runs one reader:
it registers with the coordinator (with its attempt number), fetches the splits assigned to it, reads them,
and asks for more until the coordinator says nothing more comes::

    with ConnectorRead(spark, source, parallelism=2) as read:
        df = read.dataframe()          # the records, in source.output_schema()
        df.write.parquet(...)          # one Spark job; its tasks are the readers
        read.checkpoint_complete()     # the job's output is committed: no split is given back after this

`subtasks()` is the same read as one single-partition DataFrame per reader, for a job that works on each reader's
rows on their own (a batch task's subtasks, each rolling up and writing what it read). Local Parquet files are read
by Spark's own reader instead, where it makes the same records (`sluice.connectors.native`).

An unbounded source is read in epochs, one job each, over the same DataFrame: `next_epoch()` before each job,
`checkpoint_complete(epoch)` once its output is committed (a streaming task's persists).

Spark runs a failed task again as a new attempt of the same partition. The new attempt registers, the
coordinator gets the failed attempt's splits back and assigns them again, and the failed attempt's rows were
discarded with its output: every split is in the job's output exactly once. Retries need
`spark.task.maxFailures` above 1 — in local mode, a master such as ``local[2,4]`` (`spark_session`).
"""

from __future__ import annotations

import base64
import json
import pickle
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property, reduce
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from pyspark import cloudpickle
from pyspark.sql import DataFrame
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from sluice.connectors.api import Serializer, Source
from sluice.connectors.coordination import CoordinatorHost, Mailbox
from sluice.connectors.native import NativeReader, native_readers
from sluice.connectors.reading import read_assigned
from sluice.spark_worker import start_task

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrameReader, SparkSession

SOURCE_NAME = "sluice_connector"
#: the local property that carries the epoch of an unbounded read to the job's readers
EPOCH = "sluice.connector.epoch"
#: how long an executor keeps trying to reach the coordinator (the driver may be busy collecting garbage)
_CHANNEL_RETRY_S = 30.0
#: how often the coordinator's server looks for its shutdown, which the end of every read waits for (socketserver's
#: 0.5 s default cost a small batch task of 1.6 s about 0.45 s)
_SHUTDOWN_POLL_S = 0.02


class _Handler(BaseHTTPRequestHandler):
    server: _CoordinatorServer

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        host, splits = self.server.host, self.server.splits
        try:
            reader, attempt, epoch = int(body["reader"]), int(body.get("attempt", 0)), int(body.get("epoch", 0))
            answer: dict[str, Any] = {}
            if self.path == "/register":
                host.register(reader, attempt, epoch)
            elif self.path == "/poll":
                box = host.poll(reader, attempt, epoch)
                answer = {"splits": [_encode(splits.serialize(s)) for s in box.splits], "events": box.events,
                          "noMoreSplits": box.no_more_splits, "version": splits.version}
            elif self.path == "/request":
                host.request_split(reader, body.get("hostname"))
            elif self.path == "/event":
                host.source_event(reader, body["event"])
            elif self.path == "/progress":
                host.report_progress(reader, attempt, int(body["rows"]), int(body["bytes"]), int(body["splitsDone"]),
                                     epoch)
            else:
                self.send_error(404)
                return
            status, payload = 200, answer
        except Exception as error:  # noqa: BLE001 - the reader gets the coordinator's error as text
            status, payload = 500, {"error": f"{type(error).__name__}: {error}"}
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: one request per reader poll
        pass


class _CoordinatorServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, host: CoordinatorHost[Any, Any], bind: str) -> None:
        super().__init__((bind, 0), _Handler)
        self.host = host
        self.splits: Serializer[Any] = host.source.split_serializer()


class HttpChannel:
    """An executor's way to the coordinator on the driver."""

    def __init__(self, url: str, serializer: Serializer[Any]) -> None:
        self._url = url
        self._serializer = serializer

    def register(self, reader: int, attempt: int, epoch: int) -> None:
        self._post("/register", reader=reader, attempt=attempt, epoch=epoch)

    def poll(self, reader: int, attempt: int, epoch: int) -> Mailbox[Any]:
        answer = self._post("/poll", reader=reader, attempt=attempt, epoch=epoch)
        splits = [self._serializer.deserialize(answer["version"], _decode(s)) for s in answer["splits"]]
        return Mailbox(splits, answer["events"], answer["noMoreSplits"])

    def request_split(self, reader: int, hostname: str | None) -> None:
        self._post("/request", reader=reader, hostname=hostname)

    def source_event(self, reader: int, event: dict[str, Any]) -> None:
        self._post("/event", reader=reader, event=event)

    def report_progress(self, reader: int, attempt: int, rows: int, size: int, splits_done: int, epoch: int) -> None:
        self._post("/progress", reader=reader, attempt=attempt, rows=rows, bytes=size, splitsDone=splits_done,
                   epoch=epoch)

    def _post(self, path: str, **body: Any) -> dict[str, Any]:
        request = urllib.request.Request(self._url + path, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        deadline = time.monotonic() + _CHANNEL_RETRY_S
        while True:
            try:
                with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 - our own driver
                    return json.loads(response.read())
            except urllib.error.HTTPError as error:
                raise RuntimeError(f"split coordinator at {self._url}: {json.loads(error.read()).get('error')}") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"split coordinator at {self._url} unreachable: {error}") from error
                time.sleep(0.5)


@dataclass(frozen=True)
class ReaderPartition(InputPartition):
    index: int


class _ConnectorReader(DataSourceReader):
    def __init__(self, source: Source[Any, Any], url: str, readers: range) -> None:
        self.source = source
        self.url = url
        self.readers = readers

    def partitions(self) -> list[InputPartition]:
        return [ReaderPartition(i) for i in self.readers]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        start_task()

        context = TaskContext.get()
        attempt = context.attemptNumber() if context is not None else 0
        epoch = context.getLocalProperty(EPOCH) if context is not None else None
        channel = HttpChannel(self.url, self.source.split_serializer())
        assert isinstance(partition, ReaderPartition)
        return read_assigned(self.source, partition.index, attempt, channel, int(epoch or 0))


class ConnectorDataSource(DataSource):
    """Options: ``source`` (the pickled Source, base64), ``coordinator`` (the driver's URL), ``parallelism``, and
    ``reader`` (only that reader's partition; all of them without it)."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _source(self) -> Source[Any, Any]:
        return pickle.loads(_decode(self.options["source"]))  # noqa: S301 - written by ConnectorRead below

    def schema(self) -> StructType:
        return from_arrow_schema(self._source().output_schema())

    def reader(self, schema: StructType) -> DataSourceReader:
        reader = self.options.get("reader")
        readers = range(int(self.options["parallelism"])) if reader is None else range(int(reader), int(reader) + 1)
        return _ConnectorReader(self._source(), self.options["coordinator"], readers)


class ConnectorRead:
    """One read of a source by Spark: the coordinator served for as long as the read lives."""

    def __init__(self, spark: SparkSession, source: Source[Any, Any], parallelism: int, bind: str | None = None) -> None:
        self.spark = spark
        self.source = source
        self.parallelism = parallelism
        self.host: CoordinatorHost[Any, Any] = CoordinatorHost(source, parallelism)
        self._epoch = 0
        #: Spark's own reader for each reader's splits, once decided (`_native_readers`)
        self._native: list[NativeReader] | None = None
        self._native_decided = False
        address = bind or spark.conf.get("spark.driver.host", "127.0.0.1") or "127.0.0.1"
        self._server = _CoordinatorServer(self.host, address)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(_SHUTDOWN_POLL_S,),
                                        name="split-coordinator", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ConnectorRead:
        register(self.spark)
        self.host.start()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.host.close()
        if self._epoch:  # a later read's jobs in this thread are not epochs of this one
            self.spark.sparkContext.setLocalProperty(EPOCH, None)

    def dataframe(self) -> DataFrame:
        native = self._native_readers()
        if native is not None:
            return reduce(DataFrame.union, (reader.records for reader in native))
        return self._load().load()

    def subtasks(self) -> list[DataFrame]:
        """One DataFrame per reader, each a single Spark partition (Spark's own reader's, several, where it reads
        them); in one job (their union), still one Spark task per reader, asking the same coordinator for splits."""
        native = self._native_readers()
        if native is not None:
            return [reader.records for reader in native]
        return [self._load().option("reader", str(i)).load() for i in range(self.parallelism)]

    def _native_readers(self) -> list[NativeReader] | None:
        """Decided at the read's first DataFrame, once: Spark's readers take their splits from the coordinator."""
        if not self._native_decided:
            self._native = native_readers(self.spark, self.host, self.parallelism)
            self._native_decided = True
        return self._native

    def _load(self) -> DataFrameReader:
        return (self.spark.read.format(SOURCE_NAME).option("source", self._pickled_source)
                .option("coordinator", self.url).option("parallelism", str(self.parallelism)))

    @cached_property
    def _pickled_source(self) -> str:
        """Pickled once for every DataFrame of the read (a subtask's each); cloudpickle: a source defined in a notebook
        or a script travels by value."""
        return _encode(cloudpickle.dumps(self.source))

    def checkpoint_complete(self, checkpoint_id: int = 1) -> None:
        for index, reader in enumerate(self._native or ()):  # read through, as its job's output is committed
            self.host.report_progress(index, 0, reader.rows, reader.size, reader.splits)
        self.host.checkpoint_complete(checkpoint_id)

    def next_epoch(self) -> int:
        """Make the next job this thread starts the next epoch of an unbounded read (`dataframe()` built once
        serves them all); once its output is committed, `checkpoint_complete(epoch)`."""
        self._epoch += 1
        self.host.begin_epoch(self._epoch)
        self.spark.sparkContext.setLocalProperty(EPOCH, str(self._epoch))
        return self._epoch


_registered: set[int] = set()


def register(spark: SparkSession) -> None:
    """Make ``spark.read.format("sluice_connector")`` available in this session (once)."""
    if id(spark) not in _registered:
        spark.dataSource.register(ConnectorDataSource)
        _registered.add(id(spark))


def _encode(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _decode(text: str) -> bytes:
    return base64.b64decode(text)
