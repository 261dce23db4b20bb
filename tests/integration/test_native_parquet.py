"""Local Parquet files read by Spark's own reader (`sluice.connectors.native`): the records must be exactly those the
Python readers make of the same files (`read_all`, no Spark), and any file Spark would read otherwise keeps the
Python readers."""

from __future__ import annotations

from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import TypeAdapter
from pyspark.sql import SparkSession

from sluice.connectors.coordination import CoordinatorHost
from sluice.connectors.native import native_readers
from sluice.connectors.reading import read_all
from sluice.connectors.sources import create_source
from sluice.connectors.spark import ConnectorRead
from sluice.spec.input_format import RecordFormat
from sluice.spec.input_source import InputSource, MaxSizeSplitHint

PARQUET = TypeAdapter(RecordFormat).validate_python({"type": "parquet"})
FIELDS = ["ts", "micros", "day", "page", "tiny", "small", "mid", "added", "robot", "missing"]


def _source(files: list[Path], fmt: Any = PARQUET, fields: list[str] = FIELDS) -> Any:
    spec = TypeAdapter(InputSource).validate_python({"type": "local", "files": [str(f) for f in files]})
    return create_source(spec, fmt, fields, MaxSizeSplitHint(max_num_files=1))


def _table(first: int, rows: int) -> pa.Table:
    """Every type Spark's reader serves, with nulls, times before 1970 and text beyond ASCII."""
    ids = range(first, first + rows)
    return pa.table({
        "ts": pa.array([None if i % 7 == 3 else datetime(1969, 12, 31, 23, 59, i % 60, tzinfo=UTC) if i % 5 == 0
                        else datetime(2026, 1, 1, i % 24, tzinfo=UTC) for i in ids], pa.timestamp("ms", "UTC")),
        "micros": pa.array([-1_500 - i if i % 2 else 1_000_000_123 + i for i in ids],
                           pa.timestamp("us", "Europe/Paris")),
        "day": pa.array([date(1969, 12, 1 + i % 28) if i % 3 else date(2026, 2, 1 + i % 28) for i in ids]),
        "page": pa.array([None if i % 11 == 0 else f"Pâge {i % 13} ✓" for i in ids]),
        "tiny": pa.array([i % 100 - 50 for i in ids], pa.int8()),
        "small": pa.array([i * 7 - 30_000 for i in ids], pa.int16()),
        "mid": pa.array([None if i % 4 == 0 else -i * 1_000 for i in ids], pa.int32()),
        "added": pa.array([i * 1_000_000_007 - 2**62 for i in ids], pa.int64()),
        "robot": pa.array([None if i % 9 == 0 else i % 2 == 0 for i in ids]),
        "other": pa.array([float(i) / 3 for i in ids]),  # not a field: its type does not matter
    })


def _by_locator(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda row: row["__locator"])


def test_spark_reads_local_parquet_into_the_records_the_python_readers_make(spark: SparkSession,
                                                                           tmp_path: Path) -> None:
    files = [tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "c.parquet"]
    pq.write_table(_table(0, 2_500), files[0], row_group_size=700)  # row numbers run on across row groups
    pq.write_table(_table(2_500, 1_000), files[1])
    pq.write_table(_table(3_500, 300).drop_columns(["page", "robot"]), files[2])  # fields it lacks are null
    source = _source(files)

    with ConnectorRead(spark, source, parallelism=2) as read:
        subtasks = read.subtasks()
        records = pa.concat_tables([subtask.toArrow() for subtask in subtasks])
        reading = read.host.progress()
        read.checkpoint_complete()
        done = read.host.progress()

    expected = read_all(source)
    assert records.schema.names == expected.schema.names
    assert _by_locator(records) == _by_locator(expected)
    assert records.num_rows == 3_800
    # the text Druid's Parquet reader hands on: times and dates as epoch milliseconds (floored), integers and
    # booleans as their text, a null as null
    first = next(r for r in records.to_pylist() if r["__locator"] == f"{files[0]}:row 1")
    assert first == {"__locator": f"{files[0]}:row 1", "__error": None, "ts": "-60000", "micros": "1000000",
                     "day": "1769904000000", "page": None, "tiny": "-50", "small": "-30000", "mid": None,
                     "added": str(-2**62), "robot": None, "missing": None}
    assert {r["__locator"] for r in records.to_pylist()} >= {f"{files[0]}:row 1", f"{files[0]}:row 2500",
                                                             f"{files[2]}:row 300"}
    # the coordinator assigned every split; once the job's output is committed, Spark's readers report what the
    # files' footers say: every row, every byte of the files, every split
    assert (reading.splits_done, reading.splits_assigned) == (0, 3)
    assert (done.rows, done.bytes, done.splits_done, done.splits_assigned) == (
        3_800, sum(f.stat().st_size for f in files), 3, 3)


