"""GROUP BY LOOKUP(column, …) grouped by the column first (lookup_groups.py): the answers are Druid's, computed here
from the rows; the rewrite is used where it is exact and nowhere else."""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.engine import SqlEngine
from sluice.broker.sql.translate import translate_query
from sluice.lookups.references import LookupExtractor

NAMES = {"#en": "English", "#fr": "French", "#de": "German", "#en.wiki": "English"}  # not injective
ROWS = [  # channel, page, added, deleted
    ("#en", "a", 10, 1), ("#en", "b", 5, 0), ("#fr", "a", 7, 2), ("#en.wiki", "c", 1, 1), ("#de", "d", 3, 0),
    ("#it", "e", 4, 4), (None, "f", 2, 0), ("#fr", "g", None, 3), ("#it", "h", 6, 1),
]


@pytest.fixture(scope="module")
def wiki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    path = tmp_path_factory.mktemp("lookup-groups") / "wiki.parquet"
    channel, page, added, deleted = zip(*ROWS)
    pq.write_table(pa.table({"channel": pa.array(channel, pa.string()), "page": pa.array(page, pa.string()),
                             "added": pa.array(added, pa.int64()), "deleted": pa.array(deleted, pa.int64())}), path)
    return {"wiki": [str(path)]}


@pytest.fixture(scope="module")
def engine() -> SqlEngine:
    names = LookupExtractor(NAMES)
    return SqlEngine(threads=1, lookups=lambda name: names if name == "names" else None)


def grouped(key, value) -> dict:  # noqa: ANN001
    groups: dict = defaultdict(list)
    for row in ROWS:
        groups[key(*row)].append(value(*row))
    return groups


def rewritten(sql: str) -> bool:
    return "__sluice_grouped" in translate_query(sql, ["wiki"]).sql


def test_sums_counts_minima_and_maxima_per_looked_up_name(engine: SqlEngine, wiki: dict) -> None:
    sql = ("SELECT LOOKUP(channel, 'names') AS lang, SUM(added) AS added, COUNT(*) AS n, COUNT(added) AS with_added, "
           "MIN(deleted), MAX(page) FROM wiki GROUP BY 1 ORDER BY n DESC, lang")
    assert rewritten(sql)
    result = engine.execute(sql, wiki)
    assert result.columns == ["lang", "added", "n", "with_added", "EXPR$4", "EXPR$5"]
    groups = grouped(lambda c, *_: NAMES.get(c), lambda *row: row)
    expected = [[lang, sum(r[2] for r in rows if r[2] is not None), len(rows), sum(r[2] is not None for r in rows),
                 min(r[3] for r in rows), max(r[1] for r in rows)] for lang, rows in groups.items()]
    expected.sort(key=lambda row: (-row[2], row[0] is not None, row[0]))
    assert [list(row) for row in result.rows] == expected
    assert [row[0] for row in result.rows] == [None, "English", "French", "German"]  # #it and null have no name


def test_the_replacement_for_a_missing_key_the_grouping_column_beside_it_having_and_limit(
        engine: SqlEngine, wiki: dict) -> None:
    sql = ("SELECT channel, LOOKUP(channel, 'names', 'other') AS lang, SUM(deleted) AS d FROM wiki "
           "WHERE page <> 'h' GROUP BY channel, 2 HAVING COUNT(*) > 1 ORDER BY d DESC LIMIT 2")
    assert rewritten(sql)
    rows = [r for r in ROWS if r[1] != "h"]
    groups: dict = defaultdict(list)
    for row in rows:
        groups[row[0]].append(row[3])
    expected = sorted(([c, NAMES.get(c, "other") if c is not None else "other", sum(d)]
                       for c, d in groups.items() if len(d) > 1), key=lambda row: -row[2])[:2]
    assert expected == [["#fr", "French", 5], ["#en", "English", 1]]
    assert [list(row) for row in engine.execute(sql, wiki).rows] == expected


@pytest.mark.parametrize("sql", [
    "SELECT LOOKUP(channel, 'names') AS lang, COUNT(DISTINCT page) FROM wiki GROUP BY 1",  # not from partials
    "SELECT LOOKUP(channel, 'names') AS lang, AVG(added) FROM wiki GROUP BY 1",
    "SELECT LOOKUP(channel, 'names') AS lang, SUM(added) FILTER (WHERE page = 'a') FROM wiki GROUP BY 1",
    "SELECT LOOKUP(channel, 'names') AS lang, APPROX_COUNT_DISTINCT(page) FROM wiki GROUP BY 1",
    "SELECT LOOKUP(channel, 'names') AS lang, SUM(added) FROM wiki GROUP BY lang",  # a name or a column?
    "SELECT LOOKUP(page, 'names') AS p, SUM(added) OVER () FROM wiki GROUP BY 1, added",
    "SELECT LOOKUP(channel, 'names') AS lang, page, SUM(added) FROM wiki GROUP BY 1, page HAVING lang <> 'x'",
    "SELECT channel, SUM(added) FROM wiki GROUP BY 1",  # no lookup: nothing to save
    "SELECT LOOKUP(channel, 'names'), channel IN (SELECT channel FROM wiki WHERE added > 5) FROM wiki "
    "GROUP BY 1, channel",
    "SELECT TIME_FLOOR(__time, 'PT1H'), LOOKUP(channel, 'names'), COUNT(*) FROM wiki GROUP BY 1, 2",
])
def test_a_query_the_rewrite_would_change_or_not_speed_up_is_left_as_it_is(sql: str) -> None:
    assert not rewritten(sql)


def test_a_lookup_group_inside_a_subquery_is_rewritten_too(engine: SqlEngine, wiki: dict) -> None:
    sql = ("SELECT COUNT(*) AS langs, SUM(n) AS n FROM (SELECT LOOKUP(channel, 'names', 'other') AS lang, "
           "COUNT(*) AS n FROM wiki GROUP BY 1) WHERE lang <> 'other'")
    assert rewritten(sql)
    assert [list(row) for row in engine.execute(sql, wiki).rows] == [[3, 6]]
