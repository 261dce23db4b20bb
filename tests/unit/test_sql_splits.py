"""The sql input source's pure rules: connectURI in -> SQLAlchemy URL out, a column's MIN and MAX in -> range
boundaries out, a query in -> accepted or refused."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from sluice.connectors.sources.sql import SqlSplit, check_select, cut_points, sqlalchemy_url


@pytest.mark.parametrize(("connect_uri", "url"), [
    ("jdbc:postgresql://db.example:5432/druid?sslmode=require", "postgresql+psycopg://db.example:5432/druid?sslmode=require"),
    ("jdbc:postgresql://db.example/druid", "postgresql+psycopg://db.example/druid"),
    ("jdbc:postgresql://h:5433/d?user=ann&password=p%40ss", "postgresql+psycopg://ann:p%40ss@h:5433/d"),
    ("jdbc:postgresql://h/d?ssl=true", "postgresql+psycopg://h/d?sslmode=verify-full"),
    ("jdbc:postgresql://h/d?connectTimeout=5&ApplicationName=sluice",
     "postgresql+psycopg://h/d?application_name=sluice&connect_timeout=5"),
    ("jdbc:postgresql://h/d?currentSchema=wiki", "postgresql+psycopg://h/d?options=-csearch_path%3Dwiki"),
    ("jdbc:postgresql:druid", "postgresql+psycopg://localhost/druid"),
    ("jdbc:postgresql://[::1]:5432/d", "postgresql+psycopg://[::1]:5432/d"),
    ("jdbc:mysql://db.example:3306/druid", "mysql+pymysql://db.example:3306/druid"),
    ("jdbc:mysql://h/d?user=u&connectTimeout=1500&useSSL=false&characterEncoding=UTF-8",
     "mysql+pymysql://u@h/d?charset=utf8mb4&connect_timeout=2"),
    ("jdbc:mariadb://h/d", "mysql+pymysql://h/d"),
    ("jdbc:sqlite:/var/lib/x.db", "sqlite:////var/lib/x.db"),
    ("jdbc:sqlite:///var/lib/x.db", "sqlite:////var/lib/x.db"),
    ("jdbc:sqlite:data/x.db", "sqlite:///data/x.db"),
    ("jdbc:sqlite::memory:", "sqlite://"),
    ("postgresql://u@h:5432/d", "postgresql+psycopg://u@h:5432/d"),
    ("postgresql+psycopg://u@h:5432/d", "postgresql+psycopg://u@h:5432/d"),
    ("mysql://h/d", "mysql+pymysql://h/d"),
    ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
])
def test_connect_uri_to_sqlalchemy_url(connect_uri: str, url: str) -> None:
    assert sqlalchemy_url(connect_uri).render_as_string(hide_password=False) == url


@pytest.mark.parametrize(("connect_uri", "database_type", "message"), [
    ("jdbc:postgresql://h/d?loginTimeout=3", None, "property 'loginTimeout' is not supported for PostgreSQL"),
    ("jdbc:postgresql://h1:5432,h2:5432/d", None, "several hosts are not supported"),
    ("jdbc:postgresql://h:port/d", None, "the port is not a number"),
    ("jdbc:mysql://h/d?useSSL=true", None, "to read MySQL over TLS"),
    ("jdbc:mysql://h/d?allowLoadLocalInfile=true", None, "'allowLoadLocalInfile' is not supported for MySQL"),
    ("jdbc:sqlite:/x.db?journal_mode=wal", None, "properties are not supported for SQLite"),
    ("jdbc:postgresql://h/d", "mysql", ("database.type is 'mysql' but connectURI postgresql+psycopg://h/d is "
                                        "a postgresql database")),
    ("not a uri", None, "neither a JDBC URI"),
])
def test_connect_uri_refused(connect_uri: str, database_type: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("+", r"\+")):
        sqlalchemy_url(connect_uri, database_type)


def test_a_password_in_the_uri_is_hidden_from_the_type_mismatch_error() -> None:
    with pytest.raises(ValueError) as raised:
        sqlalchemy_url("jdbc:postgresql://h/d?user=u&password=secret", "sqlite")
    assert "secret" not in str(raised.value)


# -- range cutting: (MIN, MAX, numSplits) -> inner boundaries ------------------------------------------------

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize(("low", "high", "num_splits", "points"), [
    (0, 99, 4, [25, 50, 75]),           # 25 values each
    (1, 100, 4, [26, 51, 76]),
    (-10, 10, 2, [0]),
    (5, 5, 4, []),                      # one value: one range
    (1, 3, 10, [2, 3]),                 # fewer distinct values than splits: no empty duplicate ranges
    (0.0, 1.0, 4, [0.25, 0.5, 0.75]),
    (0, 1.0, 2, [0.5]),                 # SQLite: a REAL column holding integers too
    (Decimal("0.0"), Decimal("1.0"), 2, [Decimal("0.5")]),
    (T0, T0 + timedelta(days=4), 4, [T0 + timedelta(days=d) for d in (1, 2, 3)]),
    (date(2024, 1, 1), date(2024, 1, 3), 2, [date(2024, 1, 2)]),
    ("2024-01-01 00:00:00", "2024-01-03 00:00:00", 2, ["2024-01-02 00:00:00"]),
    ("2024-01-01T00:00:00.500", "2024-01-01T00:00:01.500", 2, ["2024-01-01T00:00:01"]),
])
def test_cut_points(low: object, high: object, num_splits: int, points: list[object]) -> None:
    assert cut_points(low, high, num_splits) == points


@pytest.mark.parametrize(("low", "high"), [("a", "z"), (b"a", b"z"), (True, True), (1, "2")])
def test_cut_points_refuses_what_has_no_width(low: object, high: object) -> None:
    with pytest.raises(TypeError, match="integer, float or time column"):
        cut_points(low, high, 3)


def test_every_integer_falls_in_exactly_one_range() -> None:
    """The ranges are [-inf or NULL, p1), [p1, p2), ..., [pn, +inf): whatever the values, one range each."""
    for low, high, n in [(0, 1000, 7), (-5, 17, 3), (3, 4, 9), (0, 10**12, 13)]:
        edges = [None, *cut_points(low, high, n), None]
        assert len(edges) - 1 <= n
        values = list(range(low - 2, min(high, low + 2000) + 3))
        for value in values:
            holding = [i for i in range(len(edges) - 1)
                       if (edges[i] is None or value >= edges[i]) and (edges[i + 1] is None or value < edges[i + 1])]
            assert len(holding) == 1


def test_split_ids() -> None:
    assert SqlSplit(1, "SELECT 1").split_id == "sqls[1]"
    assert SqlSplit(0, "SELECT 1", "id", 5, 10, 1, 4).split_id == "sqls[0] range 2/4"


# -- only SELECT ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sql", [
    "SELECT * FROM t", "select a from t where b = 'x;y';", "WITH a AS (SELECT 1 AS x) SELECT x FROM a",
    "SELECT 1 UNION ALL SELECT 2", "(SELECT 1)", "-- the day's edits\nSELECT * FROM edits",
])
def test_select_queries_are_accepted(sql: str) -> None:
    assert check_select(sql, 0, "postgresql") == sql.strip().rstrip(";")


@pytest.mark.parametrize(("sql", "message"), [
    ("DELETE FROM t", r"sqls\[2\] must be a SELECT query .* found DELETE"),
    ("INSERT INTO t VALUES (1)", "found INSERT"),
    ("UPDATE t SET a = 1", "found UPDATE"),
    ("DROP TABLE t", "found DROP"),
    ("SELECT * INTO copy FROM t", "found SELECT INTO"),
    ("WITH gone AS (DELETE FROM t RETURNING *) SELECT * FROM gone", "found DELETE"),
    ("SELECT 1; DELETE FROM t", r"sqls\[2\] holds 2 statements"),
    ("VALUES (1)", "found VALUES"),
])
def test_other_statements_are_refused_naming_their_index(sql: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_select(sql, 2, "postgresql")


def test_a_missing_database_driver_is_named_at_construction() -> None:
    import importlib.util

    from sluice.connectors.sources.sql import SqlSource
    from sluice.spec.input_source import SqlInputSource

    if importlib.util.find_spec("pymysql") is not None:
        pytest.skip("PyMySQL is installed here")
    spec = SqlInputSource(type="sql", sqls=["SELECT 1"],
                          database={"type": "mysql", "connector_config": {"connect_uri": "jdbc:mysql://h:3306/d"}})
    with pytest.raises(ValueError, match=r"needs the mysql\+pymysql driver, which is not installed .* pip install "
                                         r"pymysql"):
        SqlSource(spec, ["a"])
