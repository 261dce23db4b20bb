"""Request ids at the HTTP edge, and Druid's request logs: properties in → lines (Druid's format) out."""

from __future__ import annotations

import json
import logging
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from fastapi.testclient import TestClient

from sluice.server.request_log import (SLF4J_LOGGER, FileRequestLogger, FilteredRequestLogger, RequestIdMiddleware,
                                       RequestLogConfig, RequestLogger, build_request_logger, native_query_stats,
                                       sql_query_stats)

MAY_1 = datetime(2024, 5, 1, 10, 0, 0, 123000, tzinfo=timezone.utc).timestamp()
TOPN = {"queryType": "topN", "dataSource": {"type": "table", "name": "wikiticker"}, "dimension": "page",
        "threshold": 10, "intervals": ["2015-09-12/2015-09-13"], "filter": None,
        "context": {"queryId": "74c2d540", "priority": 1}}
SQL = {"query": "SELECT page,\n\tCOUNT(*) FROM wikiticker GROUP BY 1", "context": {"sqlQueryId": "c9d035a0"}}


# --- request ids ----------------------------------------------------------------------------------------------------

@pytest.fixture
def client() -> TestClient:
    app = FastAPI()
    app.add_middleware(RequestIdMiddleware)

    @app.get("/id")
    def request_id(request: Request) -> str:
        return request.state.request_id

    @app.get("/stream")
    def stream() -> StreamingResponse:
        return StreamingResponse(iter([b"a\n", b"b\n"]), media_type="text/plain")

    @app.get("/boom")
    def boom() -> None:
        raise RuntimeError("a bug")

    return TestClient(app, raise_server_exceptions=False)


@pytest.mark.parametrize("sent, kept", [
    ("abc-123", True),
    ("0f8e2c1a-5b7d-4e3f-9a6b-1c2d3e4f5a6b", True),
    ("req.42:retry_1", True),
    ("x" * 128, True),
    ("x" * 129, False),  # too long
    ("evil\r\nSet-Cookie: a=b", False),  # a header of its own
    ("two words", False),
    ("héllo", False),
    ("", False),
])
def test_an_incoming_request_id_is_echoed_when_it_is_safe_and_replaced_otherwise(client: TestClient, sent: str,
                                                                                 kept: bool) -> None:
    response = client.get("/id", headers={"X-Request-Id": sent.encode()})
    echoed = response.headers["X-Request-Id"]
    assert response.json() == echoed
    assert (echoed == sent) is kept
    if not kept:
        assert len(echoed) == 32 and int(echoed, 16) >= 0


def test_a_request_without_an_id_gets_a_new_one_each_time(client: TestClient) -> None:
    first, second = client.get("/id").headers["X-Request-Id"], client.get("/id").headers["X-Request-Id"]
    assert len(first) == len(second) == 32 and first != second


def test_a_streamed_response_passes_through_with_the_id(client: TestClient) -> None:
    response = client.get("/stream", headers={"X-Request-Id": "s-1"})
    assert (response.status_code, response.text, response.headers["X-Request-Id"]) == (200, "a\nb\n", "s-1")


def test_a_request_that_fails_unhandled_is_answered_500_with_its_id(client: TestClient) -> None:
    response = client.get("/boom", headers={"X-Request-Id": "b-1"})
    assert (response.status_code, response.text, response.headers["X-Request-Id"]) == (500, "Internal Server Error",
                                                                                        "b-1")


# --- Druid's lines --------------------------------------------------------------------------------------------------

class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def read(path: Path) -> list[list[str]]:
    return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]


def test_the_file_logger_writes_druids_native_and_sql_lines(tmp_path: Path) -> None:
    logger = FileRequestLogger(tmp_path, clock=Clock(MAY_1 + 5))
    native_stats = native_query_stats(100.7, 800, True, "user1")
    sql_stats = sql_query_stats(250, 600, False, "user1", {**SQL["context"], "nativeQueryIds": "[]"},
                                exception="org.apache.druid.query.QueryInterruptedException: cancelled",
                                interrupted=True)
    logger.log_native("127.0.0.1", TOPN, native_stats, started_at=MAY_1)
    logger.log_sql(None, SQL, sql_stats, started_at=MAY_1)
    logger.close()
    assert [p.name for p in tmp_path.iterdir()] == ["2024-05-01.log"]
    native, sql = read(tmp_path / "2024-05-01.log")
    # Druid 37: time, remote address, stats, query (the stats first since apache/druid#17326)
    assert native[:2] == ["2024-05-01T10:00:00.123Z", "127.0.0.1"] and len(native) == 4
    assert native[2] == '{"query/time":100,"query/bytes":800,"success":true,"identity":"user1"}'
    assert json.loads(native[3]) == TOPN
    # SQL: time, remote address (empty when unknown), no native query, stats, {"context", "query"}
    assert sql[:3] == ["2024-05-01T10:00:00.123Z", "", ""] and len(sql) == 5
    assert list(json.loads(sql[3])) == ["sqlQuery/time", "sqlQuery/planningTimeMs", "sqlQuery/bytes", "success",
                                        "identity", "context", "exception", "interrupted", "reason"]
    assert json.loads(sql[3])["context"] == {"sqlQueryId": "c9d035a0", "nativeQueryIds": "[]"}
    assert sql[4] == ('{"context":{"sqlQueryId":"c9d035a0"},'
                      '"query":"SELECT page,\\n\\tCOUNT(*) FROM wikiticker GROUP BY 1"}')


