"""Input formats: bytes in, record batches out (expected values written by hand, Druid's rules in the names)."""

from __future__ import annotations

import base64
import datetime as dt
import io
from decimal import Decimal

import fastavro
import pyarrow as pa
import pyarrow.orc as pa_orc
import pyarrow.parquet as pq
import pytest
from pydantic import TypeAdapter

from sluice.connectors.formats import FormatError, record_parser, stringify
from sluice.connectors.formats.lines import LineReader, split_lines
from sluice.spec.input_format import RecordFormat


def fmt(spec: dict):
    return TypeAdapter(RecordFormat).validate_python(spec)


def read(spec: dict, fields: list[str], data: bytes, name: str = "f") -> list[dict]:
    parser = record_parser(fmt(spec), fields)
    rows = []
    for batch in parser.parse_stream(io.BytesIO(data), name):
        assert batch.schema == parser.schema
        rows += batch.to_pylist()
    return rows


def row(locator: str, error: str | None = None, **fields) -> dict:
    return {"__locator": locator, "__error": error, **fields}


# ---------------------------------------------------------------- stringify

@pytest.mark.parametrize(("array", "expected"), [
    (pa.array([1, -2, None], pa.int8()), ["1", "-2", None]),
    (pa.array([2**62, None], pa.uint64()), ["4611686018427387904", None]),
    (pa.array([True, False, None]), ["true", "false", None]),
    (pa.array([1.5, 210.0, -3.0, 0.001, 1e-5, 12345678.0, 12345678.5, 1e20, None]),
     ["1.5", "210.0", "-3.0", "0.001", "1.0E-5", "12345678", "1.23456785E7", "1.0E20", None]),
    (pa.array([float("nan"), float("inf"), float("-inf")]), ["NaN", "Infinity", "-Infinity"]),
    (pa.array([1.1, 2.5e-4, 4.0], pa.float32()), ["1.1", "2.5E-4", "4.0"]),
    (pa.array([Decimal("1.50"), Decimal("-0.001"), None], pa.decimal128(6, 3)), ["1.500", "-0.001", None]),
    (pa.array([Decimal("1E+3")], pa.decimal128(5, -2)), ["1000"]),
    (pa.array([0, 1_500, -1, None], pa.timestamp("us", "Asia/Tokyo")), ["0", "1", "-1", None]),
    (pa.array([1_700_000_000_123_456_789], pa.timestamp("ns")), ["1700000000123"]),
    (pa.array([1_700_000_000], pa.timestamp("s")), ["1700000000000"]),
    (pa.array([dt.date(2024, 1, 2), None]), ["1704153600000", None]),
    (pa.array([dt.date(1969, 12, 31)], pa.date64()), ["-86400000"]),
    (pa.array([b"hi", b"\xff", None]), ["aGk=", "/w==", None]),
    (pa.array(["a", None], pa.large_string()), ["a", None]),
    (pa.array(["x", "y", "x"]).dictionary_encode(), ["x", "y", "x"]),
    (pa.array([[1, 2], [], None]), ["[1,2]", "[]", None]),
    (pa.array([{"a": 1, "b": "z"}, None]), ['{"a":1,"b":"z"}', None]),
    (pa.array([[("k", 1)], []], pa.map_(pa.string(), pa.int64())), ['{"k":1}', "{}"]),
    (pa.array([{"t": dt.datetime(2024, 1, 1), "raw": b"hi"}],
              pa.struct([("t", pa.timestamp("ms")), ("raw", pa.binary())])), ['{"t":1704067200000,"raw":"aGk="}']),
    (pa.nulls(2), [None, None]),
    # segment columns, as the druid input source reads them: a json dimension's text, an ARRAY<STRING>'s list
    (pa.array([{"json": '{"a":1}', '$."a"': 1}, None], pa.struct([("json", pa.string()), ('$."a"', pa.int64())])),
     ['{"a":1}', None]),
    (pa.array([{"array": ["z", "y"]}, {"array": []}, None], pa.struct([("array", pa.list_(pa.string()))])),
     ['["z","y"]', "[]", None]),
])
def test_stringify(array, expected):
    text = stringify(array)
    assert text.type == pa.string()
    assert text.to_pylist() == expected


