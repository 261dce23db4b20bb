"""Druid's BLOOM_FILTER and BLOOM_FILTER_TEST (the druid-bloom-filter extension) over a small table, and the
BloomKFilter behind them, which must hash and serialize as Druid's so that filters go both ways."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.functions.bloom import (
    NULL_HASHCODE,
    BloomKFilter,
    from_base64,
    hash_bytes,
    hash_long,
)
from sluice.broker.engine import SqlEngine
from sluice.broker.errors import SqlError

# Druid's docs (sql-functions.md, BLOOM_FILTER): BLOOM_FILTER(agent_category, 10) per agent_category, each group one value
DOCS_FILTERS = {
    "Game console": "BAAAAAgAAAAAAAAAAAAAAAAAAAAAAAAAQAgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAgBAAAAAAAAAAAAAAAA",
    "Personal computer": "BAAAAAgAAAAAAEAAAAAAAAAAAAIAAAAAAAAAAAAAAAAAAAAAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAQAAAAAAAAAAAAAA",
    "Smart TV": "BAAAAAgAAAAAAAAAAAAAgAAAAgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAgAA",
}
ABSENT = [f"absent-{i}" for i in range(200)]

ROWS = {
    "s": ["Game console", "Smart TV", "Game console", None, "Personal computer", "Smart TV"],
    "n": [1, 2, 3, None, 5, 6],
    "x": [1.5, 2.5, None, 4.5, 5.5, 6.5],
    "g": ["p", "p", "q", "q", "q", "r"],
}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path: Path = tmp_path_factory.mktemp("bloom") / "t.parquet"
    pq.write_table(pa.table(ROWS), path)
    engine = SqlEngine(threads=1)
    return lambda sql: engine.execute(sql, {"t": [str(path)]})


def _filter_of(*values: Any, kind: str = "s", entries: int = 10) -> BloomKFilter:
    bloom = BloomKFilter.create(entries)
    for value in values:
        bloom.add(value, kind)
    return bloom


def _b64(bloom: BloomKFilter) -> str:
    return base64.b64encode(bloom.serialize()).decode("ascii")


# ------------------------------------------------------------------------------------------------------ the filter


def test_murmur3_is_hives() -> None:
    """Hive's Murmur3.hash64(long) is hash64 of the long's big-endian bytes (its bytes reversed, read little-endian),
    and the empty input hashes its seed alone."""
    assert hash_long(42) == hash_bytes((42).to_bytes(8, "big"))
    assert hash_long(-1) == hash_bytes(b"\xff" * 8)
    assert hash_bytes(b"") != NULL_HASHCODE


@pytest.mark.parametrize(("value", "expected"), DOCS_FILTERS.items())
def test_a_filter_of_one_value_is_druids_byte_for_byte(value: str, expected: str) -> None:
    assert _b64(_filter_of(value)) == expected


def test_sizes_follow_num_entries_with_fpp_005() -> None:
    """numBits = -n ln(0.05) / ln(2)^2, k = round(numBits / n ln 2), padded to whole blocks of 8 longs (a whole
    block more when already aligned, as Druid pads)."""
    assert str(BloomKFilter.create(10)) == "m: 512 k: 4"  # 62 bits: 1 long, padded to 8
    assert str(BloomKFilter.create(1000)) == "m: 6656 k: 4"  # 6235 bits: 98 longs, padded to 104
    assert len(BloomKFilter.create(10).serialize()) == 5 + 8 * 8


def test_added_values_test_true_and_absent_ones_mostly_false() -> None:
    values = [f"value-{i}" for i in range(100)]
    bloom = _filter_of(*values, entries=100)
    assert all(bloom.test(v) for v in values)
    false_positives = [v for v in ABSENT if bloom.test(v)]
    assert len(false_positives) < 20  # about 5% of 200, deterministic given the hash
    assert false_positives == [v for v in ABSENT if bloom.test(v)]


@pytest.mark.parametrize(("values", "kind"), [([1, -7, 2**62], "l"), ([1.5, -0.0, float("nan")], "d"),
                                              ([1.5, 3.25], "f"), (["é", ""], "s")])
def test_each_kind_tests_its_own_values(values: list, kind: str) -> None:
    bloom = _filter_of(*values, kind=kind)
    assert all(bloom.test(v, kind) for v in values)


def test_a_long_and_its_text_are_different_values() -> None:
    bloom = _filter_of(12345, kind="l")
    assert bloom.test(12345, "l") and not bloom.test("12345", "s")


def test_null_is_a_value_of_its_own() -> None:
    """Druid adds and tests a null as addBytes(null) / testBytes(null): Murmur3's NULL_HASHCODE."""
    with_null = _filter_of(None)
    assert with_null.test(None) and not with_null.test("") and not with_null.test("null")
    assert not _filter_of("a").test(None)


