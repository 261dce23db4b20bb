"""Stream jobs without Spark or a broker: the DSL and the JSON spec build the same topology, every mistake is named
with its operator and field, checkpoints know their job, and the Kafka micro-batch plan never skips a record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from sluice.spec.errors import SpecError
from sluice.spec.supervisor import parse_supervisor_spec
from sluice.stream.builder import StreamBuilder, hopping, millis, session, tumbling
from sluice.stream.data_source_table import DataSourceTableReader
from sluice.stream.job_spec import StreamJobSpec, job_to_json
from sluice.stream.kafka_micro_batch import KafkaMicroBatchReader, cap_records
from sluice.stream.topology import (
    Aggregate,
    Aggregator,
    DataSourceSink,
    KeyBy,
    StreamJobError,
    Window,
    fingerprint,
    needs_node,
    output_fields,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "stream-page-counts.json"
BOOTSTRAP = "127.0.0.1:9092"


def clicks(builder: StreamBuilder, **columns: str):  # noqa: ANN201 - an RStream
    return builder.source("clicks", bootstrap_servers=BOOTSTRAP, columns={"ts": "string", "page": "string",
                                                                           "user": "string", **columns},
                          timestamp=("ts", "iso"))


def test_the_dsl_and_the_shipped_json_build_the_same_job() -> None:
    builder = StreamBuilder("page_counts")
    (builder.source("clicks", bootstrap_servers="localhost:9092",
                    columns={"ts": "string", "user": "string", "page": "string"}, timestamp=("ts", "iso"))
     .key_by("page").window(tumbling("PT1M", lateness="PT10S")).count("cnt").to_data_source("page_counts"))
    from_json = parse_supervisor_spec(json.loads(EXAMPLE.read_text()))
    assert isinstance(from_json, StreamJobSpec)
    assert from_json.to_job() == builder.build()
    assert output_fields(builder.build().pipeline) == {"window_start": "timestamp", "window_end": "timestamp",
                                                       "page": "string", "cnt": "long"}


def test_a_stored_spec_reads_back_as_it_was_submitted() -> None:
    spec = parse_supervisor_spec(json.loads(EXAMPLE.read_text()))
    assert parse_supervisor_spec(json.loads(json.dumps(spec.to_json()))) == spec
    assert spec.to_json()["spec"]["operators"][1]["size"] == "PT60S"


def test_windows_in_milliseconds() -> None:
    assert tumbling("PT10S") == Window("tumbling", size_ms=10_000, slide_ms=10_000)
    assert hopping(5, 2, lateness="PT1S") == Window("hopping", size_ms=5_000, slide_ms=2_000, lateness_ms=1_000)
    assert session("PT5M") == Window("session", gap_ms=300_000)
    assert millis("PT0.5S") == 500


@pytest.mark.parametrize(("build", "message"), [
    (lambda s: s.key_by("page").window(tumbling(10)).print(),
     "window: a window must be followed by an aggregation"),
    (lambda s: s.key_by("pages").count().print(), "operator 0 (key_by) field 'pages': no such field"),
    (lambda s: s.key_by("page").sum("page").print(),
     "operator 1 (aggregate) aggregator 'sum_page' field 'page': sum needs a long or double field, it is string"),
    (lambda s: s.key_by("page").max("price").print(),
     "operator 1 (aggregate) aggregator 'max_price' field 'price': no such field"),
    (lambda s: s.key_by("page").window(session(5, lateness=1)).count().to_data_source("x"), None),
    (lambda s: s.key_by("page").window(tumbling(10, emit="update")).count().to_data_source("x"),
     "sink: dataSource 'x' needs rows that are final when written"),
    (lambda s: s.key_by("page").count().to_data_source("x"), "sink: dataSource 'x' needs rows that are final"),
    (lambda s: s.filter("price > 1").print(), "operator 0 (filter): expression 'price > 1' reads ['price']"),
    (lambda s: s.filter("page ==").print(), "operator 0 (filter): invalid expression 'page =='"),
    (lambda s: s.key_by("page").count().key_by("page").count().print(),
     "operator 2 (key_by): only filter and map may follow an aggregation"),
    (lambda s: s.window(tumbling(10)).print(), None),
    (lambda s: s.distinct("user", within=0).print(), "operator 0 (distinct): distinct needs a positive 'within'"),
    (lambda s: s.key_by("page").count().sink("out", bootstrap_servers=BOOTSTRAP, key=["user"]),
     "sink: key field 'user' is not in the job's output"),
    (lambda s: s.map(lambda row: row).print(), "operator 0 (map): a Python map function needs the schema"),
])
def test_a_job_that_cannot_run_is_refused_naming_operator_and_field(build, message: str | None) -> None:
    builder = StreamBuilder("bad")
    try:
        build(clicks(builder))
        if message is None:
            builder.build()
            return
    except AttributeError:  # a window straight on a stream: the DSL has no such method, as in RocketMQ Streams
        assert message is None
        return
    with pytest.raises(StreamJobError) as raised:
        builder.build()
    assert str(raised.value).startswith(message)


def test_a_session_window_has_no_update_mode_and_a_join_needs_a_bound() -> None:
    builder = StreamBuilder("s")
    clicks(builder).key_by("user").window(Window("session", gap_ms=1000, emit="update")).count().print()
    with pytest.raises(StreamJobError, match="a session window emits final results only"):
        builder.build()
    builder = StreamBuilder("j")
    left, right = clicks(builder), clicks(builder)
    left.join(right, on="user", within=0).print()
    with pytest.raises(StreamJobError, match="needs a positive time bound"):
        builder.build()
    builder = StreamBuilder("j2")
    left, right = clicks(builder), clicks(builder)
    left.join(right, on="user", within="PT10S").print()
    assert set(output_fields(builder.build().pipeline)) == {"ts", "page", "user", "__time", "right_ts",
                                                            "right_page", "right___time"}


def test_a_job_has_one_sink() -> None:
    builder = StreamBuilder("two")
    stream = clicks(builder)
    stream.print()
    with pytest.raises(StreamJobError, match="already has a sink"):
        stream.to_data_source("x")
    with pytest.raises(StreamJobError, match="has no sink"):
        StreamBuilder("none").build()


def test_the_fingerprint_changes_with_the_operators_not_with_the_sink() -> None:
    def job(extra: bool, sink: str):  # noqa: ANN202
        builder = StreamBuilder("f")
        stream = clicks(builder).filter(lambda row: row["page"] != "home")
        if extra:
            stream = stream.filter("page != 'cart'")
        stream.key_by("page").window(tumbling(10)).count().to_data_source(sink)
        return builder.build()

    assert fingerprint(job(False, "a")) == fingerprint(job(False, "b"))
    assert fingerprint(job(False, "a")) != fingerprint(job(True, "a"))
    assert fingerprint(job(False, "a"))["operators"][0]["condition"].startswith("python:<lambda>:")


@pytest.mark.parametrize(("operators", "path", "message"), [
    ([{"type": "keyBy", "fields": ["page"]}, {"type": "window", "windowType": "tumbling", "size": "P1M"}],
     "spec.operators[1].size", "period P1M contains months or years, which vary in length"),
    ([{"type": "keyBy", "fields": ["page"]}, {"type": "sum", "fieldName": "cost"}], "spec.operators[1]",
     "aggregator 'sum_cost' field 'cost': no such field"),
    ([{"type": "map", "transforms": [{"type": "expression", "name": "p", "expression": "upper(page"}]}],
     "spec.operators[0]", "field 'p': invalid expression"),
    ([{"type": "join", "right": {}, "on": ["user"], "within": "PT1S"}], "spec.operators[0].right.ioConfig",
     "Field required"),
])
def test_a_json_job_error_names_its_path(operators: list, path: str, message: str) -> None:
    spec = json.loads(EXAMPLE.read_text())
    spec["spec"]["operators"] = operators
    spec["spec"]["sink"] = {"type": "console"}
    with pytest.raises(SpecError) as raised:
        parse_supervisor_spec(spec)
    assert raised.value.path == path
    assert raised.value.message.startswith(message), raised.value.message


def test_a_json_job_without_an_id_is_named_after_its_data_source() -> None:
    spec = json.loads(EXAMPLE.read_text())
    del spec["id"]
    parsed = parse_supervisor_spec(spec)
    assert (parsed.id, parsed.data_sources) == ("page_counts", ["page_counts"])
    assert parsed.to_job().sink == DataSourceSink("page_counts", "HOUR")
    assert parsed.to_job().pipeline.operators[0] == KeyBy(("page",))
    assert parsed.to_job().pipeline.operators[2] == Aggregate((Aggregator("count", "cnt"),))


class Topic:
    """The broker's partitions and offsets, as the test sets them."""

    def __init__(self, earliest: dict[int, int], latest: dict[int, int]) -> None:
        self.earliest, self.latest = earliest, latest

    def partitions(self) -> list[int]:
        return sorted(self.latest)

    def earliest_offsets(self, partitions) -> dict[int, int]:  # noqa: ANN001
        return {p: self.earliest[p] for p in partitions}

    def latest_offsets(self, partitions) -> dict[int, int]:  # noqa: ANN001
        return {p: self.latest[p] for p in partitions}