def test_stringify_binary_as_string_and_chunks_and_slices():
    assert stringify(pa.array([b"caf\xc3\xa9", None]), binary_as_string=True).to_pylist() == ["café", None]
    assert stringify(pa.chunked_array([[1], [2]])).to_pylist() == ["1", "2"]
    assert stringify(pa.array([[1], None, [2, 3]]).slice(1)).to_pylist() == [None, "[2,3]"]
    assert stringify(pa.array([0, -1_500_000], pa.timestamp("ns")).slice(1)).to_pylist() == ["-2"]


# ---------------------------------------------------------------- lines

def test_lines_are_druids_fast_line_iterator_lines():
    assert split_lines(b"a\nb\r\n\nc").to_pylist() == [b"a", b"b", b"", b"c"]
    assert split_lines(b"a\n").to_pylist() == [b"a"]
    assert split_lines(b"x\r").to_pylist() == [b"x\r"]  # a \r only goes with the \n after it
    reader = LineReader(io.BytesIO(b"h1\r\nh2\nx\ny\nzzzzzzzz\nw"), block_bytes=3)
    assert (reader.next_line(), reader.next_line()) == (b"h1", b"h2")
    assert [(b.data, b.first_line, b.line_count) for b in reader.blocks()] == [
        (b"x\ny\n", 3, 2), (b"zzzzzzzz\n", 5, 1), (b"w", 6, 1)]


# ---------------------------------------------------------------- json

def test_json_lines_keep_bytes_skip_blank_lines_and_count_every_line():
    data = b'{"a":1}\n\n   \t\n{"b":2}\r\n{"bad"\n{"c":3}'
    assert read({"type": "json"}, ["a"], data, "s3://b/x.json") == [
        {"__locator": "s3://b/x.json:1", "value": b'{"a":1}'},
        {"__locator": "s3://b/x.json:4", "value": b'{"b":2}'},
        {"__locator": "s3://b/x.json:5", "value": b'{"bad"'},
        {"__locator": "s3://b/x.json:6", "value": b'{"c":3}'},
    ]
    assert read({"type": "json"}, [], b"") == []


def test_json_batches_hold_at_most_64k_rows_and_messages_keep_their_locators():
    data = b'{"n":1}\n' * 70_000
    parser = record_parser(fmt({"type": "json"}), [])
    batches = list(parser.parse_stream(io.BytesIO(data), "f"))
    assert [b.num_rows for b in batches] == [65_536, 70_000 - 65_536]
    assert batches[1].column("__locator")[0].as_py() == "f:65537"
    batch = parser.parse_values([b'{"a":1}', None], ["p=0 o=5", "p=0 o=6"])
    assert batch.schema == parser.schema
    assert batch.to_pylist() == [{"__locator": "p=0 o=5", "value": b'{"a":1}'}, {"__locator": "p=0 o=6", "value": None}]


# ---------------------------------------------------------------- csv / tsv

CSV = {"type": "csv", "columns": ["ts", "page", "added"]}


