"""Repeated log messages are collapsed: the first is written, then one a minute with the count held back."""

from __future__ import annotations

import logging

from sluice.logs import RepeatFilter


def record(message: str, *args: object, name: str = "sluice.supervisor", level: int = logging.WARNING
           ) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, args, None)


def test_a_repeated_message_is_written_once_a_minute_with_the_count_held_back() -> None:
    now = [0.0]
    repeats = RepeatFilter(interval_s=60, clock=lambda: now[0])
    unreachable = "supervisor %s: Kafka brokers localhost:9092 unreachable (after %dms in state CONNECT)"
    assert repeats.filter(record(unreachable, "wiki", 3))
    for second in range(1, 60):
        now[0] = second
        assert not repeats.filter(record(unreachable, "wiki", second))  # numbers differ, the message does not
    assert repeats.filter(record("supervisor %s: another problem", "wiki"))  # another message passes
    assert repeats.filter(record(unreachable, "wiki", 1, level=logging.ERROR))  # so does another level
    now[0] = 61
    again = record(unreachable, "wiki", 7)
    assert repeats.filter(again)
    assert again.getMessage() == ("supervisor wiki: Kafka brokers localhost:9092 unreachable (after 7ms in state "
                                  "CONNECT) (59 more like it in the last 60 s)")
    now[0] = 62
    assert not repeats.filter(record(unreachable, "wiki", 8))
    assert repeats.filter(record(unreachable, "other_source", 8))  # another data source's message is another
