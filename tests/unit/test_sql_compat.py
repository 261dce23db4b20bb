"""Queries from Druid's SQL reference (tutorials, aggregation and time function pages) over wikipedia-like rows that
sit in hourly segments as ingestion leaves them; every expected answer is computed here from the raw rows."""

from __future__ import annotations

import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.broker import Broker
from sluice.broker.sql.translate import translate_query
from sluice.metadata.store import MetadataStore
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec

START = datetime(2015, 9, 12, tzinfo=UTC)
HOURS = 30
CHANNELS = ["#en.wikipedia", "#fr.wikipedia", "#de.wikipedia", "#ja.wikipedia"]
PAGES = [f"Page {i}" for i in range(12)]
USERS = ["Alice", "Bob", "Carol", "Dan", "Eve", None]
COUNTRIES = ["France", "Japan", None, None]


def _rows() -> list[dict[str, Any]]:
    rng = random.Random(5)
    rows = []
    for hour in range(HOURS):
        if hour in (7, 8):  # a quiet stretch without any segment
            continue
        for _ in range(rng.randint(4, 12)):
            added = rng.randint(0, 500)
            deleted = rng.randint(0, 50)
            rows.append({
                "__time": START + timedelta(hours=hour, minutes=rng.randint(0, 59), seconds=rng.randint(0, 59)),
                "channel": rng.choice(CHANNELS), "page": rng.choice(PAGES), "user": rng.choice(USERS),
                "countryName": rng.choice(COUNTRIES), "isRobot": rng.choice(["true", "false"]),
                "added": added, "deleted": deleted, "delta": added - deleted,
            })
    return sorted(rows, key=lambda r: r["__time"])