def test_csv_values_nulls_and_rows_of_other_lengths():
    data = (b'2024-01-01,Main,1\n'
            b'2024-01-02,,""\n'             # unquoted empty is null, quoted empty is ""
            b'2024-01-03,"a, ""quoted"" b",3\n'
            b'2024-01-04,short\n'           # fewer values: the rest null
            b'2024-01-05,long,5,extra\n'    # more values: the extra dropped
            b'\n'                           # a blank line is a row of nulls
            b'2024-01-06,"open,6\n'         # a quote left open ends the line unparseable
            b'2024-01-07,crlf,7\r\n')
    assert read(CSV, ["ts", "page", "added", "country"], data, "w.csv") == [
        row("w.csv:1", ts="2024-01-01", page="Main", added="1", country=None),
        row("w.csv:2", ts="2024-01-02", page=None, added="", country=None),
        row("w.csv:3", ts="2024-01-03", page='a, "quoted" b', added="3", country=None),
        row("w.csv:4", ts="2024-01-04", page="short", added=None, country=None),
        row("w.csv:5", ts="2024-01-05", page="long", added="5", country=None),
        row("w.csv:6", ts=None, page=None, added=None, country=None),
        row("w.csv:7", 'Unable to parse row [2024-01-06,"open,6]', ts=None, page=None, added=None, country=None),
        row("w.csv:8", ts="2024-01-07", page="crlf", added="7", country=None),
    ]


def test_csv_a_quoted_line_break_splits_the_value_as_druid_reads_line_by_line():
    data = b'1,"two\nlines",x\n2,b,c\n'
    assert read(CSV, ["ts", "page"], data) == [
        row("f:1", 'Unable to parse row [1,"two]', ts=None, page=None),
        row("f:2", ts='lines"', page="x"),  # a quote inside an unquoted value is a plain character
        row("f:3", ts="2", page="b"),
    ]


def test_csv_header_is_read_after_skipped_rows_and_names_columns():
    spec = {"type": "csv", "findColumnsFromHeader": True, "skipHeaderRows": 2}
    data = b"# export\n# v2\nts,,page\n2024,x,Main\n"
    assert read(spec, ["ts", "column_2", "page"], data, "h.csv") == [
        row("h.csv:4", ts="2024", column_2="x", page="Main")]
    # the deprecated hasHeaderRow is the same; the header wins over columns
    spec = {"type": "csv", "hasHeaderRow": True, "columns": ["a", "b"]}
    assert read(spec, ["a", "y"], b"x,y\n1,2\n") == [row("f:2", a=None, y="2")]
    assert read({"type": "csv", "findColumnsFromHeader": True}, ["a"], b"") == []


def test_csv_duplicate_header_columns_make_the_file_unreadable():
    with pytest.raises(FormatError, match=r"dup\.csv: Duplicate column entries found : \[a\]"):
        read({"type": "csv", "findColumnsFromHeader": True}, ["a"], b"a,b,a\n1,2,3\n", "dup.csv")


def test_tsv_ignores_quotes_and_every_empty_value_is_null():
    spec = {"type": "tsv", "columns": ["a", "b", "c"]}
    data = b'1\t"x\ty"\t\n\t\t3\n'
    assert read(spec, ["a", "b", "c"], data) == [
        row("f:1", a="1", b='"x', c='y"'),
        row("f:2", a=None, b=None, c="3"),
    ]


def test_tsv_with_a_multi_character_delimiter():
    spec = {"type": "tsv", "delimiter": "||", "columns": ["a", "b"]}
    assert read(spec, ["a", "b"], b"1||2\n||x|y\n") == [row("f:1", a="1", b="2"), row("f:2", a=None, b="x|y")]


def test_a_value_holding_the_list_delimiter_is_several_values_as_a_json_list():
    """Druid's listDelimiter (Ctrl-A unless given) splits a value into a multi-value: the rows' parse reads it as a
    JSON list, as it reads a JSON record's array."""
    assert read(CSV, ["ts", "page", "added"], b"2024,a\x01b\x01a,1\n2024,plain,2\n", "f") == [
        row("f:1", ts="2024", page='["a", "b", "a"]', added="1"), row("f:2", ts="2024", page="plain", added="2")]
    tsv = {"type": "tsv", "columns": ["ts", "page"], "listDelimiter": "|"}
    assert record_parser(fmt(tsv), ["ts", "page"]).parse_values([b"2024\tx|y", b"2024\tz"], ["o=1", "o=2"]
                                                                ).to_pylist() == [
        row("o=1", ts="2024", page='["x", "y"]'), row("o=2", ts="2024", page="z")]
    regex = {"type": "regex", "pattern": "(\\d+) (.*)", "columns": ["ts", "page"], "listDelimiter": ","}
    assert read(regex, ["ts", "page"], b"2024 a,b\n", "r") == [row("r:1", ts="2024", page='["a", "b"]')]


