"""How many Spark tasks a reading task's persist job may run: its share of Spark's cores among its supervisor's
reading tasks (the Spark side: tests/integration/test_kafka_stream_source.py)."""

from __future__ import annotations

import pytest

from sluice.task.kafka_index_task import spark_tasks_per_job


@pytest.mark.parametrize(("cores", "reading_tasks", "spark_tasks"), [
    (2, 1, 2),  # one task: the node's cores (a job reads its 4 partitions in 2 Spark tasks)
    (2, 2, 1),  # taskCount 2, or 1 task with 2 replicas: one core each
    (2, 4, 1),  # more tasks than cores: still one each
    (8, 2, 4),
    (8, 3, 2),
    (1, 1, 1),
])
def test_a_persist_job_runs_its_share_of_the_cores(cores: int, reading_tasks: int, spark_tasks: int) -> None:
    assert spark_tasks_per_job(cores, reading_tasks) == spark_tasks
