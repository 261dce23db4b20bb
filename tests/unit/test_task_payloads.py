"""Task payloads survive the trip through storage, a worker and a peon's task.json unchanged."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from sluice.spec.batch import BatchTuningConfig
from sluice.spec.supervisor import parse_supervisor_spec
from sluice.task.batch_index_task import BatchIndexTaskSpec
from sluice.task.kafka_index_task import KafkaIndexTaskSpec
from sluice.task.task import NoopTask, NoopTaskSpec, TaskFailure, task_from_json
from tests.integration.harness import supervisor_spec


def test_kafka_index_task_round_trips_through_its_json() -> None:
    ingestion = parse_supervisor_spec(supervisor_spec("wiki", "edits", "127.0.0.1:9092",
                                                      lateMessageRejectionPeriod="PT1H")).spec
    spec = KafkaIndexTaskSpec("index_kafka_wiki_abc", 1, "index_kafka_wiki_0123456789abcdef", ingestion,
                              {0: 10, 2: 7}, datetime(2026, 11, 22, 1, 2, 3, 456000, UTC),
                              checkpoints={0: {0: 10, 2: 7}, 1: {0: 55, 2: 7}})

    again = task_from_json(spec.to_json())

    assert again == spec
    assert spec.to_json()["context"]["checkpoints"] == {"0": {"0": 10, "2": 7}, "1": {"0": 55, "2": 7}}
    assert again.message_window == spec.message_window
    assert (again.type, again.group_id, again.priority) == ("index_kafka", "index_kafka_wiki", 75)


def test_noop_task_round_trips_and_runs(tmp_path: Path) -> None:
    spec = task_from_json({"type": "noop", "id": "noop_1", "runTime": 10, "groupId": "g", "context": {"priority": 5}})

    assert spec == NoopTaskSpec("noop_1", "none", 10, False, "g", 5)
    assert task_from_json(spec.to_json()) == spec
    assert NoopTask(spec, tmp_path).run().status_code == "SUCCESS"
    assert NoopTask(NoopTaskSpec("noop_2", fail=True, run_time_ms=0), tmp_path).run().error_msg == "noop task told to fail"


@pytest.mark.parametrize(("payload", "message"), [
    ({"type": "index_hadoop", "id": "x"}, "task type 'index_hadoop' is not supported"),
    ({"type": "noop"}, "non-empty string 'id'"),
    ([], "a task must be a JSON object"),
])
def test_bad_task_payloads_are_named(payload: object, message: str) -> None:
    with pytest.raises(TaskFailure, match=message):
        task_from_json(payload)


def test_a_batch_task_without_an_id_gets_druids_kind_of_id_and_round_trips() -> None:
    payload = {"type": "index_parallel", "spec": {
        "dataSchema": {"dataSource": "wiki", "timestampSpec": {"column": "ts"}, "dimensionsSpec": {"dimensions": ["a"]},
                       "granularitySpec": {"intervals": ["2024-01-01/P1M"]}},
        "ioConfig": {"type": "index_parallel", "inputSource": {"type": "inline", "data": "{}"},
                     "inputFormat": {"type": "json"}}}, "context": {"priority": 60}}

    spec = task_from_json(payload)

    assert isinstance(spec, BatchIndexTaskSpec) and spec.id.startswith("index_parallel_wiki_")
    assert (spec.group_id, spec.data_source, spec.priority) == (spec.id, "wiki", 60)
    again = task_from_json(spec.to_json())
    assert (again.id, again.payload.spec, again.priority) == (spec.id, spec.payload.spec, 60)


def test_druids_deprecated_max_num_sub_tasks_is_max_num_concurrent_sub_tasks() -> None:
    assert BatchTuningConfig.model_validate({"maxNumSubTasks": 3}).max_num_concurrent_sub_tasks == 3
    with pytest.raises(ValueError, match="Can't use both maxNumSubTasks and maxNumConcurrentSubTasks"):
        BatchTuningConfig.model_validate({"maxNumSubTasks": 3, "maxNumConcurrentSubTasks": 2})


def test_druids_deprecated_target_partition_size_is_max_rows_per_segment() -> None:
    assert BatchTuningConfig.model_validate({"targetPartitionSize": 500}).effective_partitions_spec.max_rows_per_segment \
        == 500
    with pytest.raises(ValueError, match="Can't use targetPartitionSize and maxRowsPerSegment together"):
        BatchTuningConfig.model_validate({"targetPartitionSize": 500, "maxRowsPerSegment": 600})


@pytest.mark.parametrize(("tuning", "hashed"), [
    ({}, {"target_rows": 5_000_000, "num_shards": None}),
    ({"targetPartitionSize": 1000}, {"target_rows": 1000, "num_shards": None}),
    ({"numShards": 3, "partitionDimensions": ["page"]}, {"num_shards": 3, "partition_dimensions": ["page"]}),
])
def test_perfect_rollup_without_a_partitions_spec_hashes_as_druid_defaults_it(tuning: dict, hashed: dict) -> None:
    spec = BatchTuningConfig.model_validate({"forceGuaranteedRollup": True, **tuning}).effective_partitions_spec
    assert spec.type == "hashed" and {name: getattr(spec, name) for name in hashed} == hashed
    with pytest.raises(ValueError, match="DynamicPartitionsSpec cannot be used for perfect rollup"):
        BatchTuningConfig.model_validate({"forceGuaranteedRollup": True, "partitionsSpec": {"type": "dynamic"}})