def test_a_reader_without_files_is_no_records(spark: SparkSession, tmp_path: Path) -> None:
    pq.write_table(_table(0, 10), tmp_path / "only.parquet")
    with ConnectorRead(spark, _source([tmp_path / "only.parquet"]), parallelism=3) as read:
        counts = sorted(subtask.count() for subtask in read.subtasks())
    assert counts == [0, 0, 10]


def _written(path: Path, table: pa.Table, **kwargs: Any) -> Path:
    pq.write_table(table, path, **kwargs)
    return path


@pytest.mark.parametrize("case", ["double field", "flattenSpec path", "gzip file", "hidden name", "space in name",
                                  "column of another case", "time without zone", "nanoseconds", "types differ",
                                  "not parquet"])
def test_files_spark_would_read_otherwise_keep_the_python_readers(spark: SparkSession, tmp_path: Path,
                                                                   case: str) -> None:
    plain = _written(tmp_path / "plain.parquet", pa.table({"page": ["a", "b"], "added": [1, 2]}))
    fmt, fields, files = PARQUET, ["page", "added"], [plain]
    if case == "double field":
        files.append(_written(tmp_path / "d.parquet", pa.table({"page": ["c"], "added": [1.5]})))
    elif case == "flattenSpec path":
        fmt = TypeAdapter(RecordFormat).validate_python(
            {"type": "parquet", "flattenSpec": {"fields": [{"type": "path", "name": "page", "expr": "$.meta.page"}]}})
    elif case == "gzip file":
        gz = tmp_path / "g.parquet.gz"
        with pa.CompressedOutputStream(str(gz), "gzip") as out:
            pq.write_table(pa.table({"page": ["c"], "added": [3]}), out)
        files.append(gz)
    elif case == "hidden name":
        files.append(_written(tmp_path / "_part.parquet", pa.table({"page": ["c"], "added": [3]})))
    elif case == "space in name":
        files.append(_written(tmp_path / "part 2.parquet", pa.table({"page": ["c"], "added": [3]})))
    elif case == "column of another case":
        files.append(_written(tmp_path / "u.parquet", pa.table({"Page": ["c"], "added": [3]})))
    elif case == "time without zone":
        files.append(_written(tmp_path / "t.parquet", pa.table({"page": [datetime(2026, 1, 1)], "added": [3]})))
    elif case == "nanoseconds":
        times = pa.array([1], pa.timestamp("ns", "UTC"))
        files.append(_written(tmp_path / "n.parquet", pa.table({"page": times, "added": [3]}), version="2.6"))
    elif case == "types differ":
        files.append(_written(tmp_path / "i.parquet", pa.table({"page": ["c"], "added": pa.array([3], pa.int32())})))
    else:
        (tmp_path / "x.parquet").write_text("page,added\nc,3\n")
        files.append(tmp_path / "x.parquet")
    source = _source(files, fmt, fields)
    host = CoordinatorHost(source, 2)
    host.start()
    try:
        assert native_readers(spark, host, 2) is None
        assert host.assigned() == {}  # no reader took a split: the Python readers get them all
    finally:
        host.close()
