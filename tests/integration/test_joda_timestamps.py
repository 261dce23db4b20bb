"""Joda-Time timestamp patterns whose letters Spark spells differently: JSON in -> `__time` out, on Spark."""

from __future__ import annotations

import pytest

from tests.integration.test_pipeline import event, ingest, ms, pipeline

pytestmark = pytest.mark.spark

ZONED = [
    # Joda pattern, the JSON value of the timestamp field, __time as ISO in UTC
    ("yyyy-MM-dd HH:mm:ss Z", "2024-01-01 02:00:01 +0200", "2024-01-01T00:00:01"),
    ("yyyy-MM-dd HH:mm:ss Z", "2024-01-01 00:00:01 Z", "2024-01-01T00:00:01"),  # Joda's Z reads "Z" for UTC
    ("yyyy-MM-dd'T'HH:mm:ssZZ", "2024-01-01T00:00:01Z", "2024-01-01T00:00:01"),
    ("yyyy-MM-dd HH:mm:ss ZZZ", "2024-07-01 02:00:01 Europe/Paris", "2024-07-01T00:00:01"),  # a zone id
    ("YYYY-MM-dd HH:mm:ss", "2024-01-01 00:00:01", "2024-01-01T00:00:01"),  # Joda's Y: the year of era
]


@pytest.mark.parametrize("fmt, value, iso", ZONED, ids=[f"{f}:{v}" for f, v, _ in ZONED])
def test_joda_zone_and_year_letters(spark, fmt, value, iso):
    p = pipeline(spark, timestampSpec={"column": "ts", "format": fmt}, granularitySpec={"rollup": False})
    assert ingest(p, [event(value, page="a")]) == [{"__time": ms(iso), "page": "a"}]