def test_serialization_round_trips() -> None:
    bloom = _filter_of("a", "b", entries=1000)
    again = from_base64(_b64(bloom))
    assert again.serialize() == bloom.serialize() and again.k == 4
    assert again.test("a") and again.test("b")
    for text in DOCS_FILTERS.values():
        assert _b64(from_base64(text)) == text


def test_merge_is_the_union() -> None:
    bloom = _filter_of("a")
    bloom.merge(_filter_of("b"))
    assert bloom.serialize() == _filter_of("a", "b").serialize()
    with pytest.raises(ValueError, match="not compatible"):
        bloom.merge(_filter_of("c", entries=1000))


@pytest.mark.parametrize("text", ["not base64!", "", base64.b64encode(b"\x04\x00\x00\x00\x08").decode(),
                                  base64.b64encode(b"\x04\x00\x00\x00\x03" + bytes(24)).decode()])
def test_what_is_no_filter_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        from_base64(text)


# -------------------------------------------------------------------------------------------------------------- SQL


def test_bloom_filter_is_base64_of_druids_bytes(run: Any) -> None:
    result = run("SELECT BLOOM_FILTER(s, 10) FROM t WHERE s = 'Game console'")
    assert result.druid_types == ["COMPLEX<bloom>"] and result.sql_types == ["OTHER"]
    assert result.rows == [(DOCS_FILTERS["Game console"],)]


def test_bloom_filter_adds_nulls_as_druid_does(run: Any) -> None:
    [(text,)] = run("SELECT BLOOM_FILTER(s, 10) FROM t").rows
    expected = _filter_of("Game console", "Smart TV", None, "Personal computer")
    assert text == _b64(expected)


def test_bloom_filter_of_numbers_adds_longs_and_doubles(run: Any) -> None:
    [(longs, doubles)] = run("SELECT BLOOM_FILTER(n, 100), BLOOM_FILTER(x, 100) FROM t").rows
    expected_longs = _filter_of(1, 2, 3, None, 5, 6, kind="l", entries=100)
    expected_doubles = _filter_of(1.5, 2.5, None, 4.5, 5.5, 6.5, kind="d", entries=100)
    assert (longs, doubles) == (_b64(expected_longs), _b64(expected_doubles))


def test_bloom_filter_with_filter_and_group_by(run: Any) -> None:
    result = run("SELECT g, BLOOM_FILTER(s, 10) FILTER(WHERE n > 1) FROM t GROUP BY g ORDER BY g")
    assert result.rows == [("p", _b64(_filter_of("Smart TV"))), ("q", _b64(_filter_of("Game console",
                                                                                       "Personal computer"))),
                           ("r", _b64(_filter_of("Smart TV")))]


def test_bloom_filter_of_no_rows_is_the_empty_filter(run: Any) -> None:
    result = run("SELECT BLOOM_FILTER(s, 10) FROM t WHERE n > 100")
    assert result.rows == [(_b64(BloomKFilter.create(10)),)]
    empty = run("SELECT g, BLOOM_FILTER(s, 10) FROM t WHERE n > 100 GROUP BY g")
    assert empty.rows == [] and empty.druid_types == ["STRING", "COMPLEX<bloom>"]


