"""Druid's HttpPostEmitter: events POSTed as JSON arrays to one URL, by a background thread."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from sluice.emitter.core import Emitter, event_json
from sluice.emitter.events import Event


class HttpPostEmitter(Emitter):
    """Sends batches of up to `flush_count` events, or fewer once the oldest has waited `flush_millis`.

    `emit` only appends the event's JSON to a bounded queue. When the receiver is slow or down the queue
    fills and further events are dropped and counted (`dropped`), so the caller is never held up. A batch
    the receiver refuses (an error status or no connection) is retried with exponential backoff and, after
    `max_send_attempts`, given up and counted (`failed`).
    """

    def __init__(self, recipient_base_url: str, *, flush_millis: int = 60_000, flush_count: int = 500,
                 max_queue_size: int = 25_000, max_send_attempts: int = 3, retry_backoff: float = 1.0,
                 http_timeout: float = 10.0, flush_timeout: float = 30.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.url = recipient_base_url
        self._flush_period = flush_millis / 1000
        self._flush_count = flush_count
        self._max_queue_size = max_queue_size
        self._max_send_attempts = max_send_attempts
        self._retry_backoff = retry_backoff
        self._http_timeout = http_timeout
        self._flush_timeout = flush_timeout
        self._cond = threading.Condition()
        #: (when it was queued, its JSON); the oldest decides when a partial batch is due
        self._pending: deque[tuple[float, str]] = deque()
        # Counted in queue order, so "everything emitted before this flush" is a number to wait for:
        # accepted events, events taken into batches, and events done with (sent, failed or dropped).
        self._accepted = 0
        self._taken = 0
        self._finished = 0
        self._flush_upto = 0
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def sent(self) -> int:
        """Events the receiver accepted."""
        return self._counts["sent"]

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="HttpPostEmitter", daemon=True)
            self._thread.start()

    def _emit(self, event: Event) -> None:
        line = event_json(event)
        with self._cond:
            accepted = not self._closed and len(self._pending) < self._max_queue_size
            if accepted:
                self._pending.append((time.monotonic(), line))
                self._accepted += 1
                if len(self._pending) == 1 or len(self._pending) >= self._flush_count:
                    self._cond.notify_all()
            closed = self._closed
        if not accepted:
            self._count("dropped")
            self._warn("closed; dropping events" if closed else
                       f"queue full ({self._max_queue_size} events, the receiver is slow or down); dropping events")

    def flush(self) -> None:
        """Send everything emitted so far now, and wait (up to the flush timeout) until it is sent or given up."""
        with self._cond:
            target = self._accepted
            self._flush_upto = max(self._flush_upto, target)
            self._cond.notify_all()
            if self._thread is not None and self._thread.is_alive():
                self._cond.wait_for(lambda: self._finished >= target, self._flush_timeout)

    def close(self) -> None:
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self._http_timeout + 1)
        self._drop_pending()

    # ---- the sending thread ----

    def _run(self) -> None:
        with httpx.Client(timeout=self._http_timeout) as client:
            while (batch := self._next_batch()) is not None:
                try:
                    delivered = self._send(client, batch)
                except Exception as error:  # the thread must outlive any one batch
                    delivered = False
                    self._warn(f"sending a batch failed: {type(error).__name__}: {error}")
                self._count("sent" if delivered else "failed", len(batch))
                with self._cond:
                    self._finished += len(batch)
                    self._cond.notify_all()

    def _next_batch(self) -> list[str] | None:
        """Wait until a batch is due and take it; None once closed."""
        with self._cond:
            while not self._closed:
                wait = self._seconds_until_due(time.monotonic())
                if wait is not None and wait <= 0:
                    size = min(len(self._pending), self._flush_count)
                    self._taken += size
                    return [self._pending.popleft()[1] for _ in range(size)]
                self._cond.wait(wait)
            return None

    def _seconds_until_due(self, now: float) -> float | None:
        """0 when a batch is full or a flush asks for it; else when the oldest event will have waited
        flushMillis; None with nothing queued."""
        if not self._pending:
            return None
        if len(self._pending) >= self._flush_count or self._taken < self._flush_upto:
            return 0
        return self._pending[0][0] + self._flush_period - now

    def _send(self, client: httpx.Client, batch: list[str]) -> bool:
        body = ("[" + ",".join(batch) + "]").encode()

        def post() -> None:
            try:
                response = client.post(self.url, content=body, headers={"Content-Type": "application/json"})
            except httpx.HTTPError as error:
                raise _NotSent(f"{type(error).__name__}: {error}") from None
            if not response.is_success:
                raise _NotSent(f"HTTP {response.status_code}")

        def failed(state: RetryCallState) -> None:
            last = state.attempt_number == self._max_send_attempts
            self._warn(f"POST {self.url} failed ({state.outcome.exception() if state.outcome else ''}), attempt "
                       f"{state.attempt_number} of {self._max_send_attempts}"
                       + (f"; giving up on {len(batch)} events" if last else ""))

        try:  # closing stops the retries: shutdown is not held up with backoff
            Retrying(retry=retry_if_exception_type(_NotSent),
                     stop=stop_after_attempt(self._max_send_attempts) | (lambda _state: self._stop.is_set()),
                     wait=wait_exponential(multiplier=self._retry_backoff), sleep=self._stop.wait, after=failed,
                     reraise=True)(post)
        except _NotSent:
            return False
        return True

    def _drop_pending(self) -> None:
        with self._cond:
            left = len(self._pending)
            self._pending.clear()
            self._finished += left
            self._cond.notify_all()
        if left:
            self._count("dropped", left)
            self._warn(f"closed with {left} events unsent; dropped them")


class _NotSent(Exception):
    """A batch the endpoint did not take this time."""
