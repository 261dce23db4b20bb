"""Two overlords against one metadata store: one leads (isLeader 200, the other 404 and a 307 to it), and when the
leader is killed with SIGKILL while a supervisor's tasks read, the standby takes over within twice the lease, adopts
the running peons and the supervisor, and the data stays exact: two leaders killed in turn, 0 rows lost, 0 doubled;
the coordinator duties run on the last one."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from sluice.dev.sample_data import generate, produce
from tests.integration.harness import supervisor_spec, wait_for
from tests.integration.processes import SluiceProcess, start_all, stop_all

TASKS = "/druid/indexer/v1"
LEASE_S = 4.0


@pytest.mark.spark
@pytest.mark.kafka
def test_a_standby_takes_over_from_a_killed_leader_and_the_data_stays_exact(kafka_broker, tmp_path: Path) -> None:
    config = tmp_path / "runtime.properties"
    config.write_text(f"sluice.leader.leaseDuration=PT{LEASE_S:.0f}S\nsluice.leader.renewPeriod=PT1S\n"
                      "druid.coordinator.period=PT1S\n")
    uri = f"sqlite:///{tmp_path / 'metadata.db'}"

    def overlord(name: str) -> SluiceProcess:
        return SluiceProcess("overlord", tmp_path, uri, "--config", str(config), name=name)

    *overlords, worker, broker = start_all(overlord("overlord_0"), overlord("overlord_1"),
                                           SluiceProcess("worker", tmp_path, uri, "--capacity", "4"),
                                           SluiceProcess("broker", tmp_path, uri))
    others = [worker, broker]
    topic = "wiki-failover"
    kafka_broker.create_topic(topic, 2)
    records = generate(12_000, seed=11)
    parts = [records[i * 4_000:(i + 1) * 4_000] for i in range(3)]
    produce(kafka_broker.bootstrap_servers, topic, parts[0], 2)
    takeovers: list[float] = []
    try:
        [leader] = [p for p in overlords if p.leads()]
        [standby] = [p for p in overlords if p is not leader]
        assert httpx.get(f"{standby.url}{TASKS}/isLeader").status_code == 404
        assert httpx.get(f"{standby.url}{TASKS}/leader").text == leader.url
        redirected = httpx.get(f"{standby.url}{TASKS}/supervisor?state=true")
        assert redirected.status_code == 307
        assert redirected.headers["Location"] == f"{leader.url}{TASKS}/supervisor?state=true"
        spec = supervisor_spec("wiki_failover", topic, kafka_broker.bootstrap_servers, taskDuration="PT30S")
        assert httpx.post(f"{standby.url}{TASKS}/supervisor", json=spec, follow_redirects=True).status_code == 200

        for part in parts[1:]:
            def reading() -> bool:
                # the report asks each task for its offsets: a peon still starting Spark answers late
                payload = httpx.get(f"{leader.url}{TASKS}/supervisor/wiki_failover/status", timeout=30).json()["payload"]
                return bool(payload["activeTasks"]) and all(t.get("currentOffsets") for t in payload["activeTasks"])

            wait_for(reading, 300, "the supervisor's tasks reading")
            leader.kill()
            killed = time.monotonic()
            overlords.remove(leader)
            leader = wait_for(lambda: next((p for p in overlords if p.leads()), None), 3 * LEASE_S, "a new leader")
            takeovers.append(time.monotonic() - killed)
            overlords.append(overlord(f"overlord_{len(takeovers) + 1}").start())  # back, as a standby
            assert not overlords[-1].leads()
            ends = produce(kafka_broker.bootstrap_servers, topic, part, 2)

        assert max(takeovers) < 2 * LEASE_S, takeovers
        with httpx.Client(base_url=leader.url, timeout=60) as client, others[1].client() as broker:

            def caught_up() -> bool:
                payload = client.get(f"{TASKS}/supervisor/wiki_failover/status").json()["payload"]
                latest = {int(p): o for p, o in (payload["latestOffsets"] or {}).items()}
                return latest == ends and payload["aggregateLag"] == 0 and not payload["publishingTasks"]

            wait_for(caught_up, 300, "every offset read")
            valid = sum(1 for r in records if r.kind == "valid")

            def total() -> int | None:
                rows = broker.post("/druid/v2/sql", json={"query": 'SELECT SUM("count") AS n FROM wiki_failover'}).json()
                return rows[0]["n"] if rows else None

            assert wait_for(lambda: total() == valid and total(), 120, "the broker to see every row") == valid
            client.post(f"{TASKS}/supervisor/wiki_failover/terminate")

            # the coordinator duties moved with the leadership: the third leader applies a rule set now
            assert client.post("/druid/coordinator/v1/rules/wiki_failover", json=[{"type": "dropForever"}]
                               ).status_code == 200

            def active_segments() -> int:
                return broker.post("/druid/v2/sql", json={"query": "SELECT COUNT(*) AS n FROM sys.segments WHERE "
                                                                   "datasource = 'wiki_failover' AND is_active = 1"
                                                          }).json()[0]["n"]

            assert wait_for(lambda: active_segments() == 0, 60, "the retention duty to drop every segment") is True
    finally:
        stop_all([*others, *overlords])
