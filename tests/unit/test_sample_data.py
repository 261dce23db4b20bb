"""The bundled sample data set is deterministic, realistic in shape, and has a known share of bad records."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime

from sluice.dev.sample_data import BAD_RECORD_RATE, DAY, generate

FIELDS = [
    "time", "channel", "cityName", "countryIsoCode", "countryName", "isAnonymous", "isMinor", "isNew",
    "isRobot", "namespace", "page", "user", "added", "deleted", "delta",
]


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    assert [r.value for r in generate(2000)] == [r.value for r in generate(2000)]
    assert [r.value for r in generate(2000, seed=8)] != [r.value for r in generate(2000)]


def test_bad_records_have_exact_counts_and_are_really_bad() -> None:
    records = generate(20_000)
    per_kind = int(20_000 * BAD_RECORD_RATE)
    assert Counter(r.kind for r in records) == {
        "valid": 20_000 - 3 * per_kind, "malformed_json": per_kind, "missing_time": per_kind, "bad_time": per_kind,
    }
    for record in records:
        if record.kind == "valid":
            assert record.event is not None and json.loads(record.value) == record.event
            continue
        assert record.event is None
        if record.kind == "malformed_json":
            try:
                json.loads(record.value)
            except ValueError:
                continue
            raise AssertionError(f"parseable 'malformed' record: {record.value!r}")
        parsed = json.loads(record.value)
        assert ("time" not in parsed) if record.kind == "missing_time" else (parsed["time"] == "not-a-time")


def test_valid_events_look_like_wikiticker() -> None:
    events = [r.event for r in generate(20_000) if r.event is not None]
    for event in events:
        assert list(event) == FIELDS
        assert event["time"].startswith(f"{DAY}T") and event["time"].endswith("Z") and len(event["time"]) == 24
        datetime.fromisoformat(event["time"])
        assert event["delta"] == event["added"] - event["deleted"]
        assert event["isAnonymous"] == (event["countryIsoCode"] is not None)
    times = [e["time"] for e in events]
    assert times == sorted(times)
    # Zipf-like skew: the top channel is far above the median one, and pages have a long tail
    channels = Counter(e["channel"] for e in events).most_common()
    assert channels[0][1] > 10 * channels[len(channels) // 2][1]
    assert len({e["page"] for e in events}) > 2000