def test_the_file_logger_starts_a_file_each_utc_day_and_appends_after_a_restart(tmp_path: Path) -> None:
    clock = Clock(MAY_1)
    logger = FileRequestLogger(tmp_path, clock=clock)
    logger.log_native("a", TOPN, native_query_stats(1, 1, True))
    clock.now += timedelta(hours=14).total_seconds()  # 00:00:00.123 the next day, UTC
    logger.log_native("b", TOPN, native_query_stats(1, 1, True))
    logger.close()
    restarted = FileRequestLogger(tmp_path, clock=clock)
    restarted.log_sql("c", SQL, sql_query_stats(1, 1, True, None, {}))
    restarted.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["2024-05-01.log", "2024-05-02.log"]
    assert [line[1] for line in read(tmp_path / "2024-05-02.log")] == ["b", "c"]


def test_a_file_pattern_names_the_files_and_retention_deletes_only_old_ones_of_that_name(tmp_path: Path) -> None:
    for name, days_old in (("broker.20240420.log", 11), ("20240420.notes", 11), ("broker.20240430.log", 1)):
        (tmp_path / name).write_text("x\n")
        os.utime(tmp_path / name, (MAY_1 - days_old * 86400,) * 2)
    config = RequestLogConfig.from_properties({"druid.request.logging.type": "file",
                                               "druid.request.logging.dir": str(tmp_path),
                                               "druid.request.logging.filePattern": "'broker.'yyyyMMdd'.log'",
                                               "druid.request.logging.durationToRetain": "P7D"})
    logger = build_request_logger(config, clock=Clock(MAY_1))
    logger.log_native("a", TOPN, native_query_stats(1, 1, True))
    logger.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["20240420.notes", "broker.20240430.log",
                                                          "broker.20240501.log"]


@pytest.fixture
def slf4j(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.INFO, logger=SLF4J_LOGGER)
    yield caplog


def test_the_slf4j_logger_writes_the_same_lines_to_druids_logger_name(slf4j: pytest.LogCaptureFixture) -> None:
    logger = build_request_logger(RequestLogConfig.from_properties({"druid.request.logging.type": "slf4j"}))
    logger.log_native("127.0.0.1", TOPN, native_query_stats(3, 10, True), started_at=MAY_1)
    logger.log_sql("127.0.0.1", SQL, sql_query_stats(3, 10, True, None, {}), started_at=MAY_1)
    native, sql = [r for r in slf4j.records if r.name == "org.apache.druid.server.log.LoggingRequestLogger"]
    assert native.levelno == logging.INFO and not hasattr(native, "mdc")
    assert native.getMessage().split("\t")[:3] == ["2024-05-01T10:00:00.123Z", "127.0.0.1",
                                                   '{"query/time":3,"query/bytes":10,"success":true}']
    assert sql.getMessage().split("\t")[2] == ""


def test_set_mdc_puts_druids_mdc_fields_on_the_record(slf4j: pytest.LogCaptureFixture) -> None:
    logger = build_request_logger(RequestLogConfig.from_properties({
        "druid.request.logging.type": "slf4j", "druid.request.logging.setMDC": "true",
        "druid.request.logging.setContextMDC": "TRUE"}))
    logger.log_native("10.0.0.1", TOPN, native_query_stats(3, 10, True))
    [record] = [r for r in slf4j.records if r.name == SLF4J_LOGGER]
    assert record.mdc == {"queryId": "74c2d540", "sqlQueryId": "", "dataSource": "wikiticker", "queryType": "topN",
                          "isNested": "false", "hasFilters": "false", "remoteAddr": "10.0.0.1", "priority": "1"}


class Recorder(RequestLogger):
    def __init__(self) -> None:
        self.logged: list[str] = []

    def log_native(self, remote_addr: str | None, query: Any, stats: Any, started_at: float | None = None) -> None:
        self.logged.append(f"native {query['queryType']} {stats['query/time']}")

    def log_sql(self, remote_addr: str | None, sql_query: Any, stats: Any, started_at: float | None = None) -> None:
        self.logged.append(f"sql {stats['sqlQuery/time']}")


