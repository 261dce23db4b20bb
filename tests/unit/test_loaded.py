"""Data sources loaded into DuckDB's own storage answer exactly as their Parquet files do, dictionary-encoded."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.engine import ClippedFile, SqlEngine
from sluice.broker.loaded import LoadedDataSources
from sluice.segment.segment import Interval

START = datetime(2024, 1, 1)
PAGES = ["zeta", "alpha", "Mid", None, "ü-umlaut", "10"]


def segment(path: Path, hour: int, rows: int) -> str:
    times = [START + timedelta(hours=hour, seconds=i) for i in range(rows)]
    pq.write_table(pa.table({
        "__time": pa.array(times, pa.timestamp("ms", tz="UTC")),
        "page": pa.array([PAGES[i % len(PAGES)] for i in range(rows)], pa.string()),
        "count": pa.array([1 + i % 3 for i in range(rows)], pa.int64()),
    }), path)
    return str(path)


def loaded(data: LoadedDataSources, source: str, files: list) -> object:
    """Ask until the load of `files` has finished (it settles first, then runs in the background)."""
    deadline = time.monotonic() + 30
    while (database := data.database(source, files)) is None:
        assert time.monotonic() < deadline, "the data source was not loaded"
        time.sleep(0.05)
    return database


@pytest.fixture
def files(tmp_path: Path) -> list[str]:
    return [segment(tmp_path / f"h{hour}.parquet", hour, 500) for hour in range(3)]


@pytest.fixture
def data() -> LoadedDataSources:
    loader = LoadedDataSources({"threads": 1}, max_rows=10_000, settle_s=0.0)
    yield loader
    loader.stop()


QUERIES = [
    'SELECT page, SUM("count") AS n FROM wiki GROUP BY page ORDER BY page',
    'SELECT page, SUM("count") AS n FROM wiki GROUP BY page ORDER BY n DESC, page LIMIT 3',
    "SELECT MIN(page), MAX(page), COUNT(DISTINCT page) FROM wiki",
    "SELECT COUNT(*) FROM wiki WHERE page > 'b' OR page = 'nope' OR page IN ('10', 'x') OR page LIKE 'M%'",
    "SELECT UPPER(page) || '!' AS shout, TRY_CAST(page AS BIGINT) AS number FROM wiki GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT TIME_FLOOR(__time, 'PT1H') AS h, COUNT(*) FROM wiki WHERE __time >= TIMESTAMP '2024-01-01 01:00:00' "
    "GROUP BY 1 ORDER BY 1",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_a_loaded_data_source_answers_as_its_files_do(data, files, sql) -> None:
    engine = SqlEngine(threads=1)
    from_files = engine.execute(sql, {"wiki": files})
    database = loaded(data, "wiki", files)
    from sluice.broker.sql.translate import translate_query

    from_loaded = engine.run(translate_query(sql, {"wiki"}), {"wiki": files}, database=database)
    assert (from_loaded.rows, from_loaded.sql_types) == (from_files.rows, from_files.sql_types)


def test_strings_are_dictionary_encoded_and_rows_in_time_order(data, files) -> None:
    database = loaded(data, "wiki", list(reversed(files)))
    kinds = dict(database.execute("SELECT column_name, data_type FROM information_schema.columns "
                                  "WHERE table_name = 'wiki'").fetchall())
    assert kinds["page"].startswith("ENUM(") and kinds["__time"] == "TIMESTAMP"
    times = [row[0] for row in database.execute("SELECT __time FROM wiki").fetchall()]
    assert times == sorted(times) and len(times) == 1500


def test_other_files_are_not_answered_from_the_load_until_they_are_loaded(data, files) -> None:
    loaded(data, "wiki", files[:2])
    assert data.database("wiki", files) is None  # a segment was added: read from the files meanwhile
    assert data.load_status() == {"wiki": pytest.approx(200 / 3)}
    database = loaded(data, "wiki", files)
    assert database.execute("SELECT COUNT(*) FROM wiki").fetchone() == (1500,)
    assert data.load_status() == {"wiki": 100.0}


def test_a_segment_seen_in_part_is_loaded_in_part(data, files) -> None:
    clipped = ClippedFile(files[1], (Interval.parse("2024-01-01T01:00:00Z/2024-01-01T01:01:00Z"),))
    database = loaded(data, "wiki", [files[0], clipped])
    assert database.execute("SELECT COUNT(*) FROM wiki").fetchone() == (560,)


def test_a_data_source_over_the_row_limit_is_not_loaded(files) -> None:
    small = LoadedDataSources({"threads": 1}, max_rows=1_000, settle_s=0.0)
    try:
        small.database("wiki", files)
        time.sleep(1)
        assert small.database("wiki", files) is None and small.load_status() == {"wiki": 0.0}
    finally:
        small.stop()


def test_a_loaded_database_reads_no_file(data, files, tmp_path) -> None:
    database = loaded(data, "wiki", files)
    other = segment(tmp_path / "other.parquet", 5, 10)
    with pytest.raises(Exception, match="disabled|Permission"):
        database.execute(f"SELECT * FROM read_parquet('{other}')").fetchall()
