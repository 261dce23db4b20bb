"""Overlord leader election on a lease in the metadata store (Druid elects in ZooKeeper or with Kubernetes leases).

Every overlord runs a LeaderSelector: the leader renews its lease every `renew_s`; a standby takes the lease once it
has expired (or at once when the lease names its own address: its previous process is gone), with the next epoch.
The leader's metadata store is fenced with its epoch, so a leader that was paused past its lease can no longer
commit; when its renewal finds the lease taken, it is deposed and stops. `claim` decides, the store writes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sluice.metadata.store import Lease, MetadataStore

log = logging.getLogger(__name__)

OVERLORD_ROLE = "overlord"


def claim(current: Lease | None, me: str, my_epoch: int | None, now: int, lease_ms: int) -> Lease | None:
    """The lease `me` writes now: its own renewed, a new term when the lease is free, expired or names `me` from an
    earlier process; None while another holds it (or took it from `me`)."""
    if current is None:
        return Lease(me, 1, now + lease_ms)
    if current.leader == me and (my_epoch is None or current.epoch == my_epoch):
        return Lease(me, current.epoch if my_epoch is not None else current.epoch + 1, now + lease_ms)
    if current.expires <= now and my_epoch is None:
        return Lease(me, current.epoch + 1, now + lease_ms)
    return None


class LeaderSelector:
    def __init__(self, metadata: MetadataStore, me: str, on_elected: Callable[[], None],
                 on_deposed: Callable[[], None], lease_s: float = 15.0, renew_s: float = 3.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._metadata = metadata
        self.me = me
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._lease_ms = int(lease_s * 1000)
        self._renew = renew_s
        self._clock = clock
        self.epoch: int | None = None  # while this node leads
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="leader-selector", daemon=True)

    @property
    def is_leader(self) -> bool:
        return self.epoch is not None

    def leader(self) -> str | None:
        """The current leader's URL, if one is alive: its lease unexpired and renewed within the last two renewal
        periods (a dead leader's lease holds on until it expires, but nobody answers at its address)."""
        if self.is_leader:
            return self.me
        lease = self._metadata.lease(OVERLORD_ROLE)
        now = self._now()
        renewed_at = None if lease is None else lease.expires - self._lease_ms
        fresh = renewed_at is not None and renewed_at > now - 2 * self._renew * 1000
        return lease.leader if lease is not None and lease.expires > now and fresh else None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop competing; a leader gives its lease up, so that a standby need not wait for it to expire."""
        self._stopped.set()
        self._thread.join(10)
        if self.epoch is not None:
            epoch = self.epoch
            self._metadata.claim_lease(OVERLORD_ROLE, lambda current: Lease(self.me, epoch, 0)
                                       if current is not None and (current.leader, current.epoch) == (self.me, epoch)
                                       else None)
            self.epoch = None

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def _loop(self) -> None:
        while not self._stopped.is_set():
            try:
                self._round()
            except Exception:  # the store may be unreachable for a moment; the lease decides, not this thread
                log.exception("leader election round failed")
            self._stopped.wait(self._renew)

    def _round(self) -> None:
        lease = self._metadata.claim_lease(OVERLORD_ROLE, lambda current: claim(
            current, self.me, self.epoch, self._now(), self._lease_ms))
        mine = lease is not None and lease.leader == self.me and lease.expires > self._now()
        if mine and self.epoch is None:
            assert lease is not None
            self.epoch = lease.epoch
            self._metadata.fence(OVERLORD_ROLE, self.me, lease.epoch)
            log.warning("%s is the overlord leader (epoch %d)", self.me, lease.epoch)
            # the leader's services start in a thread of their own: renewing the lease must not wait for them
            threading.Thread(target=self._on_elected, name="leader-services", daemon=True).start()
        elif not mine and self.epoch is not None:
            log.error("%s lost the overlord lease (epoch %d) to %s: stepping down", self.me, self.epoch,
                      lease.leader if lease else "nobody")
            self.epoch = None
            self._stopped.set()
            self._on_deposed()
