"""Druid SQL's documented functions, one table row each (several where useful): Druid SQL in → the value Druid's
documentation says comes out, through Sluice's SQL path (SqlEngine, then the JSON result writer, so a timestamp
reads `2013-08-01T08:14:37.000Z` as in Druid's docs).

Expected values are copied from the examples of Druid's `docs/querying/sql-functions.md` ("Returns the following")
with the example's input written as a literal, or, for a function without an example, worked out by hand from its
description in `sql-scalar.md`, `sql-aggregations.md`, `sql-array-functions.md`, `sql-multivalue-string-functions.md`
or `sql-json-functions.md` (over the five rows of `T` below where a table is needed). The window functions follow
the worked example of `sql-window-functions.md`, results included. None is Sluice's own output.

A row Sluice does not answer as documented yet carries a `gap` and is a strict xfail, so fixing a function turns
the suite red until its gap is removed. `docs/sql-functions.md` is generated from `CASES` (run this file as a script)
and a test checks it still is.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.engine import SqlEngine
from sluice.broker.errors import SqlError
from sluice.broker.results import render
from sluice.lookups.references import LookupExtractor

DOC = Path(__file__).resolve().parents[2] / "docs" / "sql-functions.md"

# Druid's docs title each function in one of these categories (FLOOR and CEIL twice: numeric, date and time).
NUMERIC, STRING, TIME, REDUCTION, IP, SKETCH, OTHER = (
    "numeric", "string", "date and time", "reduction", "IP address", "sketch", "other scalar")
AGGREGATION, ARRAY, MULTI_VALUE, JSON_, WINDOW = ("aggregation", "array", "multi-value string", "JSON", "window")
CATEGORIES = (NUMERIC, STRING, TIME, REDUCTION, IP, SKETCH, OTHER, AGGREGATION, ARRAY, MULTI_VALUE, JSON_, WINDOW)

# The rows the aggregation and sketch cases read, as table `t`: `__time` in order, `t2` in reverse order
# (EARLIEST_BY / LATEST_BY), `s` with three distinct values, `n` = 1…5.
T = {
    "__time": pa.array([datetime(2013, 8, 1, h, m, sec, tzinfo=UTC) for h, m, sec in
                        ((8, 14, 37), (9, 13, 0), (10, 0, 0), (11, 0, 0), (12, 0, 0))], pa.timestamp("us", tz="UTC")),
    "t2": pa.array([datetime(2013, 8, 1, h) for h in (12, 11, 10, 9, 8)], pa.timestamp("us")),
    "s": pa.array(["a", "b", "c", "a", "b"], pa.string()),
    "n": pa.array([1, 2, 3, 4, 5], pa.int64()),
    "tags": pa.array([["a", "b"], ["c"], ["a"], ["b", "c"], []], pa.list_(pa.string())),
}

# sql-window-functions.md's example rows: ABS(delta) of #kk.wikipedia and #lt.wikipedia on 2016-06-27.
KK_CHANGES = [1, 7, 56, 63, 91, 2440, 2703, 6900]
LT_CHANGES = [1, 2, 13, 28, 53, 56, 59, 391, 894, 4358]
WIKIPEDIA = {
    "__time": pa.array([datetime(2016, 6, 27, i % 24, tzinfo=UTC) for i in range(18)], pa.timestamp("us", tz="UTC")),
    "channel": pa.array(["#kk.wikipedia"] * 8 + ["#lt.wikipedia"] * 10, pa.string()),
    "delta": pa.array([-c if i % 2 else c for i, c in enumerate(KK_CHANGES + LT_CHANGES)], pa.int64()),
}

# The 2013-08-01T08:14:37Z and 09:13:00Z rows of the docs' `taxi-trips` examples, as literals.
TAXI_1 = "TIMESTAMP '2013-08-01 08:14:37'"
TAXI_2 = "TIMESTAMP '2013-08-01 09:13:00'"
JSON_DOC = """'{"x":1, "y":[1, 2, 3]}'"""  # the JSONPath example of sql-json-functions.md
MV = "STRING_TO_MV('a,b,c', ',')"  # a multi-value string, as sql-multivalue-string-functions.md builds one
# The lookup of sql-functions.md's LOOKUP example, as a broker serves it.
CODE_TO_NAME = LookupExtractor({"SJU": "Luis Munoz Marin International Airport", "IAD": "Dulles International Airport"})


@dataclass(frozen=True)
class Check:
    """An expected value the docs give only as a property (an approximation, the current time, a sketch)."""

    description: str
    holds: Callable[[Any], bool]

    def __repr__(self) -> str:
        return self.description


@dataclass(frozen=True)
class Rows:
    """The first column of a result of several rows, in order."""

    values: tuple


# BLOOM_FILTER(agent_category, 10) of the docs' example, for the group 'Game console'
GAME_CONSOLE_BLOOM = "BAAAAAgAAAAAAAAAAAAAAAAAAAAAAAAAQAgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAgBAAAAAAAAAAAAAAAA"

REFUSED = Check("a 400 error", lambda value: False)  # the docs say the call fails


@dataclass(frozen=True)
class Case:
    function: str  # as Druid's docs title it
    category: str
    sql: str  # an expression (run as `SELECT <sql>`) or a whole query
    expected: Any  # the first column of the one row; Rows(...) for several rows
    label: str = ""  # tells apart the rows of one function
    gap: str = ""  # "differs: …" or "missing: …" while Sluice does not answer as documented

    @property
    def id(self) -> str:
        return f"{self.function}:{self.label}" if self.label else self.function


def _near(target: float, within: float) -> Check:
    return Check(f"≈{target} ±{within}", lambda v: _number(v) and abs(v - target) <= within)


def _unordered(values: list) -> Check:
    return Check(f"{sorted(values)} in any order", lambda v: isinstance(v, list) and sorted(v) == sorted(values))


def _joined_unordered(values: list[str], separator: str) -> Check:
    return Check(f"{separator.join(values)} in any order",
                 lambda v: isinstance(v, str) and sorted(v.split(separator)) == sorted(values))


def _base64() -> Check:
    def holds(value: Any) -> bool:
        try:
            return isinstance(value, str) and len(base64.b64decode(value, validate=True)) > 0
        except (binascii.Error, ValueError):
            return False
    return Check("a Base64-serialized sketch", holds)


def _starts(prefix: str) -> Check:
    return Check(f"text starting {prefix!r}", lambda v: isinstance(v, str) and v.startswith(prefix))


def _now() -> Check:
    def holds(value: Any) -> bool:
        if not isinstance(value, str) or not value.endswith("Z"):
            return False
        at = datetime.fromisoformat(value[:-1]).replace(tzinfo=UTC)
        return abs(at - datetime.now(UTC)) < timedelta(minutes=5)
    return Check("the current UTC time, as ISO text", holds)


def _today() -> Check:
    def holds(value: Any) -> bool:
        now = datetime.now(UTC)
        days = {(now - timedelta(minutes=5)).date(), now.date()}  # a run across midnight
        return value in {f"{day.isoformat()}T00:00:00.000Z" for day in days}
    return Check("the current UTC date, at midnight", holds)


def _estimate_with_bounds(estimate: float) -> Check:
    return Check(f"[estimate≈{estimate}, lower ≤ estimate, upper ≥ estimate]", lambda v: isinstance(v, list)
                 and len(v) == 3 and abs(v[0] - estimate) < 1e-6 and v[1] <= v[0] <= v[2])


def _theta_bounds(estimate: float) -> Check:
    def holds(value: Any) -> bool:
        bounds = json.loads(value) if isinstance(value, str) else value
        return isinstance(bounds, dict) and bounds.get("numStdDev") == 1 and abs(bounds["estimate"] - estimate) < 1e-6
    return Check(f'{{"estimate":{estimate},…,"numStdDev":1}}', holds)


# ------------------------------------------------------------------------------------------------------ the table

def _scalar() -> list[Case]:
    pi_3 = "PI / 3"
    return [
        # numeric: sql-functions.md's examples
        Case("ABS", NUMERIC, "ABS(-27)", 27),
        Case("ACOS", NUMERIC, "ACOS(0)", 1.5707963267948966),
        Case("ASIN", NUMERIC, "ASIN(1)", 1.5707963267948966),
        Case("ATAN", NUMERIC, "ATAN(1)", 0.7853981633974483),
        Case("ATAN2", NUMERIC, "ATAN2(1, -1)", 2.356194490192345),
        Case("BITWISE_AND", NUMERIC, "BITWISE_AND(12, 10)", 8),
        Case("BITWISE_COMPLEMENT", NUMERIC, "BITWISE_COMPLEMENT(12)", -13),
        Case("BITWISE_CONVERT_DOUBLE_TO_LONG_BITS", NUMERIC, "BITWISE_CONVERT_DOUBLE_TO_LONG_BITS(255)",
             4643176031446892544),
        Case("BITWISE_CONVERT_LONG_BITS_TO_DOUBLE", NUMERIC,
             "BITWISE_CONVERT_LONG_BITS_TO_DOUBLE(4643176031446892544)", 255),
        Case("BITWISE_OR", NUMERIC, "BITWISE_OR(12, 10)", 14),
        Case("BITWISE_SHIFT_LEFT", NUMERIC, "BITWISE_SHIFT_LEFT(2, 3)", 16),
        Case("BITWISE_SHIFT_RIGHT", NUMERIC, "BITWISE_SHIFT_RIGHT(16, 3)", 2),
        Case("BITWISE_XOR", NUMERIC, "BITWISE_XOR(12, 10)", 6),
        Case("CEIL (numeric)", NUMERIC, "CEIL(21.25)", 22),
        Case("COS", NUMERIC, f"COS({pi_3})", 0.5000000000000001),
        Case("COT", NUMERIC, f"COT({pi_3})", 0.577350269189626),
        Case("DEGREES", NUMERIC, "DEGREES(PI)", 180),
        Case("DIV", NUMERIC, "DIV(78, 10)", 7),
        Case("EXP", NUMERIC, "EXP(1)", 2.7182818284590455),
        Case("FLOOR (numeric)", NUMERIC, "FLOOR(21.25)", 21),
        Case("HUMAN_READABLE_BINARY_BYTE_FORMAT", NUMERIC, "HUMAN_READABLE_BINARY_BYTE_FORMAT(1000000, 2)",
             "976.56 KiB"),
        Case("HUMAN_READABLE_BINARY_BYTE_FORMAT", NUMERIC, "HUMAN_READABLE_BINARY_BYTE_FORMAT(1048576)", "1.00 MiB",
             "default precision"),  # sql-scalar.md; its 1.04 MB / 1.04 M for the decimal formats are left out:
        # Druid's HumanReadableBytes formats 1048576 as 1.048 M, which %.2f writes 1.05
        Case("HUMAN_READABLE_DECIMAL_BYTE_FORMAT", NUMERIC, "HUMAN_READABLE_DECIMAL_BYTE_FORMAT(1000000, 2)",
             "1.00 MB"),
        Case("HUMAN_READABLE_DECIMAL_FORMAT", NUMERIC, "HUMAN_READABLE_DECIMAL_FORMAT(1000000, 2)", "1.00 M"),
        Case("LN", NUMERIC, "LN(76)", 4.330733340286331),
        Case("LOG10", NUMERIC, "LOG10(76)", 1.8808135922807914),
        Case("MOD", NUMERIC, "MOD(78, 10)", 8),
        Case("PI", NUMERIC, "PI", math.pi),  # "Constant Pi."
        Case("POWER", NUMERIC, "POWER(5, 2)", 25),
        Case("RADIANS", NUMERIC, "RADIANS(180)", 3.141592653589793),
        Case("ROUND", NUMERIC, "ROUND(-73.9377670288086, 0)", -74),
        Case("SAFE_DIVIDE", NUMERIC, "SAFE_DIVIDE(78, 10)", 7),
        Case("SAFE_DIVIDE", NUMERIC, "SAFE_DIVIDE(78, 0)", None, "by zero"),  # null in SQL-compatible mode
        Case("SIN", NUMERIC, f"SIN({pi_3})", 0.8660254037844386),
        Case("SQRT", NUMERIC, "SQRT(25)", 5),
        Case("TAN", NUMERIC, f"TAN({pi_3})", 1.7320508075688767),
        Case("TRUNCATE", NUMERIC, "TRUNCATE(-73.9377670288086, 1)", -73.9),
        Case("TRUNC", NUMERIC, "TRUNC(-73.9377670288086, 1)", -73.9),  # alias for TRUNCATE
        # string
        Case("BTRIM", STRING, "BTRIM('___abc___', '_')", "abc"),
        Case("CHAR_LENGTH", STRING, "CHAR_LENGTH('San Juan, PR')", 12),
        Case("CHARACTER_LENGTH", STRING, "CHARACTER_LENGTH('San Juan, PR')", 12),
        Case("CONCAT", STRING, "CONCAT('San Juan, PR', ' to ', 'Washington, DC')", "San Juan, PR to Washington, DC"),
        Case("CONTAINS_STRING", STRING, "CONTAINS_STRING('San Juan, PR', 'San')", True),
        Case("CONTAINS_STRING", STRING, "CONTAINS_STRING('Boston, MA', 'San')", False, "absent"),
        # 'SGVsbG8gV29ybGQhCg==' ends in a line break the docs' table cannot show
        Case("DECODE_BASE64_UTF8", STRING, "DECODE_BASE64_UTF8('SGVsbG8gV29ybGQhCg==')", "Hello World!\n"),
        Case("ICONTAINS_STRING", STRING, "ICONTAINS_STRING('San Juan, PR', 'san')", True),
        Case("ICONTAINS_STRING", STRING, "ICONTAINS_STRING('Boston, MA', 'san')", False, "absent"),
        Case("LEFT", STRING, "LEFT('ABCDEFG', 3)", "ABC"),
        Case("LENGTH", STRING, "LENGTH('San Juan, PR')", 12),
        Case("LOOKUP", STRING, "LOOKUP('SJU', 'code_to_name', 'key not found')",
             "Luis Munoz Marin International Airport"),
        Case("LOOKUP", STRING, "LOOKUP('BOS', 'code_to_name', 'key not found')", "key not found", "missing key"),
        Case("LOWER", STRING, "LOWER('San Juan, PR')", "san juan, pr"),
        Case("LPAD", STRING, "LPAD('Florida', 11, '+')", "++++Florida"),
        Case("LPAD", STRING, "LPAD('Massachusetts', 11, '+')", "Massachuset", "truncates"),
        Case("LPAD", STRING, "LPAD('Puerto Rico', 11, '+')", "Puerto Rico", "exact length"),
        Case("LPAD", STRING, "LPAD('abc', 5, CAST(NULL AS VARCHAR))", None, "null chars"),  # sql-scalar.md
        Case("LTRIM", STRING, "LTRIM('___abc___', '_')", "abc___"),
        Case("PARSE_LONG", STRING, "PARSE_LONG('1110', 2)", 14),
        Case("POSITION", STRING, "POSITION('PR' IN 'San Juan, PR' FROM 5)", 11),
        Case("POSITION", STRING, "POSITION('PR' IN 'Boston, MA' FROM 5)", 0, "absent"),
        Case("REGEXP_EXTRACT", STRING, "REGEXP_EXTRACT('San Juan, PR', '([^,]+)', 0)", "San Juan"),
        Case("REGEXP_LIKE", STRING, r"REGEXP_LIKE('San Juan, PR', '[A-Za-z]+\s[A-Za-z]+')", True),
        Case("REGEXP_LIKE", STRING, r"REGEXP_LIKE('Boston, MA', '[A-Za-z]+\s[A-Za-z]+')", False, "no match"),
        Case("REGEXP_REPLACE", STRING,
             "REGEXP_REPLACE('foo bar baz', '([A-Za-z]+) ([A-Za-z]+) ([A-Za-z]+)' , '$2!')", "bar!"),
        Case("REPEAT", STRING, "REPEAT('abc', 3)", "abcabcabc"),
        Case("REPLACE", STRING, "REPLACE('abc 123 abc 123', 'abc', 'XYZ')", "XYZ 123 XYZ 123"),
        Case("REVERSE", STRING, "REVERSE('abc')", "cba"),
        Case("RIGHT", STRING, "RIGHT('ABCDEFG', 3)", "EFG"),
        Case("RPAD", STRING, "RPAD('Florida', 11, '+')", "Florida++++"),
        Case("RPAD", STRING, "RPAD('Massachusetts', 11, '+')", "Massachuset", "truncates"),
        Case("RTRIM", STRING, "RTRIM('___abc___', '_')", "___abc"),
        Case("STRING_FORMAT", STRING, "STRING_FORMAT('Flight No.%d departing from %s', 314, 'SJU')",
             "Flight No.314 departing from SJU"),
        Case("STRLEN", STRING, "STRLEN('San Juan, PR')", 12),
        Case("STRPOS", STRING, "STRPOS('Hello World!', 'World')", 7),
        Case("SUBSTR", STRING, "SUBSTR('abcdefghi', 4, 3)", "def"),
        Case("SUBSTRING", STRING, "SUBSTRING('abcdefghi', 4, 3)", "def"),
        Case("TEXTCAT", STRING, "TEXTCAT('PR', ', USA')", "PR, USA"),
        Case("TRIM", STRING, "TRIM( BOTH '_' FROM '___abc___')", "abc"),
        Case("UPPER", STRING, "UPPER('San Juan, PR')", "SAN JUAN, PR"),
        # date and time: the `taxi-trips` examples over their first two timestamps
        Case("CEIL (date and time)", TIME, f"CEIL({TAXI_1} TO YEAR)", "2014-01-01T00:00:00.000Z"),
        Case("CURRENT_DATE", TIME, "CURRENT_DATE", _today()),
        Case("CURRENT_TIMESTAMP", TIME, "CURRENT_TIMESTAMP", _now()),
        Case("DATE_TRUNC", TIME, f"DATE_TRUNC('decade', {TAXI_1})", "2010-01-01T00:00:00.000Z"),
        Case("EXTRACT", TIME, f"EXTRACT(YEAR FROM {TAXI_1})", 2013),
        Case("FLOOR (date and time)", TIME, f"FLOOR({TAXI_1} TO YEAR)", "2013-01-01T00:00:00.000Z"),
        Case("MILLIS_TO_TIMESTAMP", TIME, "MILLIS_TO_TIMESTAMP(1375344877000)", "2013-08-01T08:14:37.000Z"),
        Case("TIME_CEIL", TIME, f"TIME_CEIL({TAXI_1}, 'PT45M', TIMESTAMP '2013-08-01 08:00:00')",
             "2013-08-01T08:45:00.000Z"),
        Case("TIME_CEIL", TIME, f"TIME_CEIL({TAXI_2}, 'PT45M', TIMESTAMP '2013-08-01 08:00:00')",
             "2013-08-01T09:30:00.000Z", "second row"),
        Case("TIME_CEIL", TIME, f"TIME_CEIL({TAXI_1}, 'PT45M', TIMESTAMP '2013-08-01 08:0:00')",
             "2013-08-01T08:45:00.000Z", "origin as the docs write it"),
        Case("TIME_EXTRACT", TIME, f"TIME_EXTRACT({TAXI_1}, 'hour', '-04:00')", 4),
        Case("TIME_EXTRACT", TIME, f"TIME_EXTRACT({TAXI_2}, 'hour', '-04:00')", 5, "second row"),
        Case("TIME_FLOOR", TIME, f"TIME_FLOOR({TAXI_1}, 'PT45M', TIMESTAMP '2013-08-01 08:00:00')",
             "2013-08-01T08:00:00.000Z"),
        Case("TIME_FLOOR", TIME, f"TIME_FLOOR({TAXI_2}, 'PT45M', TIMESTAMP '2013-08-01 08:00:00')",
             "2013-08-01T08:45:00.000Z", "second row"),
        Case("TIME_FORMAT", TIME, f"TIME_FORMAT({TAXI_1}, 'dd-MM-YYYY hh:mm aa zzz', '-05:00')",
             "01-08-2013 03:14 AM -05:00"),
        Case("TIME_IN_INTERVAL", TIME, f"TIME_IN_INTERVAL({TAXI_1}, '2013-08-01T08:00:00/PT1H')", True),
        Case("TIME_IN_INTERVAL", TIME, f"TIME_IN_INTERVAL({TAXI_2}, '2013-08-01T08:00:00/PT1H')", False, "outside"),
        Case("TIME_PARSE", TIME, "TIME_PARSE('2005-11-01', 'YYYY-MM-dd', '-05:00')", "2005-11-01T05:00:00.000Z"),
        Case("TIME_SHIFT", TIME, f"TIME_SHIFT({TAXI_1}, 'PT1H', -24)", "2013-07-31T08:14:37.000Z"),
        Case("TIMESTAMP_TO_MILLIS", TIME, f"TIMESTAMP_TO_MILLIS({TAXI_1})", 1375344877000),
        Case("TIMESTAMPADD", TIME, "TIMESTAMPADD (MONTH, 5, TIMESTAMP '2000-01-01 00:00:00')",
             "2000-06-01T00:00:00.000Z"),
        Case("TIMESTAMPDIFF", TIME, f"TIMESTAMPDIFF (MINUTE, {TAXI_1}, TIME_PARSE('2013-08-01 09:09:06'))", 54),
        # reduction
        Case("GREATEST", REDUCTION, "GREATEST(PI, 4, -5.0)", 4),
        Case("LEAST", REDUCTION, "LEAST( 'apple', 'orange', 'pear')", "apple"),
        # IP address
        Case("IPV4_MATCH", IP, "IPV4_MATCH('181.13.41.82', '181.13.41.0/24')", True),
        Case("IPV4_MATCH", IP, "IPV4_MATCH('177.242.100.0', '181.13.41.0/24')", False, "outside"),
        Case("IPV4_PARSE", IP, "IPV4_PARSE('5.5.5.5')", 84215045),
        Case("IPV4_STRINGIFY", IP, "IPV4_STRINGIFY(84215045)", "5.5.5.5"),
        Case("IPV6_MATCH", IP, "IPV6_MATCH('75e9:efa4:29c6:85f6::232c', '75e9:efa4:29c6:85f6::/64')", True),
        Case("IPV6_MATCH", IP, "IPV6_MATCH('75e9:efa4:29c6:85f7::1', '75e9:efa4:29c6:85f6::/64')", False, "outside"),
        Case("IPV6_MATCH", IP, "IPV6_MATCH('181.13.41.82', '75e9:efa4:29c6:85f6::/64')", False, "not IPv6"),
        # other scalar
        Case("CASE", OTHER, "CASE 'Personal computer' WHEN 'Personal computer' THEN 'Large UI' "
             "WHEN 'Smartphone' THEN 'Mobile UI' ELSE 'other' END", "Large UI", "simple"),
        Case("CASE", OTHER, "CASE WHEN 'Massachusetts' = 'Puerto Rico' THEN 'U.S. Territory' "
             "WHEN 'Massachusetts' = 'U.S. Virgin Islands' THEN 'U.S. Territory' ELSE 'U.S. State' END",
             "U.S. State", "searched"),
        Case("CAST", OTHER, "CAST(CAST(1571 AS DOUBLE) AS VARCHAR)", "1571.0"),  # a DOUBLE column's 1571
        Case("COALESCE", OTHER, "COALESCE(null, null, 5, 'abc')", 5),
        Case("NULLIF", OTHER, "NULLIF('PR', 'PR')", None),
        Case("NULLIF", OTHER, "NULLIF('MA', 'PR')", "MA", "different"),
        Case("NVL", OTHER, "NVL(CAST(NULL AS VARCHAR), 'No tail number')", "No tail number"),
        Case("NVL", OTHER, "NVL('N951DL', 'No tail number')", "N951DL", "not null"),
        # The filter as a Base64 literal: BLOOM_FILTER's example gives the filter of 'Game console' (10 entries).
        Case("BLOOM_FILTER_TEST", OTHER, f"BLOOM_FILTER_TEST('Game console', '{GAME_CONSOLE_BLOOM}')", True),
        Case("BLOOM_FILTER_TEST", OTHER, f"BLOOM_FILTER_TEST('Smart TV', '{GAME_CONSOLE_BLOOM}')", False, "absent"),
        Case("BLOOM_FILTER_TEST", OTHER, "BLOOM_FILTER_TEST('a', (SELECT BLOOM_FILTER(s, 10) FROM t))", True,
             "a filter BLOOM_FILTER built"),
        Case("DECODE_BASE64_COMPLEX", OTHER,
             "HLL_SKETCH_ESTIMATE(DECODE_BASE64_COMPLEX('HLLSketch', (SELECT DS_HLL(s) FROM t)), true)", 3),
    ]


def _sketches() -> list[Case]:
    """Sketches of `t`: small enough that HLL, Theta, Tuple and Quantiles sketches are exact (DataSketches'
    exact modes), so the documented meaning gives the value."""
    quantiles = "DS_QUANTILES_SKETCH(n)"
    low, high = "FILTER(WHERE n <= 2)", "FILTER(WHERE n >= 3)"
    return [
        Case("HLL_SKETCH_ESTIMATE", SKETCH, "SELECT HLL_SKETCH_ESTIMATE(DS_HLL(s), true) FROM t", 3),
        Case("HLL_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS", SKETCH,
             "SELECT HLL_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS(DS_HLL(s), 1) FROM t", _estimate_with_bounds(3)),
        Case("HLL_SKETCH_TO_STRING", SKETCH, "SELECT HLL_SKETCH_TO_STRING(DS_HLL(s)) FROM t",
             _starts("### HLL SKETCH SUMMARY")),
        Case("HLL_SKETCH_UNION", SKETCH, f"SELECT HLL_SKETCH_ESTIMATE(HLL_SKETCH_UNION(DS_HLL(s) {low}, "
             f"DS_HLL(s) {high}), true) FROM t", 3),
        Case("THETA_SKETCH_ESTIMATE", SKETCH, "SELECT THETA_SKETCH_ESTIMATE(DS_THETA(s)) FROM t", 3),
        Case("THETA_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS", SKETCH,
             "SELECT THETA_SKETCH_ESTIMATE_WITH_ERROR_BOUNDS(DS_THETA(s), 1) FROM t", _theta_bounds(3)),
        Case("THETA_SKETCH_INTERSECT", SKETCH, "SELECT THETA_SKETCH_ESTIMATE(THETA_SKETCH_INTERSECT("
             f"DS_THETA(s) {low}, DS_THETA(s) {high})) FROM t", 2),  # {a,b} ∩ {c,a,b}
        Case("THETA_SKETCH_NOT", SKETCH, "SELECT THETA_SKETCH_ESTIMATE(THETA_SKETCH_NOT("
             f"DS_THETA(s), DS_THETA(s) {low})) FROM t", 1),  # {a,b,c} − {a,b}
        Case("THETA_SKETCH_UNION", SKETCH, "SELECT THETA_SKETCH_ESTIMATE(THETA_SKETCH_UNION("
             "DS_THETA(s) FILTER(WHERE n = 1), DS_THETA(s) FILTER(WHERE n = 3))) FROM t", 2),
        Case("DS_GET_QUANTILE", SKETCH, f"SELECT DS_GET_QUANTILE({quantiles}, 0.5) FROM t", 3),
        Case("DS_GET_QUANTILES", SKETCH, f"SELECT DS_GET_QUANTILES({quantiles}, 0.5, 1.0) FROM t", "[3.0,5.0]"),
        Case("DS_HISTOGRAM", SKETCH, f"SELECT DS_HISTOGRAM({quantiles}, 3) FROM t", "[2.0,3.0]"),
        Case("DS_CDF", SKETCH, f"SELECT DS_CDF({quantiles}, 3) FROM t", "[0.4,1.0]"),
        Case("DS_RANK", SKETCH, f"SELECT DS_RANK({quantiles}, 3) FROM t", 0.4),  # 1 and 2 are below 3
        Case("DS_QUANTILE_SUMMARY", SKETCH, f"SELECT DS_QUANTILE_SUMMARY({quantiles}) FROM t",
             _starts("### Quantiles")),
        # a Tuple sketch of s keyed values n: a → 1+4, b → 2+5, c → 3
        Case("DS_TUPLE_DOUBLES_METRICS_SUM_ESTIMATE", SKETCH,
             "SELECT DS_TUPLE_DOUBLES_METRICS_SUM_ESTIMATE(DS_TUPLE_DOUBLES(s, n)) FROM t", [15.0]),
        Case("DS_TUPLE_DOUBLES_INTERSECT", SKETCH, "SELECT DS_TUPLE_DOUBLES_METRICS_SUM_ESTIMATE("
             f"DS_TUPLE_DOUBLES_INTERSECT(DS_TUPLE_DOUBLES(s, n) {low}, DS_TUPLE_DOUBLES(s, n) {high})) FROM t",
             [12.0]),  # a and b, their values summed
        Case("DS_TUPLE_DOUBLES_NOT", SKETCH, "SELECT DS_TUPLE_DOUBLES_METRICS_SUM_ESTIMATE("
             f"DS_TUPLE_DOUBLES_NOT(DS_TUPLE_DOUBLES(s, n), DS_TUPLE_DOUBLES(s, n) {low})) FROM t", [3.0]),
        Case("DS_TUPLE_DOUBLES_UNION", SKETCH, "SELECT DS_TUPLE_DOUBLES_METRICS_SUM_ESTIMATE("
             f"DS_TUPLE_DOUBLES_UNION(DS_TUPLE_DOUBLES(s, n) {low}, DS_TUPLE_DOUBLES(s, n) {high})) FROM t",
             [15.0]),
    ]


def _aggregations() -> list[Case]:
    """Over `t`: n = 1…5 (mean 3, squared deviations 10), s = a b c a b, __time ascending, t2 descending."""
    return [
        Case(name, AGGREGATION, f"SELECT {sql} FROM t", expected, label, gap)
        for name, sql, expected, label, gap in [
            ("COUNT", "COUNT(*)", 5, "", ""),
            ("COUNT", "COUNT(DISTINCT s)", 3, "distinct", ""),
            ("SUM", "SUM(n)", 15, "", ""),
            ("MIN", "MIN(n)", 1, "", ""),
            ("MAX", "MAX(n)", 5, "", ""),
            ("AVG", "AVG(n)", 3, "", ""),
            ("APPROX_COUNT_DISTINCT", "APPROX_COUNT_DISTINCT(s)", 3, "", ""),
            ("APPROX_COUNT_DISTINCT_BUILTIN", "APPROX_COUNT_DISTINCT_BUILTIN(s)", 3, "", ""),
            ("APPROX_COUNT_DISTINCT_DS_HLL", "APPROX_COUNT_DISTINCT_DS_HLL(s)", 3, "", ""),
            ("APPROX_COUNT_DISTINCT_DS_THETA", "APPROX_COUNT_DISTINCT_DS_THETA(s)", 3, "", ""),
            ("APPROX_QUANTILE", "APPROX_QUANTILE(n, 0.5)", _near(3, 1), "", ""),
            ("APPROX_QUANTILE_DS", "APPROX_QUANTILE_DS(n, 0.5)", 3, "", ""),
            ("APPROX_QUANTILE_FIXED_BUCKETS", "APPROX_QUANTILE_FIXED_BUCKETS(n, 0.5, 10, 0, 10)", _near(3, 1), "", ""),
            ("TDIGEST_QUANTILE", "TDIGEST_QUANTILE(n, 0.5)", _near(3, 1), "", ""),
            ("TDIGEST_QUANTILE", "TDIGEST_QUANTILE(n, 0.5, 200)", _near(3, 1), "compression", ""),
            ("VAR_POP", "VAR_POP(n)", 2.0, "", ""),
            ("VAR_SAMP", "VAR_SAMP(n)", 2.5, "", ""),
            ("VARIANCE", "VARIANCE(n)", 2.5, "", ""),
            ("STDDEV_POP", "STDDEV_POP(n)", math.sqrt(2), "", ""),
            ("STDDEV_SAMP", "STDDEV_SAMP(n)", math.sqrt(2.5), "", ""),
            ("STDDEV", "STDDEV(n)", math.sqrt(2.5), "", ""),
            ("EARLIEST", "EARLIEST(s)", "a", "", ""),
            ("EARLIEST", "EARLIEST(s, 1024)", "a", "maxBytesPerValue", ""),
            ("EARLIEST_BY", "EARLIEST_BY(n, t2)", 5, "", ""),
            ("LATEST", "LATEST(s)", "b", "", ""),
            ("LATEST_BY", "LATEST_BY(n, t2)", 1, "", ""),
            ("ANY_VALUE", "ANY_VALUE(n)", Check("one of 1…5", lambda v: v in (1, 2, 3, 4, 5)), "", ""),
            ("ARRAY_AGG", "ARRAY_AGG(s)", _unordered(["a", "b", "c", "a", "b"]), "", ""),
            ("ARRAY_AGG", "ARRAY_AGG(DISTINCT s)", ["a", "b", "c"], "distinct", ""),  # the element type's order
            ("ARRAY_CONCAT_AGG", "ARRAY_CONCAT_AGG(tags)", _unordered(["a", "b", "c", "a", "b", "c"]), "", ""),
            ("ARRAY_CONCAT_AGG", "ARRAY_CONCAT_AGG(DISTINCT tags)", ["a", "b", "c"], "distinct", ""),
            ("STRING_AGG", "STRING_AGG(s, ',')", _joined_unordered(["a", "b", "c", "a", "b"], ","), "", ""),
            ("STRING_AGG", "STRING_AGG(DISTINCT s, ',')", "a,b,c", "distinct", ""),  # STRING order
            ("LISTAGG", "LISTAGG(DISTINCT s, ',')", "a,b,c", "", ""),  # alias for STRING_AGG
            ("BIT_AND", "BIT_AND(n)", 0, "", ""),
            ("BIT_OR", "BIT_OR(n)", 7, "", ""),
            ("BIT_XOR", "BIT_XOR(n)", 1, "", ""),
            ("BLOOM_FILTER", "BLOOM_FILTER(s, 10)", _base64(), "", ""),
            # the docs' example: the filter of the one value 'Game console', whichever rows add it
            ("BLOOM_FILTER", "BLOOM_FILTER('Game console', 10)", GAME_CONSOLE_BLOOM, "the docs' filter", ""),
            ("DS_HLL", "DS_HLL(s)", _base64(), "", ""),
            ("DS_THETA", "DS_THETA(s)", _base64(), "", ""),
            ("DS_QUANTILES_SKETCH", "DS_QUANTILES_SKETCH(n)", _base64(), "", ""),
            ("DS_TUPLE_DOUBLES", "DS_TUPLE_DOUBLES(s, n)", _base64(), "", ""),
            ("TDIGEST_GENERATE_SKETCH", "TDIGEST_GENERATE_SKETCH(n)", _base64(), "", ""),
        ]
    ] + [
        Case("GROUPING", AGGREGATION, "SELECT GROUPING(s) FROM t GROUP BY GROUPING SETS ((s), ()) ORDER BY 1",
             Rows((0, 0, 0, 1))),  # 1 on the grand total, where s is not grouped on
    ]


def _arrays() -> list[Case]:
    abc = "ARRAY['a', 'b', 'c']"
    return [
        Case("ARRAY[]", ARRAY, abc, ["a", "b", "c"]),
        Case("ARRAY_APPEND", ARRAY, "ARRAY_APPEND(ARRAY['a', 'b'], 'z')", ["a", "b", "z"]),
        Case("ARRAY_CONCAT", ARRAY, "ARRAY_CONCAT(ARRAY['a', 'b'], ARRAY['c'])", ["a", "b", "c"]),
        Case("ARRAY_CONTAINS", ARRAY, f"ARRAY_CONTAINS({abc}, 'b')", True),
        Case("ARRAY_CONTAINS", ARRAY, f"ARRAY_CONTAINS({abc}, ARRAY['a', 'c'])", True, "all elements"),
        Case("ARRAY_CONTAINS", ARRAY, f"ARRAY_CONTAINS({abc}, 'z')", False, "absent"),
        Case("ARRAY_LENGTH", ARRAY, "ARRAY_LENGTH(ARRAY[1, 2, 3])", 3),
        Case("ARRAY_OFFSET", ARRAY, f"ARRAY_OFFSET({abc}, 1)", "b"),
        Case("ARRAY_OFFSET", ARRAY, f"ARRAY_OFFSET({abc}, 3)", None, "out of range"),
        Case("ARRAY_OFFSET_OF", ARRAY, f"ARRAY_OFFSET_OF({abc}, 'c')", 2),
        Case("ARRAY_OFFSET_OF", ARRAY, f"ARRAY_OFFSET_OF({abc}, 'z')", None, "absent"),
        Case("ARRAY_ORDINAL", ARRAY, f"ARRAY_ORDINAL({abc}, 1)", "a"),
        Case("ARRAY_ORDINAL", ARRAY, f"ARRAY_ORDINAL({abc}, 4)", None, "out of range"),
        Case("ARRAY_ORDINAL_OF", ARRAY, f"ARRAY_ORDINAL_OF({abc}, 'c')", 3),
        Case("ARRAY_ORDINAL_OF", ARRAY, f"ARRAY_ORDINAL_OF({abc}, 'z')", None, "absent"),
        Case("ARRAY_OVERLAP", ARRAY, "ARRAY_OVERLAP(ARRAY['a', 'b'], ARRAY['b', 'z'])", True),
        Case("ARRAY_OVERLAP", ARRAY, "ARRAY_OVERLAP(ARRAY['a', 'b'], ARRAY['y', 'z'])", False, "disjoint"),
        Case("ARRAY_PREPEND", ARRAY, "ARRAY_PREPEND('z', ARRAY['a', 'b'])", ["z", "a", "b"]),
        Case("ARRAY_SLICE", ARRAY, "ARRAY_SLICE(ARRAY['a', 'b', 'c', 'd'], 1, 3)", ["b", "c"]),
        Case("ARRAY_SLICE", ARRAY, f"ARRAY_SLICE({abc}, -1, 2)", None, "negative start"),
        Case("ARRAY_SLICE", ARRAY, f"ARRAY_SLICE({abc}, 4, 5)", None, "start past the end"),
        Case("ARRAY_SLICE", ARRAY, f"ARRAY_SLICE({abc}, 2, 1)", None, "start after end"),
        Case("ARRAY_TO_MV", ARRAY, "ARRAY_TO_MV(ARRAY['a', 'b'])", ["a", "b"]),
        Case("ARRAY_TO_STRING", ARRAY, f"ARRAY_TO_STRING({abc}, '-')", "a-b-c"),
        Case("SCALAR_IN_ARRAY", ARRAY, "SCALAR_IN_ARRAY('b', ARRAY['a', 'b'])", True),
        Case("SCALAR_IN_ARRAY", ARRAY, "SCALAR_IN_ARRAY('z', ARRAY['a', 'b'])", False, "absent"),
        Case("SCALAR_IN_ARRAY", ARRAY, "SCALAR_IN_ARRAY(CAST(NULL AS VARCHAR), ARRAY['a', 'b'])", None, "null"),
        Case("STRING_TO_ARRAY", ARRAY, "STRING_TO_ARRAY('a,b,c', ',')", ["a", "b", "c"]),
        Case("STRING_TO_ARRAY", ARRAY, "STRING_TO_ARRAY('a1b22c', '[0-9]+')", ["a", "b", "c"], "regex delimiter"),
    ]


def _multi_value() -> list[Case]:
    """The multi-value argument is an ARRAY literal ("All array references in the multi-value string function
    documentation can refer to multi-value string columns or ARRAY types"), so that each row tests its own function;
    STRING_TO_MV and MV_TO_ARRAY build and read a real multi-value string."""
    abc = "ARRAY['a', 'b', 'c']"
    cases = [
        ("MV_APPEND", f"MV_APPEND({abc}, 'z')", ["a", "b", "c", "z"], ""),
        ("MV_CONCAT", f"MV_CONCAT({abc}, ARRAY['d', 'e'])", ["a", "b", "c", "d", "e"], ""),
        ("MV_CONTAINS", f"MV_CONTAINS({abc}, 'b')", True, ""),
        ("MV_CONTAINS", f"MV_CONTAINS({abc}, ARRAY['a', 'c'])", True, "all elements"),
        ("MV_FILTER_NONE", "MV_FILTER_NONE(ARRAY['a', 'b', 'c', 'd'], ARRAY['a', 'c'])", ["b", "d"], ""),
        ("MV_FILTER_ONLY", f"MV_FILTER_ONLY({abc}, ARRAY['a', 'c'])", ["a", "c"], ""),
        ("MV_LENGTH", f"MV_LENGTH({abc})", 3, ""),
        ("MV_OFFSET", f"MV_OFFSET({abc}, 1)", "b", ""),
        ("MV_OFFSET_OF", f"MV_OFFSET_OF({abc}, 'c')", 2, ""),
        ("MV_ORDINAL", f"MV_ORDINAL({abc}, 1)", "a", ""),
        ("MV_ORDINAL_OF", f"MV_ORDINAL_OF({abc}, 'c')", 3, ""),
        ("MV_OVERLAP", f"MV_OVERLAP({abc}, ARRAY['c', 'z'])", True, ""),
        ("MV_PREPEND", f"MV_PREPEND('z', {abc})", ["z", "a", "b", "c"], ""),
        ("MV_SLICE", f"MV_SLICE({abc}, 1, 3)", ["b", "c"], ""),
        ("MV_TO_ARRAY", f"MV_TO_ARRAY({MV})", ["a", "b", "c"], ""),
        ("MV_TO_STRING", f"MV_TO_STRING({abc}, '-')", "a-b-c", ""),
        ("STRING_TO_MV", MV, ["a", "b", "c"], ""),
    ]
    return [Case(name, MULTI_VALUE, sql, expected, label) for name, sql, expected, label in cases]


def _json() -> list[Case]:
    doc = f"PARSE_JSON({JSON_DOC})"
    return [
        Case("JSON_KEYS", JSON_, f"JSON_KEYS({doc}, '$')", ["x", "y"]),
        Case("JSON_MERGE", JSON_, """JSON_MERGE('{"a":1,"b":2}', '{"b":3}')""", {"a": 1, "b": 3}),
        Case("JSON_OBJECT", JSON_, "JSON_OBJECT(KEY 'x' VALUE 1, KEY 'y' VALUE 'z')", {"x": 1, "y": "z"}),
        Case("JSON_OBJECT", JSON_, "JSON_OBJECT('x': 1)", {"x": 1}, "colon pairs"),
        Case("JSON_PATHS", JSON_, f"JSON_PATHS({doc})", _unordered(["$.x", "$.y"])),
        # the JSONPath examples of sql-json-functions.md
        Case("JSON_QUERY", JSON_, f"JSON_QUERY({doc}, '$')", {"x": 1, "y": [1, 2, 3]}),
        Case("JSON_QUERY", JSON_, f"JSON_QUERY({doc}, '$[''y'']')", [1, 2, 3], "bracket notation"),
        Case("JSON_QUERY_ARRAY", JSON_, """JSON_QUERY_ARRAY(PARSE_JSON('{"a":[{"b":1},{"b":2}]}'), '$.a')""",
             [{"b": 1}, {"b": 2}]),
        Case("JSON_QUERY_ARRAY", JSON_, f"JSON_QUERY_ARRAY({doc}, '$.x')", [1], "not an array"),
        Case("JSON_VALUE", JSON_, f"JSON_VALUE({doc}, '$.x')", "1", "no RETURNING"),  # "defaults to VARCHAR"
        Case("JSON_VALUE", JSON_, f"JSON_VALUE({doc}, '$.x' RETURNING BIGINT)", 1),
        Case("JSON_VALUE", JSON_, f"JSON_VALUE({doc}, '$.y[1]' RETURNING BIGINT)", 2, "array index"),
        Case("JSON_VALUE", JSON_, f"JSON_VALUE({doc}, '$.y' RETURNING BIGINT ARRAY)", [1, 2, 3], "array"),
        Case("PARSE_JSON", JSON_, doc, {"x": 1, "y": [1, 2, 3]}),
        Case("PARSE_JSON", JSON_, "PARSE_JSON('not json')", REFUSED, "invalid"),
        Case("TO_JSON_STRING", JSON_, """TO_JSON_STRING(PARSE_JSON('{"x":1}'))""", '{"x":1}'),
        Case("TRY_PARSE_JSON", JSON_, "TRY_PARSE_JSON('not json')", None),
        Case("TRY_PARSE_JSON", JSON_, f"TRY_PARSE_JSON({JSON_DOC})", {"x": 1, "y": [1, 2, 3]}, "valid"),
    ]


def _windows() -> list[Case]:
    """sql-window-functions.md's example over `wikipedia` (#kk and #lt, one day), one function a row, and the
    result table it shows, which has the page's known issues in it: LAG and LEAD ignore their default value,
    LAST_VALUE is the last value of the whole window even with ORDER BY (the third, frames, is test_windows.py's)."""
    query = ("SELECT {} OVER w FROM wikipedia GROUP BY channel, ABS(delta), FLOOR(__time TO DAY) "
             "WINDOW w AS (PARTITION BY channel ORDER BY ABS(delta) ASC) ORDER BY channel, ABS(delta)")
    kk, lt = KK_CHANGES, LT_CHANGES
    cases = [
        ("ROW_NUMBER", "ROW_NUMBER()", [*range(1, 9), *range(1, 11)], ""),
        ("RANK", "RANK()", [*range(1, 9), *range(1, 11)], ""),
        ("DENSE_RANK", "DENSE_RANK()", [*range(1, 9), *range(1, 11)], ""),
        ("PERCENT_RANK", "PERCENT_RANK()", [i / 7 for i in range(8)] + [i / 9 for i in range(10)], ""),
        ("CUME_DIST", "CUME_DIST()", [i / 8 for i in range(1, 9)] + [i / 10 for i in range(1, 11)], ""),
        ("NTILE", "NTILE(4)", [1, 1, 2, 2, 3, 3, 4, 4, 1, 1, 1, 2, 2, 2, 3, 3, 4, 4], ""),
        ("LAG", "LAG(ABS(delta), 1, 0)", [None, *kk[:-1], None, *lt[:-1]], ""),
        ("LEAD", "LEAD(ABS(delta), 1, 0)", [*kk[1:], None, *lt[1:], None], ""),
        ("FIRST_VALUE", "FIRST_VALUE(ABS(delta))", [1] * 8 + [1] * 10, ""),
        ("LAST_VALUE", "LAST_VALUE(ABS(delta))", [6900] * 8 + [4358] * 10, ""),
        ("LAG", "LAG(ABS(delta))", [None, *kk[:-1], None, *lt[:-1]], "no default"),
        ("LEAD", "LEAD(ABS(delta))", [*kk[1:], None, *lt[1:], None], "no default"),
    ]
    whole = ("SELECT LAST_VALUE(ABS(delta)) OVER (PARTITION BY channel ORDER BY ABS(delta) ROWS BETWEEN UNBOUNDED "
             "PRECEDING AND UNBOUNDED FOLLOWING) FROM wikipedia ORDER BY channel, ABS(delta)")
    return [*(Case(name, WINDOW, query.format(call), Rows(tuple(values)), label) for name, call, values, label in cases),
            Case("LAST_VALUE", WINDOW, whole, Rows((6900,) * 8 + (4358,) * 10), "whole window frame")]


CASES: list[Case] = _scalar() + _sketches() + _aggregations() + _arrays() + _multi_value() + _json() + _windows()


# ------------------------------------------------------------------------------------------------------ the test

@pytest.fixture(scope="module")
def evaluate(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], list[Any]]:
    folder = tmp_path_factory.mktemp("conformance")
    pq.write_table(pa.table(T), folder / "t.parquet")
    pq.write_table(pa.table(WIKIPEDIA), folder / "wikipedia.parquet")
    engine = SqlEngine(threads=1, lookups={"code_to_name": CODE_TO_NAME}.get)
    tables = {"t": [str(folder / "t.parquet")], "wikipedia": [str(folder / "wikipedia.parquet")]}

    def first_column(sql: str) -> list[Any]:
        query = sql if sql.lstrip().upper().startswith("SELECT") else f"SELECT {sql}"
        body, _ = render(engine.execute(query, tables), "array", header=False, types_header=False,
                         sql_types_header=False)
        return [row[0] for row in json.loads(body)]

    return first_column


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _matches(actual: Any, expected: Any) -> bool:
    if isinstance(expected, Check):
        return expected.holds(actual)
    if _number(expected):
        return _number(actual) and actual == pytest.approx(expected, rel=1e-12, abs=1e-12)
    if isinstance(expected, list | tuple):
        return (isinstance(actual, list | tuple) and len(actual) == len(expected)
                and all(map(_matches, actual, expected)))
    if isinstance(expected, dict):
        return isinstance(actual, dict) and actual.keys() == expected.keys() and all(
            _matches(actual[k], v) for k, v in expected.items())
    return type(actual) is type(expected) and actual == expected


def _param(case: Case) -> Any:
    marks = [pytest.mark.xfail(strict=True, reason=f"not yet: {case.gap}")] if case.gap else []
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_function_answers_as_druid_documents(evaluate: Callable[[str], list[Any]], case: Case) -> None:
    if case.expected is REFUSED:
        with pytest.raises(SqlError) as caught:
            evaluate(case.sql)
        assert caught.value.status == 400
        return
    try:
        values = evaluate(case.sql)
    except SqlError as error:  # a refused function fails here, without a traceback through the translator
        pytest.fail(f"{case.sql} → {error.status} {error.error_message}", pytrace=False)
    if isinstance(case.expected, Rows):
        assert _matches(values, list(case.expected.values)), f"{case.sql} → {values}, Druid: {case.expected.values}"
    else:
        assert len(values) == 1 and _matches(values[0], case.expected), (
            f"{case.sql} → {values}, Druid: {case.expected}")


def test_case_ids_are_unique() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


def test_every_gap_says_how_or_why() -> None:
    assert all(re.match(r"(differs|missing): \S", case.gap) for case in CASES if case.gap)


# --------------------------------------------------------------------------------------- docs/sql-functions.md

_START = "<!-- conformance table: generated from tests/unit/test_sql_conformance.py; do not edit by hand -->"
_END = "<!-- end of conformance table -->"


def _status(cases: list[Case]) -> str:
    gaps = [case.gap for case in cases if case.gap]
    if not gaps:
        return "supported"
    if all(gap.startswith("missing: ") for gap in gaps) and len(gaps) == len(cases):
        return "not supported: " + gaps[0].removeprefix("missing: ")
    return "differs: " + "; ".join(dict.fromkeys(gap.split(": ", 1)[1] for gap in gaps))


def conformance_table() -> str:
    """The function table of docs/sql-functions.md: one line per documented function, in the docs' categories."""
    by_function: dict[tuple[str, str], list[Case]] = {}
    for case in CASES:
        by_function.setdefault((case.category, case.function), []).append(case)
    statuses = {key: _status(cases) for key, cases in by_function.items()}
    counts = {word: sum(s.startswith(word) for s in statuses.values()) for word in ("supported", "differs", "not")}
    summary = (f"{len(statuses)} documented functions: {counts['supported']} supported, {counts['differs']} "
               f"differing, {counts['not']} not supported.")
    lines = [_START, "", summary, "", "| Function | Category | Status | Test rows |", "| --- | --- | --- | --- |"]
    for category in CATEGORIES:
        for (kind, function), cases in sorted(by_function.items(), key=lambda item: item[0][1]):
            if kind == category:
                rows = ", ".join(f"`{case.id}`" for case in cases)
                lines.append(f"| `{function}` | {category} | {statuses[kind, function]} | {rows} |")
    return "\n".join([*lines, "", _END])


def _generated_part(text: str) -> str:
    start, end = text.index(_START), text.index(_END) + len(_END)
    return text[start:end]


def test_the_doc_lists_exactly_the_functions_of_this_table() -> None:
    assert _generated_part(DOC.read_text()) == conformance_table(), (
        "docs/sql-functions.md is stale: run `.venv/bin/python tests/unit/test_sql_conformance.py`")


if __name__ == "__main__":  # rewrites the generated part of docs/sql-functions.md
    text = DOC.read_text()
    DOC.write_text(text.replace(_generated_part(text), conformance_table()))
    sys.stdout.write(f"{DOC}: {len({(c.category, c.function) for c in CASES})} functions, {len(CASES)} rows\n")
