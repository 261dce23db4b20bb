"""How Sluice's roles find each other: announcements with heartbeats in the metadata store.

Druid announces nodes in ZooKeeper; Sluice's roles already share the metadata store, so a node writes its
announcement there and refreshes it every `period`. A node whose heartbeat is older than the timeout is
gone (its process died, or it cannot reach the store), and the others act on that.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from sluice.metadata.store import Announcement, MetadataStore

log = logging.getLogger(__name__)

WORKER = "worker"
OVERLORD = "overlord"
BROKER = "broker"
#: where a worker serves the overlord's calls (Druid's WorkerResource), below the HTTP layer so that the overlord
#: that calls it does not import the server
WORKER_PREFIX = "/druid/worker/v1"

HEARTBEAT_PERIOD = 1.0
#: a node missing this many heartbeats in a row is taken for dead
MISSED_HEARTBEATS = 10


class Announcer:
    def __init__(self, metadata: MetadataStore, role: str, host: str, port: int,
                 payload: Callable[[], dict[str, Any]] = dict, period: float = HEARTBEAT_PERIOD) -> None:
        self._metadata = metadata
        self._where = (role, host, port)
        self._payload = payload
        self._period = period
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"announce-{role}", daemon=True)

    def start(self) -> None:
        self._metadata.announce(*self._where, self._payload())
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(5)
        self._metadata.unannounce(*self._where)

    def _beat(self) -> None:
        while not self._stopped.wait(self._period):
            try:
                self._metadata.announce(*self._where, self._payload())
            except Exception:  # a missed heartbeat is survivable; a dead announcer thread is not
                log.exception("heartbeat of %s:%s:%d failed", *self._where)


def live_nodes(metadata: MetadataStore, role: str, period: float = HEARTBEAT_PERIOD) -> list[Announcement]:
    return metadata.announcements(role, int(period * MISSED_HEARTBEATS * 1000))


def live_urls(metadata: MetadataStore, role: str) -> list[str]:
    """The base URLs of the live nodes of a role."""
    return [f"http://{node.host}:{node.port}" for node in live_nodes(metadata, role)]
