"""File input sources read for real, without Spark (`read_all`): local files (filter, recursion, `files`, every
compression), HTTP from a server on loopback (basic auth, retried 5xx, 404), S3 from moto's server on loopback
(prefixes, uris, objects, objectGlob), inline data, and a combining source of local and inline files.

Each test writes its input, computes the rows it expects from what it wrote, and compares them with what the
source read."""

from __future__ import annotations

import base64
import bz2
import gzip
import io
import json
import lzma
import pickle
import sqlite3
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from moto.server import ThreadedMotoServer
from pydantic import TypeAdapter

from sluice.connectors.reading import read_all
from sluice.connectors.sources import create_source
from sluice.dev import free_port
from sluice.spec.errors import SpecError
from sluice.spec.input_format import RecordFormat
from sluice.spec.input_source import InputSource, MaxSizeSplitHint

FIELDS = ["page", "added"]
JSON = TypeAdapter(RecordFormat).validate_python({"type": "json"})
CSV = TypeAdapter(RecordFormat).validate_python({"type": "csv", "columns": ["page", "added"]})


def _source(spec: dict[str, Any], fmt: Any = JSON, hint: MaxSizeSplitHint | None = None, **kwargs: Any) -> Any:
    return create_source(TypeAdapter(InputSource).validate_python(spec), fmt, FIELDS, hint, **kwargs)


def _events(tag: str, n: int) -> list[str]:
    """`n` JSON lines, each one distinct, as a Druid JSON file holds them."""
    return [json.dumps({"page": f"{tag}-{i}", "added": i}) for i in range(n)]


def _text(lines: list[str]) -> bytes:
    return "".join(f"{line}\n" for line in lines).encode()


def _values(table: pa.Table) -> list[str]:
    """The raw JSON lines read, sorted (readers run in any order)."""
    return sorted(v.decode().rstrip("\r\n") for v in table.column("value").to_pylist())


# -- local ---------------------------------------------------------------------------------------------------


def test_local_reads_matching_files_under_base_dir_recursively(tmp_path: Path) -> None:
    (tmp_path / "2024" / "01").mkdir(parents=True)
    top, nested, other = _events("top", 3), _events("nested", 4), _events("other", 5)
    (tmp_path / "wiki-top.json").write_bytes(_text(top))
    (tmp_path / "2024" / "01" / "wiki-nested.json").write_bytes(_text(nested))
    (tmp_path / "2024" / "notes.txt").write_bytes(_text(other))       # the filter is on the file name
    (tmp_path / "2024" / "wiki-empty.json").write_bytes(b"")          # empty files are skipped

    source = _source({"type": "local", "baseDir": str(tmp_path), "filter": "wiki-*.json"})
    assert len(source.enumerate_splits()) == 1
    assert _values(read_all(source)) == sorted(top + nested)


def test_local_files_are_read_after_the_directory_and_leave_out_same_named_files(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "extra").mkdir()
    in_dir, same_name, listed = _events("dir", 2), _events("same", 3), _events("listed", 4)
    (tmp_path / "dir" / "a.json").write_bytes(_text(in_dir))
    (tmp_path / "dir" / "b.json").write_bytes(_text(same_name))   # named like a listed file: Druid skips it
    (tmp_path / "extra" / "b.json").write_bytes(_text(listed))

    source = _source({"type": "local", "baseDir": str(tmp_path / "dir"), "filter": "*",
                      "files": [str(tmp_path / "extra" / "b.json")]})
    assert _values(read_all(source)) == sorted(in_dir + listed)


def _compressed(suffix: str, data: bytes) -> bytes:
    if suffix == ".gz":
        return gzip.compress(data)
    if suffix == ".bz2":
        return bz2.compress(data)
    if suffix == ".xz":
        return lzma.compress(data)
    if suffix == ".zst":
        return pa.Codec("zstd").compress(data, asbytes=True)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("events.json", data)
    return buffer.getvalue()


def test_local_decompresses_each_file_by_its_suffix(tmp_path: Path) -> None:
    expected = []
    for suffix in (".gz", ".bz2", ".xz", ".zst", ".zip"):
        lines = _events(suffix.lstrip("."), 50)
        (tmp_path / f"events.json{suffix}").write_bytes(_compressed(suffix, _text(lines)))
        expected += lines
    plain = _events("plain", 7)
    (tmp_path / "events.json").write_bytes(_text(plain))

    table = read_all(_source({"type": "local", "baseDir": str(tmp_path), "filter": "events.json*"}), parallelism=3)
    assert table.num_rows == 257
    assert _values(table) == sorted(expected + plain)


