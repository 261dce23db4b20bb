"""The same rows loaded through every input source × format, end to end (task on Spark, segments, Druid SQL): each
load answers exactly what the test computes from the rows it wrote."""

from __future__ import annotations

import csv
import gzip
import io
import json
import sqlite3
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from moto.server import ThreadedMotoServer

from sluice.dev.tansu import DevKafkaBroker
from tests.integration.harness import free_port, sql
from tests.integration.test_batch_ingestion import by_channel, rows, run, task, totals

EVENTS = rows(240) + rows(160, "2024-03-02", seed=3)
COLUMNS = ["ts", "channel", "page", "added", "deleted"]


def encode(fmt: str) -> bytes:
    if fmt in ("json", "json.gz"):
        text = "\n".join(json.dumps(e) for e in EVENTS).encode()
        return gzip.compress(text) if fmt == "json.gz" else text
    if fmt in ("csv", "tsv"):
        out = io.StringIO()
        writer = csv.writer(out, delimiter="," if fmt == "csv" else "\t", lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows([e[c] for c in COLUMNS] for e in EVENTS)
        return out.getvalue().encode()
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(EVENTS), buffer)
    return buffer.getvalue()


INPUT_FORMATS = {
    "json": {"type": "json"}, "json.gz": {"type": "json"}, "parquet": {"type": "parquet"},
    "csv": {"type": "csv", "findColumnsFromHeader": True},
    "tsv": {"type": "tsv", "columns": COLUMNS, "skipHeaderRows": 1},
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("batch-sources")
    for fmt in INPUT_FORMATS:
        directory = root / fmt.replace(".", "_")
        directory.mkdir()
        half = len(EVENTS) // 2
        if fmt == "parquet":  # two files, so that two readers share the work
            for i, part in enumerate((EVENTS[:half], EVENTS[half:])):
                pq.write_table(pa.Table.from_pylist(part), directory / f"part-{i}.{fmt}")
        else:
            (directory / f"events.{fmt}").write_bytes(encode(fmt))
    return root


@pytest.fixture(scope="module")
def web(files: Path) -> Iterator[str]:
    handler = lambda *a, **k: SimpleHTTPRequestHandler(*a, directory=str(files), **k)  # noqa: E731
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.RequestHandlerClass.log_message = lambda *a: None  # type: ignore[method-assign]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def s3(files: Path) -> Iterator[str]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="k", aws_secret_access_key="s",
                          region_name="us-east-1")
    client.create_bucket(Bucket="history")
    for path in files.rglob("*.*"):
        client.put_object(Bucket="history", Key=str(path.relative_to(files)), Body=path.read_bytes())
    yield endpoint
    server.stop()


def file_source(kind: str, fmt: str, files: Path, web: str, s3: str) -> dict[str, Any]:
    folder = fmt.replace(".", "_")
    names = sorted(p.name for p in (files / folder).iterdir())
    if kind == "local":
        return {"type": "local", "baseDir": str(files / folder), "filter": f"*.{fmt}"}
    if kind == "http":
        return {"type": "http", "uris": [f"{web}/{folder}/{name}" for name in names]}
    if kind == "s3":
        return {"type": "s3", "prefixes": [f"s3://history/{folder}/"], "endpointConfig": {"url": s3},
                "clientConfig": {"protocol": "http", "enablePathStyleAccess": True},
                "properties": {"accessKeyId": "k", "secretAccessKey": "s"}}
    return {"type": "inline", "data": encode(fmt).decode()}


@pytest.mark.parametrize(("kind", "fmt"), [
    ("local", "json"), ("local", "json.gz"), ("local", "csv"), ("local", "tsv"), ("local", "parquet"),
    ("http", "json.gz"), ("http", "csv"), ("http", "parquet"),
    ("s3", "json"), ("s3", "tsv"), ("s3", "parquet"),
    ("inline", "json"), ("inline", "csv"),
])
def test_files_from_every_source_in_every_format_answer_alike(http, files, web, s3, kind, fmt):
    data_source = f"src_{kind}_{fmt.replace('.', '_')}"
    run(http, task(data_source, file_source(kind, fmt, files, web, s3), INPUT_FORMATS[fmt]))
    assert by_channel(http, data_source) == totals(EVENTS)