def reader(topic: Topic, **options: str) -> KafkaMicroBatchReader:
    planned = KafkaMicroBatchReader({"topic": "t", "consumerProperties": json.dumps({"bootstrap.servers": "x"}),
                                     **options})
    planned._stream = topic
    return planned


def test_a_partition_added_to_the_topic_is_read_from_its_start() -> None:
    topic = Topic({0: 5, 1: 0}, {0: 100, 1: 40})
    planner = reader(topic)
    start = planner.initialOffset()
    assert start == {"0": 5, "1": 0}
    topic.earliest[2], topic.latest[2] = 0, 7  # the topic grew while the job ran
    end = planner.latestOffset(start, ReadAllAvailable())
    assert end == {"0": 100, "1": 40, "2": 7}
    assert [(s.partition, s.start, s.end) for s in planner.partitions(start, end)] == [(0, 5, 100), (1, 0, 40),
                                                                                      (2, 0, 7)]


def test_latest_starting_offsets_and_a_shrunken_partition_never_go_backwards() -> None:
    topic = Topic({0: 0}, {0: 50})
    planner = reader(topic, startingOffsets="latest")
    start = planner.initialOffset()
    assert start == {"0": 50}
    topic.latest[0] = 10  # deleted and re-created smaller
    assert planner.latestOffset(start, ReadAllAvailable()) == {"0": 50}