def test_local_splits_follow_max_split_size_and_max_num_files(tmp_path: Path) -> None:
    expected = []
    for i in range(6):
        lines = _events(f"f{i}", 10)
        (tmp_path / f"f{i}.json").write_bytes(_text(lines))
        expected += lines
    size = (tmp_path / "f0.json").stat().st_size
    spec = {"type": "local", "baseDir": str(tmp_path), "filter": "*.json"}

    by_size = _source(spec, hint=MaxSizeSplitHint(maxSplitSize=2 * size + 1))   # two files stay below it
    assert [len(s.files) for s in by_size.enumerate_splits()] == [2, 2, 2]
    by_count = _source(spec, hint=MaxSizeSplitHint(maxNumFiles=4))
    assert [len(s.files) for s in by_count.enumerate_splits()] == [4, 2]
    one_each = _source(spec, hint=MaxSizeSplitHint(maxSplitSize=size))
    assert len(one_each.enumerate_splits()) == 6
    for source in (by_size, by_count, one_each):
        assert _values(read_all(source, parallelism=4)) == sorted(expected)


def test_a_pickled_local_source_reads_the_same_rows(tmp_path: Path) -> None:
    lines = _events("p", 20)
    (tmp_path / "p.json.gz").write_bytes(gzip.compress(_text(lines)))
    source = _source({"type": "local", "files": [str(tmp_path / "p.json.gz")]})
    source.output_schema()  # the parser is built: it must not travel with the source
    copy = pickle.loads(pickle.dumps(source))
    assert "parser" not in copy.__dict__
    assert _values(read_all(copy)) == sorted(lines)


@pytest.mark.parametrize(("spec", "field"), [
    ({"baseDir": "/no/such/dir", "filter": "*"}, "ioConfig.inputSource.baseDir"),
    ({"files": ["/no/such/file.json"]}, "ioConfig.inputSource.files[0]"),
])
def test_a_missing_base_dir_or_file_is_named(spec: dict[str, Any], field: str) -> None:
    source = _source({"type": "local", **spec})
    with pytest.raises(SpecError, match="/no/such") as raised:
        source.enumerate_splits()
    assert raised.value.path == field


# -- inline and combining ---------------------------------------------------------------------------------------


def test_inline_data_is_one_file_named_inline() -> None:
    lines = _events("inline", 5)
    source = _source({"type": "inline", "data": _text(lines).decode()})
    [split] = source.enumerate_splits()
    assert [f.uri for f in split.files] == ["inline"]
    table = read_all(source)
    assert _values(table) == sorted(lines)
    assert all(locator.startswith("inline") for locator in table.column("__locator").to_pylist())


def test_combining_reads_every_delegate(tmp_path: Path) -> None:
    local, inline = _events("local", 6), _events("inline", 3)
    (tmp_path / "a.json").write_bytes(_text(local))
    source = _source({"type": "combining", "delegates": [
        {"type": "local", "baseDir": str(tmp_path), "filter": "*.json"},
        {"type": "inline", "data": _text(inline).decode()},
    ]})
    splits = source.enumerate_splits()
    assert [s.delegate for s in splits] == [0, 1]
    assert len({s.split_id for s in splits}) == 2
    assert _values(read_all(pickle.loads(pickle.dumps(source)))) == sorted(local + inline)


# -- create_source's refusals ------------------------------------------------------------------------------------


def test_a_file_source_needs_an_input_format() -> None:
    with pytest.raises(SpecError, match="inputFormat is required for a inline input source"):
        _source({"type": "inline", "data": "{}"}, fmt=None)


def test_sql_and_druid_take_no_input_format_and_druid_needs_a_metadata_store() -> None:
    sql = {"type": "sql", "database": {"type": "sqlite", "connectorConfig": {"connectURI": "jdbc:sqlite:/x.db"}},
           "sqls": ["SELECT 1"]}
    with pytest.raises(SpecError, match="takes no inputFormat"):
        _source(sql)
    druid = {"type": "druid", "dataSource": "wiki", "interval": "2024-01-01/2024-01-02"}
    with pytest.raises(SpecError, match="needs a metadata store"):
        _source(druid, fmt=None)
    made = []
    assert _source(druid, fmt=None, druid=lambda spec, fields: made.append((spec.data_source, fields)) or "reader") \
        == "reader"
    assert made == [("wiki", FIELDS)]