def test_rows_of_a_sql_database_cut_into_key_ranges(http, tmp_path):
    database = tmp_path / "history.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE edits (id INTEGER, ts TEXT, channel TEXT, page TEXT, added INTEGER, "
                           "deleted INTEGER)")
        connection.executemany("INSERT INTO edits VALUES (?, ?, ?, ?, ?, ?)",
                               [(i, *(e[c] for c in COLUMNS)) for i, e in enumerate(EVENTS)])
    source = {"type": "sql", "database": {"type": "sqlite", "connectorConfig": {"connectURI": f"jdbc:sqlite:{database}"}},
              "sqls": ["SELECT * FROM edits WHERE id % 2 = 0", "SELECT * FROM edits WHERE id % 2 = 1"],
              "splitColumn": "id", "numSplits": 3}
    run(http, task("src_sql", source))
    assert by_channel(http, "src_sql") == totals(EVENTS)


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_bounded_kafka_range(http, kafka_broker: DevKafkaBroker, fmt):
    from confluent_kafka import Producer

    topic = f"history-{fmt}"
    kafka_broker.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    lines = encode(fmt).decode().splitlines()[1 if fmt == "csv" else 0:]
    for i, line in enumerate(lines):
        producer.produce(topic, line.encode(), partition=i % 2)
    producer.flush(30)
    for partition in (0, 1):  # the dev broker's offset quirk: end each partition with one record of its own
        producer.produce(topic, b"", partition=partition)
        producer.flush(30)
    fmt_spec = {"type": "csv", "columns": COLUMNS} if fmt == "csv" else {"type": "json"}
    source = {"type": "kafka", "topic": topic, "consumerProperties": {"bootstrap.servers": kafka_broker.bootstrap_servers}}
    result = run(http, task(f"src_kafka_{fmt}", source, fmt_spec))
    assert by_channel(http, f"src_kafka_{fmt}") == totals(EVENTS)
    assert result["report"]["payload"]["rowStats"]["buildSegments"]["unparseable"] == 2  # the two empty records


@pytest.mark.parametrize(("kind", "fmt", "fields"), [
    ("local", "parquet", ["__file_uri", "__file_path"]),
    ("http", "csv", ["__file_uri", "__file_path"]),
    ("s3", "json", ["__file_uri", "__file_bucket", "__file_path"]),
])
def test_system_fields_name_the_file_each_row_came_from(http, files, web, s3, kind, fmt, fields):
    """Druid's systemFields as dimensions: the local file's `file:` URI and absolute path, the HTTP URI and its
    path, the S3 object's URI, bucket and key."""
    data_source = f"sys_{kind}_{fmt}"
    source = {**file_source(kind, fmt, files, web, s3), "systemFields": fields}
    payload = task(data_source, source, INPUT_FORMATS[fmt])
    payload["spec"]["dataSchema"]["dimensionsSpec"]["dimensions"] = ["channel", *fields]
    run(http, payload)
    folder = fmt.replace(".", "_")
    names = sorted(p.name for p in (files / folder).iterdir())
    expected = {
        "local": [(f"file:{files / folder / n}", str(files / folder / n)) for n in names],
        "http": [(f"{web}/{folder}/{n}", f"/{folder}/{n}") for n in names],
        "s3": [(f"s3://history/{folder}/{n}", "history", f"{folder}/{n}") for n in names],
    }[kind]
    columns = ", ".join(f'"{f}"' for f in fields)
    answer = sql(http, f'SELECT {columns}, SUM("count") AS n FROM {data_source} GROUP BY {columns} ORDER BY 1')
    assert [tuple(row[f] for f in fields) for row in answer] == expected
    assert sum(row["n"] for row in answer) == len(EVENTS)