def test_max_records_per_trigger_is_shared_by_backlog() -> None:
    assert cap_records({0: 0, 1: 0}, {0: 900, 1: 100}, 100) == {0: 90, 1: 10}
    assert cap_records({0: 0, 1: 0}, {0: 10_000, 1: 1}, 100) == {0: 99, 1: 1}  # every backlog moves
    assert cap_records({0: 0, 1: 5}, {0: 20, 1: 5}, 100) == {0: 20, 1: 5}
    planner = reader(Topic({0: 0, 1: 0}, {0: 900, 1: 100}), maxRecordsPerTrigger="100")
    assert planner.getDefaultReadLimit() == ReadMaxRows(100)
    assert planner.latestOffset({"0": 0, "1": 0}, ReadMaxRows(100)) == {"0": 90, "1": 10}
    with pytest.raises(ValueError, match='"startingOffsets" must be'):
        reader(Topic({}, {}), startingOffsets="middle")


def test_table_joins_and_state_ttls_in_both_front_ends() -> None:
    builder = StreamBuilder("tt")
    users = builder.source("users", bootstrap_servers=BOOTSTRAP, columns={"user": "string", "age": "long"})
    (clicks(builder).join_table(users, on="user", how="left").key_by("page").count("n", ttl="PT1H")
     .sink("out", bootstrap_servers=BOOTSTRAP))
    job = builder.build()
    assert output_fields(job.pipeline) == {"page": "string", "n": "long"}
    assert job.pipeline.operators[-1] == Aggregate((Aggregator("count", "n"),), ttl_ms=3_600_000)
    document = job_to_json(job)
    assert document["spec"]["operators"][0]["type"] == "joinTable"
    assert document["spec"]["operators"][2]["stateTtl"] == "PT3600S"
    assert parse_supervisor_spec(document).to_job() == job

    windowed = StreamBuilder("w")
    clicks(windowed).key_by("page").window(tumbling(10)).count("n", ttl=60).print()
    with pytest.raises(StreamJobError, match="a state TTL is for aggregations without a window"):
        windowed.build()
    aggregating_table = StreamBuilder("t")
    table = aggregating_table.source("users", bootstrap_servers=BOOTSTRAP, columns={"user": "string"})
    table = table.distinct("user", within=10)
    clicks(aggregating_table).join_table(table, on="user").print()
    with pytest.raises(StreamJobError, match="a table's pipeline may only filter and map"):
        aggregating_table.build()