# -- http ------------------------------------------------------------------------------------------------------


class _Server:
    """An HTTP file server on loopback that wants basic auth, and counts the requests for each path."""

    USER, PASSWORD = "druid", "s3cret"

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.failures: dict[str, int] = {}     # path -> how many 500s to answer before the file
        self.requests: dict[str, int] = {}
        self.headers: list[dict[str, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                server.requests[path] = server.requests.get(path, 0) + 1
                server.headers.append(dict(self.headers))
                expected = "Basic " + base64.b64encode(f"{server.USER}:{server.PASSWORD}".encode()).decode()
                if self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="files"')
                    self.end_headers()
                elif server.failures.get(path, 0) > 0:
                    server.failures[path] -= 1
                    self.send_response(500)
                    self.end_headers()
                elif path not in server.files:
                    self.send_response(404)
                    self.end_headers()
                else:
                    body = server.files[path]
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_port}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)


@pytest.fixture
def server() -> Iterator[_Server]:
    files = _Server()
    files.thread.start()
    yield files
    files.http.shutdown()
    files.http.server_close()


def _http(server: _Server, paths: list[str], password: Any = _Server.PASSWORD, fmt: Any = JSON, **more: Any) -> Any:
    return _source({"type": "http", "uris": [server.url + p for p in paths],
                    "httpAuthenticationUsername": _Server.USER, "httpAuthenticationPassword": password, **more}, fmt)


def test_http_reads_each_uri_as_a_split_with_basic_auth_and_headers(server: _Server) -> None:
    plain, zipped = _events("plain", 4), _events("gz", 6)
    server.files["/plain.json"] = _text(plain)
    server.files["/zipped.json.gz"] = gzip.compress(_text(zipped))
    source = _http(server, ["/plain.json", "/zipped.json.gz?signature=abc"],
                   password={"type": "default", "password": _Server.PASSWORD},
                   requestHeaders={"X-Tenant": "wiki"})
    assert len(source.enumerate_splits()) == 2
    assert _values(read_all(pickle.loads(pickle.dumps(source)))) == sorted(plain + zipped)
    assert all(h.get("X-Tenant") == "wiki" for h in server.headers)


def test_http_without_the_right_password_fails_naming_the_uri(server: _Server) -> None:
    server.files["/plain.json"] = _text(_events("x", 1))
    with pytest.raises(PermissionError, match=f"{server.url}/plain.json.*401"):
        read_all(_http(server, ["/plain.json"], password="wrong"))
    assert server.requests["/plain.json"] == 1  # refused at once, not retried