def test_csv_kafka_messages_are_one_row_each():
    parser = record_parser(fmt(CSV), ["ts", "page"])
    batch = parser.parse_values([b"2024,Main,1\n", None, b'2024,"open'], ["o=1", "o=2", "o=3"])
    assert batch.schema == parser.schema
    assert batch.to_pylist() == [
        row("o=1", ts="2024", page="Main"),
        row("o=2", "the message has no value", ts=None, page=None),
        row("o=3", 'Unable to parse row [2024,"open]', ts=None, page=None),
    ]
    with pytest.raises(ValueError, match="need columns"):
        record_parser(fmt({"type": "csv", "findColumnsFromHeader": True}), ["a"]).parse_values([b"1"], ["o=1"])


def test_csv_large_file_keeps_line_numbers_and_odd_rows_in_place():
    lines = [f"2024,p{i},{i}" if i % 1000 else f"2024,p{i}" for i in range(1, 70_001)]
    rows = read(CSV, ["page", "added"], ("\n".join(lines) + "\n").encode())
    assert len(rows) == 70_000
    assert rows[998] == row("f:999", page="p999", added="999")
    assert rows[999] == row("f:1000", page="p1000", added=None)
    assert rows[69_999] == row("f:70000", page="p70000", added=None)


# ---------------------------------------------------------------- regex

def test_regex_matches_whole_lines_with_druids_default_column_names():
    spec = {"type": "regex", "pattern": r"(\d+) (\w+)(?: (\w+))?"}
    data = b"12 GET\n13 PUT extra\n13 PUT extra trailing\n\n"
    assert read(spec, ["column_1", "column_3"], data, "a.log") == [
        row("a.log:1", column_1="12", column_3=None),
        row("a.log:2", column_1="13", column_3="extra"),
        row("a.log:3", "Unable to parse row [13 PUT extra trailing]", column_1=None, column_3=None),
        row("a.log:4", "Unable to parse row []", column_1=None, column_3=None),
    ]


def test_regex_columns_name_the_groups_and_messages_parse_alike():
    parser = record_parser(fmt({"type": "regex", "pattern": r"(\w+)=(\w*)", "columns": ["k", "v"]}), ["v", "k"])
    assert parser.parse_values([b"a=1", b"a=", b"nope"], ["1", "2", "3"]).to_pylist() == [
        row("1", v="1", k="a"), row("2", v="", k="a"), row("3", "Unable to parse row [nope]", v=None, k=None)]


# ---------------------------------------------------------------- parquet / orc / avro

NESTED = pa.table({
    "ts": pa.array([1_700_000_000_123_000, None], pa.timestamp("us", "UTC")),
    "geo": pa.array([{"city": "Oslo", "pts": [1.5, 2.0]}, {"city": None, "pts": []}]),
    "tags": pa.array([{"k": "v"}, None], pa.map_(pa.string(), pa.string())),
    "n": pa.array([7, 8], pa.int64()),
    "raw": pa.array([b"ab", None]),
})

FLATTEN = {"fields": [{"type": "path", "name": "city", "expr": "$.geo.city"},
                      {"type": "jq", "name": "pt1", "expr": ".geo.pts[1]"},
                      {"type": "tree", "name": "tagk", "nodes": ["tags", "k"]},
                      {"type": "root", "name": "n"}]}


