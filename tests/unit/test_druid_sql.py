"""Druid SQL in → rows out, over two small segment files written here; rejected queries → status and message out."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.engine import SqlEngine
from sluice.broker.sql.translate import SqlError, translate

# (time, page, channel, user, added); the 01:00 and later rows are in a second segment that also has `deleted`.
EDITS = [
    ("2015-09-12T00:05:00.000", "Cat", "#en", "alice", 10),
    ("2015-09-12T00:47:53.259", "Dog", "#en", "bob", 20),
    ("2015-09-12T00:59:59.999", "Cat", "#fr", "carol", 5),
    ("2015-09-12T01:10:00.000", "Cat", "#en", "alice", 7),
    ("2015-09-12T01:20:00.000", "Emu", "#de", None, 3),
    ("2015-09-13T12:00:00.000", "Dog", "#fr", "bob", 1),
]
DELETED = {"2015-09-12T01:10:00.000": 0.5, "2015-09-12T01:20:00.000": 4.0, "2015-09-13T12:00:00.000": 1.0}
WIKI = "wikipedia-kafka"


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _write_segment(path: str, edits: list[tuple], with_deleted: bool) -> str:
    """A segment file as Spark writes it: `__time` a UTC-adjusted timestamp, then dimensions and metrics."""
    columns = {
        "__time": pa.array([_time(e[0]).replace(tzinfo=UTC) for e in edits], pa.timestamp("us", tz="UTC")),
        "page": [e[1] for e in edits],
        "channel": [e[2] for e in edits],
        "user": [e[3] for e in edits],
        "added": pa.array([e[4] for e in edits], pa.int64()),
    }
    if with_deleted:
        columns["deleted"] = pa.array([DELETED[e[0]] for e in edits], pa.float64())
    pq.write_table(pa.table(columns), path)
    return path


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    folder = tmp_path_factory.mktemp("segments")
    first = _write_segment(str(folder / "hour0.parquet"), EDITS[:3], with_deleted=False)
    rest = _write_segment(str(folder / "rest.parquet"), EDITS[3:], with_deleted=True)
    return {WIKI: [first, rest], "wiki": [rest], "not-yet": []}


@pytest.fixture(scope="module")
def engine() -> SqlEngine:
    return SqlEngine(threads=1)


@pytest.fixture
def query(engine: SqlEngine, tables: dict[str, list[str]]):
    """Druid SQL → list of row tuples."""

    def run(sql: str, parameters: list[dict] = (), context: dict | None = None) -> list[tuple]:
        return engine.execute(sql, tables, parameters, context).rows

    return run


def _rejected(run, sql: str, *args) -> SqlError:
    with pytest.raises(SqlError) as caught:
        run(sql, *args)
    return caught.value


# ------------------------------------------------------------------------------------------------ reading segments


def test_select_star_unions_segment_columns_by_name(engine: SqlEngine, tables: dict) -> None:
    result = engine.execute(f'SELECT * FROM "{WIKI}" ORDER BY __time', tables)
    assert result.columns == ["__time", "page", "channel", "user", "added", "deleted"]
    assert result.druid_types == ["LONG", "STRING", "STRING", "STRING", "LONG", "DOUBLE"]
    assert result.sql_types == ["TIMESTAMP", "VARCHAR", "VARCHAR", "VARCHAR", "BIGINT", "DOUBLE"]
    assert result.rows == [(_time(e[0]), *e[1:], DELETED.get(e[0])) for e in EDITS]


def test_druid_schema_prefix_names_the_same_data_source(query) -> None:
    assert query(f'SELECT COUNT(*) FROM druid."{WIKI}"') == [(len(EDITS),)]


def test_counts_per_hour_with_floor_to_hour(query) -> None:
    per_hour = Counter(_time(e[0]).replace(minute=0, second=0, microsecond=0) for e in EDITS)
    rows = query(f'SELECT FLOOR(__time TO HOUR) AS h, COUNT(*) AS n FROM "{WIKI}" GROUP BY 1 ORDER BY 1')
    assert rows == sorted(per_hour.items())


def test_aggregates(query) -> None:
    added = [e[4] for e in EDITS]
    rows = query(f'SELECT SUM(added), MIN(added), MAX(added), COUNT(*), AVG(added), SUM(deleted) FROM "{WIKI}"')
    assert rows == [(sum(added), min(added), max(added), len(EDITS), sum(added) / len(added), sum(DELETED.values()))]
    assert isinstance(rows[0][0], int)


def test_distinct_counts(query) -> None:
    users = {e[3] for e in EDITS if e[3]}
    assert query(f'SELECT COUNT(DISTINCT "user"), APPROX_COUNT_DISTINCT("user") FROM "{WIKI}"') == [
        (len(users), len(users))
    ]


def test_group_by_alias_order_by_limit_offset(query) -> None:
    per_page = Counter(e[1] for e in EDITS)
    ranked = sorted(per_page.items(), key=lambda kv: (-kv[1], kv[0]))
    sql = f'SELECT page AS p, COUNT(*) AS n FROM "{WIKI}" GROUP BY p ORDER BY n DESC, p LIMIT 2 OFFSET 1'
    assert query(sql) == ranked[1:3]


def test_where_on_dimensions_and_time(query) -> None:
    sql = f"""SELECT page FROM "{WIKI}"
              WHERE channel = '#en'
                AND __time BETWEEN TIMESTAMP '2015-09-12 00:30:00' AND TIMESTAMP '2015-09-12 01:10:00'
              ORDER BY __time"""
    assert query(sql) == [("Dog",), ("Cat",)]
    assert query(f"SELECT COUNT(*) FROM \"{WIKI}\" WHERE __time >= TIMESTAMP '2015-09-13 00:00:00'") == [(1,)]


def test_current_timestamp_minus_interval(query) -> None:
    assert query(f"SELECT COUNT(*) FROM \"{WIKI}\" WHERE __time >= CURRENT_TIMESTAMP - INTERVAL '1' DAY") == [(0,)]
    (now,) = query("SELECT CURRENT_TIMESTAMP")[0]
    assert abs(now - datetime.now(UTC).replace(tzinfo=None)) < timedelta(minutes=1)


def test_subquery_union_all_and_cte(query) -> None:
    sql = f"""WITH en AS (SELECT page FROM "{WIKI}" WHERE channel = '#en')
              SELECT page FROM en WHERE page IN (SELECT page FROM wiki)
              UNION ALL SELECT 'none' ORDER BY 1"""
    assert query(sql) == [("Cat",), ("Cat",), ("Dog",), ("none",)]


def test_case_coalesce_nullif(query) -> None:
    sql = f"""SELECT CASE WHEN added >= 10 THEN 'big' ELSE 'small' END, COALESCE("user", 'anon'), NULLIF(page, 'Cat')
              FROM "{WIKI}" WHERE __time = TIMESTAMP '2015-09-12 01:20:00'"""
    assert query(sql) == [("small", "anon", "Emu")]


def test_integer_division_like_druid(query) -> None:
    assert query("SELECT 5 / 2, -7 / 2, 5.0 / 2") == [(2, -3, 2.5)]
    added = [e[4] for e in EDITS]
    assert query(f'SELECT SUM(added) / COUNT(*) FROM "{WIKI}"') == [(sum(added) // len(added),)]


def test_parameters_are_bound(query) -> None:
    sql = f'SELECT COUNT(*) FROM "{WIKI}" WHERE page = ? AND __time >= ? AND added > ?'
    parameters = [
        {"type": "VARCHAR", "value": "Cat"},
        {"type": "TIMESTAMP", "value": "2015-09-12 00:30:00"},
        {"type": "BIGINT", "value": 6},
    ]
    assert query(sql, parameters) == [(1,)]


def test_parameter_count_must_match(query) -> None:
    error = _rejected(query, f'SELECT COUNT(*) FROM "{WIKI}" WHERE page = ?', [])
    assert error.status == 400
    assert error.error_message == "The query has 1 parameter placeholders but 0 parameters were given"


def test_parameter_of_the_wrong_type(query) -> None:
    error = _rejected(query, "SELECT ?", [{"type": "BIGINT", "value": "many"}])
    assert (error.status, error.error_message) == (400, "Parameter at position [0] is not a valid BIGINT: 'many'")


# ---------------------------------------------------------------------------------------------------- output names


def test_output_names_follow_calcite(engine: SqlEngine, tables: dict) -> None:
    sql = f'SELECT page, "{WIKI}".channel, COUNT(*), SUM(added) AS total, UPPER(page) FROM "{WIKI}" GROUP BY 1, 2'
    assert engine.execute(sql, tables).columns == ["page", "channel", "EXPR$2", "total", "EXPR$4"]


def test_repeated_column_names_are_made_unique(engine: SqlEngine, tables: dict) -> None:
    assert engine.execute("SELECT page, page FROM wiki", tables).columns == ["page", "page0"]


# ------------------------------------------------------------------------------------------------- time functions

AT = "TIMESTAMP '2015-09-12 00:47:53.259'"


@pytest.mark.parametrize(
    ("period", "floor"),
    [
        ("PT1M", "2015-09-12T00:47:00"),
        ("PT5M", "2015-09-12T00:45:00"),
        ("PT15M", "2015-09-12T00:45:00"),
        ("PT1H", "2015-09-12T00:00:00"),
        ("P1D", "2015-09-12T00:00:00"),
        ("P1W", "2015-09-07T00:00:00"),  # Monday
        ("P1M", "2015-09-01T00:00:00"),
        ("P3M", "2015-07-01T00:00:00"),
        ("P1Y", "2015-01-01T00:00:00"),
    ],
)
def test_time_floor(query, period: str, floor: str) -> None:
    assert query(f"SELECT TIME_FLOOR({AT}, '{period}')") == [(_time(floor),)]


def test_time_floor_with_origin_and_time_zone(query) -> None:
    origin = f"SELECT TIME_FLOOR({AT}, 'PT1H', TIMESTAMP '2000-01-01 00:30:00')"
    assert query(origin) == [(_time("2015-09-12T00:30:00"),)]
    # Midnight in Los Angeles (UTC-7 in September) is 07:00 UTC; 00:47 UTC is still on the 11th there.
    zoned = f"SELECT TIME_FLOOR({AT}, 'P1D', NULL, 'America/Los_Angeles')"
    assert query(zoned) == [(_time("2015-09-11T07:00:00"),)]


def test_counts_per_hour_with_time_floor(query) -> None:
    per_hour = Counter(_time(e[0]).replace(minute=0, second=0, microsecond=0) for e in EDITS)
    rows = query(f"SELECT TIME_FLOOR(__time, 'PT1H'), COUNT(*) FROM \"{WIKI}\" GROUP BY 1 ORDER BY 1")
    assert rows == sorted(per_hour.items())


def test_ceil_keeps_a_boundary_and_rounds_up_otherwise(query) -> None:
    sql = f"""SELECT CEIL({AT} TO HOUR), CEIL(TIMESTAMP '2015-09-12 01:00:00' TO HOUR),
                     TIME_CEIL({AT}, 'PT15M'), TIME_CEIL(TIMESTAMP '2015-09-12 00:45:00', 'PT15M')"""
    ceilings = ["2015-09-12T01:00", "2015-09-12T01:00", "2015-09-12T01:00", "2015-09-12T00:45"]
    assert query(sql) == [tuple(map(_time, ceilings))]


def test_time_shift(query) -> None:
    sql = f"SELECT TIME_SHIFT({AT}, 'PT1H', 2), TIME_SHIFT({AT}, 'P1M', -1)"
    assert query(sql) == [(_time("2015-09-12T02:47:53.259"), _time("2015-08-12T00:47:53.259"))]


def test_time_extract_and_extract(query) -> None:
    epoch = int(_time("2015-09-12T00:47:53.259").replace(tzinfo=UTC).timestamp())
    sql = f"""SELECT TIME_EXTRACT({AT}, 'HOUR'), TIME_EXTRACT({AT}, 'DOW'), TIME_EXTRACT({AT}, 'EPOCH'),
                     TIME_EXTRACT({AT}, 'HOUR', 'Asia/Tokyo'), EXTRACT(HOUR FROM {AT}), EXTRACT(MONTH FROM {AT})"""
    assert query(sql) == [(0, 6, epoch, 9, 0, 9)]  # 2015-09-12 is a Saturday: day 6 of Druid's Monday-first week


def test_time_format(query) -> None:
    sql = f"""SELECT TIME_FORMAT({AT}), TIME_FORMAT({AT}, 'yyyy-MM-dd HH:mm'),
                     TIME_FORMAT({AT}, 'd/M/yy h:mm a ''o''''clock'''), TIME_FORMAT({AT}, 'HH:mm', 'Asia/Tokyo')"""
    assert query(sql) == [("2015-09-12T00:47:53.259Z", "2015-09-12 00:47", "12/9/15 12:47 AM o'clock", "09:47")]


def test_time_parse(query) -> None:
    sql = """SELECT TIME_PARSE('2015-09-12T00:47:53.259Z'), TIME_PARSE('2015-09-12T02:00:00+02:00'),
                    TIME_PARSE('12/09/2015 07', 'dd/MM/yyyy HH'),
                    TIME_PARSE('12/09/2015 09', 'dd/MM/yyyy HH', 'Asia/Tokyo'),
                    TIME_PARSE('not a time')"""
    expected = ["2015-09-12T00:47:53.259", "2015-09-12T00:00", "2015-09-12T07:00", "2015-09-12T00:00"]
    assert query(sql) == [(*map(_time, expected), None)]


def test_millis_round_trip(query) -> None:
    millis = int(_time("2015-09-12T00:47:53.259").replace(tzinfo=UTC).timestamp() * 1000)
    sql = f"SELECT TIMESTAMP_TO_MILLIS({AT}), MILLIS_TO_TIMESTAMP({millis})"
    assert query(sql) == [(millis, _time("2015-09-12T00:47:53.259"))]


def test_time_function_errors(query) -> None:
    assert _rejected(query, f"SELECT TIME_FLOOR({AT}, 'hourly')").error_message == (
        "Invalid period 'hourly', expected an ISO-8601 period such as PT1H, P1D or P1M"
    )
    assert _rejected(query, f"SELECT TIME_FLOOR({AT}, page) FROM wiki").error_message == (
        "TIME_FLOOR needs the period as a string literal, got page"
    )
    assert _rejected(query, f"SELECT TIME_FLOOR({AT})").error_message == (
        "Function TIME_FLOOR takes 2 to 4 arguments, got 1"
    )
    assert _rejected(query, f"SELECT TIME_FORMAT({AT}, 'yyyy G')").error_message == (
        "Unsupported Joda pattern field 'G' in 'yyyy G'"
    )
    assert _rejected(query, f"SELECT FLOOR({AT} TO MILLENNIUM)").status == 400


# ----------------------------------------------------------------------------------------------- string functions


def test_string_functions(query) -> None:
    sql = """SELECT LOWER(page), UPPER(page), CONCAT(page, '-', channel), page || '!', SUBSTRING(page, 2, 2),
                    STRLEN(page), CHAR_LENGTH(channel), TRIM('  x  '), REPLACE(page, 'm', 'M'), CONCAT(page, "user")
             FROM wiki WHERE page LIKE 'E%'"""
    assert query(sql) == [("emu", "EMU", "Emu-#de", "Emu!", "mu", 3, 3, "x", "EMu", None)]


# -------------------------------------------------------------------------------------------------------- sandbox

REJECTED = [
    ("SELECT * FROM nope", "Object 'nope' not found (line [1], column [15])"),
    ("SELECT * FROM druid.nope", "Object 'nope' not found within 'druid' (line [1], column [21])"),
    ("SELECT * FROM \"not-yet\"", "Object 'not-yet' not found (line [1], column [15])"),
    ("SELECT * FROM INFORMATION_SCHEMA.VIEWS", "Object 'VIEWS' not found within 'INFORMATION_SCHEMA' (line [1], column ["),
    ("SELECT * FROM sys.nope", "Object 'nope' not found within 'sys' (line [1], column [19])"),
    ("SELECT * FROM main.wiki", "Object 'main' not found (line [1], column [15])"),
    ("SELECT * FROM 'a.parquet'", "A string literal is not a table, use a data source name instead of 'a.parquet'"),
    ("SELECT * FROM read_parquet('x.parquet')", "Table functions are not allowed, only data sources: READ_PARQUET("),
    ("SELECT * FROM read_csv('x.csv')", "Table functions are not allowed, only data sources: READ_CSV('x.csv')"),
    ("SELECT * FROM read_json_auto('x.json')", "Table functions are not allowed, only data sources: READ_JSON_AUTO("),
    ("SELECT * FROM read_text('/etc/passwd')", "Table functions are not allowed, only data sources: READ_TEXT("),
    ("SELECT * FROM duckdb_settings()", "Table functions are not allowed, only data sources: DUCKDB_SETTINGS()"),
    ("SELECT * FROM TABLE(EXTERN('{}', '{}', '[]'))", "Table functions are not allowed, only data sources: TABLE("),
    ("SELECT * FROM ?", "Table functions are not allowed, only data sources: ?"),
    ("SELECT * FROM wiki WHERE page IN (SELECT * FROM glob('*'))",
     "Table functions are not allowed, only data sources: GLOB('*')"),
    ("SELECT * FROM read_json('x.json')", "Table functions are not allowed, only data sources: READ_JSON("),
    ("SELECT * FROM read_parquet('https://example.com/x.parquet')",
     "Table functions are not allowed, only data sources: READ_PARQUET("),
    ("SELECT * FROM 'https://example.com/x.parquet'", "A string literal is not a table, use a data source name"),
    ("SELECT * FROM duckdb_extensions()", "Table functions are not allowed, only data sources: DUCKDB_EXTENSIONS()"),
    ("SELECT * FROM pragma_version()", "Table functions are not allowed, only data sources: PRAGMA_VERSION()"),
    ("SELECT * FROM query_table('wiki')", "Table functions are not allowed, only data sources: QUERY_TABLE("),
    *[(sql, f"Function {name} is not allowed: a query may read data sources and system tables, not files, URLs, "
            "the environment or engine settings") for sql, name in [
        ("SELECT read_text('/etc/passwd')", "READ_TEXT"),
        ("SELECT read_blob('/etc/passwd')", "READ_BLOB"),
        ("SELECT read_parquet('x.parquet')", "READ_PARQUET"),
        ("SELECT page FROM wiki WHERE page = read_csv('https://example.com/x.csv')", "READ_CSV"),
        ("SELECT glob('*')", "GLOB"),
        ("SELECT getenv('HOME')", "GETENV"),
        ("SELECT current_setting('threads')", "CURRENT_SETTING"),
        ("SELECT duckdb_secrets()", "DUCKDB_SECRETS"),
    ]],
    ("SELECT nope(1)", "No match found for function signature nope(...)"),
    *[(sql, f"Only SELECT queries are allowed, not {keyword}: a query may read data sources and system tables, "
            "nothing else") for sql, keyword in [
        ("COPY wiki TO 'out.csv'", "COPY"),
        ("COPY (SELECT 1) TO 'out.csv'", "COPY"),
        ("ATTACH 'other.db'", "ATTACH"),
        ("ATTACH DATABASE ':memory:' AS scratch", "ATTACH"),
        ("DETACH scratch", "DETACH"),
        ("EXPORT DATABASE 'dump'", "EXPORT"),
        ("IMPORT DATABASE 'dump'", "IMPORT"),
        ("INSTALL httpfs", "INSTALL"),
        ("LOAD httpfs", "LOAD"),
        ("SET threads = 64", "SET"),
        ("SET GLOBAL enable_external_access = true", "SET"),
        ("RESET threads", "RESET"),
        ("PRAGMA version", "PRAGMA"),
        ("CALL pragma_version()", "CALL"),
        ("USE main", "USE"),
        ("CHECKPOINT", "CHECKPOINT"),
        ("CREATE TABLE t AS SELECT 1", "CREATE"),
        ("INSERT INTO wiki SELECT * FROM wiki", "INSERT"),
        ("UPDATE wiki SET page = 'x'", "UPDATE"),
        ("DELETE FROM wiki", "DELETE"),
        ("DROP TABLE wiki", "DROP"),
        ("SELECT * INTO copied FROM wiki", "SELECT … INTO"),
        ("EXPLAIN PLAN FOR ATTACH 'other.db'", "ATTACH"),
        ("EXPLAIN SELECT * FROM wiki", "EXPLAIN"),
        ("EXPLAIN PLAN FOR DELETE FROM wiki", "DELETE"),
    ]],
    ("SELECT 1; SELECT 2", "Only one statement per query is allowed, got 2"),
    ("SELEC 1", "Incorrect syntax: Invalid expression / Unexpected token (line [1], column [7])"),
    ("", "The query is empty"),
    # A CTE is visible in its own query only, and to the CTEs after it.
    ("SELECT * FROM (WITH c AS (SELECT 1) SELECT * FROM c) AS x, c", "Object 'c' not found (line [1], column [60])"),
    ("WITH a AS (SELECT * FROM b), b AS (SELECT 1) SELECT * FROM a", "Object 'b' not found (line [1], column [26])"),
]


@pytest.mark.parametrize(("sql", "message"), REJECTED)
def test_sandbox_rejects(sql: str, message: str) -> None:
    with pytest.raises(SqlError) as caught:
        translate(sql, [WIKI, "wiki"])
    assert caught.value.status == 400
    assert caught.value.error_message.startswith(message)


def test_unknown_table_error_has_druids_shape() -> None:
    with pytest.raises(SqlError) as caught:
        translate("SELECT * FROM nope", ["wiki"])
    assert caught.value.to_json() == {
        "error": "druidException",
        "errorCode": "invalidInput",
        "persona": "USER",
        "category": "INVALID_INPUT",
        "errorMessage": "Object 'nope' not found (line [1], column [15])",
        "errorClass": "org.apache.druid.error.DruidException",
        "host": None,
        "context": {"sourceType": "sql", "line": "1", "column": "15", "endLine": "1", "endColumn": "18"},
    }


def test_translation_reads_only_known_tables_and_ctes() -> None:
    sql = 'WITH c AS (SELECT * FROM druid."wikipedia-kafka") SELECT FLOOR(__time TO DAY) FROM c'
    assert translate(sql, [WIKI]) == (
        'WITH c AS (SELECT * FROM "wikipedia-kafka") SELECT DATE_TRUNC(\'DAY\', __time) AS "EXPR$0" FROM c'
    )


def test_unknown_column_is_a_user_error(query) -> None:
    error = _rejected(query, "SELECT nope FROM wiki")
    assert (error.status, error.error_code) == (400, "invalidInput")
    assert '"nope" not found' in error.error_message