def test_http_password_from_the_environment(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _events("env", 2)
    server.files["/env.json"] = _text(lines)
    monkeypatch.setenv("SLUICE_TEST_HTTP_PASSWORD", _Server.PASSWORD)
    source = _http(server, ["/env.json"], password={"type": "environment", "variable": "SLUICE_TEST_HTTP_PASSWORD"})
    assert _values(read_all(source)) == sorted(lines)


def test_http_retries_a_uri_that_answers_500_and_reads_it_once(server: _Server) -> None:
    lines = _events("flaky", 5)
    server.files["/flaky.json"] = _text(lines)
    server.failures["/flaky.json"] = 2
    assert _values(read_all(_http(server, ["/flaky.json"]))) == sorted(lines)
    assert server.requests["/flaky.json"] == 3


def test_http_404_fails_at_once_naming_the_uri(server: _Server) -> None:
    with pytest.raises(FileNotFoundError, match=f"{server.url}/gone.json.*404"):
        read_all(_http(server, ["/gone.json"]))
    assert server.requests["/gone.json"] == 1


# -- s3 --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def s3() -> Iterator[str]:
    """moto's S3 on loopback, with bucket `wiki` holding JSON files under `logs/`."""
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


S3_OBJECTS = {
    "logs/2024-01/a.json": _events("jan-a", 5),
    "logs/2024-01/b.json.gz": _events("jan-b", 7),
    "logs/2024-02/c.json": _events("feb-c", 3),
    "logs/2024-02/notes.txt": _events("feb-notes", 2),
    "logs/2024-020.json": _events("feb-sibling", 4),
    "other/d.json": _events("other-d", 6),
}


@pytest.fixture(scope="module")
def bucket(s3: str) -> str:
    client = boto3.client("s3", endpoint_url=s3, aws_access_key_id="test", aws_secret_access_key="test",
                          region_name="us-east-1")
    client.create_bucket(Bucket="wiki")
    for key, lines in S3_OBJECTS.items():
        body = _text(lines)
        client.put_object(Bucket="wiki", Key=key, Body=gzip.compress(body) if key.endswith(".gz") else body)
    client.put_object(Bucket="wiki", Key="logs/2024-02/empty.json", Body=b"")
    return "wiki"


def _s3(endpoint: str, fmt: Any = JSON, **spec: Any) -> Any:
    return _source({"type": "s3", "endpointConfig": {"url": endpoint, "signingRegion": "us-east-1"},
                    "clientConfig": {"protocol": "http", "enablePathStyleAccess": True},
                    "properties": {"accessKeyId": "test", "secretAccessKey": "test"}, **spec}, fmt)


def _lines(*keys: str) -> list[str]:
    return sorted(line for key in keys for line in S3_OBJECTS[key])


def test_s3_prefixes_list_every_object_whose_key_starts_with_them(s3: str, bucket: str) -> None:
    source = _s3(s3, prefixes=[f"s3://{bucket}/logs/2024-02"])   # a key prefix, not a folder
    assert [f.uri for s in source.enumerate_splits() for f in s.files] == [
        "s3://wiki/logs/2024-02/c.json", "s3://wiki/logs/2024-02/notes.txt", "s3://wiki/logs/2024-020.json"]
    assert _values(read_all(source)) == _lines("logs/2024-02/c.json", "logs/2024-02/notes.txt", "logs/2024-020.json")


def test_s3_object_glob_filters_keys_with_java_glob_rules(s3: str, bucket: str) -> None:
    everything = _s3(s3, prefixes=[f"s3://{bucket}/"], objectGlob="**.json*")
    assert _values(read_all(everything, parallelism=3)) == _lines(
        *(key for key in S3_OBJECTS if ".json" in key))
    one_level = _s3(s3, prefixes=[f"s3://{bucket}/logs/"], objectGlob="logs/*.json")
    assert _values(read_all(one_level)) == _lines("logs/2024-020.json")


def test_s3_uris_and_objects_name_objects(s3: str, bucket: str) -> None:
    keys = ["logs/2024-01/b.json.gz", "other/d.json"]
    by_uri = _s3(s3, uris=[f"s3://{bucket}/{key}" for key in keys])
    by_object = _s3(s3, objects=[{"bucket": bucket, "path": key} for key in keys], objectGlob="other/**")
    assert _values(read_all(by_uri)) == _lines(*keys)
    assert _values(read_all(pickle.loads(pickle.dumps(by_object)))) == _lines("other/d.json")


def test_s3_a_missing_object_is_named(s3: str, bucket: str) -> None:
    with pytest.raises(SpecError, match="s3://wiki/logs/nope.json") as raised:
        _s3(s3, uris=[f"s3://{bucket}/logs/nope.json"]).enumerate_splits()
    assert raised.value.path == "ioConfig.inputSource.uris[0]"


def test_s3_without_properties_reads_the_aws_environment(s3: str, bucket: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3)
    source = _source({"type": "s3", "clientConfig": {"enablePathStyleAccess": True},
                      "uris": [f"s3://{bucket}/other/d.json"]})
    assert _values(read_all(source)) == _lines("other/d.json")


# -- csv ------------------------------------------------------------------------------------------------------


def _rows(tag: str, n: int) -> list[tuple[str, str]]:
    return [(f"{tag}-{i}", str(i * 3)) for i in range(n)]


def _csv(rows: list[tuple[str, str]], header: bool = False) -> bytes:
    return "".join(f"{a},{b}\n" for a, b in ([("page", "added")] if header else []) + rows).encode()


def _columns(table: pa.Table) -> list[tuple[str, str]]:
    return sorted(zip(table.column("page").to_pylist(), table.column("added").to_pylist(), strict=True))


def test_csv_files_are_parsed_into_columns_each_with_its_own_header(tmp_path: Path) -> None:
    plain, zipped = _rows("plain", 4), _rows("gz", 9)
    (tmp_path / "a.csv").write_bytes(_csv(plain, header=True))
    (tmp_path / "b.csv.gz").write_bytes(gzip.compress(_csv(zipped, header=True)))
    header = TypeAdapter(RecordFormat).validate_python({"type": "csv", "findColumnsFromHeader": True})
    table = read_all(_source({"type": "local", "baseDir": str(tmp_path), "filter": "*.csv*"}, fmt=header))
    assert table.schema.names == ["__locator", "__error", "page", "added"]
    assert table.column("__error").null_count == table.num_rows == 13
    assert _columns(table) == sorted(plain + zipped)


def test_csv_from_s3_and_http(s3: str, bucket: str, server: _Server) -> None:
    from_s3, from_http = _rows("s3", 6), _rows("http", 5)
    boto3.client("s3", endpoint_url=s3, aws_access_key_id="test", aws_secret_access_key="test",
                 region_name="us-east-1").put_object(Bucket=bucket, Key="csv/x.csv.bz2", Body=bz2.compress(_csv(from_s3)))
    server.files["/y.csv"] = _csv(from_http)
    assert _columns(read_all(_s3(s3, fmt=CSV, prefixes=[f"s3://{bucket}/csv/"]))) == sorted(from_s3)
    assert _columns(read_all(_http(server, ["/y.csv"], fmt=CSV))) == sorted(from_http)


def test_combining_with_sql_and_csv_files(tmp_path: Path) -> None:
    """A SQL query's rows and a CSV file's are both column records: one job reads them together."""
    database = tmp_path / "wiki.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE edits (page TEXT, added INTEGER)")
        connection.executemany("INSERT INTO edits VALUES (?, ?)", [("sql-0", 5), ("sql-1", 6)])
    (tmp_path / "a.csv").write_bytes(_csv(_rows("csv", 3)))
    sql = {"type": "sql", "database": {"type": "sqlite", "connectorConfig": {"connectURI": f"jdbc:sqlite:{database}"}},
           "sqls": ["SELECT page, added FROM edits"]}
    source = _source({"type": "combining", "delegates": [sql, {"type": "local", "files": [str(tmp_path / "a.csv")]}]},
                     fmt=CSV)
    assert _columns(read_all(source)) == sorted([("sql-0", "5"), ("sql-1", "6"), *_rows("csv", 3)])


