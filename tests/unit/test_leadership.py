"""Overlord leader election as decisions, and its lease and fence in a real SQLite metadata store."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice.metadata.store import Lease, MetadataStore, NotLeader
from sluice.overlord.leadership import OVERLORD_ROLE, claim

A, B = "http://127.0.0.1:8090", "http://127.0.0.1:8091"
LEASE = 10_000


@pytest.mark.parametrize(("current", "me", "my_epoch", "now", "written"), [
    (None, A, None, 0, Lease(A, 1, LEASE)),  # nobody leads: take the first term
    (Lease(A, 1, LEASE), A, 1, 5_000, Lease(A, 1, 5_000 + LEASE)),  # the leader renews
    (Lease(A, 1, LEASE), A, 1, 12_000, Lease(A, 1, 12_000 + LEASE)),  # late, but nobody took it: still its own
    (Lease(A, 1, LEASE), B, None, 5_000, None),  # a standby waits while the lease holds
    (Lease(A, 1, LEASE), B, None, LEASE, Lease(B, 2, 2 * LEASE)),  # expired: the next term is the standby's
    (Lease(B, 2, 2 * LEASE), A, 1, 11_000, None),  # the old leader finds its lease taken: it writes nothing
    (Lease(A, 1, LEASE), A, None, 3_000, Lease(A, 2, 3_000 + LEASE)),  # its own address, from a dead process
])
def test_who_writes_the_lease(current: Lease | None, me: str, my_epoch: int | None, now: int,
                              written: Lease | None) -> None:
    assert claim(current, me, my_epoch, now, LEASE) == written


def test_a_deposed_leader_is_fenced_out_of_every_commit(tmp_path: Path) -> None:
    first = MetadataStore(f"sqlite:///{tmp_path / 'metadata.db'}")
    first.create_tables()
    second = MetadataStore(first.uri)
    assert first.claim_lease(OVERLORD_ROLE, lambda lease: claim(lease, A, None, 0, LEASE)) == Lease(A, 1, LEASE)
    first.fence(OVERLORD_ROLE, A, 1)
    first.set_rules("wiki", [{"type": "loadForever"}], "a", "", None)  # the leader writes
    # B waits out the lease, then takes it; A, paused all along, comes back and tries to commit
    assert second.claim_lease(OVERLORD_ROLE, lambda lease: claim(lease, B, None, 5_000, LEASE)) == Lease(A, 1, LEASE)
    assert second.claim_lease(OVERLORD_ROLE, lambda lease: claim(lease, B, None, LEASE, LEASE)) == Lease(B, 2,
                                                                                                       2 * LEASE)
    second.fence(OVERLORD_ROLE, B, 2)
    with pytest.raises(NotLeader, match=r"http://127.0.0.1:8090 is no longer the overlord leader \(epoch 1\)"):
        first.set_rules("wiki", [{"type": "dropForever"}], "a", "", None)
    with pytest.raises(NotLeader):
        first.reset_stream_offsets("wiki", _offsets())
    second.set_rules("wiki", [{"type": "loadByPeriod", "period": "P1D"}], "b", "", None)
    assert first.rules() == {"wiki": [{"type": "loadByPeriod", "period": "P1D"}]}  # reads are not fenced
    assert first.claim_lease(OVERLORD_ROLE, lambda lease: claim(lease, A, 1, 12_000, LEASE)) == Lease(B, 2, 2 * LEASE)


def _offsets():
    from sluice.metadata.offsets import StreamOffsets

    return StreamOffsets("edits", {0: 5})
