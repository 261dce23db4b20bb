"""Druid SQL's JSON functions at their edges: nulls, invalid JSON, missing paths, the JSONPath Druid accepts and
refuses, and how COMPLEX<json> values come out of the HTTP result writer.

Expected values follow Druid's `sql-json-functions.md` and `nested-columns.md` and, where the docs are silent, the
code they describe (NestedPathFinder for paths, NestedDataExpressions for the functions); none is Sluice's output.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sluice.broker.engine import SqlEngine
from sluice.broker.errors import SqlError
from sluice.broker.functions.json_functions import parse_path
from sluice.broker.results import render

DOC = """PARSE_JSON('{"x":1, "y":[1, 2, 3], "o":{"a":"b"}, "f":1.9, "s":"12", "t":true, "n":null}')"""


@pytest.fixture(scope="module")
def engine() -> SqlEngine:
    return SqlEngine(threads=1)


def _value(engine: SqlEngine, sql: str) -> Any:
    body, _ = render(engine.execute(f"SELECT {sql}", {}), "array", header=False, types_header=False,
                     sql_types_header=False)
    return json.loads(body)[0][0]


@pytest.mark.parametrize(("sql", "expected"), [
    # nulls: a NULL argument, a missing path, an explicit JSON null
    ("PARSE_JSON(NULL)", None),
    ("TRY_PARSE_JSON(NULL)", None),
    ("TO_JSON_STRING(NULL)", None),
    ("""JSON_MERGE('{"a":1}', NULL)""", None),  # "Returns NULL if any argument is NULL"
    (f"JSON_QUERY({DOC}, '$.missing')", None),
    (f"JSON_QUERY({DOC}, '$.n')", None),
    (f"JSON_VALUE({DOC}, '$.missing')", None),
    (f"JSON_VALUE({DOC}, '$.missing' RETURNING BIGINT)", None),
    (f"JSON_VALUE({DOC}, '$.y[5]' RETURNING BIGINT)", None),
    (f"JSON_QUERY_ARRAY({DOC}, '$.missing')", None),
    # JSON_VALUE extracts primitives only: an object or (without RETURNING … ARRAY) an array is null
    (f"JSON_VALUE({DOC}, '$.o')", None),
    (f"JSON_VALUE({DOC}, '$.y')", None),
    (f"JSON_VALUE({DOC}, '$.o' RETURNING BIGINT ARRAY)", None),
    (f"JSON_VALUE({DOC}, '$.o.a')", "b"),
    # RETURNING: Druid casts the primitive (a fraction truncated, text parsed, a boolean is 1)
    (f"JSON_VALUE({DOC}, '$.f' RETURNING BIGINT)", 1),
    (f"JSON_VALUE({DOC}, '$.s' RETURNING BIGINT)", 12),
    (f"JSON_VALUE({DOC}, '$.t' RETURNING BIGINT)", 1),
    (f"JSON_VALUE({DOC}, '$.f' RETURNING DOUBLE)", 1.9),
    (f"JSON_VALUE({DOC}, '$.y' RETURNING VARCHAR ARRAY)", ["1", "2", "3"]),
    (f"JSON_VALUE({DOC}, '$.x' RETURNING BIGINT ARRAY)", [1]),  # a lone primitive: an array of one
    # paths: bracket notation, array indexes, a negative index counting from the end
    (f"JSON_VALUE({DOC}, '$[''o''][''a'']')", "b"),
    (f"JSON_VALUE({DOC}, '$.y[-1]' RETURNING BIGINT)", 3),
    (f"JSON_QUERY({DOC}, '')", {"x": 1, "y": [1, 2, 3], "o": {"a": "b"}, "f": 1.9, "s": "12", "t": True, "n": None}),
    ("""JSON_QUERY(PARSE_JSON('{"a b":{"c.d":[5]}}'), '$[''a b''][''c.d''][0]')""", 5),
    # the other functions
    (f"JSON_QUERY_ARRAY({DOC}, '$.o')", [{"a": "b"}]),
    (f"JSON_KEYS({DOC}, '$.o')", ["a"]),
    (f"JSON_KEYS({DOC}, '$.y')", ["0", "1", "2"]),  # an array's indexes
    (f"JSON_KEYS({DOC}, '$.x')", None),
    ("""JSON_PATHS(PARSE_JSON('{"a":[{"b":1},2],"c.d":{"e":[1,2]}}'))""", ["$.a[0].b", "$.a[1]", "$.['c.d'].e"]),
    ("""JSON_MERGE('{"a":{"b":1}}', PARSE_JSON('{"a":{"c":2}}'), '{"d":3}')""", {"a": {"b": 1, "c": 2}, "d": 3}),
    ("""JSON_OBJECT('x': PARSE_JSON('{"a":[1]}'), 'y': NULL)""", {"x": {"a": [1]}, "y": None}),
    ("TO_JSON_STRING('a')", '"a"'),
    ("""TO_JSON_STRING(PARSE_JSON('{"x": [1, 2]}'))""", '{"x":[1,2]}'),
    ("TRY_PARSE_JSON('{not json')", None),
    ("TRY_PARSE_JSON('\"text\"')", "text"),
])
def test_json_function_answers_as_druid(engine: SqlEngine, sql: str, expected: Any) -> None:
    assert _value(engine, sql) == expected


@pytest.mark.parametrize(("sql", "message"), [
    ("PARSE_JSON('{not json')", "{not json"),
    (f"JSON_VALUE({DOC}, '$..x')", "'$..x' is not a valid JSONPath path"),
    (f"JSON_QUERY({DOC}, 'x.y')", "'x.y' is not a valid JSONPath path: must start with '$'"),
    (f"JSON_QUERY({DOC}, '$.y[*]')", "'$.y[*]' is not a valid JSONPath path"),
    (f"JSON_QUERY_ARRAY({DOC}, '$x')", "'$x' is not a valid JSONPath path"),
    (f"JSON_KEYS({DOC}, '$[''a')", "'$['a' is not a valid JSONPath path: unterminated '"),
    (f"JSON_QUERY({DOC}, CONCAT('$', '.x'))", "JSON_QUERY needs the path as a string literal"),
    (f"JSON_VALUE({DOC}, '$.x' RETURNING TIMESTAMP)", "JSON_VALUE cannot return TIMESTAMP"),
])
def test_refused_call_is_a_400_naming_the_cause(engine: SqlEngine, sql: str, message: str) -> None:
    with pytest.raises(SqlError) as caught:
        _value(engine, sql)
    assert caught.value.status == 400
    assert message in caught.value.error_message


@pytest.mark.parametrize(("path", "parts"), [
    ("$", []),
    ("", []),
    ("$.", []),
    ("$.a.b", ["a", "b"]),
    ("$['a']", ["a"]),
    ("$.a[1]", ["a", 1]),
    ("$[0][-1]", [0, -1]),
    ("$['a.b'].c", ["a.b", "c"]),
])
def test_jsonpath_is_read_as_druid_reads_it(path: str, parts: list[str | int]) -> None:
    assert parse_path(path, "JSON_VALUE") == parts


def test_complex_json_is_written_nested_with_its_types(engine: SqlEngine) -> None:
    """A COMPLEX<json> object, array or number is a nested JSON value (a double as Java writes it), typed
    COMPLEX<json> / OTHER; sqlStringifyArrays turns ARRAY columns into text, not JSON arrays."""
    sql = (f"SELECT {DOC} AS doc, JSON_QUERY({DOC}, '$.y') AS y, PARSE_JSON('1.0E7') AS big, "
           f"JSON_QUERY_ARRAY({DOC}, '$.y') AS elements, JSON_VALUE({DOC}, '$.y' RETURNING BIGINT ARRAY) AS longs, "
           f"JSON_VALUE({DOC}, '$.x') AS x")
    body, _ = render(engine.execute(sql, {}), "objectLines", header=True, types_header=True, sql_types_header=True,
                     stringify_arrays=True)
    header, row = body.decode().split("\n")[:2]
    assert json.loads(header) == {
        "doc": {"type": "COMPLEX<json>", "sqlType": "OTHER"},
        "y": {"type": "COMPLEX<json>", "sqlType": "OTHER"},
        "big": {"type": "COMPLEX<json>", "sqlType": "OTHER"},
        "elements": {"type": "ARRAY<COMPLEX<json>>", "sqlType": "ARRAY"},
        "longs": {"type": "ARRAY<LONG>", "sqlType": "ARRAY"},
        "x": {"type": "STRING", "sqlType": "VARCHAR"},
    }
    assert row == ('{"doc":{"x":1,"y":[1,2,3],"o":{"a":"b"},"f":1.9,"s":"12","t":true,"n":null},"y":[1,2,3],'
                   '"big":1.0E7,"elements":"[1,2,3]","longs":"[1,2,3]","x":"1"}')


def test_complex_json_in_csv_is_compact_json_text(engine: SqlEngine) -> None:
    body, _ = render(engine.execute("""SELECT PARSE_JSON('{"a": [1, "b"]}')""", {}), "csv", header=False,
                     types_header=False, sql_types_header=False)
    assert body.decode() == '"{""a"":[1,""b""]}"\n\n'


@pytest.mark.parametrize(("sql", "expected"), [
    # Joda's `zzz` is the zone's short name: the offset itself for a fixed offset, UTC, or the name in force then
    ("TIME_FORMAT(TIMESTAMP '2013-08-01 08:14:37', 'HH:mm zzz')", "08:14 UTC"),
    ("TIME_FORMAT(TIMESTAMP '2013-08-01 08:14:37', 'HH:mm z', '+05:30')", "13:44 +05:30"),
    ("TIME_FORMAT(TIMESTAMP '2013-08-01 08:14:37', 'HH:mm zzz', 'America/New_York')", "04:14 EDT"),
    ("TIME_FORMAT(TIMESTAMP '2013-01-01 08:14:37', 'HH:mm zzz', 'America/New_York')", "03:14 EST"),
    # an interval written start/period or period/end, half-open
    ("TIME_IN_INTERVAL(TIMESTAMP '2013-08-01 09:00:00', '2013-08-01T08:00:00/PT1H')", False),
    ("TIME_IN_INTERVAL(TIMESTAMP '2013-08-01 07:59:59', 'PT1H/2013-08-01T08:00:00Z')", True),
    ("TIME_IN_INTERVAL(TIMESTAMP '2013-08-31 23:00:00', '2013-08-01/P1M')", True),
])
def test_time_functions_with_zone_names_and_periods(engine: SqlEngine, sql: str, expected: Any) -> None:
    assert _value(engine, sql) == expected