def test_combining_refuses_delegates_whose_records_differ(tmp_path: Path) -> None:
    """JSON files read as raw lines, a SQL query as columns: Spark reads one schema, so they cannot be combined."""
    sql = {"type": "sql", "database": {"type": "sqlite", "connectorConfig": {"connectURI": "jdbc:sqlite:/x.db"}},
           "sqls": ["SELECT 1"]}
    with pytest.raises(SpecError, match="columns") as raised:
        _source({"type": "combining", "delegates": [{"type": "inline", "data": "{}"}, sql]})
    assert raised.value.path == "ioConfig.inputSource.delegates[1]"


# -- parquet: a format that seeks, read from streams that do not -------------------------------------------------


def test_parquet_from_s3_and_http_is_spooled_and_read(s3: str, bucket: str, server: _Server, tmp_path: Path) -> None:
    rows = _rows("pq", 8)
    path = tmp_path / "edits.parquet"
    pq.write_table(pa.table({"page": [p for p, _ in rows], "added": [int(a) for _, a in rows]}), path)
    boto3.client("s3", endpoint_url=s3, aws_access_key_id="test", aws_secret_access_key="test",
                 region_name="us-east-1").put_object(Bucket=bucket, Key="parquet/edits.parquet", Body=path.read_bytes())
    server.files["/edits.parquet"] = path.read_bytes()
    parquet = TypeAdapter(RecordFormat).validate_python({"type": "parquet"})
    from_s3 = _s3(s3, fmt=parquet, uris=[f"s3://{bucket}/parquet/edits.parquet"])
    from_http = _http(server, ["/edits.parquet"], fmt=parquet)
    from_local = _source({"type": "local", "files": [str(path)]}, fmt=parquet)
    for source in (from_s3, from_http, from_local):
        assert _columns(read_all(pickle.loads(pickle.dumps(source)))) == sorted(rows)


def test_s3_an_object_gone_after_listing_fails_at_once_naming_it(s3: str, bucket: str) -> None:
    client = boto3.client("s3", endpoint_url=s3, aws_access_key_id="test", aws_secret_access_key="test",
                          region_name="us-east-1")
    client.put_object(Bucket=bucket, Key="gone/x.json", Body=_text(_events("gone", 1)))
    source = _s3(s3, prefixes=[f"s3://{bucket}/gone/"])
    [split] = source.enumerate_splits()
    client.delete_object(Bucket=bucket, Key="gone/x.json")
    with pytest.raises(FileNotFoundError, match="s3://wiki/gone/x.json"):
        list(source.read_split(split))