def test_a_data_source_is_only_ever_a_table_and_its_job_runs_on_a_node() -> None:
    builder = StreamBuilder("enrich")
    users = builder.table("users", columns={"user": "string", "country": "string"}).filter("country != 'jp'")
    clicks(builder).join_table(users, on="user", how="left").print()
    job = builder.build()
    assert output_fields(job.pipeline)["country"] == "string"
    assert needs_node(job)
    assert fingerprint(job)["operators"][0]["table"]["source"] == "dataSource:users"
    document = job_to_json(job)
    assert document["spec"]["operators"][0]["table"] == {
        "dataSource": "users", "columns": [{"name": "user", "type": "string"}, {"name": "country", "type": "string"}],
        "operators": [{"type": "filter", "expression": "country != 'jp'"}]}
    assert parse_supervisor_spec(document).to_job() == job

    plain = StreamBuilder("plain")
    clicks(plain).print()
    assert not needs_node(plain.build())
    as_stream = StreamBuilder("s")
    as_stream.table("users", columns={"user": "string"}).print()
    with pytest.raises(StreamJobError, match="data source 'users' can only be the table of a join_table"):
        as_stream.build()
    as_right = StreamBuilder("r")
    clicks(as_right).join(as_right.table("users", columns={"user": "string"}), on="user", within=10).print()
    with pytest.raises(StreamJobError, match=r"^operator 0 \(join\) right source: data source 'users' can only"):
        as_right.build()
    with_time = StreamBuilder("t")
    clicks(with_time).join_table(with_time.table("users", columns={"user": "string", "__time": "long"}),
                                 on="user").print()
    with pytest.raises(StreamJobError, match="a data source's __time is always read"):
        with_time.build()


def segment(segment_id: str, start: int) -> list:
    return [segment_id, {"type": "local", "path": f"/deep/{segment_id}.parquet"}, [[start, start + 86_400_000_000]]]


def test_a_changed_data_source_is_read_whole_with_tombstones_for_the_segments_it_lost() -> None:
    options = {"dataSource": "users", "metadataUri": "sqlite://", "deepStorage": "/deep", "keys": '["user"]'}
    planner = DataSourceTableReader(options, StructType([StructField("__time", TimestampType()),
                                                         StructField("user", StringType())]))
    day1, day2, day1_v2 = segment("users_d1_v1", 0), segment("users_d2_v1", 86_400_000_000), segment("users_d1_v2", 0)
    assert planner.partitions({"segments": [day1, day2]}, {"segments": [day1, day2]}) == []
    planned = planner.partitions({"segments": [day1, day2]}, {"segments": [day1_v2, day2]})
    assert [(type(p).__name__, getattr(p, "segment", p).segment_id) for p in planned] == [
        ("RemovedSegment", "users_d1_v1"), ("SegmentInputPartition", "users_d1_v2"),
        ("SegmentInputPartition", "users_d2_v1")]
    assert planner.partitions(planner.initialOffset(), {"segments": [day1]})[0].ranges == ((0, 86_400_000_000),)


def test_a_python_fold_is_one_typed_column_and_stays_out_of_json() -> None:
    builder = StreamBuilder("fold")
    clicks(builder).key_by("page").window(tumbling(10)).aggregate(lambda: 0, lambda n, row: n + 1, name="n",
                                                                  type="long").print()
    job = builder.build()
    assert output_fields(job.pipeline) == {"window_start": "timestamp", "window_end": "timestamp", "page": "string",
                                           "n": "long"}
    with pytest.raises(StreamJobError, match="operator 2 .*a Python function cannot go into a JSON spec"):
        job_to_json(job)
    with pytest.raises(StreamJobError, match="a fold needs both init and add"):
        clicks(StreamBuilder("half")).key_by("page").aggregate(lambda: 0)
    bad = StreamBuilder("bad-type")
    clicks(bad).key_by("page").aggregate(lambda: 0, lambda n, row: n, type="list").print()
    with pytest.raises(StreamJobError, match="type must be one of"):
        bad.build()
