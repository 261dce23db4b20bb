"""Druid SQL's array and multi-value string functions over the example datasources of Druid's `sql-functions.md`
(`array-example` and `mvd-example`): SQL in → one value per row out, as the docs' "Returns the following" tables give
them, NULL arrays, NULL elements and empty arrays included."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.engine import SqlEngine
from sluice.broker.errors import SqlError

# sql-functions.md's `array-example`, rows 1…5.
ARRAY_EXAMPLE = {
    "label": pa.array([f"row{i}" for i in range(1, 6)], pa.string()),
    "arrayString": pa.array([["a", "b"], [None, "b"], [], ["a", "b"], None], pa.list_(pa.string())),
    "arrayLong": pa.array([[1, None, 3], None, [1, 2, 3], [1, 2, 3], []], pa.list_(pa.int64())),
    "arrayDouble": pa.array([[1.1, 2.2, None], [999.0, None, 5.5], [None, 2.2, 1.1], [], None],
                            pa.list_(pa.float64())),
}
# sql-functions.md's `mvd-example`: the empty `tags` of row4 reads as NULL.
MVD_EXAMPLE = {
    "label": pa.array([f"row{i}" for i in range(1, 5)], pa.string()),
    "tags": pa.array([["t1", "t2", "t3"], ["t3", "t4", "t5"], ["t5", "t6", "t7"], None], pa.list_(pa.string())),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("arrays")
    pq.write_table(pa.table(ARRAY_EXAMPLE), folder / "arrays.parquet")
    pq.write_table(pa.table(MVD_EXAMPLE), folder / "mvd.parquet")
    engine = SqlEngine(threads=1)
    tables = {"arrays": [str(folder / "arrays.parquet")], "mvd": [str(folder / "mvd.parquet")]}

    def values(sql: str) -> list[Any]:
        return [row[0] for row in engine.execute(sql, tables).rows]

    return values


ARRAYS = [
    ("ARRAY_APPEND(arrayString, 'c')", [["a", "b", "c"], [None, "b", "c"], ["c"], ["a", "b", "c"], None]),
    ("ARRAY_PREPEND('c', arrayString)", [["c", "a", "b"], ["c", None, "b"], ["c"], ["c", "a", "b"], None]),
    ("ARRAY_CONCAT(arrayLong, arrayDouble)",
     [[1, None, 3, 1.1, 2.2, None], None, [1, 2, 3, None, 2.2, 1.1], [1, 2, 3], None]),
    ("ARRAY_CONTAINS(arrayLong, 2)", [False, None, True, True, False]),
    ("ARRAY_CONTAINS(arrayLong, ARRAY[1, 2, 3])", [False, None, True, True, False]),
    ("ARRAY_CONTAINS(arrayString, ARRAY[CAST(NULL AS VARCHAR)])", [False, True, False, False, None]),
    # An array made by a function is an array argument too; an element taken out of one is a scalar.
    ("ARRAY_CONTAINS(arrayString, STRING_TO_ARRAY('a,b', ','))", [True, False, False, True, None]),
    ("ARRAY_CONTAINS(arrayLong, ARRAY_ORDINAL(arrayLong, 1))", [True, None, True, True, False]),
    ("ARRAY_LENGTH(arrayDouble)", [3, 3, 3, 0, None]),
    ("ARRAY_OFFSET(arrayLong, 2)", [3, None, 3, 3, None]),
    ("ARRAY_OFFSET(arrayLong, -1)", [None, None, None, None, None]),
    ("ARRAY_OFFSET_OF(arrayLong, 3)", [2, None, 2, 2, None]),
    ("ARRAY_ORDINAL(arrayLong, 2)", [None, None, 2, 2, None]),
    ("ARRAY_ORDINAL(arrayLong, 0)", [None, None, None, None, None]),
    ("ARRAY_ORDINAL_OF(arrayLong, 3)", [3, None, 3, 3, None]),
    # NULL is a known element: row2 overlaps on it.
    ("ARRAY_OVERLAP(arrayString, ARRAY_TO_MV(arrayDouble))", [False, True, False, False, None]),
    ("ARRAY_SLICE(arrayDouble, 0, 2)", [[1.1, 2.2], [999.0, None], [None, 2.2], [None, None], None]),
    ("ARRAY_SLICE(arrayLong, 1)", [[None, 3], None, [2, 3], [2, 3], None]),
    ("ARRAY_TO_MV(arrayDouble)", [["1.1", "2.2", None], ["999.0", None, "5.5"], [None, "2.2", "1.1"], [], None]),
    ("ARRAY_TO_STRING(arrayDouble, '')", ["1.12.2null", "999.0null5.5", "null2.21.1", "", None]),
    ("SCALAR_IN_ARRAY('b', arrayString)", [True, True, False, True, None]),
    ("SCALAR_IN_ARRAY(CAST(NULL AS VARCHAR), arrayString)", [None] * 5),
    # Java's String.split, which Druid calls: trailing empty strings go, unless the delimiter never matched.
    ("STRING_TO_ARRAY(label, '[0-9]')", [["row"]] * 5),
    ("STRING_TO_ARRAY(CONCAT(',', label, ',,'), ',')", [["", f"row{i}"] for i in range(1, 6)]),
    ("STRING_TO_ARRAY('', ',')", [[""]] * 5),
    ("STRING_TO_ARRAY(',,', ',')", [[]] * 5),
    ("STRING_TO_ARRAY(CAST(NULL AS VARCHAR), ',')", [None] * 5),
]

MULTI_VALUE = [
    ("MV_APPEND(tags, label)", [["t1", "t2", "t3", "row1"], ["t3", "t4", "t5", "row2"], ["t5", "t6", "t7", "row3"],
                                None]),
    ("MV_PREPEND(label, tags)", [["row1", "t1", "t2", "t3"], ["row2", "t3", "t4", "t5"], ["row3", "t5", "t6", "t7"],
                                 None]),
    ("MV_CONCAT(tags, tags)", [["t1", "t2", "t3"] * 2, ["t3", "t4", "t5"] * 2, ["t5", "t6", "t7"] * 2, None]),
    ("MV_CONTAINS(tags, 't3')", [True, True, False, False]),
    ("MV_CONTAINS(tags, ARRAY['t3', 't4'])", [False, True, False, False]),
    ("MV_FILTER_NONE(tags, ARRAY['t1', 't3'])", [["t2"], ["t4", "t5"], ["t5", "t6", "t7"], None]),
    ("MV_FILTER_ONLY(tags, ARRAY['t1', 't3'])", [["t1", "t3"], ["t3"], None, None]),
    ("MV_LENGTH(tags)", [3, 3, 3, None]),
    ("MV_OFFSET(tags, 2)", ["t3", "t5", "t7", None]),
    ("MV_OFFSET_OF(tags, 't3')", [2, 0, None, None]),
    ("MV_ORDINAL(tags, 3)", ["t3", "t5", "t7", None]),
    ("MV_ORDINAL_OF(tags, 't3')", [3, 1, None, None]),
    ("MV_OVERLAP(tags, ARRAY['t1', 't3'])", [True, True, False, False]),
    ("MV_SLICE(tags, 1, 3)", [["t2", "t3"], ["t4", "t5"], ["t6", "t7"], None]),
    ("MV_TO_ARRAY(tags)", [["t1", "t2", "t3"], ["t3", "t4", "t5"], ["t5", "t6", "t7"], None]),
    ("MV_TO_STRING(tags, ' ')", ["t1 t2 t3", "t3 t4 t5", "t5 t6 t7", None]),
    ("STRING_TO_MV('123 Rose Lane', '\\s+')", [["123", "Rose", "Lane"]] * 4),
]


@pytest.mark.parametrize(("expression", "expected"), ARRAYS, ids=[case[0] for case in ARRAYS])
def test_array_function_per_row(run, expression: str, expected: list[Any]) -> None:
    assert run(f"SELECT {expression} FROM arrays ORDER BY label") == expected


@pytest.mark.parametrize(("expression", "expected"), MULTI_VALUE, ids=[case[0] for case in MULTI_VALUE])
def test_multi_value_function_per_row(run, expression: str, expected: list[Any]) -> None:
    assert run(f"SELECT {expression} FROM mvd ORDER BY label") == expected


def test_array_concat_agg_distinct_sorts_with_null_first(run) -> None:
    assert run("SELECT ARRAY_CONCAT_AGG(DISTINCT arrayDouble) FROM arrays") == [[None, 1.1, 2.2, 5.5, 999.0]]


def test_array_concat_agg_takes_druids_size_argument(run) -> None:
    """`size` is a memory hint, after DISTINCT or without it (sql-aggregations.md: ARRAY_CONCAT_AGG(expr, [size]))."""
    assert run("SELECT ARRAY_CONCAT_AGG(arrayLong, 10000) FROM arrays WHERE label = 'row3'") == [[1, 2, 3]]
    assert run("SELECT ARRAY_CONCAT_AGG(DISTINCT arrayDouble, 10000) FROM arrays") == [[None, 1.1, 2.2, 5.5, 999.0]]


def test_a_slice_padded_beyond_reason_is_refused(run) -> None:
    with pytest.raises(SqlError) as caught:
        run("SELECT ARRAY_SLICE(arrayLong, 0, 2000000000) FROM arrays")
    assert "ARRAY_SLICE would add more than" in caught.value.error_message
