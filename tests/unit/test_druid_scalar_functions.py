"""Druid SQL's scalar functions (the string, numeric and IP address tables of Druid's reference) over a small segment:
SQL in → one value per row out, with Druid's semantics where DuckDB's differ; unsupported functions → a 400 naming
them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.engine import SqlEngine
from sluice.broker.errors import SqlError

# Three rows, the last one mostly NULL: every function below is read over each of them (ORDER BY id).
ROWS = {
    "id": pa.array([1, 2, 3], pa.int64()),
    "s": pa.array(["Druid", "sluice", None], pa.string()),
    "t": pa.array(["  pad me  ", "xxcorexx", ""], pa.string()),
    "n": pa.array([1500, -7, None], pa.int64()),
    "d": pa.array([2.5, -7.9, None], pa.float64()),
    "hex": pa.array(["ff", "0x1F", "nope"], pa.string()),
    "ip": pa.array(["192.168.1.10", "10.0.0.1", "not an ip"], pa.string()),
    "ipn": pa.array([3232235786, 167772161, 4294967296], pa.int64()),
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("scalar") / "fn.parquet"
    pq.write_table(pa.table(ROWS), path)
    engine, tables = SqlEngine(threads=1), {"fn": [str(path)]}

    def values(expression: str) -> list[Any]:
        return [row[0] for row in engine.execute(f"SELECT {expression} FROM fn ORDER BY id", tables).rows]

    return values


STRING = [
    ("CONCAT(s, '-', n)", ["Druid-1500", "sluice--7", None]),
    ("s || '!'", ["Druid!", "sluice!", None]),
    ("TEXTCAT(s, '?')", ["Druid?", "sluice?", None]),
    # Java writes NULL as "null", justified to the width and cut to the precision (%.1f: "n").
    ("STRING_FORMAT('%s has %d (%.1f%%)', s, n, d)", ["Druid has 1500 (2.5%)", "sluice has -7 (-7.9%)",
                                                      "null has null (n%)"]),
    ("STRING_FORMAT('%-7s|%5d|%x|%S', s, n, 255, s)", ["Druid  | 1500|ff|DRUID", "sluice |   -7|ff|SLUICE",
                                                      "null   | null|ff|NULL"]),
    *[(f"{name}(s)", [5, 6, None]) for name in ("LENGTH", "CHAR_LENGTH", "CHARACTER_LENGTH", "STRLEN")],
    ("LOWER(s)", ["druid", "sluice", None]),
    ("UPPER(s)", ["DRUID", "SLUICE", None]),
    ("LPAD(s, 7, '*')", ["**Druid", "*sluice", None]),
    ("LPAD(s, 3)", ["Dru", "slu", None]),
    ("LPAD(s, 8, '')", ["Druid", "sluice", None]),  # an empty pad adds nothing
    ("RPAD(s, 8, 'ab')", ["Druidaba", "sluiceab", None]),
    ("RPAD(s, 0, 'ab')", ["", "", None]),
    ("LTRIM(t)", ["pad me  ", "xxcorexx", ""]),
    ("RTRIM(t, 'x')", ["  pad me  ", "xxcore", ""]),
    ("BTRIM(t, 'x')", ["  pad me  ", "core", ""]),
    ("BTRIM(t)", ["pad me", "xxcorexx", ""]),
    ("TRIM(t)", ["pad me", "xxcorexx", ""]),
    ("TRIM(LEADING 'x' FROM t)", ["  pad me  ", "corexx", ""]),
    ("TRIM(BOTH 'x' FROM t)", ["  pad me  ", "core", ""]),
    ("PARSE_LONG(hex, 16)", [255, 31, None]),
    ("PARSE_LONG(CAST(n AS VARCHAR))", [1500, -7, None]),
    ("PARSE_LONG(CAST(d AS VARCHAR))", [None, None, None]),  # '2.5' is no long
    ("PARSE_LONG('-777', 8)", [-511] * 3),
    ("PARSE_LONG('9223372036854775807')", [9223372036854775807] * 3),
    ("PARSE_LONG('9223372036854775808')", [None] * 3),  # beyond a BIGINT
    ("PARSE_LONG('zz', 36)", [1295] * 3),
    ("POSITION('u' IN s)", [3, 3, None]),
    ("POSITION('d' IN LOWER(s) FROM 2)", [5, 0, None]),
    ("STRPOS(s, 'i')", [4, 4, None]),
    ("STRPOS(s, 'z')", [0, 0, None]),
    (r"REGEXP_EXTRACT(ip, '(\d+)\.(\d+)', 2)", ["168", "0", None]),
    ("REGEXP_EXTRACT(s, '[A-Z]')", ["D", None, None]),  # no match is NULL
    ("REGEXP_LIKE(s, '^[a-z]+$')", [False, True, None]),
    (r"REGEXP_REPLACE(ip, '(\d+)\.(\d+)', '$2.$1')", ["168.192.10.1", "0.10.1.0", "not an ip"]),
    (r"REGEXP_REPLACE(s, 'i', '\$')", ["Dru$d", "slu$ce", None]),
    ("REPLACE(s, 'u', 'U')", ["DrUid", "slUice", None]),
    ("REPEAT(s, 2)", ["DruidDruid", "sluicesluice", None]),
    ("REPEAT(s, -1)", [None, None, None]),
    ("REVERSE(s)", ["diurD", "eciuls", None]),
    ("LEFT(s, 2)", ["Dr", "sl", None]),
    ("RIGHT(s, 2)", ["id", "ce", None]),
    ("SUBSTRING(s, 2, 3)", ["rui", "lui", None]),
    ("SUBSTR(s, 5)", ["d", "ce", None]),
    ("SUBSTRING(s, 6)", [None, "e", None]),  # past the end is NULL
    ("SUBSTRING(s FROM 2 FOR 2)", ["ru", "lu", None]),
    ("CONTAINS_STRING(s, 'ui')", [True, True, None]),
    ("ICONTAINS_STRING(s, 'dR')", [True, False, None]),
    ("DECODE_BASE64_UTF8('U2x1aWNl')", ["Sluice"] * 3),
    ("HUMAN_READABLE_BINARY_BYTE_FORMAT(n)", ["1.46 KiB", "-7 B", None]),
    ("HUMAN_READABLE_BINARY_BYTE_FORMAT(1048576 * n, 3)", ["1.465 GiB", "-7.000 MiB", None]),
    ("HUMAN_READABLE_DECIMAL_BYTE_FORMAT(n, 1)", ["1.5 KB", "-7 B", None]),
    ("HUMAN_READABLE_DECIMAL_BYTE_FORMAT(99999)", ["100.00 KB"] * 3),
    ("HUMAN_READABLE_DECIMAL_FORMAT(n, 0)", ["2 K", "-7", None]),
    ("HUMAN_READABLE_DECIMAL_FORMAT(d)", ["2", "-7", None]),
]

NUMERIC = [
    ("PI", [math.pi] * 3),
    ("ABS(n)", [1500, 7, None]),
    ("CEIL(d)", [3.0, -7.0, None]),
    ("FLOOR(d)", [2.0, -8.0, None]),
    ("EXP(0)", [1.0] * 3),
    ("LN(EXP(2))", [2.0] * 3),
    ("LOG10(1000)", [3.0] * 3),
    ("POWER(2, 10)", [1024.0] * 3),
    ("SQRT(16)", [4.0] * 3),
    ("TRUNCATE(d)", [2.0, -7.0, None]),
    ("TRUNC(123.456, 1)", [123.4] * 3),
    ("TRUNCATE(n, -2)", [1500, 0, None]),
    ("ROUND(d)", [3.0, -8.0, None]),  # half up
    ("ROUND(n, -2)", [1500, 0, None]),
    ("ROUND(1234.5678, 2)", [1234.57] * 3),
    ("MOD(n, 4)", [0, -3, None]),
    ("SIN(0)", [0.0] * 3),
    ("COS(0)", [1.0] * 3),
    ("TAN(0)", [0.0] * 3),
    ("COT(PI / 4)", [1.0] * 3),
    ("ASIN(1)", [math.pi / 2] * 3),
    ("ACOS(1)", [0.0] * 3),
    ("ATAN(1)", [math.pi / 4] * 3),
    ("ATAN2(1, 1)", [math.pi / 4] * 3),
    ("DEGREES(PI)", [180.0] * 3),
    ("RADIANS(180)", [math.pi] * 3),
    ("DIV(n, 4)", [375, -1, None]),
    ("DIV(d, 2)", [1, -3, None]),  # (long) (x / y)
    ("BITWISE_AND(n, 255)", [220, 249, None]),
    ("BITWISE_OR(d, 1)", [3, -7, None]),  # a DOUBLE loses its fraction first
    ("BITWISE_XOR(n, 12)", [1500 ^ 12, -7 ^ 12, None]),
    ("BITWISE_COMPLEMENT(n)", [-1501, 6, None]),
    ("BITWISE_SHIFT_LEFT(n, 2)", [6000, -28, None]),
    ("BITWISE_SHIFT_LEFT(1, 63)", [-(2**63)] * 3),  # wraps like Java's long
    ("BITWISE_SHIFT_LEFT(1, 64)", [1] * 3),  # the distance is taken modulo 64
    ("BITWISE_SHIFT_RIGHT(n, 1)", [750, -4, None]),
    ("SAFE_DIVIDE(n, 0)", [None, None, None]),
    ("SAFE_DIVIDE(n, 7)", [214, -1, None]),
    ("SAFE_DIVIDE(d, 2)", [1.25, -3.95, None]),
    ("GREATEST(n, 0, d)", [1500.0, 0.0, 0.0]),  # NULLs are ignored
    ("LEAST(n, d)", [2.5, -7.9, None]),
    ("NVL(s, 'none')", ["Druid", "sluice", "none"]),
    # IEEE 754 bits: 2.5 is 0x4004000000000000; a long is read as a double first (1500 → 1500.0)
    ("BITWISE_CONVERT_DOUBLE_TO_LONG_BITS(d)", [4612811918334230528, -4602791409163331174, None]),
    ("BITWISE_CONVERT_DOUBLE_TO_LONG_BITS(n)", [4654311885213007872, -4603804719079489536, None]),
    ("BITWISE_CONVERT_LONG_BITS_TO_DOUBLE(BITWISE_CONVERT_DOUBLE_TO_LONG_BITS(d))", [2.5, -7.9, None]),
]

IP = [
    ("IPV4_PARSE(ip)", [3232235786, 167772161, None]),
    ("IPV4_PARSE(ipn)", [3232235786, 167772161, None]),  # beyond 2^32-1 is no address
    ("IPV4_PARSE('192.168.01.1')", [None] * 3),
    ("IPV4_STRINGIFY(ipn)", ["192.168.1.10", "10.0.0.1", None]),
    ("IPV4_STRINGIFY(ip)", ["192.168.1.10", "10.0.0.1", None]),
    ("IPV4_MATCH(ip, '192.168.0.0/16')", [True, False, False]),
    ("IPV4_MATCH(ipn, '10.0.0.0/8')", [False, True, False]),
    ("IPV6_MATCH(ip, '::/0')", [False, False, False]),  # IPv4 text is no IPv6 address
    ("IPV6_MATCH('::ffff:1', '::ffff:0/112')", [True, True, True]),
]


@pytest.mark.parametrize(("expression", "expected"), STRING + NUMERIC + IP, ids=[c[0] for c in STRING + NUMERIC + IP])
def test_scalar_function_per_row(run, expression: str, expected: list[Any]) -> None:
    values = run(expression)
    assert values == [pytest.approx(v) if isinstance(v, float) else v for v in expected]
    # A float must come back as a float, and a count as an int, as Druid types them.
    assert [type(v) for v in values] == [type(v) for v in expected]


REFUSED = [
    ("LOOKUP(s, 'countries')", "Lookup [countries] not found"),
    ("IPV6_MATCH(ip, '10.0.0.0/8')", "IPV6_MATCH needs an IPv6 subnet in CIDR notation"),
    ("HLL_SKETCH_ESTIMATE(s)", "Binder Error: No function matches the given name and argument types "
                               "'HLL_SKETCH_ESTIMATE(VARCHAR)'"),  # a string is not an HLL sketch
    ("DS_KLL_SKETCH(n)", "Function DS_KLL_SKETCH is not supported: Sluice has the HLL, Theta, Quantiles and Tuple "
                         "sketch functions only"),
    ("PARSE_LONG(hex, 37)", "PARSE_LONG needs the radix in the range of [2, 36], got 37"),
    ("PARSE_LONG(hex, n)", "PARSE_LONG needs the radix as an integer literal, got n"),
    ("HUMAN_READABLE_BINARY_BYTE_FORMAT(n, 4)", "HUMAN_READABLE_BINARY_BYTE_FORMAT needs the precision in the range of "
                                               "[0, 3], got 4"),
    ("STRING_FORMAT('%b', s)", "STRING_FORMAT does not support the conversion '%b' in '%b'"),
    ("STRING_FORMAT('%s %s', s)", "STRING_FORMAT's format '%s %s' needs more than the 1 arguments given"),
    ("REGEXP_EXTRACT(s, t)", "REGEXP_EXTRACT needs the pattern as a string literal, got t"),
    ("REGEXP_REPLACE(s, 'a', '${name}')", "REGEXP_REPLACE's replacement '${name}' has a group reference other than"),
    ("IPV4_MATCH(ip, '300.0.0.0/8')", "IPV4_MATCH needs an IPv4 subnet in CIDR notation such as '192.168.0.0/16'"),
    ("DIV(n)", "Function DIV takes 2 arguments, got 1"),
]


@pytest.mark.parametrize(("expression", "message"), REFUSED, ids=[c[0] for c in REFUSED])
def test_unsupported_functions_and_arguments_are_a_400_naming_them(run, expression: str, message: str) -> None:
    with pytest.raises(SqlError) as caught:
        run(expression)
    assert caught.value.status == 400
    assert caught.value.error_message.startswith(message)


def test_a_column_named_pi_stays_a_column_when_quoted(tmp_path: Path) -> None:
    path = tmp_path / "pi.parquet"
    pq.write_table(pa.table({"PI": [1]}), path)
    assert SqlEngine(threads=1).execute('SELECT "PI", PI FROM t', {"t": [str(path)]}).rows == [(1, math.pi)]
