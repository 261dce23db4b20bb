"""The benchmarks at smoke size (`make bench-smoke`), so that `make test` proves they still run and measure
the right thing: every ingestion run holds exactly the events produced, the freshness run sees every event, the query
engines agree. Their figures at this size mean nothing and are not checked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sluice.dev.sample_data import generate, generate_flat

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("bench") / "results-smoke.json"
    # the benchmarks whose figures the README quotes; `make bench-smoke` runs the others: batch ingestion's
    # (3-4 minutes at smoke size; tests/integration/test_batch_*.py check its answers), the memory benchmark's and the
    # per-stage profile's (a node or a session of their own for over a minute each, whose rows are counted as the
    # ingestion benchmark's are). Ingestion on the synthetic events only: each data set costs about 110 s, most of it
    # the yardstick's three runs, and the streaming tests ingest the wikipedia-shaped sample throughout.
    completed = subprocess.run([sys.executable, str(BENCHMARKS / "run_all.py"), "--smoke", "--out", str(out),
                                "--only", "ingest,freshness,queries,concurrency,scaling,task_count",
                                "--extra", "ingest:--datasets synthetic"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1200)
    assert completed.returncode == 0, completed.stdout[-3000:]
    return json.loads(out.read_text())


def test_every_benchmark_runs_at_smoke_size(smoke: dict[str, Any]) -> None:
    assert set(smoke["results"]) == {"ingest", "freshness", "queries", "concurrency", "scaling", "task_count"}
    assert [name for name, result in smoke["results"].items() if "error" in result] == []
    # each of the issues' targets is judged (met or not), none left out for a missing figure
    targets = smoke["targets"]
    assert {name.split("  ")[0] for name in targets} >= {
        "ingest synthetic: (c) warm steady >= 1.2 x (b)", "ingest synthetic: (c) cold steady >= 1.0 x (b)",
        "freshness p50 <= 1 s", "freshness p95 <= 3 s"}
    assert len(targets) == 15 and all(isinstance(met, bool) for met in targets.values())


def _totals(events: list[dict[str, Any]], metrics: dict[str, tuple[str, str]]) -> dict[str, float]:
    return {name: (len(events) if how == "count" else
                   max(e[field] for e in events) if how == "max" else sum(e[field] for e in events))
            for name, (how, field) in metrics.items()}


def test_every_ingestion_run_holds_exactly_the_produced_events(smoke: dict[str, Any]) -> None:
    """Against the events regenerated here from the benchmark's seed, not against anything the benchmark counted:
    the count and metric totals Sluice answers in SQL, cold and warm, and the rows the hand-written job wrote."""
    ingest = smoke["results"]["ingest"]
    produced = {"synthetic": [r.event for r in generate_flat(ingest["events"], 8, seed=7)]}
    metrics = {"synthetic": {"count": ("count", ""), "m0": ("sum", "m0"), "m1": ("sum", "m1"), "m2": ("max", "m2")}}
    assert set(ingest["datasets"]) == set(produced)
    for name, data in ingest["datasets"].items():
        expected = _totals(produced[name], metrics[name])
        (python,), (yardstick,), (sluice,) = (data["runs"][v] for v in ("python", "yardstick", "sluice"))
        assert python["parsed"] + python["not_json"] == ingest["events"]
        assert yardstick["diy_events_per_s"] > 0
        assert yardstick.get("rows_ingested", len(produced[name])) == len(produced[name])
        for run in ("cold", "warm"):
            assert sluice[run]["totals"] == pytest.approx(expected, rel=1e-12), (name, run)
            stats = sluice[run]["row_stats"]
            assert (stats["processed"], stats["unparseable"], stats["processedWithError"]) == (
                len(produced[name]), ingest["events"] - len(produced[name]), 0)


def test_the_freshness_run_sees_every_event(smoke: dict[str, Any]) -> None:
    freshness = smoke["results"]["freshness"]
    assert freshness["sql_errors"] == 0, freshness["sql_error_sample"]
    assert freshness["events_visible"] == freshness["events_produced"] > 0


def test_the_query_engines_return_the_same_rows(smoke: dict[str, Any]) -> None:
    shapes = smoke["results"]["queries"]["shapes"]
    assert set(shapes) == {"timeseries", "topN", "groupBy", "scan"}
    disagree = [(shape, engine) for shape, figures in shapes.items()
                for engine, result in figures["engines"].items() if not result["same_result_as_duckdb"]]
    assert disagree == []



def test_the_result_cache_answers_as_the_engine_and_no_query_fails(smoke: dict[str, Any]) -> None:
    concurrency = smoke["results"]["concurrency"]
    off, on = concurrency["result_cache_off"], concurrency["result_cache_on"]
    assert off["answers"]["point"] == on["answers"]["point"] and off["answers"]["point"][0][0] > 0
    assert sorted(off["answers"]["topN"]) == sorted(on["answers"]["topN"]) and len(off["answers"]["topN"]) == 10
    for levels in (off, on):
        assert [(clients, level["errors"]) for clients, level in levels.items() if clients.isdigit()] == \
            [("1", 0), ("4", 0)]
        assert all(level["queries"] > 0 for clients, level in levels.items() if clients.isdigit())


def test_every_size_answers_as_duckdb_on_the_same_files(smoke: dict[str, Any]) -> None:
    scaling = smoke["results"]["scaling"]
    assert list(scaling["sizes"]) == ["20000", "100000"]
    assert [(rows, shape) for rows, size in scaling["sizes"].items() for shape, figures in size["shapes"].items()
            if not figures["same_result_as_duckdb"]] == []
    assert all(len(size["shapes"]) == 4 for size in scaling["sizes"].values())


def test_every_task_count_on_local_spark_and_on_the_cluster_holds_exactly_the_produced_events(
        smoke: dict[str, Any]) -> None:
    """Against the sample events regenerated here from the benchmark's seed: count, SUM(added), SUM(deleted)."""
    task_count = smoke["results"]["task_count"]
    valid = [r.event for r in generate(task_count["events"], seed=7) if r.kind == "valid"]
    expected = [len(valid), sum(e["added"] for e in valid), sum(e["deleted"] for e in valid)]
    assert {mode: {count: run["totals"] for count, run in runs.items()}
            for mode, runs in task_count["modes"].items()} == {
        mode: {"1": expected, "2": expected} for mode in ("local", "cluster")}
