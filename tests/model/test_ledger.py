"""The ledger's index stays bounded: estimates expire in their TTL caches, and so do their index entries."""

from __future__ import annotations

from ballast.model.ledger import Ledger
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE


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


def _estimate(uid: str):
    from ballast.model.estimation import Estimate

    return Estimate(uid, uid, "n", 100, 1 << 20, 0.0)


def test_an_estimate_is_forgotten_its_ttl_after_it_was_stored() -> None:
    """The estimates' store keeps an entry exactly until ``stored + ttl`` (as ``TTLCache`` did), for every
    way the ledger reads it, and storing it again starts its time over."""
    from ballast.model.ledger import _Expiring

    clock = Clock()
    store = _Expiring(10, 30.0, clock)
    store["a"] = _estimate("a")
    clock.now += 29.999
    assert store.get("a") is not None and "a" in store and [u for u, _ in store.items()] == ["a"]
    store["a"] = _estimate("a")  # stored again: 30 s from now
    clock.now += 29.999
    assert "a" in store
    clock.now += 0.001
    assert store.get("a") is None and "a" not in store and list(store.items()) == []
    assert store.get("a", clock.now - 1) is not None  # a reader's own "now" decides for it
    assert store.pop("a") is None and len(store) == 0


def test_the_estimates_store_is_bounded_and_a_clock_stepped_back_returns_nothing_expired() -> None:
    from ballast.model.ledger import _Expiring

    clock = Clock()
    store = _Expiring(3, 30.0, clock)
    for uid in "abcd":
        store[uid] = _estimate(uid)
    assert len(store) == 3 and "a" not in store and all(u in store for u in "bcd")  # the first stored went
    clock.now += 31  # all expired; the next store drops them from the front
    store["e"] = _estimate("e")
    assert len(store) == 1
    clock.now -= 100  # the wall clock stepped back: "e" is younger than ever, nothing comes back
    assert [u for u, _ in store.items()] == ["e"]