@pytest.mark.parametrize("kind", ["parquet", "orc"])
def test_columnar_files_flatten_and_stringify(kind):
    buf = io.BytesIO()
    (pq.write_table if kind == "parquet" else pa_orc.write_table)(NESTED, buf)
    spec = {"type": kind, "flattenSpec": FLATTEN}
    fields = ["ts", "city", "pt1", "tagk", "n", "raw", "geo", "absent"]
    assert read(spec, fields, buf.getvalue(), f"x.{kind}") == [
        row(f"x.{kind}:row 1", ts="1700000000123", city="Oslo", pt1="2.0", tagk="v", n="7",
            raw=base64.b64encode(b"ab").decode(), geo='{"city":"Oslo","pts":[1.5,2.0]}', absent=None),
        row(f"x.{kind}:row 2", ts=None, city=None, pt1=None, tagk=None, n="8", raw=None,
            geo='{"city":null,"pts":[]}', absent=None),
    ]


def test_parquet_without_field_discovery_reads_only_the_flatten_spec_and_binary_as_string():
    buf = io.BytesIO()
    pq.write_table(NESTED, buf)
    spec = {"type": "parquet", "binaryAsString": True, "flattenSpec": {"useFieldDiscovery": False, "fields": [
        {"type": "root", "name": "raw"}]}}
    assert read(spec, ["raw", "n"], buf.getvalue()) == [row("f:row 1", raw="ab", n=None), row("f:row 2", raw=None, n=None)]


@pytest.mark.parametrize("kind", ["parquet", "orc", "avro_ocf"])
def test_corrupt_files_raise_format_error_and_messages_are_refused(kind):
    parser = record_parser(fmt({"type": kind}), ["a"])
    assert parser.needs_seekable
    with pytest.raises(FormatError, match=r"^broken\.bin: cannot read it"):
        list(parser.parse_stream(io.BytesIO(b"not a file at all"), "broken.bin"))
    with pytest.raises(ValueError, match="file format"):
        parser.parse_values([b"x"], ["o=1"])


AVRO_SCHEMA = {"type": "record", "name": "Edit", "fields": [
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "user", "type": {"type": "record", "name": "User", "fields": [
        {"name": "id", "type": "long"}, {"name": "tags", "type": {"type": "array", "items": "string"}}]}},
    {"name": "scores", "type": {"type": "map", "values": "double"}},
    {"name": "either", "type": ["null", "int", "string"]},
    {"name": "ratio", "type": "float"},
]}


def avro_file(schema: dict, records: list[dict]) -> bytes:
    buf = io.BytesIO()
    fastavro.writer(buf, schema, records)
    return buf.getvalue()


def test_avro_ocf_flattens_nested_records():
    data = avro_file(AVRO_SCHEMA, [
        {"ts": dt.datetime(2024, 1, 1, tzinfo=dt.UTC), "user": {"id": 7, "tags": ["a", "b"]},
         "scores": {"m": 2.5}, "either": 3, "ratio": 1.1},
        {"ts": 1000, "user": {"id": 8, "tags": []}, "scores": {}, "either": "x", "ratio": 2.0},
    ])
    spec = {"type": "avro_ocf", "flattenSpec": {"fields": [
        {"type": "path", "name": "uid", "expr": "$.user.id"}, {"type": "jq", "name": "tag0", "expr": ".user.tags[0]"},
        {"type": "path", "name": "m", "expr": "$['scores']['m']"}]}}
    assert read(spec, ["ts", "uid", "tag0", "m", "either", "ratio", "user"], data, "e.avro") == [
        row("e.avro:row 1", ts="1704067200000", uid="7", tag0="a", m="2.5", either="3", ratio="1.1",
            user='{"id":7,"tags":["a","b"]}'),
        row("e.avro:row 2", ts="1000", uid="8", tag0=None, m=None, either="x", ratio="2.0",
            user='{"id":8,"tags":[]}'),
    ]


def test_avro_ocf_reader_schema_overrides_the_files():
    writer = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    reader = {"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "long"}, {"name": "b", "type": "string", "default": "none"}]}
    spec = {"type": "avro_ocf", "schema": reader}
    assert read(spec, ["a", "b"], avro_file(writer, [{"a": 1}])) == [row("f:row 1", a="1", b="none")]
