"""The ledger's index stays bounded: estimates expire in their TTL caches, and so do their index entries."""

from __future__ import annotations

from app.model.ledger import Ledger
from app.model.policy import load_policy
from tests.conftest import POLICY_FILE


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_index_entries_of_expired_estimates_leave_even_for_nodes_nobody_asks_about() -> None:
    clock = Clock()
    ledger = Ledger(load_policy(POLICY_FILE), clock)
    for i in range(3001):
        ledger.bound(None, f"uid-{i}", f"node-{i}", clock.now, size=(100, 1 << 20))
    assert len(ledger._by_node) == 3001
    clock.now += 2 * 86400  # every estimate has expired (the longest TTL is 1d + 5m); nobody asks
    ledger.bound(None, "uid-new", "node-new", clock.now, size=(100, 1 << 20))
    assert set(ledger._by_node) == {"node-new"}
