"""Json dimensions in Druid's nested-column layout: the paths a segment indexes, and queries that read a path's
field column where a file has one and parse the JSON text where it has not, with the same answers either way.

The files are written here as Sluice's ingestion writes them (integration/test_schema_discovery.py checks that it
does): a struct of the JSON text and one field per string or long path, named by `path_key`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlglot import exp

from sluice.broker.engine import SqlEngine, complex_columns
from sluice.broker.loaded import LoadedDataSources
from sluice.broker.sql.nested_fields import field_column
from sluice.broker.sql.translate import translate_query
from sluice.segment.nested import path_key, typed_paths
from tests.unit.test_loaded import loaded

DOCS = [{"device": "phone", "n": {"x": 1}}, {"device": "desktop", "n": {"x": 22}}, {"device": "phone"},
        {"n": {"x": 3}, "other": [1]}, None]


def test_the_paths_indexed_are_those_to_a_string_or_a_long_through_objects_only():
    schema = ("OBJECT<`a.b c`: STRING, b: BOOLEAN, big: DECIMAL(20,0), device: STRING, m: VARIANT, "
              "n: OBJECT<x: BIGINT, y: ARRAY<OBJECT<`q>`: STRING>>>, v: DOUBLE, `x``y`: STRING, `it's`: STRING>")
    assert typed_paths(schema) == [(["a.b c"], "STRING"), (["device"], "STRING"), (["n", "x"], "BIGINT"),
                                   (["x`y"], "STRING")]
    assert typed_paths("VARIANT") == [] and typed_paths("OBJECT<>") == []


def _write(path: Path, docs: list, fields: dict[str, tuple[pa.DataType, list]] | None) -> str:
    """A segment file of `docs` (its `n` metric 1, 2, 4, …) with the json dimension `payload` holding `fields`."""
    texts = pa.array([None if d is None else json.dumps(d, separators=(",", ":")) for d in docs], pa.string())
    arrays, names = [texts], ["json"]
    for key, (kind, values) in (fields or {}).items():
        arrays.append(pa.array(values, kind))
        names.append(key)
    payload = pa.StructArray.from_arrays(arrays, names, mask=pa.array([d is None for d in docs]))
    times = pa.array([1_700_000_000_000 + i for i in range(len(docs))], pa.timestamp("ms", tz="UTC"))
    pq.write_table(pa.table({"__time": times, "payload": payload,
                             "n": pa.array([2 ** i for i in range(len(docs))], pa.int64())}), path)
    return str(path)


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, list[str]]:
    """One file in the nested layout, one written before it (the text alone), one without the dimension."""
    device, x = path_key(["device"]), path_key(["n", "x"])
    indexed = _write(tmp_path / "indexed.parquet", DOCS, {
        device: (pa.string(), [d and d.get("device") for d in DOCS]),
        x: (pa.int64(), [d and d.get("n", {}).get("x") for d in DOCS])})
    text_only = _write(tmp_path / "text.parquet", DOCS, None)
    without = tmp_path / "without.parquet"
    pq.write_table(pa.table({"__time": pa.array([1_700_000_100_000], pa.timestamp("ms", tz="UTC")),
                             "n": pa.array([1000], pa.int64())}), without)
    return {"events": [indexed, text_only, str(without)]}


def _rows(engine: SqlEngine, sql: str, files: dict[str, list[str]]) -> list[tuple]:
    return [tuple(row) for row in engine.execute(sql, files).rows]


def test_a_filter_on_a_path_reads_the_same_rows_from_its_field_and_from_the_text(files):
    engine = SqlEngine(threads=1)
    # phone: rows 0 and 2 (1 + 4) of the indexed and of the text-only file; the file without payload has none
    assert _rows(engine, "SELECT SUM(n) FROM events WHERE JSON_VALUE(payload, '$.device') = 'phone'", files) == [
        (10,)]
    # a long field reads as its text, as JSON_VALUE returns it; a row without the path (or the column) is null
    assert _rows(engine, "SELECT JSON_VALUE(payload, '$.n.x') AS x, SUM(n) FROM events GROUP BY 1 ORDER BY 1",
                 files) == [(None, 1000 + 2 * (4 + 16)), ("1", 2), ("22", 4), ("3", 16)]
    assert _rows(engine, "SELECT SUM(JSON_VALUE(payload, '$.n.x' RETURNING BIGINT)) FROM events", files) == [(52,)]
    # a path no file indexes is read from the text
    assert _rows(engine, "SELECT COUNT(*) FROM events WHERE JSON_VALUE(payload, '$.other[0]') = '1'", files) == [
        (2,)]


def test_the_query_reads_the_field_column_and_star_does_not_show_it(files):
    engine = SqlEngine(threads=1)
    translated = translate_query("SELECT COUNT(*) FROM events e WHERE JSON_VALUE(e.payload, '$.device') = 'phone'",
                                 ["events"], complex_columns=lambda source, _: complex_columns(files[source])).sql
    column = exp.to_identifier(field_column("payload", path_key(["device"])), quoted=True).sql(dialect="duckdb")
    assert f'"e".{column} = ' in translated and "JSON_VALUE" not in translated
    for sql in ("SELECT * FROM events", "SELECT e.* FROM events AS e", "SELECT * FROM (SELECT * FROM events)",
                "SELECT *, JSON_VALUE(payload, '$.device') AS d FROM events"):
        result = engine.execute(f"{sql} ORDER BY __time LIMIT 1", files)
        assert [c for c in result.columns if c != "d"] == ["__time", "payload", "n"], sql
    unnamed = engine.execute("SELECT JSON_VALUE(payload, '$.device'), COUNT(*) FROM events GROUP BY 1", files)
    assert unnamed.columns == ["EXPR$0", "EXPR$1"]  # named as Druid names a function's output, not as the field
    joined = _rows(engine, "SELECT JSON_VALUE(a.payload, '$.device') AS d, COUNT(*) FROM events a JOIN events b "
                           "ON a.__time = b.__time GROUP BY 1 ORDER BY 1", files)
    assert joined == [(None, 9), ("desktop", 4), ("phone", 8)]  # each time twice (two files): 2 x 2 rows


def test_a_loaded_data_source_answers_from_its_field_columns_as_its_files_do(files):
    engine, loader = SqlEngine(threads=1), LoadedDataSources({"threads": 1}, max_rows=10_000, settle_s=0.0)
    try:
        database = loaded(loader, "events", files["events"])
        for sql in ("SELECT JSON_VALUE(payload, '$.device') AS d, SUM(n) FROM events GROUP BY 1 ORDER BY 1",
                    "SELECT SUM(n) FROM events WHERE JSON_VALUE(payload, '$.n.x') IN ('1', '3')",
                    "SELECT * FROM events ORDER BY __time, n"):
            query = translate_query(sql, ["events"], complex_columns=lambda source, _: complex_columns(files[source]))
            from_loaded = engine.run(query, files, database=database)
            from_files = engine.execute(sql, files)
            assert (from_loaded.columns, from_loaded.rows) == (from_files.columns, from_files.rows), sql
    finally:
        loader.stop()
