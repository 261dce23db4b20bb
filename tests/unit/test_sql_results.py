"""A query result in → Druid's response body and media type out, for every result format and header option."""

from __future__ import annotations

from datetime import date, datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sluice.broker.engine import QueryResult
from sluice.broker.results import RESULT_FORMATS, render
from sluice.broker.sql.translate import SqlError

EDITS = QueryResult(
    columns=["__time", "page", "added"],
    druid_types=["LONG", "STRING", "LONG"],
    sql_types=["TIMESTAMP", "VARCHAR", "BIGINT"],
    rows=[(datetime(2015, 9, 12, 0, 47, 53, 259000), "Dog", 20), (datetime(2015, 9, 12, 1, 0), None, 7)],
)
EMPTY = QueryResult(columns=["page"], druid_types=["STRING"], sql_types=["VARCHAR"], rows=[])


def body(result: QueryResult, fmt: str, header: bool = False, types: bool = False, sql_types: bool = False) -> str:
    return render(result, fmt, header, types, sql_types)[0].decode()


@pytest.mark.parametrize(
    ("result_format", "expected", "media_type"),
    [
        (
            "object",
            '[{"__time":"2015-09-12T00:47:53.259Z","page":"Dog","added":20},'
            '{"__time":"2015-09-12T01:00:00.000Z","page":null,"added":7}]\n',
            "application/json",
        ),
        ("array", '[["2015-09-12T00:47:53.259Z","Dog",20],["2015-09-12T01:00:00.000Z",null,7]]\n', "application/json"),
        (
            "objectLines",
            '{"__time":"2015-09-12T00:47:53.259Z","page":"Dog","added":20}\n'
            '{"__time":"2015-09-12T01:00:00.000Z","page":null,"added":7}\n\n',
            "text/plain",
        ),
        ("arrayLines", '["2015-09-12T00:47:53.259Z","Dog",20]\n["2015-09-12T01:00:00.000Z",null,7]\n\n', "text/plain"),
        ("csv", "2015-09-12T00:47:53.259Z,Dog,20\n2015-09-12T01:00:00.000Z,,7\n\n", "text/csv"),
    ],
)
def test_formats(result_format: str, expected: str, media_type: str) -> None:
    assert render(EDITS, result_format, False, False, False) == (expected.encode(), media_type)


@pytest.mark.parametrize(
    ("result_format", "expected"),
    [("object", "[]\n"), ("array", "[]\n"), ("objectLines", "\n\n"), ("arrayLines", "\n\n"), ("csv", "\n")],
)
def test_empty_results_still_end_like_druid(result_format: str, expected: str) -> None:
    assert body(EMPTY, result_format) == expected


@pytest.mark.parametrize(
    ("types", "sql_types", "expected"),
    [
        (False, False, '[{"page":null},{"page":"Dog"}]\n'),
        (True, False, '[{"page":{"type":"STRING"}},{"page":"Dog"}]\n'),
        (False, True, '[{"page":{"sqlType":"VARCHAR"}},{"page":"Dog"}]\n'),
        (True, True, '[{"page":{"type":"STRING","sqlType":"VARCHAR"}},{"page":"Dog"}]\n'),
    ],
)
def test_object_header(types: bool, sql_types: bool, expected: str) -> None:
    result = QueryResult(["page"], ["STRING"], ["VARCHAR"], [("Dog",)])
    assert body(result, "object", True, types, sql_types) == expected


def test_array_lines_and_csv_headers_are_rows() -> None:
    result = QueryResult(["page"], ["STRING"], ["VARCHAR"], [("Dog",)])
    assert body(result, "array", True, True, True) == '[["page"],["STRING"],["VARCHAR"],["Dog"]]\n'
    assert body(result, "arrayLines", True, True, False) == '["page"]\n["STRING"]\n["Dog"]\n\n'
    assert body(result, "objectLines", True, False, True) == '{"page":{"sqlType":"VARCHAR"}}\n{"page":"Dog"}\n\n'
    assert body(result, "csv", True, True, True) == "page\nSTRING\nVARCHAR\nDog\n\n"


def test_type_headers_need_the_header() -> None:
    assert body(EMPTY, "array", False, True, True) == "[]\n"


def test_csv_quotes_only_what_needs_it_and_never_writes_a_blank_row() -> None:
    result = QueryResult(
        ["a", "b"],
        ["STRING", "STRING"],
        ["VARCHAR", "VARCHAR"],
        [('say "hi"', "x,y"), ("two\nlines", "plain"), ("", None)],
    )
    assert body(result, "csv") == '"say ""hi""","x,y"\n"two\nlines",plain\n,\n\n'
    single = QueryResult(["a"], ["STRING"], ["VARCHAR"], [("",), (None,), ("x",)])
    assert body(single, "csv") == '""\n""\nx\n\n'


