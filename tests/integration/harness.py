"""Helpers for tests that drive a running Sluice node over HTTP."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

import httpx

from sluice.dev import free_port
from sluice.server.node import Node, NodeConfig

EXAMPLE = json.loads((Path(__file__).resolve().parents[2] / "examples" / "wikipedia-kafka-supervisor.json").read_text())


@contextmanager
def running_node(work_dir: Path, **config: Any) -> Iterator[Node]:
    """An all-in-one node on a free port (NodeConfig's other fields as given); its supervisors are terminated
    before it stops, so that no task outlives the test."""
    node = Node(NodeConfig(port=free_port(), work_dir=work_dir, **config))
    node.start()
    try:
        yield node
    finally:
        node.supervisors.terminate_all()
        node.stop()


def supervisor_spec(data_source: str, topic: str, bootstrap: str, **io: Any) -> dict[str, Any]:
    """The example spec, pointed at a test topic, with a fast supervisor loop."""
    spec = copy.deepcopy(EXAMPLE)
    spec["spec"]["dataSchema"]["dataSource"] = data_source
    spec["spec"]["ioConfig"].update({"topic": topic, "consumerProperties": {"bootstrap.servers": bootstrap},
                                     "startDelay": "PT0S", "period": "PT1S", **io})
    return spec


def sql(http: httpx.Client, query: str) -> list[dict[str, Any]]:
    response = http.post("/druid/v2/sql", json={"query": query})
    assert response.status_code == 200, response.text
    return response.json()


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if result := condition():
            return result
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def committed_offsets(node: Node, data_source: str) -> dict[int, int]:
    stored = node.metadata.get_stream_offsets(data_source)
    return stored.offsets if stored else {}


def active_tasks(http: httpx.Client, spec_id: str) -> list[dict[str, Any]]:
    return http.get(f"/druid/indexer/v1/supervisor/{spec_id}/status").json()["payload"]["activeTasks"]


def read_up_to(http: httpx.Client, spec_id: str, offsets: dict[int, int]) -> bool:
    """The supervisor has one reading task, and it has read up to `offsets` exactly."""
    return [t["currentOffsets"] for t in active_tasks(http, spec_id)] == [{str(p): o for p, o in offsets.items()}]


def reading(http: httpx.Client, spec_id: str) -> bool:
    """Some reading task of the supervisor has moved past its starting offsets."""
    return any(sum((t["currentOffsets"] or {}).values()) > sum(t["startingOffsets"].values())
               for t in active_tasks(http, spec_id))


def read_to(http: httpx.Client, spec_id: str, offsets: dict[int, int]) -> bool:
    """Some reading task's current offsets are exactly these."""
    expected = {str(p): o for p, o in offsets.items()}
    return any(t["currentOffsets"] == expected for t in active_tasks(http, spec_id))
