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