@pytest.mark.parametrize(
    ("value", "druid_type", "json_text"),
    [
        (1.5, "DOUBLE", "1.5"),
        (100.0, "DOUBLE", "100.0"),
        (1234567.0, "DOUBLE", "1234567.0"),
        (1e7, "DOUBLE", "1.0E7"),
        (1.2345e20, "DOUBLE", "1.2345E20"),
        (0.001, "DOUBLE", "0.001"),
        (0.0001, "DOUBLE", "1.0E-4"),
        (-2.5e-5, "DOUBLE", "-2.5E-5"),
        (0.0, "DOUBLE", "0.0"),
        (float("nan"), "DOUBLE", '"NaN"'),
        (float("-inf"), "DOUBLE", '"-Infinity"'),
        (0.10000000149011612, "FLOAT", "0.1"),
        (100, "LONG", "100"),
        (True, "LONG", "true"),
    ],
)
def test_numbers_are_written_as_java_writes_them(value: object, druid_type: str, json_text: str) -> None:
    result = QueryResult(["x"], [druid_type], ["DOUBLE"], [(value,)])
    assert body(result, "array") == f"[[{json_text}]]\n"


def test_csv_writes_numbers_and_booleans_like_java() -> None:
    types = ["DOUBLE", "DOUBLE", "LONG"]
    result = QueryResult(["d", "n", "b"], types, ["DOUBLE", "DOUBLE", "BOOLEAN"], [(1e7, float("nan"), False)])
    assert body(result, "csv") == "1.0E7,NaN,false\n\n"


def test_dates_arrays_and_unicode() -> None:
    result = QueryResult(
        ["d", "tags", "name"],
        ["LONG", "ARRAY<STRING>", "STRING"],
        ["DATE", "ARRAY", "VARCHAR"],
        [(date(2015, 9, 12), ["a", "b"], "Zürich ☃")],
    )
    assert body(result, "object") == '[{"d":"2015-09-12T00:00:00.000Z","tags":["a","b"],"name":"Zürich ☃"}]\n'
    assert body(result, "csv") == '2015-09-12T00:00:00.000Z,"[""a"",""b""]",Zürich ☃\n\n'


def test_unknown_result_format_is_rejected() -> None:
    with pytest.raises(SqlError) as caught:
        render(EDITS, "xml", False, False, False)
    assert caught.value.status == 400
    assert caught.value.error_message == f"Unknown resultFormat 'xml', expected one of {', '.join(RESULT_FORMATS)}"


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_double_reads_back_and_uses_java_notation(value: float) -> None:
    result = QueryResult(["x"], ["DOUBLE"], ["DOUBLE"], [(value,)])
    text = body(result, "array")[2:-3]
    assert float(text) == value
    assert ("E" in text) == (value != 0 and not 1e-3 <= abs(value) < 1e7)
    assert "." in text.split("E")[0]


def test_timestamps_in_a_session_time_zone_carry_its_offset() -> None:
    la, kolkata = ZoneInfo("America/Los_Angeles"), ZoneInfo("Asia/Kolkata")
    result = QueryResult(
        ["t", "d"], ["LONG", "LONG"], ["TIMESTAMP", "DATE"],
        [(datetime(2015, 9, 11, 17, 47, 53, 259000, tzinfo=la), datetime(2015, 9, 12, tzinfo=kolkata)),
         (datetime(2015, 12, 1, tzinfo=ZoneInfo("Europe/London")), datetime(2015, 1, 1, tzinfo=la))],
    )
    assert body(result, "array") == (
        '[["2015-09-11T17:47:53.259-07:00","2015-09-12T00:00:00.000+05:30"],'
        '["2015-12-01T00:00:00.000Z","2015-01-01T00:00:00.000-08:00"]]\n'
    )


def test_arrays_are_json_text_when_stringified() -> None:
    result = QueryResult(["tags", "sizes"], ["ARRAY<STRING>", "ARRAY<DOUBLE>"], ["ARRAY", "ARRAY"],
                         [(["a", None], [1e7, 0.5])])
    assert render(result, "object", False, False, False, stringify_arrays=True)[0].decode() == (
        '[{"tags":"[\\"a\\",null]","sizes":"[1.0E7,0.5]"}]\n'
    )
    assert render(result, "csv", False, False, False, stringify_arrays=True)[0].decode() == (
        '"[""a"",null]","[1.0E7,0.5]"\n\n'
    )