def test_bloom_filter_test_over_a_column_with_a_literal_filter(run: Any) -> None:
    literal = DOCS_FILTERS["Game console"]
    result = run(f"SELECT s, BLOOM_FILTER_TEST(s, '{literal}') FROM t ORDER BY n")
    assert result.rows == [(None, False), ("Game console", True), ("Smart TV", False), ("Game console", True),
                           ("Personal computer", False), ("Smart TV", False)]  # a null n sorts first
    [(count,)] = run(f"SELECT COUNT(*) FROM t WHERE BLOOM_FILTER_TEST(s, '{literal}')").rows
    assert count == 2


def test_bloom_filter_test_of_null_is_testbytes_null(run: Any) -> None:
    with_null = _b64(_filter_of("Smart TV", None))
    result = run(f"SELECT s, BLOOM_FILTER_TEST(s, '{with_null}') FROM t WHERE s IS NULL OR s = 'Smart TV' "
                 "ORDER BY n")
    assert result.rows == [(None, True), ("Smart TV", True), ("Smart TV", True)]


def test_bloom_filter_test_of_numbers(run: Any) -> None:
    longs = _b64(_filter_of(2, 5, kind="l"))
    doubles = _b64(_filter_of(2.5, kind="d"))
    result = run(f"SELECT n, BLOOM_FILTER_TEST(n, '{longs}'), BLOOM_FILTER_TEST(x, '{doubles}') FROM t "
                 "WHERE n IS NOT NULL ORDER BY n")
    assert result.rows == [(1, False, False), (2, True, True), (3, False, False), (5, True, False),
                           (6, False, False)]


def test_bloom_filter_test_of_a_built_filter(run: Any) -> None:
    result = run("SELECT s, BLOOM_FILTER_TEST(s, (SELECT BLOOM_FILTER(s, 10) FROM t WHERE g = 'p')) FROM t "
                 "WHERE s IS NOT NULL ORDER BY n")
    assert result.rows == [("Game console", True), ("Smart TV", True), ("Game console", True),
                           ("Personal computer", False), ("Smart TV", True)]


def test_a_filter_read_back_with_decode_base64_complex(run: Any) -> None:
    [(text,)] = run("SELECT BLOOM_FILTER(s, 10) FROM t").rows
    [(again,)] = run(f"SELECT DECODE_BASE64_COMPLEX('bloom', '{text}')").rows
    assert again == text


@pytest.mark.parametrize(("sql", "message"), [
    ("SELECT BLOOM_FILTER(s, 0) FROM t", "BLOOM_FILTER needs numEntries in the range of [1, 2147483647], got 0"),
    ("SELECT BLOOM_FILTER(s, -5) FROM t", "BLOOM_FILTER needs numEntries in the range of [1, 2147483647], got -5"),
    ("SELECT BLOOM_FILTER(s, 'many') FROM t", "BLOOM_FILTER needs numEntries as an integer literal"),
    ("SELECT BLOOM_FILTER(s, n) FROM t", "BLOOM_FILTER needs numEntries as an integer literal"),
    ("SELECT BLOOM_FILTER(s) FROM t", "Function BLOOM_FILTER takes 2 arguments, got 1"),
    ("SELECT BLOOM_FILTER_TEST(s, 'not a filter') FROM t", "BLOOM_FILTER_TEST needs the filter as the Base64 text"),
    ("SELECT BLOOM_FILTER_TEST(s, 42) FROM t", "BLOOM_FILTER_TEST needs the filter as a Base64 string literal"),
])
def test_wrong_calls_are_refused_naming_the_function(run: Any, sql: str, message: str) -> None:
    with pytest.raises(SqlError) as caught:
        run(sql)
    assert caught.value.status == 400
    assert message in caught.value.error_message
