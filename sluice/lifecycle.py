"""Druid's Lifecycle: handlers start stage by stage and stop in the reverse order.

Stages (seed 001): INIT (metadata store, deep storage), NORMAL (Spark, task runner, supervisors),
SERVER (HTTP), ANNOUNCEMENTS (tell the cluster this node is ready). Stopping in reverse means the
node stops announcing and serving before the parts behind the API go away.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from enum import IntEnum
from typing import Callable

log = logging.getLogger(__name__)


class Stage(IntEnum):
    INIT = 0
    NORMAL = 1
    SERVER = 2
    ANNOUNCEMENTS = 3


class Lifecycle:
    def __init__(self) -> None:
        self._handlers: dict[Stage, list[tuple[str, Callable[[], None], Callable[[], None]]]] = {s: [] for s in Stage}
        self._started: list[tuple[str, Callable[[], None]]] = []
        self._stop_requested = threading.Event()

    def add(self, name: str, start: Callable[[], None], stop: Callable[[], None] = lambda: None,
            stage: Stage = Stage.NORMAL) -> None:
        self._handlers[stage].append((name, start, stop))

    def start(self) -> None:
        """Start every handler in stage order; if one fails, stop those already started and re-raise."""
        for stage in Stage:
            for name, start, stop in self._handlers[stage]:
                log.info("starting %s (%s)", name, stage.name)
                try:
                    start()
                except BaseException:
                    self.stop()
                    raise
                self._started.append((name, stop))

    def stop(self) -> None:
        while self._started:
            name, stop = self._started.pop()
            log.info("stopping %s", name)
            try:
                stop()
            except Exception:
                log.exception("stopping %s failed", name)

    def request_stop(self) -> None:
        self._stop_requested.set()

    def handle_signals(self) -> None:
        """From now on, SIGTERM or SIGINT (Ctrl-C) asks for the graceful stop `join` carries out, and a second one
        exits at once (what was not committed is read again by the tasks' next run, so nothing is lost or doubled).
        Called before `start` by a command, so that a signal during a slow start (Spark's) is not the default
        action's abrupt exit; in the main thread only, as Python's signal handlers are."""
        def first(signum: int, _frame: object) -> None:
            log.warning("%s: stopping gracefully (send it again to exit at once)", signal.Signals(signum).name)
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, again)
            self._stop_requested.set()

        def again(signum: int, _frame: object) -> None:
            log.warning("%s again: exiting now", signal.Signals(signum).name)
            os._exit(128 + signum)

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, first)

    def join(self) -> None:
        """Block until a signal (see `handle_signals`, which this calls if it was not) or `request_stop`, then stop
        everything, gracefully: tasks stop at a point they resume from."""
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signal.SIG_IGN, None):
            self.handle_signals()
        while not self._stop_requested.wait(0.5):
            pass
        self.stop()
