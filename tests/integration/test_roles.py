"""Overlord, worker and broker as separate processes sharing one metadata store: tasks queue, run in
peons, survive an overlord restart, and fail (to be replaced) when their worker dies. Streaming ingestion
through peons stays exactly once when a peon is killed with SIGKILL while reading or while publishing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sluice.dev.sample_data import generate, produce
from tests.integration.harness import supervisor_spec, wait_for
from tests.integration.processes import SluiceProcess, kill_9, peon_pids, start_all, stop_all

TASKS = "/druid/indexer/v1"


def noop(task_id: str, run_time_ms: int) -> dict:
    return {"type": "noop", "id": task_id, "runTime": run_time_ms}


def task_status(overlord: httpx.Client, task_id: str) -> dict:
    return overlord.get(f"{TASKS}/task/{task_id}/status").json()["status"]


def finished(overlord: httpx.Client, task_id: str) -> dict | None:
    status = task_status(overlord, task_id)
    return status if status["statusCode"] != "RUNNING" else None


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Path:
    return tmp_path


def metadata_uri(work_dir: Path) -> str:
    return f"sqlite:///{work_dir / 'metadata.db'}"


def sum_count(broker: httpx.Client, data_source: str) -> int | None:
    response = broker.post("/druid/v2/sql", json={"query": f'SELECT SUM("count") AS n FROM {data_source}'})
    return response.json()[0]["n"] if response.status_code == 200 else None


@pytest.fixture
def overlord_and_worker(cluster_dir: Path) -> Iterator[tuple[SluiceProcess, SluiceProcess]]:
    uri = metadata_uri(cluster_dir)
    overlord, worker = start_all(SluiceProcess("overlord", cluster_dir, uri),
                                 SluiceProcess("worker", cluster_dir, uri, "--capacity", "1"))
    yield overlord, worker
    stop_all((worker, overlord))


def test_tasks_wait_for_a_free_slot_run_in_peons_and_report_through_the_overlord(overlord_and_worker) -> None:
    overlord_process, worker = overlord_and_worker
    with overlord_process.client() as overlord:
        assert overlord.post(f"{TASKS}/task", json=noop("noop_a", 4000)).json() == {"task": "noop_a"}
        assert overlord.post(f"{TASKS}/task", json=noop("noop_b", 200)).json() == {"task": "noop_b"}

        # a task is running before its peon has said where it serves (Druid's TaskLocation.unknown(): port -1)
        running = wait_for(lambda: [t for t in overlord.get(f"{TASKS}/runningTasks").json()
                                    if t["location"]["port"] > 0], 30, "noop_a running at a known location")
        assert [t["id"] for t in running] == ["noop_a"]
        assert [t["id"] for t in overlord.get(f"{TASKS}/pendingTasks").json()] == ["noop_b"]
        workers = overlord.get(f"{TASKS}/workers").json()
        assert [(w["worker"]["host"], w["worker"]["capacity"], w["currCapacityUsed"], w["runningTasks"])
                for w in workers] == [(f"127.0.0.1:{worker.port}", 1, 1, ["noop_a"])]

        for task_id in ("noop_a", "noop_b"):
            assert wait_for(lambda: finished(overlord, task_id), 60, task_id)["statusCode"] == "SUCCESS"
        assert {t["id"] for t in overlord.get(f"{TASKS}/completeTasks").json()} == {"noop_a", "noop_b"}
        assert "task noop_a finished: SUCCESS" in overlord.get(f"{TASKS}/task/noop_a/log").text
        statuses = overlord.post(f"{TASKS}/taskStatus", json=["noop_a", "nope"]).json()
        assert list(statuses) == ["noop_a"] and statuses["noop_a"]["status"] == "SUCCESS"

        overlord.post(f"{TASKS}/task", json=noop("noop_long", 600_000))
        wait_for(lambda: task_status(overlord, "noop_long")["runnerStatusCode"] == "RUNNING", 30, "noop_long running")
        assert overlord.post(f"{TASKS}/task/noop_long/shutdown").json() == {"task": "noop_long"}
        stopped = wait_for(lambda: finished(overlord, "noop_long"), 30, "shutdown")
        assert stopped["statusCode"] == "FAILED" and stopped["errorMsg"] in ("stopped", "shut down before the task started")
        assert overlord.post(f"{TASKS}/task/noop_long/shutdown").status_code == 404


def test_a_worker_spreads_its_slots_over_its_base_task_dirs_and_finds_them_after_a_restart(cluster_dir: Path) -> None:
    uri = metadata_uri(cluster_dir)
    disks = [cluster_dir / "disk-a", cluster_dir / "disk-b"]
    worker_args = ("--capacity", "2", "--base-task-dirs", ",".join(map(str, disks)))
    overlord_process, worker = start_all(SluiceProcess("overlord", cluster_dir, uri),
                                         SluiceProcess("worker", cluster_dir, uri, *worker_args))
    try:
        with overlord_process.client() as overlord:
            for task_id in ("slot_0", "slot_1"):
                overlord.post(f"{TASKS}/task", json=noop(task_id, 600_000))
                wait_for(lambda: task_status(overlord, task_id)["runnerStatusCode"] == "RUNNING", 30, task_id)
            # slot i keeps its tasks in base dir i mod 2: one task per disk
            assert [sorted(p.name for p in disk.iterdir()) for disk in disks] == [["slot_0"], ["slot_1"]]
            assert overlord.get(f"{TASKS}/task/slot_1/log").status_code == 200  # the peon's log, found on disk-b
            assert overlord.get(f"{TASKS}/task/nope/log").status_code == 404

            # noop tasks cannot resume: the restarted worker finds them in both dirs and reports them failed (stopped
            # with the worker, if the peon got as far as writing its status)
            worker.stop()
            worker = SluiceProcess("worker", cluster_dir, uri, *worker_args).start()
            for task_id in ("slot_0", "slot_1"):
                assert wait_for(lambda: finished(overlord, task_id), 60, task_id)["errorMsg"] in (
                    "stopped", "the worker restarted and this task's peon was gone")
    finally:
        stop_all((worker, overlord_process))


def test_bad_task_submissions_are_400s_naming_the_problem(overlord_and_worker) -> None:
    with overlord_and_worker[0].client() as overlord:
        response = overlord.post(f"{TASKS}/task", json={"type": "index_hadoop", "id": "h"})
        assert response.status_code == 400 and "task type 'index_hadoop' is not supported" in response.json()["error"]
        overlord.post(f"{TASKS}/task", json=noop("twice", 10))
        response = overlord.post(f"{TASKS}/task", json=noop("twice", 10))
        assert response.status_code == 400 and response.json()["error"] == "Task [twice] already exists"
        response = overlord.get(f"{TASKS}/tasks", params={"state": "sleeping"})
        assert response.status_code == 400 and "Invalid state : sleeping" in response.json()["error"]


def test_a_restarted_overlord_finds_the_tasks_still_running_on_workers(overlord_and_worker, cluster_dir) -> None:
    overlord_process, _ = overlord_and_worker
    with overlord_process.client() as overlord:
        overlord.post(f"{TASKS}/task", json=noop("survivor", 40_000))  # outlives the lease its successor waits out
        wait_for(lambda: task_status(overlord, "survivor")["runnerStatusCode"] == "RUNNING", 30, "survivor running")
    overlord_process.kill()
    successor = SluiceProcess("overlord", cluster_dir, metadata_uri(cluster_dir)).start().leading()
    try:
        with successor.client() as overlord:
            status = task_status(overlord, "survivor")
            assert (status["statusCode"], status["runnerStatusCode"]) == ("RUNNING", "RUNNING")
            assert wait_for(lambda: finished(overlord, "survivor"), 60, "survivor")["statusCode"] == "SUCCESS"
    finally:
        successor.stop()


def test_task_locks_conflict_revoke_by_priority_and_survive_an_overlord_restart(overlord_and_worker,
                                                                                  cluster_dir) -> None:
    def action(client: httpx.Client, task_id: str, **fields: object) -> dict:
        response = client.post(f"{TASKS}/action", json={"task": task_id, "action": fields})
        assert response.status_code == 200, response.text
        return response.json()

    day = "2026-01-01T00:00:00.000Z/2026-01-02T00:00:00.000Z"
    overlord_process, _ = overlord_and_worker
    with overlord_process.client() as overlord:
        for task_id, priority in (("low_a", 0), ("low_b", 0), ("urgent", 50)):
            overlord.post(f"{TASKS}/task", json={**noop(task_id, 600_000), "dataSource": "wiki",
                                                 "context": {"priority": priority}})
        granted = action(overlord, "low_a", type="timeChunkLockTryAcquire", lockType="EXCLUSIVE", interval=day)
        lock = granted["result"]
        assert (lock["type"], lock["interval"], lock["groupId"], lock["revoked"]) == ("EXCLUSIVE", day, "low_a", False)
        denied = action(overlord, "low_b", type="timeChunkLockTryAcquire", lockType="EXCLUSIVE", interval=day)
        assert denied["result"] is None and denied["reason"]
        bad = overlord.post(f"{TASKS}/action", json={"task": "low_b", "action": {"type": "segmentMetadataUpdate"}})
        assert bad.status_code == 400 and "action.type: 'segmentMetadataUpdate' is not supported" in bad.json()["error"]
    overlord_process.kill()
    successor = SluiceProcess("overlord", cluster_dir, metadata_uri(cluster_dir)).start().leading()
    try:
        with successor.client() as overlord:
            assert action(overlord, "low_a", type="lockList")["result"] == [lock]  # re-acquired, same version
            revoking = action(overlord, "urgent", type="timeChunkLockTryAcquire", lockType="EXCLUSIVE", interval=day)
            assert revoking["result"]["version"] > lock["version"]
            assert [held["revoked"] for held in action(overlord, "low_a", type="lockList")["result"]] == [True]
            for task_id in ("low_a", "low_b", "urgent"):
                overlord.post(f"{TASKS}/task/{task_id}/shutdown")
    finally:
        successor.stop()


def test_a_dead_worker_fails_its_tasks_and_its_peons_exit(overlord_and_worker, cluster_dir) -> None:
    overlord_process, worker = overlord_and_worker
    with overlord_process.client() as overlord:
        overlord.post(f"{TASKS}/task", json=noop("orphan", 600_000))
        wait_for(lambda: task_status(overlord, "orphan")["runnerStatusCode"] == "RUNNING", 30, "orphan running")
        assert len(peon_pids("orphan")) == 1
        worker.kill()
        wait_for(lambda: not peon_pids("orphan"), 20, "the orphaned peon to exit")
        status = wait_for(lambda: finished(overlord, "orphan"), 30, "the worker's death to be noticed")
        assert (status["statusCode"], status["errorMsg"]) == ("FAILED", "the worker running this task disappeared")

        restarted = SluiceProcess("worker", cluster_dir, metadata_uri(cluster_dir), "--capacity", "1").start()
        try:
            overlord.post(f"{TASKS}/task", json=noop("after", 100))
            assert wait_for(lambda: finished(overlord, "after"), 60, "a task on the restarted worker")["statusCode"] \
                == "SUCCESS"
            assert task_status(overlord, "orphan")["statusCode"] == "FAILED"
        finally:
            restarted.stop()


@pytest.mark.spark
@pytest.mark.kafka
def test_streaming_through_peons_is_exactly_once_when_peons_are_killed(kafka_broker, cluster_dir) -> None:
    uri = metadata_uri(cluster_dir)
    processes = start_all(SluiceProcess("overlord", cluster_dir, uri),
                          SluiceProcess("worker", cluster_dir, uri, "--capacity", "3"),
                          SluiceProcess("broker", cluster_dir, uri))
    overlord_process, _, broker_process = processes
    topic = "wiki-peons"
    kafka_broker.create_topic(topic, 2)
    records = generate(12_000, seed=5)
    first, second = records[:6_000], records[6_000:]
    produce(kafka_broker.bootstrap_servers, topic, first, 2)
    try:
        with overlord_process.client() as overlord, broker_process.client() as broker:
            spec = supervisor_spec("wiki_peons", topic, kafka_broker.bootstrap_servers, taskDuration="PT20S")
            assert overlord.post(f"{TASKS}/supervisor", json=spec).status_code == 200

            def supervisor() -> dict:
                return overlord.get(f"{TASKS}/supervisor/wiki_peons/status").json()["payload"]

            def in_state(tasks: list[dict], state: str) -> str | None:
                """A task whose peon says it is in `state` (asked on its chat API, where the supervisor asks)."""
                for task in tasks:
                    location = task_status(overlord, task["id"])["location"]
                    if location["port"] > 0:
                        chat = f"http://127.0.0.1:{location['port']}/druid/worker/v1/chat/{task['id']}/status"
                        try:
                            if httpx.get(chat, timeout=2).json() == state:
                                return task["id"]
                        except httpx.HTTPError:
                            pass
                time.sleep(0.05)
                return None

            victim = wait_for(lambda: in_state(supervisor()["activeTasks"], "READING"), 300, "a task reading")
            for pid in peon_pids(victim):
                kill_9(pid)
            assert wait_for(lambda: finished(overlord, victim), 60, "the killed task")["statusCode"] == "FAILED"

            end_offsets = produce(kafka_broker.bootstrap_servers, topic, second, 2)
            victim = wait_for(lambda: in_state(supervisor()["publishingTasks"], "PUBLISHING"), 300,
                              "a task publishing")
            for pid in peon_pids(victim):
                kill_9(pid)

            def committed() -> dict[int, int]:
                stored = overlord.get(f"{TASKS}/supervisor/wiki_peons/status").json()["payload"]
                return {int(p): o for p, o in (stored["latestOffsets"] or {}).items()} if stored["aggregateLag"] == 0 \
                    and not stored["publishingTasks"] else {}

            wait_for(lambda: committed() == end_offsets, 300, "every offset read and published")
            valid = [r for r in records if r.kind == "valid"]

            def total() -> int | None:
                rows = broker.post("/druid/v2/sql", json={"query": 'SELECT SUM("count") AS n FROM wiki_peons'}).json()
                return rows[0]["n"] if rows and rows[0]["n"] == len(valid) else None

            assert wait_for(total, 60, "the broker to see every row") == len(valid)
            overlord.post(f"{TASKS}/supervisor/wiki_peons/terminate")
    finally:
        stop_all(processes)


@pytest.mark.spark
@pytest.mark.kafka
def test_a_restarted_overlord_adopts_the_reading_task_and_it_publishes_exactly_once(kafka_broker, cluster_dir) -> None:
    """The broker sees none of the worker's disk (a machine of its own): the reading task's unpublished rows reach it
    over the task's chat API."""
    uri = metadata_uri(cluster_dir)
    worker, broker, overlord = start_all(SluiceProcess("worker", cluster_dir, uri, "--capacity", "2"),
                                         SluiceProcess("broker", cluster_dir, uri, hidden=(cluster_dir / "worker",)),
                                         SluiceProcess("overlord", cluster_dir, uri))
    topic, ds = "wiki-adopt", "wiki_adopt"
    kafka_broker.create_topic(topic, 1)
    records = generate(10_000, seed=9)
    valid = sum(r.kind == "valid" for r in records)
    end_offsets = produce(kafka_broker.bootstrap_servers, topic, records, 1)
    try:
        with overlord.client() as client:
            spec = supervisor_spec(ds, topic, kafka_broker.bootstrap_servers, taskCount=1, taskDuration="PT1H")
            assert client.post(f"{TASKS}/supervisor", json=spec).status_code == 200
            reading = wait_for(lambda: [t for t in client.get(f"{TASKS}/supervisor/{ds}/status").json()["payload"]
                                        ["activeTasks"] if t["currentOffsets"] == {"0": end_offsets[0]}],
                               300, "the task to read everything")
        with broker.client() as sql_client:
            wait_for(lambda: sum_count(sql_client, ds) == valid, 60, "the broker to answer with the unpublished rows")
            assert sql_client.post("/druid/v2/sql", json={"query": "SELECT COUNT(*) AS n FROM sys.segments WHERE is_published = 1"}).json() \
                == [{"n": 0}]
        assert list((cluster_dir / "broker" / "realtime-cache").glob("*/*.parquet"))  # copies of the peon's persists
        overlord.kill()
        overlord = SluiceProcess("overlord", cluster_dir, uri).start().leading()
        with overlord.client() as client, broker.client() as sql_client:
            adopted = wait_for(lambda: client.get(f"{TASKS}/supervisor/{ds}/status").json()["payload"]["activeTasks"],
                               60, "the supervisor to adopt its running task")
            assert [t["id"] for t in adopted] == [reading[0]["id"]]
            assert client.post(f"{TASKS}/supervisor/{ds}/taskGroups/handoff", json={"taskGroupIds": [0]}).status_code \
                == 200
            assert wait_for(lambda: finished(client, reading[0]["id"]), 120, "its publish")["statusCode"] == "SUCCESS"
            # a query reads a snapshot up to half a second old: taken before the publish, it has the rows the task
            # had persisted then
            assert wait_for(lambda: sum_count(sql_client, ds) == valid, 30, "the broker to answer from the segments")
            client.post(f"{TASKS}/supervisor/{ds}/terminate")
    finally:
        stop_all((overlord, broker, worker))
