"""pydruid, unchanged, against Sluice: its DB-API and SQLAlchemy dialect over Druid SQL, and its native client.

The data and the server are those of `test_native_queries` (its `cluster` fixture, one instance for this module).
"""

from __future__ import annotations

from collections import defaultdict
from urllib.parse import urlsplit

import pytest
import sqlalchemy as sa
from pydruid.client import PyDruid
from pydruid.db import connect
from pydruid.utils.aggregators import count, doublesum, longsum
from pydruid.utils.filters import Dimension
from pydruid.utils.having import Aggregation
from pydruid.utils.postaggregator import Field

from tests.integration.test_native_queries import ROWS, Cluster, cluster  # noqa: F401  (the shared fixture)


def _address(cluster: Cluster) -> tuple[str, int]:  # noqa: F811
    url = urlsplit(str(cluster.http.base_url))
    return url.hostname or "127.0.0.1", url.port or 80


def _added_by_page() -> list[tuple[str, int]]:
    totals: dict[str, int] = defaultdict(int)
    for row in ROWS:
        totals[row["page"]] += row["added"]
    return sorted(totals.items(), key=lambda kv: -kv[1])


# -------------------------------------------------------------------------------------------------------- DB-API


def test_db_api_runs_druid_sql_with_parameters(cluster: Cluster) -> None:  # noqa: F811
    host, port = _address(cluster)
    connection = connect(host=host, port=port, path="/druid/v2/sql/", scheme="http")
    cursor = connection.cursor()
    cursor.execute("SELECT page, SUM(added) AS added FROM wiki GROUP BY page ORDER BY added DESC LIMIT 3")
    assert [tuple(row) for row in cursor.fetchall()] == _added_by_page()[:3]
    assert [column[0] for column in cursor.description] == ["page", "added"]

    cursor.execute("SELECT COUNT(*) AS n FROM wiki WHERE channel = %(channel)s", {"channel": "#fr"})
    assert cursor.fetchone().n == sum(1 for r in ROWS if r["channel"] == "#fr")


# ---------------------------------------------------------------------------------------------------- SQLAlchemy


def test_sqlalchemy_dialect_queries_and_reflects(cluster: Cluster) -> None:  # noqa: F811
    host, port = _address(cluster)
    engine = sa.create_engine(f"druid://{host}:{port}/druid/v2/sql/")
    with engine.connect() as connection:
        rows = connection.execute(sa.text("SELECT channel, COUNT(*) AS n FROM wiki WHERE channel IS NOT NULL "
                                          "GROUP BY channel ORDER BY channel")).fetchall()
    counts: dict[str, int] = defaultdict(int)
    for row in ROWS:
        if row["channel"] is not None:
            counts[row["channel"]] += 1
    assert [tuple(r) for r in rows] == sorted(counts.items())

    # reflection reads INFORMATION_SCHEMA.TABLES and .COLUMNS
    inspector = sa.inspect(engine)
    assert "wiki" in inspector.get_table_names()
    columns = {c["name"]: c["type"] for c in inspector.get_columns("wiki")}
    assert set(columns) == {"__time", "channel", "page", "added", "deleted", "delta"}
    assert isinstance(columns["added"], sa.types.BigInteger)
    assert isinstance(columns["page"], sa.types.String)

    wiki = sa.Table("wiki", sa.MetaData(), autoload_with=engine)
    query = sa.select(wiki.c.page, sa.func.sum(wiki.c.added).label("added")).group_by(wiki.c.page)
    with engine.connect() as connection:
        answer = connection.execute(query.order_by(sa.desc("added")).limit(2)).fetchall()
    assert [tuple(r) for r in answer] == _added_by_page()[:2]


# -------------------------------------------------------------------------------------------------------- native


@pytest.fixture
def client(cluster: Cluster) -> PyDruid:  # noqa: F811
    host, port = _address(cluster)
    return PyDruid(f"http://{host}:{port}", "druid/v2")


def test_native_timeseries(client: PyDruid) -> None:
    query = client.timeseries(
        datasource="wiki", granularity="day", intervals="2015-09-12/2015-09-13",
        aggregations={"rows": count("rows"), "delta": doublesum("delta")},
        post_aggregations={"per_row": Field("delta") / Field("rows")},
        filter=Dimension("channel") == "#en",
    )
    en = [r for r in ROWS if r["channel"] == "#en"]
    delta = sum(r["delta"] for r in en)
    assert query.result == [{"timestamp": "2015-09-12T00:00:00.000Z",
                             "result": {"rows": len(en), "delta": delta, "per_row": delta / len(en)}}]


def test_native_topn(client: PyDruid) -> None:
    query = client.topn(datasource="wiki", granularity="all", intervals="2015-09-12/2015-09-13",
                        aggregations={"added": longsum("added")}, dimension="page", metric="added", threshold=2)
    assert query.result == [{"timestamp": "2015-09-12T00:00:00.000Z",
                             "result": [{"page": p, "added": a} for p, a in _added_by_page()[:2]]}]


def test_native_groupby(client: PyDruid) -> None:
    query = client.groupby(
        datasource="wiki", granularity="all", intervals="2015-09-12/2015-09-13", dimensions=["channel"],
        aggregations={"rows": count("rows")}, having=Aggregation("rows") > 10,
        limit_spec={"type": "default", "limit": 2, "columns": [{"dimension": "rows", "direction": "descending"}]},
    )
    counts: dict[str | None, int] = defaultdict(int)
    for row in ROWS:
        counts[row["channel"]] += 1
    top = sorted(((c, n) for c, n in counts.items() if n > 10), key=lambda cn: -cn[1])[:2]
    assert [(r["event"]["channel"], r["event"]["rows"]) for r in query.result] == top
    assert {r["version"] for r in query.result} == {"v1"}
