"""Druid's data sources in native queries: union, inline, lookup, query and join JSON in → Druid's result rows out,
or the 400 naming the field. Two tables of wiki edits in one hourly segment each, and a map lookup of channel names.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.broker.broker import Broker
from sluice.broker.engine import SqlEngine
from sluice.broker.errors import SqlError
from sluice.broker.native.queries import NativeQueryRunner
from sluice.lookups.references import LookupReferences
from sluice.metadata.store import MetadataStore
from sluice.security.access import Forbidden
from sluice.security.resources import Action, Resource
from sluice.segment.deep_storage import LocalDeepStorage
from sluice.segment.segment import DataSegment, Interval, SegmentId, numbered_shard_spec

DAY = datetime(2024, 1, 1, tzinfo=UTC)
INTERVALS = ["2024-01-01/2024-01-02"]
ETERNITY = ["-146136543-09-08T08:23:32.096Z/146140482-04-24T15:36:27.903Z"]
# per table: (minutes into the day, channel, page, added)
EDITS = {
    "wiki": [(10, "#en", "Main", 3), (20, "#fr", "Accueil", 5), (30, "#en", "Talk", 7), (40, "#de", "Haupt", 1)],
    "wiki_mobile": [(15, "#en", "Help", 10), (25, "#de", "Haupt", 2)],
}
CHANNELS = {"#en": "English", "#fr": "French"}


def _millis(minutes: int) -> int:
    return int((DAY + timedelta(minutes=minutes)).timestamp() * 1000)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Broker:
    root = tmp_path_factory.mktemp("broker")
    store = MetadataStore(f"sqlite:///{root / 'metadata.db'}")
    store.create_tables()
    for name, edits in EDITS.items():
        path = root / "deep" / name / "index.parquet"
        path.parent.mkdir(parents=True)
        columns = {"__time": pa.array([DAY + timedelta(minutes=e[0]) for e in edits], pa.timestamp("ms", tz="UTC")),
                   "channel": [e[1] for e in edits], "page": [e[2] for e in edits],
                   "added": pa.array([e[3] for e in edits], pa.int64())}
        if name == "wiki_mobile":  # a column only one table of the union has
            columns["device"] = ["phone"] * len(edits)
        pq.write_table(pa.table(columns), path)
        segment = DataSegment(
            id=SegmentId(name, Interval(DAY, DAY + timedelta(hours=1)), "v1", 0),
            dimensions=[c for c in columns if c not in ("__time", "added")], metrics=["added"], aggregators=[],
            shard_spec=numbered_shard_spec(0), num_rows=len(edits), size=path.stat().st_size,
            load_spec={"type": "local", "path": str(path)})
        assert store.commit_segments_and_metadata([segment], name, None, None).success
    lookups = {"__default": {"channels": {"version": "v1",
                                          "lookupExtractorFactory": {"type": "map", "map": CHANNELS}}}}
    engine = SqlEngine(threads=1, lookups=LookupReferences(lambda: lookups).get)
    return Broker(store, LocalDeepStorage(root / "deep"), root / "cache", engine, snapshot_ttl_s=60)


def _run(broker: Broker, query: dict[str, Any]) -> list[dict[str, Any]]:
    return NativeQueryRunner(broker).run({"intervals": INTERVALS, **query})


def _events(result: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row["event"] for row in result]


SUM_ADDED = {"type": "longSum", "name": "added", "fieldName": "added"}
LOOKUP_JOIN = {"type": "join", "left": "wiki", "right": {"type": "lookup", "lookup": "channels"},
               "rightPrefix": "r.", "condition": "\"channel\" == \"r.k\"", "joinType": "INNER"}


def test_a_union_reads_the_rows_of_all_its_tables(broker: Broker) -> None:
    result = _run(broker, {"queryType": "groupBy", "dimensions": ["channel", "device"], "aggregations": [SUM_ADDED],
                           "dataSource": {"type": "union", "dataSources": ["wiki", {"type": "table",
                                                                                     "name": "wiki_mobile"}]}})
    assert _events(result) == [
        {"channel": "#de", "device": None, "added": 1}, {"channel": "#de", "device": "phone", "added": 2},
        {"channel": "#en", "device": None, "added": 10}, {"channel": "#en", "device": "phone", "added": 10},
        {"channel": "#fr", "device": None, "added": 5},
    ]
    assert result[0]["timestamp"] == "2024-01-01T00:00:00.000Z"


def test_a_scan_reads_inline_rows_with_their_times(broker: Broker) -> None:
    inline = {"type": "inline", "columnNames": ["__time", "country", "visits"],
              "columnTypes": ["LONG", "STRING", None],
              "rows": [[_millis(5), "France", 3], [_millis(1), "Peru", None], [_millis(60 * 24), "Chad", 1]]}
    [batch] = _run(broker, {"queryType": "scan", "dataSource": inline, "filter": {
        "type": "not", "field": {"type": "selector", "dimension": "country", "value": "Peru"}}})
    assert batch["columns"] == ["__time", "country", "visits"]
    assert batch["events"] == [{"__time": _millis(5), "country": "France", "visits": 3}]  # Chad is the next day
    assert [c["type"] for c in batch["rowSignature"]] == ["LONG", "STRING", "LONG"]


def test_a_topn_over_a_join_with_a_lookup_reads_the_right_columns_by_their_prefix(broker: Broker) -> None:
    [result] = _run(broker, {"queryType": "topN", "dataSource": LOOKUP_JOIN, "dimension": "r.v",
                             "metric": "added", "threshold": 5, "aggregations": [SUM_ADDED],
                             "filter": {"type": "selector", "dimension": "r.k", "value": "#en"}})
    assert result == {"timestamp": "2024-01-01T00:10:00.000Z", "result": [{"r.v": "English", "added": 10}]}


def test_a_topn_over_a_join_with_inline_rows(broker: Broker) -> None:
    languages = {"type": "inline", "columnNames": ["channel", "language"],
                 "rows": [["#en", "en"], ["#fr", "fr"], ["#de", "de"], ["#it", "it"]]}
    join = {"type": "join", "left": "wiki", "right": languages, "rightPrefix": "lang_",
            "condition": "channel == lang_channel && added > 1", "joinType": "INNER"}
    [result] = _run(broker, {"queryType": "topN", "dataSource": join, "dimension": "lang_language",
                             "metric": {"type": "inverted", "metric": "added"}, "threshold": 2,
                             "aggregations": [SUM_ADDED, {"type": "count", "name": "rows"}]})
    assert result["result"] == [{"lang_language": "fr", "added": 5, "rows": 1},
                                {"lang_language": "en", "added": 10, "rows": 2}]


def test_a_group_by_of_a_group_by(broker: Broker) -> None:
    pages = {"queryType": "groupBy", "dataSource": {"type": "union", "dataSources": ["wiki", "wiki_mobile"]},
             "intervals": INTERVALS, "dimensions": ["channel", "page"], "aggregations": [SUM_ADDED]}
    most = {"type": "longMax", "name": "most", "fieldName": "added"}
    by_most = {"type": "default", "columns": [{"dimension": "most", "direction": "descending"}]}
    result = _run(broker, {"queryType": "groupBy", "dataSource": {"type": "query", "query": pages},
                           "dimensions": ["channel"], "aggregations": [{"type": "count", "name": "pages"}, most],
                           "limitSpec": by_most})
    assert _events(result) == [{"channel": "#en", "pages": 3, "most": 10},
                               {"channel": "#fr", "pages": 1, "most": 5},
                               {"channel": "#de", "pages": 1, "most": 3}]


def test_a_left_join_keeps_the_rows_without_a_match(broker: Broker) -> None:
    result = _run(broker, {"queryType": "groupBy", "dataSource": {**LOOKUP_JOIN, "joinType": "LEFT"},
                           "dimensions": ["channel", "r.v"], "aggregations": [SUM_ADDED]})
    assert _events(result) == [{"channel": "#de", "r.v": None, "added": 1},
                               {"channel": "#en", "r.v": "English", "added": 10},
                               {"channel": "#fr", "r.v": "French", "added": 5}]
    [inner] = _run(broker, {"queryType": "timeseries", "dataSource": LOOKUP_JOIN, "aggregations": [SUM_ADDED]})
    assert inner["result"] == {"added": 15}


def test_a_lookup_data_source_has_columns_k_and_v(broker: Broker) -> None:
    result = _run(broker, {"queryType": "groupBy", "intervals": ETERNITY, "dimensions": ["k", "v"],
                           "dataSource": {"type": "lookup", "lookup": "channels"}})
    assert _events(result) == [{"k": "#en", "v": "English"}, {"k": "#fr", "v": "French"}]


def test_a_subquerys_rows_are_at_their_buckets(broker: Broker) -> None:
    per_ten_minutes = {"queryType": "timeseries", "dataSource": "wiki", "intervals": INTERVALS,
                       "granularity": {"type": "duration", "duration": 600_000}, "aggregations": [SUM_ADDED]}
    [batch] = _run(broker, {"queryType": "scan", "dataSource": {"type": "query", "query": per_ten_minutes},
                            "columns": ["__time", "added"], "order": "descending"})
    assert batch["events"] == [{"__time": _millis(minutes), "added": added}
                               for minutes, added in [(40, 1), (30, 7), (20, 5), (10, 3)]]


class ReadsOnly:
    def __init__(self, *names: str) -> None:
        self.names = names

    def allows(self, resource: Resource, action: Action) -> bool:
        return action is Action.READ and resource.name in self.names


def test_reading_a_composite_data_source_needs_read_on_each_of_its_tables(broker: Broker) -> None:
    query = {"queryType": "timeseries", "intervals": INTERVALS, "aggregations": [SUM_ADDED], "dataSource": {
        **LOOKUP_JOIN, "left": {"type": "union", "dataSources": ["wiki", "wiki_mobile"]}}}
    with pytest.raises(Forbidden):
        NativeQueryRunner(broker).run(query, permissions=ReadsOnly("wiki"))
    [row] = NativeQueryRunner(broker).run(query, permissions=ReadsOnly("wiki", "wiki_mobile"))
    assert row["result"] == {"added": 25}  # #de has no channel name


@pytest.mark.parametrize(("data_source", "message"), [
    ({"type": "nope"},
     "dataSource: expected a table name or a data source of type table, union, inline, lookup, query or join"),
    ({k: v for k, v in LOOKUP_JOIN.items() if k != "condition"}, "dataSource.condition: Field required"),
    ({**LOOKUP_JOIN, "condition": "channel == k"},
     "dataSource.condition: 'channel == k' reads no right column: a join condition compares left values with right "
     "columns, named with the rightPrefix 'r.'"),
    ({**LOOKUP_JOIN, "condition": "channel == \"r.key\""},
     "dataSource.condition: 'r.key' is not a column of the right data source, whose columns are r.__time, r.k, r.v"),
    ({**LOOKUP_JOIN, "rightPrefix": "__"}, "dataSource: rightPrefix '__' would shadow __time"),
    ({"type": "union", "dataSources": ["wiki", {"type": "inline", "columnNames": ["a"], "rows": []}]},
     "dataSource.dataSources[1]: expected a table data source, got one of type 'inline'"),
    ({"type": "inline", "columnNames": ["a", "b"], "rows": [["x"]]},
     "dataSource: rows[0] has 1 values for 2 columnNames"),
    ({"type": "query", "query": {"queryType": "timeBoundary", "dataSource": "wiki"}},
     "dataSource.query: expected a timeseries, topN, groupBy or scan query"),
    ({"type": "query", "query": {"queryType": "groupBy", "dataSource": "wiki", "intervals": INTERVALS,
                                 "dimensions": [], "limitSpec": {"type": "default", "columns": ["x"]}}},
     "dataSource.query.limitSpec.columns[0].dimension: 'x' is not an output of the query"),
])
def test_a_bad_data_source_is_a_400_naming_the_field(broker: Broker, data_source: dict[str, Any],
                                                      message: str) -> None:
    with pytest.raises(SqlError) as caught:
        _run(broker, {"queryType": "scan", "dataSource": data_source})
    assert caught.value.status == 400
    assert caught.value.error_message == f"Invalid native query: {message}"
