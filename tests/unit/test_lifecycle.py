"""Lifecycle: handlers start in stage order and stop in reverse."""

import pytest

from sluice.lifecycle import Lifecycle, Stage


def test_handlers_start_by_stage_and_stop_in_reverse():
    events = []
    lifecycle = Lifecycle()
    for name, stage in [("http", Stage.SERVER), ("announce", Stage.ANNOUNCEMENTS), ("metadata", Stage.INIT),
                        ("tasks", Stage.NORMAL)]:
        lifecycle.add(name, lambda n=name: events.append(f"start {n}"), lambda n=name: events.append(f"stop {n}"), stage)
    lifecycle.start()
    lifecycle.stop()
    assert events == ["start metadata", "start tasks", "start http", "start announce",
                      "stop announce", "stop http", "stop tasks", "stop metadata"]


def test_a_failing_start_stops_what_already_started():
    events = []
    lifecycle = Lifecycle()
    lifecycle.add("metadata", lambda: events.append("start metadata"), lambda: events.append("stop metadata"), Stage.INIT)
    lifecycle.add("spark", lambda: 1 / 0, lambda: events.append("stop spark"), Stage.NORMAL)
    with pytest.raises(ZeroDivisionError):
        lifecycle.start()
    assert events == ["start metadata", "stop metadata"]


_SLOW_TO_STOP = """
import sys, time
from sluice.lifecycle import Lifecycle
lifecycle = Lifecycle()
lifecycle.add("slow", lambda: None, lambda: (print("stopping", flush=True), time.sleep(60)))
lifecycle.handle_signals()
lifecycle.start()
print("started", flush=True)
lifecycle.join()
print("stopped", flush=True)
"""


def test_sigterm_stops_gracefully_and_a_second_sigterm_exits_at_once():
    import signal
    import subprocess
    import sys
    import time

    process = subprocess.Popen([sys.executable, "-c", _SLOW_TO_STOP], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "started"
        process.send_signal(signal.SIGTERM)
        assert process.stdout.readline().strip() == "stopping"  # the graceful stop runs the handlers
        assert process.poll() is None
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(10) == 128 + signal.SIGTERM
        assert time.monotonic() - started < 5
    finally:
        process.kill()
