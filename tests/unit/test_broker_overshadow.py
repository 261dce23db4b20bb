"""A segment a higher version overshadows in part answers Druid SQL only where the timeline shows it.

The timeline: day 1 at v1 in two partitions (a row every 10 minutes, `added` 1 each), hours 06–12 at v2 (a row every
5 minutes, `added` 10 each, and a `flag` column v1 lacks), hour 08 at v3 (a row every 20 minutes, `added` 100 each).
So v1 shows over 00–06 and 12–24, v2 over 06–08 and 09–12, v3 over 08–09; the sums per hour tell which version
answered. Files store `__time` with the UTC adjustment (as Spark writes it) or without (a plain TIMESTAMP).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.broker import Broker
from sluice.broker.engine import SqlEngine
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec

DAY = datetime(2026, 1, 1, tzinfo=UTC)
V1, V2, V3 = "2026-02-01T00:00:00.000Z", "2026-02-02T00:00:00.000Z", "2026-02-03T00:00:00.000Z"


def _hours(start: int, end: int) -> Interval:
    return Interval(DAY + timedelta(hours=start), DAY + timedelta(hours=end))


def _times(interval: Interval, every_minutes: int) -> list[datetime]:
    count = (interval.end - interval.start) // timedelta(minutes=every_minutes)
    return [interval.start + timedelta(minutes=every_minutes * i) for i in range(count)]


def _publish(store: MetadataStore, deep: Path, time_type: pa.DataType, name: str, interval: Interval, version: str,
             times: list[datetime], added: int, partition: int = 0, core: int = 0,
             extra: dict[str, Any] | None = None) -> None:
    path = deep / name / "index.parquet"
    path.parent.mkdir(parents=True)
    columns = {"__time": pa.array(times, time_type), "added": pa.array([added] * len(times), pa.int64()),
               **{column: pa.array([value] * len(times)) for column, value in (extra or {}).items()}}
    pq.write_table(pa.table(columns), path)
    segment = DataSegment(
        id=SegmentId("wiki", interval, version, partition), dimensions=[], metrics=["added"], aggregators=[],
        shard_spec=numbered_shard_spec(partition, core), num_rows=len(times), size=path.stat().st_size,
        load_spec={"type": "local", "path": str(path)})
    assert store.commit_segments_and_metadata([segment], "wiki", None, None).success


@pytest.fixture(params=[pa.timestamp("ms", tz="UTC"), pa.timestamp("ms")], ids=["utc-adjusted", "plain"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Broker:
    time_type, deep = request.param, tmp_path / "deep"
    store = MetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    store.create_tables()
    day = _times(_hours(0, 24), 10)
    _publish(store, deep, time_type, "v1-0", _hours(0, 24), V1, day[0::2], 1, partition=0, core=2)
    _publish(store, deep, time_type, "v1-1", _hours(0, 24), V1, day[1::2], 1, partition=1, core=2)
    _publish(store, deep, time_type, "v2", _hours(6, 12), V2, _times(_hours(6, 12), 5), 10, extra={"flag": "v2"})
    _publish(store, deep, time_type, "v3", _hours(8, 9), V3, _times(_hours(8, 9), 20), 100)
    return Broker(store, LocalDeepStorage(deep), tmp_path / "cache", SqlEngine(threads=1), snapshot_ttl_s=0)


def test_count_and_sum_see_each_instant_once(broker: Broker) -> None:
    # v1: 18 hours × 6 rows; v2: 5 hours × 12 rows × 10; v3: 3 rows × 100. Read whole, v1 would add 36 rows.
    assert broker.sql("SELECT COUNT(*), SUM(added) FROM wiki").rows == [(171, 108 + 600 + 300)]


def test_sums_per_hour_come_from_the_version_the_timeline_shows(broker: Broker) -> None:
    rows = broker.sql("SELECT TIME_FLOOR(__time, 'PT1H'), COUNT(*), SUM(added) FROM wiki GROUP BY 1 ORDER BY 1").rows
    v1, v2, v3 = (6, 6), (12, 120), (3, 300)
    expected = [v1] * 6 + [v2] * 2 + [v3] + [v2] * 3 + [v1] * 12
    assert rows == [(DAY.replace(tzinfo=None) + timedelta(hours=h), *answer) for h, answer in enumerate(expected)]


@pytest.mark.parametrize(("where", "answer"), [
    ("__time >= TIMESTAMP '2026-01-01 06:15:00' AND __time < TIMESTAMP '2026-01-01 06:45:00'", (6, 60, 1)),
    ("__time BETWEEN TIMESTAMP '2026-01-01 08:10:00' AND TIMESTAMP '2026-01-01 08:50:00'", (2, 200, 1)),
    ("__time >= TIMESTAMP '2026-01-01 05:30:00' AND __time < TIMESTAMP '2026-01-01 06:30:00'", (3 + 6, 3 + 60, 3)),
])
def test_a_query_inside_the_overshadowed_hours_reads_only_the_newer_rows(broker: Broker, where: str,
                                                                        answer: tuple[int, int, int]) -> None:
    """The last number is how many files the query reads: v1's partitions only where they show."""
    rows = broker.sql(f"SELECT COUNT(*), SUM(added) FROM wiki WHERE {where}").rows
    (plan,) = json.loads(broker.sql(f"EXPLAIN PLAN FOR SELECT COUNT(*) FROM wiki WHERE {where}").rows[0][0])
    assert (*rows[0], plan["query"]["dataSources"]["wiki"]["files"]) == answer


def test_a_column_only_the_newer_version_has_shows_where_it_is_visible(broker: Broker) -> None:
    rows = broker.sql("SELECT flag, COUNT(*), SUM(added) FROM wiki GROUP BY flag ORDER BY flag NULLS FIRST").rows
    assert rows == [(None, 108 + 3, 108 + 300), ("v2", 60, 600)]


def test_rows_of_the_overshadowed_part_are_never_returned(broker: Broker) -> None:
    rows = broker.sql("SELECT __time, added FROM wiki WHERE __time >= TIMESTAMP '2026-01-01 07:40:00' "
                      "AND __time < TIMESTAMP '2026-01-01 08:30:00' ORDER BY __time").rows
    at = DAY.replace(tzinfo=None)
    assert rows == [(at + timedelta(hours=7, minutes=m), 10) for m in (40, 45, 50, 55)] + [
        (at + timedelta(hours=8, minutes=m), 100) for m in (0, 20)]
