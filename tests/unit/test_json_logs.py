"""JSON logs: one object a line, carrying the id of the request being served and the ids of the query being run."""

from __future__ import annotations

import io
import json
import logging
import re
from typing import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from sluice.logs import PLAIN_FORMAT, JsonFormatter, log_handler, query_ids
from sluice.server.request_log import RequestIdMiddleware

TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.fixture
def json_lines() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = log_handler(json_format=True, stream=stream)
    logger = logging.getLogger("sluice.test_json_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_record_is_one_json_object_with_time_level_logger_message_and_thread(json_lines) -> None:
    logger, stream = json_lines
    logger.warning("supervisor %s: broker %s unreachable", "wiki", "kafka:9092\nsecond line")
    [entry] = lines(stream)
    assert TIMESTAMP.fullmatch(str(entry.pop("timestamp")))
    assert entry == {"level": "WARNING", "logger": "sluice.test_json_logs", "thread": "MainThread",
                     "message": "supervisor wiki: broker kafka:9092\nsecond line unreachable"}


def test_an_exception_is_under_exception_and_the_record_stays_one_line(json_lines) -> None:
    logger, stream = json_lines
    try:
        raise ValueError("bad spec")
    except ValueError:
        logger.exception("task failed")
    assert len(stream.getvalue().splitlines()) == 1
    [entry] = lines(stream)
    assert entry["message"] == "task failed"
    assert "Traceback" in str(entry["exception"]) and "ValueError: bad spec" in str(entry["exception"])


def test_repeats_are_collapsed_in_json_too(json_lines) -> None:
    logger, stream = json_lines
    for attempt in range(5):
        logger.warning("Kafka broker unreachable (attempt %d)", attempt)
    assert [entry["message"] for entry in lines(stream)] == ["Kafka broker unreachable (attempt 0)"]


def test_the_plain_format_is_unchanged() -> None:
    formatter = log_handler().formatter
    assert not isinstance(formatter, JsonFormatter) and formatter is not None and formatter._fmt == PLAIN_FORMAT
    assert PLAIN_FORMAT == "%(asctime)s %(levelname)s %(name)s: %(message)s"


def test_records_written_while_a_request_runs_carry_its_id_and_the_query_ids(json_lines) -> None:
    logger, stream = json_lines
    app = FastAPI()
    app.add_middleware(RequestIdMiddleware)

    @app.get("/on-the-loop")
    async def on_the_loop() -> dict[str, str]:
        with query_ids(sqlQueryId="q-1"):
            logger.info("planning")
        logger.info("answered")
        return {}

    @app.get("/in-a-thread")
    def in_a_thread() -> dict[str, str]:  # a sync handler: Starlette's threadpool, a copy of the request's context
        logger.info("reading segments")
        return {}

    client = TestClient(app)
    on_loop = client.get("/on-the-loop", headers={"X-Request-Id": "abc-123"})
    in_thread = client.get("/in-a-thread")
    logger.info("between requests")
    planning, answered, reading, between = lines(stream)
    assert on_loop.headers["X-Request-Id"] == "abc-123"
    assert (planning["requestId"], planning["sqlQueryId"]) == ("abc-123", "q-1")
    assert answered["requestId"] == "abc-123" and "sqlQueryId" not in answered
    assert reading["requestId"] == in_thread.headers["X-Request-Id"] != "abc-123"
    assert "requestId" not in between