def test_the_filtered_logger_passes_slow_queries_of_types_not_muted() -> None:
    recorder = Recorder()
    filtered = FilteredRequestLogger(recorder, query_time_threshold_ms=100, sql_query_time_threshold_ms=1000,
                                     muted_query_types=("scan", "timeBoundary"))
    for query_type, took in (("topN", 99), ("topN", 100), ("scan", 5000), ("groupBy", 101)):
        filtered.log_native(None, {"queryType": query_type}, native_query_stats(took, 0, True))
    filtered.log_native(None, {"queryType": "topN"}, {"success": True})  # no query/time: not logged, as in Druid
    for took in (999, 1000):
        filtered.log_sql(None, SQL, sql_query_stats(took, 0, True, None, {}))
    assert recorder.logged == ["native topN 100", "native groupBy 101", "sql 1000"]


# --- properties -----------------------------------------------------------------------------------------------------

def test_request_logging_is_off_by_default() -> None:
    config = RequestLogConfig.from_properties({})
    assert config == RequestLogConfig(type="noop")
    assert type(build_request_logger(config)) is RequestLogger


def test_druids_keys_are_read() -> None:
    file = RequestLogConfig.from_properties({"druid.request.logging.type": " file ",
                                             "druid.request.logging.dir": "/var/druid/request-logs"})
    assert (file.dir, file.file_pattern, file.duration_to_retain) == (Path("/var/druid/request-logs"),
                                                                      "yyyy-MM-dd'.log'", None)
    filtered = RequestLogConfig.from_properties({
        "druid.request.logging.type": "filtered", "druid.request.logging.queryTimeThresholdMs": "1000",
        "druid.request.logging.mutedQueryTypes": '["scan", "timeBoundary"]',
        "druid.request.logging.delegate.type": "file", "druid.request.logging.delegate.dir": "logs",
        "druid.request.logging.delegate.durationToRetain": "P30D"})
    assert (filtered.query_time_threshold_ms, filtered.sql_query_time_threshold_ms) == (1000, 0)
    assert filtered.muted_query_types == ("scan", "timeBoundary")
    assert filtered.delegate == RequestLogConfig(type="file", dir=Path("logs"), duration_to_retain=timedelta(days=30))
    as_json = RequestLogConfig.from_properties({"druid.request.logging.type": "filtered",
                                                "druid.request.logging.delegate": '{"type": "slf4j", "setMDC": true}'})
    assert as_json.delegate == RequestLogConfig(type="slf4j", set_mdc=True)


@pytest.mark.parametrize("properties, message", [
    ({"type": "emitter"}, "druid.request.logging.type: [emitter] is not one of noop, file, slf4j, filtered"),
    ({"type": "file"}, "druid.request.logging.dir: required"),
    ({"type": "file", "dir": "d", "filePattern": "yyyy-MM-dd.log"},
     "druid.request.logging.filePattern: [l] in [yyyy-MM-dd.log] is not a date field"),
    ({"type": "file", "dir": "d", "filePattern": "yyyy/MM/dd"},
     "druid.request.logging.filePattern: [yyyy/MM/dd] does not name a file"),
    ({"type": "file", "dir": "d", "durationToRetain": "seven days"}, "druid.request.logging.durationToRetain: "),
    ({"type": "file", "dir": "d", "durationToRetain": "PT12H"},
     "druid.request.logging.durationToRetain: [PT12H] is shorter than a day"),
    ({"type": "slf4j", "setMDC": "yes"}, "druid.request.logging.setMDC: [yes] is not true or false"),
    ({"type": "filtered", "delegate.type": "noop", "queryTimeThresholdMs": "1s"},
     "druid.request.logging.queryTimeThresholdMs: [1s] is not a whole number"),
    ({"type": "filtered", "delegate.type": "noop", "mutedQueryTypes": "scan"},
     "druid.request.logging.mutedQueryTypes: [scan] is not a JSON list"),
    ({"type": "filtered"}, "druid.request.logging.delegate.type: required"),
    ({"type": "filtered", "delegate.type": "file"},
     "druid.request.logging.delegate.dir: required"),
    ({"type": "filtered", "delegate": "slf4j"}, "druid.request.logging.delegate: [slf4j] is not a JSON object"),
])
def test_a_bad_value_is_refused_naming_its_key(properties: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as error:
        RequestLogConfig.from_properties({f"druid.request.logging.{key}": value for key, value in properties.items()})
    assert str(error.value).startswith(message)
