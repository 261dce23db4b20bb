"""HttpPostEmitter against a real loopback HTTP receiver: exact batches by count and by period, retries,
drops when the receiver is down or slow, and `emit` that never waits for any of it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from sluice.emitter import HttpPostEmitter, ServiceEmitter, ServiceMetricEvent
from sluice.emitter import metrics as m
from tests.integration.harness import free_port


class Receiver:
    """Collects POSTed batches; answers with the queued statuses first (then 200), after `delay` seconds."""

    def __init__(self) -> None:
        self.requests: list[tuple[int, str, list[dict[str, Any]]]] = []
        self.statuses: list[int] = []
        self.delay = 0.0
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                time.sleep(receiver.delay)
                with receiver._cond:
                    status = receiver.statuses.pop(0) if receiver.statuses else 200
                    receiver.requests.append((status, self.headers["Content-Type"], body))
                    receiver._cond.notify_all()
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/druid/events"

    @property
    def batches(self) -> list[list[dict[str, Any]]]:
        """The batches it accepted, in arrival order."""
        with self._cond:
            return [body for status, _, body in self.requests if status == 200]

    def wait_for_batches(self, count: int, timeout: float = 10) -> list[list[dict[str, Any]]]:
        with self._cond:
            self._cond.wait_for(lambda: sum(s == 200 for s, _, _ in self.requests) >= count, timeout)
        return self.batches

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.stop()


def values(batches: list[list[dict[str, Any]]]) -> list[list[Any]]:
    return [[event["value"] for event in batch] for batch in batches]


def emit_values(emitter: HttpPostEmitter, count: int) -> float:
    """Emit `count` metric events; the longest single `emit` call in seconds."""
    longest = 0.0
    for value in range(count):
        started = time.perf_counter()
        emitter.emit(ServiceMetricEvent(m.INGEST_EVENTS_PROCESSED, value, {m.DATASOURCE: "wiki"}))
        longest = max(longest, time.perf_counter() - started)
    return longest


def test_events_arrive_as_druid_json_arrays_batched_by_count_then_by_period(receiver) -> None:
    emitter = HttpPostEmitter(receiver.url, flush_count=3, flush_millis=400)
    emitter.start()
    service = ServiceEmitter("druid/peon", "10.0.0.1:8100", emitter, version="0.1.0")
    at = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    for value in range(7):
        service.emit(ServiceMetricEvent(m.INGEST_EVENTS_PROCESSED, value, {m.DATASOURCE: "wiki"}, created_time=at))
    last_emitted = time.monotonic()

    assert values(receiver.wait_for_batches(2)) == [[0, 1, 2], [3, 4, 5]]  # full batches go at once
    assert values(receiver.wait_for_batches(3)) == [[0, 1, 2], [3, 4, 5], [6]]  # the rest after flushMillis
    assert time.monotonic() - last_emitted >= 0.4
    assert receiver.requests[0][1] == "application/json"
    assert receiver.batches[0][0] == {
        "feed": "metrics", "timestamp": "2024-05-01T12:00:00.000Z", "service": "druid/peon",
        "host": "10.0.0.1:8100", "version": "0.1.0", "metric": "ingest/events/processed", "value": 0,
        "dataSource": "wiki"}
    emitter.close()
    assert (emitter.sent, emitter.dropped, emitter.failed) == (7, 0, 0)


def test_flush_sends_a_partial_batch_now_and_waits_for_it(receiver) -> None:
    emitter = HttpPostEmitter(receiver.url, flush_count=100, flush_millis=60_000)
    emitter.start()
    emit_values(emitter, 2)
    emitter.flush()
    assert values(receiver.batches) == [[0, 1]]
    assert emitter.sent == 2
    emitter.close()


def test_a_refused_batch_is_retried_until_the_receiver_takes_it(receiver) -> None:
    receiver.statuses = [503, 500]
    emitter = HttpPostEmitter(receiver.url, flush_count=3, max_send_attempts=3, retry_backoff=0.05)
    emitter.start()
    emit_values(emitter, 3)
    emitter.flush()
    assert [(status, values([body])[0]) for status, _, body in receiver.requests] == [
        (503, [0, 1, 2]), (500, [0, 1, 2]), (200, [0, 1, 2])]
    assert (emitter.sent, emitter.failed) == (3, 0)
    emitter.close()


def test_a_receiver_that_is_down_costs_events_not_callers() -> None:
    emitter = HttpPostEmitter(f"http://127.0.0.1:{free_port()}/events", flush_count=5, max_send_attempts=2,
                              retry_backoff=0.01)
    emitter.start()
    longest = emit_values(emitter, 5)
    emitter.flush()
    assert (emitter.sent, emitter.failed, emitter.dropped) == (0, 5, 0)
    assert longest < 0.05
    started = time.monotonic()
    emitter.close()
    assert time.monotonic() - started < 2


def test_a_slow_receiver_fills_the_queue_and_further_events_are_dropped_not_waited_for(receiver) -> None:
    receiver.delay = 0.5
    emitter = HttpPostEmitter(receiver.url, flush_count=10, max_queue_size=20, flush_millis=60_000)
    emitter.start()
    started = time.monotonic()
    longest = emit_values(emitter, 200)
    assert time.monotonic() - started < 0.4  # 200 emits done before the first POST is even answered
    assert longest < 0.05
    emitter.close()  # flushes what was queued: a few slow batches
    delivered = [value for batch in values(receiver.batches) for value in batch]
    assert emitter.sent == len(delivered)
    assert 20 <= emitter.sent <= 30  # the queue, plus at most the batch taken out of it while emitting
    assert emitter.sent + emitter.dropped == 200
    assert delivered == sorted(set(delivered))  # in order, none twice