ROWS = _rows()
# A second data source to join with: one row per channel it knows (not #ja), written at the start of the data.
LANGUAGES = [{"channel": "#en.wikipedia", "language": "English"}, {"channel": "#fr.wikipedia", "language": "French"},
             {"channel": "#de.wikipedia", "language": "German"}]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Broker:
    root = tmp_path_factory.mktemp("compat")
    metadata = MetadataStore(f"sqlite:///{root / 'metadata.db'}")
    metadata.create_tables()
    segments = []
    for hour in sorted({int((r["__time"] - START).total_seconds()) // 3600 for r in ROWS}):
        rows = [r for r in ROWS if START + timedelta(hours=hour) <= r["__time"] < START + timedelta(hours=hour + 1)]
        path = root / f"wikipedia-{hour:02d}.parquet"
        pq.write_table(pa.table({
            "__time": pa.array([r["__time"] for r in rows], pa.timestamp("ms", tz="UTC")),
            **{d: pa.array([r[d] for r in rows], pa.string()) for d in ("channel", "page", "user", "countryName",
                                                                          "isRobot")},
            **{m: pa.array([r[m] for r in rows], pa.int64()) for m in ("added", "deleted", "delta")},
        }), path)
        interval = Interval(START + timedelta(hours=hour), START + timedelta(hours=hour + 1))
        segments.append(DataSegment(
            id=SegmentId("wikipedia", interval, "2026-01-01T00:00:00.000Z", 0),
            dimensions=["channel", "page", "user", "countryName", "isRobot"], metrics=["added", "deleted", "delta"],
            aggregators=[], shard_spec=numbered_shard_spec(0), num_rows=len(rows), size=path.stat().st_size,
            load_spec={"type": "local", "path": str(path)}))
    assert metadata.commit_segments_and_metadata(segments, "wikipedia", None, None).success
    path = root / "languages.parquet"
    pq.write_table(pa.table({
        "__time": pa.array([START] * len(LANGUAGES), pa.timestamp("ms", tz="UTC")),
        **{d: pa.array([r[d] for r in LANGUAGES], pa.string()) for d in ("channel", "language")},
    }), path)
    languages = DataSegment(
        id=SegmentId("languages", Interval(START, START + timedelta(days=1)), "2026-01-01T00:00:00.000Z", 0),
        dimensions=["channel", "language"], metrics=[], aggregators=[], shard_spec=numbered_shard_spec(0),
        num_rows=len(LANGUAGES), size=path.stat().st_size, load_spec={"type": "local", "path": str(path)})
    assert metadata.commit_segments_and_metadata([languages], "languages", None, None).success
    return Broker(metadata, LocalDeepStorage(root), root / "cache")


def _naive(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(tzinfo=None)


def _hour(t: datetime) -> datetime:
    return _naive(t).replace(minute=0, second=0, microsecond=0)


DAY1, DAY2 = datetime(2015, 9, 12), datetime(2015, 9, 13)
IN_DAY1 = [r for r in ROWS if _naive(r["__time"]) < DAY2]


def _grouped(rows: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> dict[Any, list[dict[str, Any]]]:
    groups: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[key(row)].append(row)
    return groups


def _top_pages() -> list[tuple]:
    edits = Counter(r["page"] for r in IN_DAY1)
    return sorted(edits.items(), key=lambda kv: (-kv[1], kv[0]))[:10]


def _deleted_per_hour() -> list[tuple]:
    return sorted((hour, sum(r["deleted"] for r in rows)) for hour, rows in _grouped(IN_DAY1, lambda r: _hour(
        r["__time"])).items())


def _channel_page_added() -> list[tuple]:
    sums = {key: sum(r["added"] for r in rows)
            for key, rows in _grouped(IN_DAY1, lambda r: (r["channel"], r["page"])).items()}
    return sorted(((c, p, s) for (c, p), s in sums.items()), key=lambda t: (-t[2], t[0], t[1]))[:5]


def _six_hour_buckets() -> list[tuple]:
    def bucket(r: dict[str, Any]) -> str:
        t = _naive(r["__time"])
        return t.replace(hour=t.hour - t.hour % 6, minute=0, second=0).strftime("%Y-%m-%d %H:%M")
    return sorted((b, len(rows)) for b, rows in _grouped(ROWS, bucket).items())


def _robot_filters() -> list[tuple]:
    return [(
        sum(r["added"] for r in ROWS if r["isRobot"] == "true"),
        sum(1 for r in ROWS if r["isRobot"] == "false"),
        len({r["user"] for r in ROWS if r["channel"] == "#en.wikipedia" and r["user"] is not None}),
    )]


def _grouping_sets() -> list[tuple]:
    by_channel = {c: sum(r["delta"] for r in rows) for c, rows in _grouped(ROWS, lambda r: r["channel"]).items()}
    by_robot = {b: sum(r["delta"] for r in rows) for b, rows in _grouped(ROWS, lambda r: r["isRobot"]).items()}
    total = sum(r["delta"] for r in ROWS)
    rows = [(None, None, total, 3)] + [(None, b, s, 2) for b, s in sorted(by_robot.items())]
    return rows + [(c, None, s, 1) for c, s in sorted(by_channel.items())]


def _rollup() -> list[tuple]:
    """GROUP BY ROLLUP (channel, isRobot): every pair, a subtotal per channel, the grand total."""
    pairs = {k: sum(r["added"] for r in rows)
             for k, rows in _grouped(ROWS, lambda r: (r["channel"], r["isRobot"])).items()}
    channels = {c: sum(r["added"] for r in rows) for c, rows in _grouped(ROWS, lambda r: r["channel"]).items()}
    return ([(c, b, s, 0) for (c, b), s in sorted(pairs.items())]
            + [(c, None, s, 1) for c, s in sorted(channels.items())]
            + [(None, None, sum(r["added"] for r in ROWS), 3)])


def _cube() -> list[tuple]:
    """GROUP BY CUBE (isRobot, countryName): the rollup's groups plus a subtotal per country."""
    def key(value: Any) -> tuple:  # NULLS FIRST, as Druid orders them ascending
        return (value is not None, value or "")
    groups: dict[tuple, int] = {}
    for robot, country in {(r["isRobot"], r["countryName"]) for r in ROWS}:
        groups[(robot, country, 0)] = sum(1 for r in ROWS if (r["isRobot"], r["countryName"]) == (robot, country))
    for robot in {r["isRobot"] for r in ROWS}:
        groups[(robot, None, 1)] = sum(1 for r in ROWS if r["isRobot"] == robot)
    for country in {r["countryName"] for r in ROWS}:
        groups[(None, country, 2)] = sum(1 for r in ROWS if r["countryName"] == country)
    groups[(None, None, 3)] = len(ROWS)
    ordered = sorted(groups.items(), key=lambda kv: (kv[0][2], key(kv[0][0]), key(kv[0][1])))
    return [(robot, country, n, level) for (robot, country, level), n in ordered]


def _earliest_by() -> list[tuple]:
    """EARLIEST_BY over `__time` and over another timestamp (the edit time one day later: the same order)."""
    return [(c, rows[0]["page"], rows[0]["user"], rows[-1]["page"])
            for c, rows in sorted(_grouped(ROWS, lambda r: r["channel"]).items())]


def _join_languages() -> list[tuple]:
    language = {r["channel"]: r["language"] for r in LANGUAGES}
    joined = _grouped([r for r in ROWS if r["channel"] in language], lambda r: language[r["channel"]])
    return [(lang, len(rows), sum(r["added"] for r in rows)) for lang, rows in sorted(joined.items())]


def _left_join_languages() -> list[tuple]:
    language = {r["channel"]: r["language"] for r in LANGUAGES}
    return [(c, language.get(c), len(rows)) for c, rows in sorted(_grouped(ROWS, lambda r: r["channel"]).items())]


def _earliest_latest() -> list[tuple]:
    return [(c, rows[0]["page"], rows[-1]["page"], rows[-1]["added"])
            for c, rows in sorted(_grouped(ROWS, lambda r: r["channel"]).items())]


def _string_agg() -> list[tuple]:
    return [(c, ",".join(sorted({r["countryName"] for r in rows if r["countryName"]})) or None)
            for c, rows in sorted(_grouped(ROWS, lambda r: r["channel"]).items())]


def _rank_within_channel() -> list[tuple]:
    out = []
    for channel, rows in sorted(_grouped(ROWS, lambda r: r["channel"]).items()):
        sums = sorted(((p, sum(r["added"] for r in prs)) for p, prs in _grouped(rows, lambda r: r["page"]).items()),
                      key=lambda t: (-t[1], t[0]))
        out.append((channel, sums[0][0], sums[0][1], 1))
    return out


def _running_total() -> list[tuple]:
    per_hour = sorted((h, sum(r["added"] for r in rows)) for h, rows in _grouped(IN_DAY1, lambda r: _hour(
        r["__time"])).items())
    total, out = 0, []
    for hour, added in per_hour[:5]:
        total += added
        out.append((hour, added, total))
    return out


def _users_in_both_channels() -> list[tuple]:
    en = {r["user"] for r in ROWS if r["channel"] == "#en.wikipedia" and r["user"]}
    fr = {r["user"] for r in ROWS if r["channel"] == "#fr.wikipedia" and r["user"]}
    return [(u,) for u in sorted(en & fr)]


def _union_all() -> list[tuple]:
    return sorted([("added", sum(r["added"] for r in ROWS)), ("deleted", sum(r["deleted"] for r in ROWS))])


def _per_la_day() -> list[tuple]:
    la = ZoneInfo("America/Los_Angeles")
    days = Counter(r["__time"].astimezone(la).replace(hour=0, minute=0, second=0) for r in ROWS)
    return sorted(days.items())


def _hours_since_start() -> list[tuple]:
    first = ROWS[0]["__time"]
    return [(max(int((r["__time"] - first).total_seconds() // 3600) for r in ROWS),
             _naive(first + timedelta(days=1)))]


def _null_handling() -> list[tuple]:
    unknown = [r for r in ROWS if r["countryName"] is None]
    return [(len(unknown), sum(1 for r in ROWS if r["user"] is None),
             len({r["countryName"] or "(unknown)" for r in ROWS}))]


def _having() -> list[tuple]:
    sums = {p: sum(r["added"] for r in rows) for p, rows in _grouped(ROWS, lambda r: r["page"]).items()}
    return sorted(((p, s) for p, s in sums.items() if s > 5000), key=lambda t: t[0])


def _like() -> list[tuple]:
    return [(sum(1 for r in ROWS if r["page"].startswith("Page 1")),
             sum(1 for r in ROWS if "de." in r["channel"]))]


def _offset() -> list[tuple]:
    return [(p,) for p in sorted({r["page"] for r in ROWS})[3:6]]


def _day2_by_interval() -> list[tuple]:
    return [(sum(1 for r in ROWS if _naive(r["__time"]) >= DAY2),)]


COMPAT: list[tuple[str, str, Callable[[], list[tuple]], dict[str, Any]]] = [
    ("count", "SELECT COUNT(*) AS cnt FROM wikipedia", lambda: [(len(ROWS),)], {}),
    ("tutorial topN", """SELECT page, COUNT(*) AS Edits FROM wikipedia
        WHERE "__time" BETWEEN TIMESTAMP '2015-09-12 00:00:00' AND TIMESTAMP '2015-09-12 23:59:59.999'
        GROUP BY page ORDER BY Edits DESC, page LIMIT 10""", _top_pages, {}),
    ("tutorial timeseries", """SELECT FLOOR(__time to HOUR) AS HourTime, SUM(deleted) AS LinesDeleted FROM wikipedia
        WHERE "__time" >= TIMESTAMP '2015-09-12 00:00:00' AND "__time" < TIMESTAMP '2015-09-13 00:00:00'
        GROUP BY 1 ORDER BY 1""", _deleted_per_hour, {}),
    ("tutorial groupBy", """SELECT channel, page, SUM(added) FROM wikipedia
        WHERE "__time" >= TIMESTAMP '2015-09-12 00:00:00' AND "__time" < TIMESTAMP '2015-09-13 00:00:00'
        GROUP BY channel, page ORDER BY SUM(added) DESC, channel, page LIMIT 5""", _channel_page_added, {}),
    ("time_floor and time_format", """SELECT TIME_FORMAT(TIME_FLOOR(__time, 'PT6H'), 'yyyy-MM-dd HH:mm') AS b,
        COUNT(*) FROM wikipedia GROUP BY 1 ORDER BY 1""", _six_hour_buckets, {}),
    ("filtered aggregators", """SELECT SUM(added) FILTER(WHERE isRobot = 'true'),
        COUNT(*) FILTER(WHERE isRobot = 'false'), COUNT(DISTINCT "user") FILTER(WHERE channel = '#en.wikipedia')
        FROM wikipedia""", _robot_filters, {"useApproximateCountDistinct": False}),
    ("grouping sets", """SELECT channel, isRobot, SUM(delta), GROUPING(channel, isRobot) FROM wikipedia
        GROUP BY GROUPING SETS ((channel), (isRobot), ()) ORDER BY 4 DESC, 1, 2""", _grouping_sets, {}),
    ("rollup", """SELECT channel, isRobot, SUM(added), GROUPING(channel, isRobot) FROM wikipedia
        GROUP BY ROLLUP (channel, isRobot) ORDER BY 4, 1, 2""", _rollup, {}),
    ("cube", """SELECT isRobot, countryName, COUNT(*), GROUPING(isRobot, countryName) FROM wikipedia
        GROUP BY CUBE (isRobot, countryName) ORDER BY 4, 1 NULLS FIRST, 2 NULLS FIRST""", _cube, {}),
    ("earliest_by", """SELECT channel, EARLIEST_BY(page, __time), EARLIEST_BY("user", TIME_SHIFT(__time, 'P1D', 1), 64),
        LATEST_BY(page, MILLIS_TO_TIMESTAMP(TIMESTAMP_TO_MILLIS(__time))) FROM wikipedia GROUP BY channel ORDER BY 1""",
     _earliest_by, {}),
    ("join of two data sources", """SELECT l.language, COUNT(*), SUM(w.added) FROM wikipedia w
        INNER JOIN languages l ON w.channel = l.channel GROUP BY l.language ORDER BY 1""", _join_languages, {}),
    ("left join of two data sources", """SELECT w.channel, MAX(l.language), COUNT(*) FROM wikipedia w
        LEFT JOIN druid.languages l ON w.channel = l.channel GROUP BY w.channel ORDER BY 1""",
     _left_join_languages, {}),
    ("earliest and latest", """SELECT channel, EARLIEST(page, 100), LATEST(page, 100), LATEST_BY(added, __time)
        FROM wikipedia GROUP BY channel ORDER BY channel""", _earliest_latest, {}),
    ("string_agg distinct", """SELECT channel, STRING_AGG(DISTINCT countryName, ',') FROM wikipedia
        GROUP BY channel ORDER BY channel""", _string_agg, {}),
    ("window rank", """SELECT channel, page, added, rnk FROM (
          SELECT channel, page, SUM(added) AS added,
                 RANK() OVER (PARTITION BY channel ORDER BY SUM(added) DESC, page) AS rnk
          FROM wikipedia GROUP BY channel, page) WHERE rnk = 1 ORDER BY channel""", _rank_within_channel, {}),
    ("window running total", """SELECT FLOOR(__time TO HOUR) AS h, SUM(added),
          SUM(SUM(added)) OVER (ORDER BY FLOOR(__time TO HOUR)) FROM wikipedia
        WHERE __time < TIMESTAMP '2015-09-13 00:00:00' GROUP BY 1 ORDER BY 1 LIMIT 5""", _running_total, {}),
    ("join", """SELECT DISTINCT en."user" FROM wikipedia en
        INNER JOIN (SELECT "user" FROM wikipedia WHERE channel = '#fr.wikipedia') fr ON en."user" = fr."user"
        WHERE en.channel = '#en.wikipedia' ORDER BY 1""", _users_in_both_channels, {}),
    ("union all", """SELECT 'added' AS metric, SUM(added) FROM wikipedia
        UNION ALL SELECT 'deleted', SUM(deleted) FROM wikipedia ORDER BY 1""", _union_all, {}),
    ("sqlTimeZone", "SELECT FLOOR(__time TO DAY), COUNT(*) FROM wikipedia GROUP BY 1 ORDER BY 1", _per_la_day,
     {"sqlTimeZone": "America/Los_Angeles"}),
    ("timestampdiff and timestampadd", """SELECT MAX(TIMESTAMPDIFF(HOUR, (SELECT MIN(__time) FROM wikipedia), __time)),
        TIMESTAMPADD(DAY, 1, (SELECT MIN(__time) FROM wikipedia)) FROM wikipedia""", _hours_since_start, {}),
    ("nulls", """SELECT COUNT(*) FILTER(WHERE countryName IS NULL), COUNT(*) FILTER(WHERE "user" IS NULL),
        COUNT(DISTINCT COALESCE(countryName, '(unknown)')) FROM wikipedia""", _null_handling,
     {"useApproximateCountDistinct": False}),
    ("having", """SELECT page, SUM(added) FROM wikipedia GROUP BY page HAVING SUM(added) > 5000 ORDER BY page""",
     _having, {}),
    ("like and contains_string", """SELECT COUNT(*) FILTER(WHERE page LIKE 'Page 1%'),
        COUNT(*) FILTER(WHERE CONTAINS_STRING(channel, 'de.')) FROM wikipedia""", _like, {}),
    ("limit offset", "SELECT DISTINCT page FROM wikipedia ORDER BY page LIMIT 3 OFFSET 3", _offset, {}),
    ("time_in_interval", """SELECT COUNT(*) FROM wikipedia
        WHERE TIME_IN_INTERVAL(__time, '2015-09-13T00:00:00Z/2015-09-14T00:00:00Z')""", _day2_by_interval, {}),
]


@pytest.mark.parametrize(("sql", "expected", "context"), [c[1:] for c in COMPAT], ids=[c[0] for c in COMPAT])
def test_druid_reference_queries(broker: Broker, sql: str, expected: Callable[[], list[tuple]],
                                 context: dict[str, Any]) -> None:
    assert broker.sql(sql, [], context).rows == expected()


def test_parameters_as_in_the_sql_api_docs(broker: Broker) -> None:
    sql = "SELECT COUNT(*) FROM wikipedia WHERE channel = ? AND __time >= ? AND added > ?"
    parameters = [{"type": "VARCHAR", "value": "#fr.wikipedia"}, {"type": "TIMESTAMP", "value": "2015-09-13 00:00:00"},
                  {"type": "BIGINT", "value": 100}]
    expected = sum(1 for r in ROWS if r["channel"] == "#fr.wikipedia" and _naive(r["__time"]) >= DAY2
                   and r["added"] > 100)
    assert broker.sql(sql, parameters).rows == [(expected,)]


def test_approximations_are_close_and_exact_modes_are_exact(broker: Broker) -> None:
    sql = """SELECT COUNT(DISTINCT page), APPROX_COUNT_DISTINCT_DS_HLL("user"), APPROX_QUANTILE_DS(added, 0.5),
                    APPROX_QUANTILE(deleted, 0.9, 50) FROM wikipedia"""
    distinct_pages, distinct_users, median, p90 = broker.sql(sql).rows[0]
    assert distinct_pages == len({r["page"] for r in ROWS})
    assert distinct_users == len({r["user"] for r in ROWS if r["user"]})
    assert median == pytest.approx(statistics.median(r["added"] for r in ROWS), rel=0.1)
    assert p90 == pytest.approx(statistics.quantiles([r["deleted"] for r in ROWS], n=10)[-1], rel=0.15)
    exact = broker.sql("SELECT COUNT(DISTINCT channel || page) FROM wikipedia", [],
                       {"useApproximateCountDistinct": "false"}).rows
    assert exact == [(len({(r["channel"], r["page"]) for r in ROWS}),)]


def test_any_value_is_a_value_of_its_group(broker: Broker) -> None:
    """ANY_VALUE (Druid: any value of the group, nulls included) picks some row's value, never another group's."""
    rows = broker.sql("""SELECT channel, ANY_VALUE(page), ANY_VALUE(countryName, 100), ANY_VALUE(added)
                         FROM wikipedia GROUP BY channel ORDER BY channel""").rows
    groups = _grouped(ROWS, lambda r: r["channel"])
    assert [r[0] for r in rows] == sorted(groups)
    for channel, page, country, added in rows:
        assert page in {r["page"] for r in groups[channel]}
        assert country in {r["countryName"] for r in groups[channel]}
        assert added in {r["added"] for r in groups[channel]}
    constant = broker.sql("SELECT isRobot, ANY_VALUE(UPPER(isRobot)) FROM wikipedia GROUP BY 1 ORDER BY 1").rows
    assert constant == [("false", "FALSE"), ("true", "TRUE")]


def test_array_agg_distinct_is_sorted_with_nulls_first(broker: Broker) -> None:
    rows = broker.sql("SELECT ARRAY_AGG(DISTINCT \"user\", 4096) FROM wikipedia WHERE channel = '#ja.wikipedia'").rows
    users = {r["user"] for r in ROWS if r["channel"] == "#ja.wikipedia"}
    assert rows == [([None] * (None in users) + sorted(u for u in users if u),)]


def test_information_schema_describes_the_data_source(broker: Broker) -> None:
    rows = broker.sql("""SELECT COLUMN_NAME, DATA_TYPE FROM INFORMATION_SCHEMA.COLUMNS
                         WHERE TABLE_SCHEMA = 'druid' AND TABLE_NAME = 'wikipedia' ORDER BY ORDINAL_POSITION""").rows
    assert rows == [("__time", "TIMESTAMP")] + [(d, "VARCHAR") for d in ("channel", "page", "user", "countryName",
                                                                          "isRobot")] + [
        (m, "BIGINT") for m in ("added", "deleted", "delta")]


@pytest.mark.parametrize("druid, duckdb_reference", [
    ("TIME_FLOOR(__time, 'PT1S')", "time_bucket(INTERVAL 1 SECOND, __time, TIMESTAMP '1970-01-01')"),
    ("TIME_FLOOR(__time, 'PT1M')", "time_bucket(INTERVAL 1 MINUTE, __time, TIMESTAMP '1970-01-01')"),
    ("TIME_FLOOR(__time, 'PT1H')", "time_bucket(INTERVAL 1 HOUR, __time, TIMESTAMP '1970-01-01')"),
    ("TIME_FLOOR(__time, 'P1D')", "time_bucket(INTERVAL 1 DAY, __time, TIMESTAMP '1970-01-01')"),
    ("TIME_FLOOR(__time, 'P1W')", "time_bucket(INTERVAL 7 DAY, __time, TIMESTAMP '1970-01-05')"),
    ("TIME_FLOOR(__time, 'P1M')", "time_bucket(INTERVAL 1 MONTH, __time, TIMESTAMP '1970-01-01')"),
    ("TIME_FLOOR(__time, 'PT15M')", "time_bucket(INTERVAL 15 MINUTE, __time, TIMESTAMP '1970-01-01')"),
    ("TIME_FLOOR(__time, 'PT1.5S')", "time_bucket(INTERVAL 1500 MILLISECOND, __time, TIMESTAMP '1970-01-01')"),
])
def test_time_floor_buckets_from_druids_origin(druid, duckdb_reference) -> None:
    """One calendar unit (the fast path, DATE_TRUNC) or any other period: Druid's buckets, counted from its default
    origin (a Monday for P1W), before the epoch too."""
    connection = duckdb.connect()
    connection.execute("CREATE TABLE t AS SELECT TIMESTAMP '1969-12-28 13:47:31.123' + INTERVAL (i * 3571) SECOND "
                       "AS __time FROM range(3000) r(i)")
    translated = translate_query(f"SELECT {druid} FROM t", {"t"}).sql
    assert connection.execute(translated).fetchall() == connection.execute(f"SELECT {duckdb_reference} FROM t").fetchall()


@pytest.mark.parametrize("druid, reference", [
    ("SELECT FLOOR(__time TO HOUR) AS h, COUNT(*) AS n FROM t GROUP BY 1 ORDER BY 1",
     "SELECT date_trunc('hour', __time) AS h, COUNT(*) AS n FROM t GROUP BY 1 ORDER BY 1"),
    ("SELECT TIME_FLOOR(__time, 'PT1M') AS m, k, SUM(v) AS s FROM t GROUP BY TIME_FLOOR(__time, 'PT1M'), k "
     "HAVING TIME_FLOOR(__time, 'PT1M') < TIMESTAMP '1970-01-03' ORDER BY TIME_FLOOR(__time, 'PT1M') DESC, k",
     "SELECT date_trunc('minute', __time) AS m, k, SUM(v) AS s FROM t GROUP BY 1, 2 "
     "HAVING date_trunc('minute', __time) < TIMESTAMP '1970-01-03' ORDER BY 1 DESC, 2"),
    ("SELECT COUNT(*) AS n, FLOOR(__time TO DAY) AS d FROM t GROUP BY 2 ORDER BY 2",
     "SELECT COUNT(*) AS n, date_trunc('day', __time) AS d FROM t GROUP BY 2 ORDER BY 2"),
    ("SELECT d, SUM(n) AS n FROM (SELECT FLOOR(__time TO SECOND) AS d, COUNT(*) AS n FROM t GROUP BY 1) GROUP BY 1 "
     "ORDER BY 1 LIMIT 50",
     "SELECT date_trunc('second', __time) AS d, COUNT(*) AS n FROM t GROUP BY 1 ORDER BY 1 LIMIT 50"),
])
def test_groups_by_a_fixed_time_floor_are_the_same_groups_on_bucket_numbers(druid, reference) -> None:
    """GROUP BY a UTC floor of __time runs on integer bucket numbers (faster): the same rows, before the epoch too."""
    connection = duckdb.connect()
    connection.execute("CREATE TABLE t AS SELECT TIMESTAMP '1969-12-28 13:47:31.123' + INTERVAL (i * 3571) SECOND "
                       "AS __time, i % 3 AS k, i AS v FROM range(3000) r(i)")
    translated = translate_query(druid, {"t"}).sql
    assert "EPOCH_US" in translated and "DATE_TRUNC" not in translated
    assert connection.execute(translated).fetchall() == connection.execute(reference).fetchall()
