"""Druid's retention rules as pure decisions: when each rule applies to a segment's interval, and which segments the
first applying rule drops."""

from __future__ import annotations

import pytest

from sluice.coordinator.rules import DEFAULT_RULES, InvalidRule, Rule, parse_rules, segments_to_drop
from sluice.timestamps import EpochInterval, parse_instant, parse_interval

NOW = parse_instant("2024-06-15T12:00:00Z")


def day(text: str) -> EpochInterval:
    return parse_interval(f"{text}T00:00:00Z/P1D")


def rule(**document: object) -> Rule:
    return Rule.from_json(document, 0)


@pytest.mark.parametrize(("document", "applies", "not_applies"), [
    # loadByPeriod P1M, includeFuture: the segment ends after now - 1 month (and any future segment)
    ({"type": "loadByPeriod", "period": "P1M"}, ["2024-05-15", "2024-06-14", "2024-07-01"], ["2024-05-14"]),
    ({"type": "loadByPeriod", "period": "P1M", "includeFuture": False}, ["2024-05-15", "2024-06-15"],
     ["2024-06-16", "2024-05-10"]),
    ({"type": "loadByInterval", "interval": "2024-01-01/2024-02-01"}, ["2024-01-31"], ["2024-02-01"]),
    # dropByPeriod P7D: the segment starts at or after now - 7 days (includeFuture: later ones too)
    ({"type": "dropByPeriod", "period": "P7D"}, ["2024-06-09", "2024-06-30"], ["2024-06-08"]),
    ({"type": "dropByPeriod", "period": "P7D", "includeFuture": False}, ["2024-06-09", "2024-06-14"],
     ["2024-06-15", "2024-06-08"]),
    # dropBeforeByPeriod P1Y: the segment ends at or before now - 1 year
    ({"type": "dropBeforeByPeriod", "period": "P1Y"}, ["2023-06-14"], ["2023-06-15", "2024-01-01"]),
    ({"type": "dropByInterval", "interval": "2024-01-01/2024-02-01"}, ["2024-01-31"], ["2024-02-01"]),
    ({"type": "dropForever"}, ["1999-01-01", "2099-01-01"], []),
    ({"type": "loadForever"}, ["1999-01-01"], []),
])
def test_when_each_rule_applies(document: dict, applies: list[str], not_applies: list[str]) -> None:
    parsed = rule(**document)
    assert [d for d in applies if not parsed.applies_to(day(d), NOW)] == []
    assert [d for d in not_applies if parsed.applies_to(day(d), NOW)] == []


def test_a_drop_by_interval_needs_the_whole_segment_inside_and_a_load_only_an_overlap() -> None:
    month = parse_interval("2024-01-01/2024-02-01")
    straddling = parse_interval("2024-01-31T12:00:00Z/2024-02-01T12:00:00Z")
    assert not rule(type="dropByInterval", interval="2024-01-01/2024-02-01").applies_to(straddling, NOW)
    assert rule(type="loadByInterval", interval="2024-01-01/2024-02-01").applies_to(straddling, NOW)
    assert rule(type="dropByInterval", interval="2024-01-01/2024-02-01").applies_to(month, NOW)


def test_the_first_applying_rule_decides_and_a_segment_no_rule_applies_to_stays() -> None:
    segments = [(f"s{d}", day(f"2024-06-{d:02d}")) for d in range(1, 16)]
    keep_a_week_then_drop = parse_rules([{"type": "loadByPeriod", "period": "P7D"}, {"type": "dropForever"}])
    dropped = segments_to_drop(segments, keep_a_week_then_drop, parse_rules(DEFAULT_RULES), NOW)
    assert dropped == [f"s{d}" for d in range(1, 8)]  # June 8 ends after now - 7 days: kept
    only_drop_old = parse_rules([{"type": "dropBeforeByPeriod", "period": "P10D"}])
    assert segments_to_drop(segments, only_drop_old, [], NOW) == [f"s{d}" for d in range(1, 5)]
    # no own rules: the default (loadForever) keeps everything; an empty default keeps what no rule applies to
    assert segments_to_drop(segments, [], parse_rules(DEFAULT_RULES), NOW) == []
    assert segments_to_drop(segments, parse_rules([{"type": "loadByPeriod", "period": "P1D"}]), [], NOW) == []


@pytest.mark.parametrize(("document", "message"), [
    ({"type": "keepForever"}, "rules[0].type: expected one of"),
    ({"type": "loadByPeriod"}, "rules[0].period: required for loadByPeriod"),
    ({"type": "loadByPeriod", "period": "a month"}, "rules[0]: 'a month' is not an ISO-8601 period"),
    ({"type": "dropByInterval", "interval": "2024"}, "rules[0]: '2024' is not an interval"),
    ({"type": "loadForever", "tieredReplicants": {"hot": -1}}, "rules[0].tieredReplicants"),
    ({"type": "dropByPeriod", "period": "P1D", "includeFuture": "yes"}, "rules[0].includeFuture"),
])
def test_a_malformed_rule_is_refused_naming_it(document: dict, message: str) -> None:
    with pytest.raises(InvalidRule) as refused:
        parse_rules([document])
    assert str(refused.value).startswith(message)
    with pytest.raises(InvalidRule, match="rules: expected a JSON array"):
        parse_rules(document)
