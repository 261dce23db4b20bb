"""The connector framework on Spark: the guide's source as written in docs/connectors.md, and a reader that fails on
purpose, whose splits are read again by its next attempt, exactly once."""

from __future__ import annotations

import json
import re
import sys
import types
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import TaskContext, cloudpickle
from pyspark.sql import SparkSession

from sluice.connectors import BoundedSource, read_all
from sluice.connectors.records import column_records_schema
from sluice.connectors.spark import ConnectorRead

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "connectors.md"


def guide_module() -> types.ModuleType:
    """The guide's first code block, as a module of its own. Executors cannot import it, so Spark ships its classes
    by value, as it would a notebook's."""
    code = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)[0]
    module = sys.modules.setdefault("connector_guide", types.ModuleType("connector_guide"))
    exec(compile(code, str(GUIDE), "exec"), module.__dict__)  # noqa: S102 - our own documentation
    cloudpickle.register_pickle_by_value(module)
    return module


def test_the_guides_source_reads_every_record_in_process() -> None:
    table = read_all(guide_module().PageViews(10_000), parallelism=3)

    assert table.num_rows == 10_000
    assert sorted(json.loads(v)["ms"] for v in table["value"].to_pylist()) == sorted(i % 100 for i in range(10_000))


@pytest.mark.spark
def test_the_guides_source_reads_every_record_on_spark(spark: SparkSession) -> None:
    with ConnectorRead(spark, guide_module().PageViews(10_000, block=700), parallelism=2) as read:
        rows = (read.dataframe().selectExpr("from_json(CAST(value AS STRING), 'page STRING, ms INT') AS v")
                .groupBy("v.page").agg({"v.ms": "sum", "*": "count"}).collect())
        read.checkpoint_complete()

    expected = Counter(f"p{i % 7}" for i in range(10_000))
    assert {r["page"]: r["count(1)"] for r in rows} == expected
    assert {r["page"]: r["sum(v.ms AS ms)"] for r in rows} == {
        page: sum(i % 100 for i in range(10_000) if f"p{i % 7}" == page) for page in expected}


@dataclass(frozen=True)
class Numbers:
    start: int
    end: int

    @property
    def split_id(self) -> str:
        return f"n{self.start}"


class FailingOnce(BoundedSource[Numbers]):
    """Ids [0, 1000) in ten splits; the first attempt of whichever reader reads split `fail` dies after it has
    already handed half of that split to Spark."""

    def __init__(self, fail: str | None) -> None:
        self.fail = fail

    def output_schema(self) -> pa.Schema:
        return column_records_schema(["n"])

    def enumerate_splits(self) -> list[Numbers]:
        return [Numbers(i, i + 100) for i in range(0, 1000, 100)]

    def read_split(self, split: Numbers) -> Iterator[pa.RecordBatch]:
        for lo in (split.start, split.start + 50):
            ids = [str(i) for i in range(lo, lo + 50)]
            yield pa.RecordBatch.from_arrays([pa.array(ids), pa.nulls(50, pa.string()), pa.array(ids)],
                                             schema=self.output_schema())
            context = TaskContext.get()
            if split.split_id == self.fail and context is not None and context.attemptNumber() == 0:
                raise RuntimeError("reader failed on purpose")


@pytest.mark.spark
def test_a_failed_reader_gets_its_splits_back_and_the_result_is_exact(spark: SparkSession) -> None:
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # executors cannot import the tests package
    with ConnectorRead(spark, FailingOnce("n300"), parallelism=3) as read:
        ids = sorted(int(r.n) for r in read.dataframe().collect())
        reader = next(r for r, splits in read.host.assigned().items() if "n300" in splits)
        assert read.host.progress().splits_done == 10
        read.checkpoint_complete()

    assert ids == list(range(1000))  # none lost, none twice: the failed attempt's 50 rows were thrown away
    assert reader in read.host.registered_readers()
