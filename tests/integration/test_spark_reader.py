"""``spark.read.format("sluice")`` over segments written with pyarrow and published to a SQLite metadata store.

Every answer is checked against values computed from the raw rows, and against the broker's Druid SQL answer to
the same question where the broker reads the same rows. The timeline under test: day 1 at version v1 in two
partitions, hour 06 of day 1 re-published at v2 (it overshadows part of both v1 partitions), day 2 at v1 wholly
overshadowed by day 2 at v2, and day 3 at v1 marked unused.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In, LessThan, LessThanOrEqual
from pyspark.sql.types import (
    DoubleType,
    FloatType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from sqlalchemy import create_engine, update

from sluice.broker.broker import Broker
from sluice.broker.spark_reader import (
    ETERNITY_RANGE,
    ReadOptions,
    SegmentInputPartition,
    plan_partitions,
    push_time_filters,
    register,
    spark_schema,
)
from sluice.metadata import tables
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec

DAY1 = datetime(2026, 1, 1, tzinfo=UTC)
V1, V2 = "2026-01-05T00:00:00.000Z", "2026-01-06T00:00:00.000Z"
CHANNELS = ["#en", "#fr", None, "#de"]


def _micros(value: datetime) -> int:
    return (value - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _rows(start: datetime, hours: int, every_minutes: int, seed: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(hours * 60 // every_minutes):
        rows.append({
            "__time": start + timedelta(minutes=every_minutes * i, milliseconds=i % 7),
            "channel": CHANNELS[(i + seed) % 4],
            "page_id": (i * 31 + seed) % 50,
            "lat": float((i % 8) / 4),  # exact in float32
            "score": i * 0.5 + seed,
            "count": 1 + i % 3,
            "added": i * 10 + seed,
            "delta": i * 1.25 - seed,  # quarters: every sum is exact in any order
        })
    return rows


def _write(path: Path, rows: list[dict[str, Any]], extra: dict[str, list[Any]] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({
        "__time": pa.array([r["__time"] for r in rows], pa.timestamp("ms", tz="UTC")),
        "channel": pa.array([r["channel"] for r in rows], pa.string()),
        "page_id": pa.array([r["page_id"] for r in rows], pa.int64()),
        "lat": pa.array([r["lat"] for r in rows], pa.float32()),
        "score": pa.array([r["score"] for r in rows], pa.float64()),
        "count": pa.array([r["count"] for r in rows], pa.int64()),
        "added": pa.array([r["added"] for r in rows], pa.int64()),
        "delta": pa.array([r["delta"] for r in rows], pa.float64()),
        **{name: pa.array(values, pa.string()) for name, values in (extra or {}).items()},
    }), path, row_group_size=24)


def _segment(path: Path, interval: Interval, version: str, partition: int, rows: int, core: int) -> DataSegment:
    return DataSegment(
        id=SegmentId("wiki", interval, version, partition),
        dimensions=["channel", "page_id", "lat", "score"], metrics=["count", "added", "delta"],
        aggregators=[{"type": "longSum", "name": "added", "fieldName": "added"}],
        shard_spec=numbered_shard_spec(partition, core), num_rows=rows, size=path.stat().st_size,
        load_spec={"type": "local", "path": str(path)},
    )


@dataclass
class Published:
    options: dict[str, str]
    broker: Broker
    visible: list[dict[str, Any]]  # the raw rows the timeline shows


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Published]:
    deep = tmp_path_factory.mktemp("deep")
    day = timedelta(days=1)
    hour6 = Interval(DAY1 + timedelta(hours=6), DAY1 + timedelta(hours=7))
    day1, day2, day3 = (Interval(DAY1 + n * day, DAY1 + (n + 1) * day) for n in range(3))

    day1_v1 = _rows(DAY1, 24, 10, seed=0)
    parts = [day1_v1[0::2], day1_v1[1::2]]
    hour6_v2 = _rows(hour6.start, 1, 4, seed=100)
    day2_v1, day2_v2 = _rows(day2.start, 24, 30, seed=200), _rows(day2.start, 24, 20, seed=300)
    day3_v1 = _rows(day3.start, 24, 60, seed=400)

    files = {
        "d1v1p0": (parts[0], day1, V1, 0), "d1v1p1": (parts[1], day1, V1, 1), "h6v2": (hour6_v2, hour6, V2, 0),
        "d2v1": (day2_v1, day2, V1, 0), "d2v2": (day2_v2, day2, V2, 0), "d3v1": (day3_v1, day3, V1, 0),
    }
    segments = {}
    for name, (rows, interval, version, partition) in files.items():
        path = deep / name / "index.parquet"
        # Only the v2 hour has a `flag` column: elsewhere it reads as NULL.
        _write(path, rows, {"flag": ["new"] * len(rows)} if name == "h6v2" else None)
        core = 2 if name.startswith("d1v1") else 0
        segments[name] = _segment(path, interval, version, partition, len(rows), core)

    uri = f"sqlite:///{deep / 'metadata.db'}"
    metadata = MetadataStore(uri)
    metadata.create_tables()
    for batch in (["d1v1p0", "d1v1p1", "d2v1", "d3v1"], ["h6v2", "d2v2"]):
        assert metadata.commit_segments_and_metadata([segments[n] for n in batch], "wiki", None, None).success
    engine = create_engine(uri)
    with engine.begin() as conn:  # day 3 dropped: marked unused, its file still in deep storage
        conn.execute(update(tables.segments).where(tables.segments.c.id == str(segments["d3v1"].id)).values(used=False))
    engine.dispose()

    visible = [r for r in day1_v1 if not hour6.contains(r["__time"])] + hour6_v2 + day2_v2
    broker = Broker(metadata, LocalDeepStorage(deep), deep / "cache")
    yield Published({"dataSource": "wiki", "metadataUri": uri, "deepStorage": f"file://{deep}"}, broker, visible)
    metadata.close()


@pytest.fixture(scope="module")
def sluice(spark: SparkSession) -> SparkSession:
    register(spark)
    return spark


def _read(spark: SparkSession, options: dict[str, str]) -> DataFrame:
    return spark.read.format("sluice").options(**options).load()


def _totals(rows: list[dict[str, Any]]) -> tuple[int, int, int, float]:
    return len(rows), sum(r["count"] for r in rows), sum(r["added"] for r in rows), sum(r["delta"] for r in rows)


# ------------------------------------------------------------------------------------------------- through Spark


def test_reads_exactly_the_visible_rows_typed_as_stored(sluice: SparkSession, published: Published) -> None:
    df = _read(sluice, published.options)

    assert df.schema == StructType([
        StructField("__time", TimestampType(), False), StructField("channel", StringType()),
        StructField("page_id", LongType()), StructField("lat", FloatType()), StructField("score", DoubleType()),
        StructField("count", LongType()), StructField("added", LongType()), StructField("delta", DoubleType()),
        StructField("flag", StringType()),
    ])
    assert df.rdd.getNumPartitions() == 4  # one per visible segment file: d1v1p0, d1v1p1, h6v2, d2v2

    rows = df.withColumn("micros", F.unix_micros("__time")).collect()
    expected = sorted(published.visible, key=lambda r: r["__time"])
    assert sorted((r["micros"], r["added"]) for r in rows) == [(_micros(r["__time"]), r["added"]) for r in expected]
    hour6 = (_micros(DAY1 + timedelta(hours=6)), _micros(DAY1 + timedelta(hours=7)))
    assert {r["flag"] for r in rows if hour6[0] <= r["micros"] < hour6[1]} == {"new"}
    assert sum(r["flag"] is None for r in rows) == len(expected) - 15  # 15 rows in the v2 hour
    assert sorted(r["page_id"] + r["lat"] + r["score"] for r in rows) == sorted(
        r["page_id"] + r["lat"] + r["score"] for r in expected)


def _by_channel(rows: list[dict[str, Any]]) -> dict[str | None, tuple[int, int, int, float]]:
    return {channel: _totals([r for r in rows if r["channel"] == channel]) for channel in CHANNELS}


def _sums() -> list[Column]:
    return [F.count("*"), F.sum("count"), F.sum("added"), F.sum("delta")]


def test_sums_by_channel_equal_the_raw_rows(sluice: SparkSession, published: Published) -> None:
    found = {r[0]: tuple(r[1:]) for r in _read(sluice, published.options).groupBy("channel").agg(*_sums()).collect()}
    assert found == _by_channel(published.visible)


def test_sums_equal_the_broker_where_no_segment_is_partly_overshadowed(sluice: SparkSession,
                                                                         published: Published) -> None:
    """From hour 08 of day 1 on: the rest of day 1 at v1 and day 2 at v2 over the whole v1 chunk."""
    since = DAY1 + timedelta(hours=8)
    found = {r[0]: tuple(r[1:]) for r in _read(sluice, published.options).filter(F.col("__time") >= since)
             .groupBy("channel").agg(*_sums()).collect()}
    broker = published.broker.sql(
        'SELECT channel, COUNT(*), SUM("count"), SUM(added), SUM(delta) FROM wiki '
        "WHERE __time >= TIMESTAMP '2026-01-01 08:00:00' GROUP BY channel").rows
    assert found == {r[0]: tuple(r[1:]) for r in broker}
    assert found == _by_channel([r for r in published.visible if r["__time"] >= since])


def test_the_broker_hides_the_overshadowed_part_of_a_segment(published: Published) -> None:
    """What the Spark reader returns (the raw visible rows, checked above) is what Druid SQL must return."""
    broker = published.broker.sql('SELECT COUNT(*), SUM("count"), SUM(added), SUM(delta) FROM wiki').rows
    assert tuple(broker[0]) == _totals(published.visible)
    by_channel = published.broker.sql(
        'SELECT channel, COUNT(*), SUM("count"), SUM(added), SUM(delta) FROM wiki GROUP BY channel').rows
    assert {r[0]: tuple(r[1:]) for r in by_channel} == _by_channel(published.visible)
    in_hour6 = published.broker.sql("SELECT COUNT(*), MIN(flag), MAX(flag) FROM wiki WHERE __time >= TIMESTAMP "
                                    "'2026-01-01 06:00:00' AND __time < TIMESTAMP '2026-01-01 07:00:00'")
    assert in_hour6.rows == [(15, "new", "new")]  # the v2 hour alone


def test_interval_option_and_pushed_time_filters_prune_segments(sluice: SparkSession, published: Published) -> None:
    """An interval, or a comparison of `__time`, reads only the segments it overlaps and only its rows."""
    start, end = DAY1 + timedelta(hours=5, minutes=30), DAY1 + timedelta(hours=6, minutes=30)
    expected = [r for r in published.visible if start <= r["__time"] < end]

    by_interval = _read(sluice, {**published.options, "interval": f"{start.isoformat()}/{end.isoformat()}"})
    by_filter = _read(sluice, published.options).filter((F.col("__time") >= start) & (F.col("__time") < end))
    for df in (by_interval, by_filter):
        assert df.rdd.getNumPartitions() == 3  # the two v1 partitions of day 1 and the v2 hour; not day 2
        assert sorted(r[0] for r in df.select(F.unix_micros("__time")).collect()) == sorted(
            _micros(r["__time"]) for r in expected)

    one = published.visible[5]["__time"]  # rows have odd milliseconds: equality is exact
    assert _read(sluice, published.options).filter(F.col("__time") == one).count() == 1


def test_an_interval_without_segments_gives_no_rows_and_the_columns(sluice: SparkSession, published: Published) -> None:
    df = _read(sluice, {**published.options, "interval": "2025-01-01/2025-02-01"})
    assert df.columns[:3] == ["__time", "channel", "page_id"]
    assert df.count() == 0


@pytest.mark.parametrize(("options", "message"), [
    ({"dataSource": "nope"}, r"dataSource \[nope\] has no used segments .*\['wiki'\]"),
    ({"interval": "yesterday"}, r"option interval: expected ISO-8601 'start/end'.*'yesterday'"),
])
def test_a_bad_option_fails_load_naming_it(sluice: SparkSession, published: Published, options: dict[str, str],
                                          message: str) -> None:
    with pytest.raises(Exception, match=message):
        _read(sluice, {**published.options, **options})


# ------------------------------------------------------------------------------------------- planning, no Spark


def test_a_partially_overshadowed_segment_is_read_over_its_visible_parts(published: Published) -> None:
    metadata = MetadataStore(published.options["metadataUri"])
    try:
        partitions = plan_partitions(metadata.used_segments("wiki"), ETERNITY_RANGE)
    finally:
        metadata.close()
    hour6, hour7 = _micros(DAY1 + timedelta(hours=6)), _micros(DAY1 + timedelta(hours=7))
    day1, day2, day3 = (_micros(DAY1 + timedelta(days=n)) for n in range(3))
    assert [(Path(p.load_spec["path"]).parent.name, p.ranges) for p in partitions] == [
        ("d1v1p0", ((day1, hour6), (hour7, day2))),
        ("d1v1p1", ((day1, hour6), (hour7, day2))),
        ("h6v2", ((hour6, hour7),)),
        ("d2v2", ((day2, day3),)),
    ]
    assert all(isinstance(p, SegmentInputPartition) for p in partitions)
    assert plan_partitions([], ETERNITY_RANGE) == []


def test_time_comparisons_narrow_the_range_exactly_and_other_filters_stay_with_spark() -> None:
    t = DAY1 + timedelta(microseconds=5)
    other = In(("__time",), (t,))
    on_channel = EqualTo(("channel",), "#en")
    full = ETERNITY_RANGE
    assert push_time_filters([GreaterThan(("__time",), t), on_channel, other], full) == (
        (_micros(t) + 1, full[1]), [on_channel, other])
    assert push_time_filters([GreaterThanOrEqual(("__time",), t), LessThanOrEqual(("__time",), t)], full) == (
        (_micros(t), _micros(t) + 1), [])
    assert push_time_filters([EqualTo(("__time",), t)], (0, 10)) == (None, [])  # outside the interval option
    assert push_time_filters([LessThan(("__time",), t), GreaterThan(("__time",), t)], full) == (None, [])


def test_a_column_stored_with_different_types_gets_their_common_type() -> None:
    time = ("__time", pa.timestamp("ms", tz="UTC"))
    schema = spark_schema([
        pa.schema([time, ("page_id", pa.int64()), ("user", pa.dictionary(pa.int32(), pa.string())), ("x", pa.int64())]),
        pa.schema([("page_id", pa.float64()), ("x", pa.string()), time]),
    ])
    assert [(f.name, f.dataType, f.nullable) for f in schema] == [
        ("__time", TimestampType(), False), ("page_id", DoubleType(), True), ("user", StringType(), True),
        ("x", StringType(), True)]
    with pytest.raises(ValueError, match="no __time column"):
        spark_schema([pa.schema([("page_id", pa.int64())])])


def test_options_are_case_insensitive_and_required_ones_are_named() -> None:
    given = {"datasource": "wiki", "metadatauri": "sqlite://", "deepstorage": "/deep",
                      "interval": "2026-01-01/2026-01-02"}
    parsed = ReadOptions.parse(given)
    assert (parsed.data_source, parsed.time_range) == ("wiki", (_micros(DAY1), _micros(DAY1 + timedelta(days=1))))
    with pytest.raises(ValueError, match=r"needs option\(s\) \['metadataUri', 'deepStorage'\]"):
        ReadOptions.parse({"dataSource": "wiki"})
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['segmentz'\]"):
        ReadOptions.parse({**given, "segmentz": "1"})
    with pytest.raises(ValueError, match=r"option deepStorage: .*unsupported scheme 'ftp'"):
        ReadOptions.parse({**given, "deepStorage": "ftp://x/y"})
