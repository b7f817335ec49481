"""Lease leader election against the fake API server, with hand-driven clocks (no sleeping)."""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

import pytest

from ballast.kube.client import Kube, KubeConfigError
from ballast.program.leader import (
    LeaderElector,
    LeaderFlagsError,
    connect_elected,
    leader_flags_problem,
    micro_time,
)
from ballast.testing.fakekube import FakeKube

NS = "ballast-system"
WALL0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return WALL0 + self.t


@pytest.fixture
def kube(kube_client) -> Kube:
    return Kube(kube_client)


def elector(kube: Kube, identity: str, clock: Clock, **kw) -> LeaderElector:
    return LeaderElector(
        kube, NS, "ballast-annotator", identity, clock=clock.wall, monotonic=clock.mono, **kw
    )


def spec(fake: FakeKube) -> dict:
    obj = fake.get("leases", "ballast-annotator", namespace=NS)
    assert obj is not None
    return obj["spec"]


def test_first_candidate_creates_and_holds(fake_kube: FakeKube, kube: Kube) -> None:
    clock = Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew() and a.is_leader()
    assert not b.try_acquire_or_renew() and not b.is_leader()
    s = spec(fake_kube)
    assert s["holderIdentity"] == "a" and s["leaseDurationSeconds"] == 15 and s["leaseTransitions"] == 0
    assert s["renewTime"] == micro_time(clock.wall())


def test_stalled_leader_stops_writing_before_anyone_takes_over(fake_kube: FakeKube, kube: Kube) -> None:
    clock = Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew()
    t0 = clock.t
    assert not b.try_acquire_or_renew()  # b observes a's record at t0
    # a stalls (no renewals). It may write only until t0 + renew deadline (10s) ...
    clock.t = t0 + 9.99
    assert a.is_leader()
    clock.t = t0 + 10
    assert not a.is_leader()
    # ... while b waits the full lease duration (15s) from when it observed the record.
    clock.t = t0 + 14.9
    assert not b.try_acquire_or_renew()
    clock.t = t0 + 15
    assert b.try_acquire_or_renew() and b.is_leader() and not a.is_leader()
    s = spec(fake_kube)
    assert s["holderIdentity"] == "b" and s["leaseTransitions"] == 1
    # a comes back: it sees b's record and does not write.
    assert not a.try_acquire_or_renew() and not a.is_leader()


def test_observed_time_not_wall_clock_decides_expiry(fake_kube: FakeKube, kube: Kube) -> None:
    # A renewTime far in the past (a skewed clock) does not make the lease look expired to a newcomer.
    clock = Clock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew()
    fake_kube.patch(
        "leases", "ballast-annotator", {"spec": {"renewTime": micro_time(WALL0 - 86400)}}, namespace=NS
    )
    b = elector(kube, "b", clock)
    assert not b.try_acquire_or_renew()


def test_renewal_keeps_acquire_time_and_uses_the_cached_lease(fake_kube: FakeKube, kube: Kube) -> None:
    clock = Clock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew()
    acquired = spec(fake_kube)["acquireTime"]
    fake_kube.clear_requests()
    for _ in range(3):
        clock.t += 2
        assert a.try_acquire_or_renew()
    s = spec(fake_kube)
    assert s["acquireTime"] == acquired and s["renewTime"] == micro_time(clock.wall())
    assert s["leaseTransitions"] == 0
    assert [r.method for r in fake_kube.requests] == ["PUT", "PUT", "PUT"]  # no GET while leading


def test_optimistic_concurrency_lets_one_of_two_racers_win(fake_kube: FakeKube, kube: Kube) -> None:
    clock = Clock()
    old = elector(kube, "old", clock)
    assert old.try_acquire_or_renew()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert not a.try_acquire_or_renew() and not b.try_acquire_or_renew()  # both observe "old"
    stale = fake_kube.get("leases", "ballast-annotator", namespace=NS)
    clock.t += 16  # "old" is gone; both candidates now see an expired lease
    assert a.try_acquire_or_renew()
    # b decides on the same (stale) record a just replaced: its update carries the old resourceVersion.
    b.kube = _StaleGet(kube, stale)
    assert not b.try_acquire_or_renew() and not b.is_leader()
    assert spec(fake_kube)["holderIdentity"] == "a"
    conflicts = [r for r in fake_kube.requests if r.method == "PUT" and r.status == 409]
    assert len(conflicts) == 1


class _StaleGet:
    """A Kube whose GET of the lease returns an old copy (a read that raced with another writer)."""

    def __init__(self, kube: Kube, lease: dict) -> None:
        self._kube = kube
        self._lease = lease

    def get(self, path: str, query=None) -> dict:
        return self._lease

    def __getattr__(self, name: str):
        return getattr(self._kube, name)


def test_release_hands_over_at_once(fake_kube: FakeKube, kube: Kube) -> None:
    clock = Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release() and not a.is_leader()
    s = spec(fake_kube)
    assert s["holderIdentity"] == "" and s["leaseDurationSeconds"] == 1
    assert b.try_acquire_or_renew()  # no waiting: nobody holds it
    assert spec(fake_kube)["holderIdentity"] == "b"
    assert not a.release()  # not the holder any more: nothing to release


def test_api_errors_are_not_leadership(fake_kube: FakeKube, kube: Kube) -> None:
    clock = Clock()
    a = elector(kube, "a", clock)
    fake_kube.fail_next("*", "/leases", 500, count=None)
    assert not a.try_acquire_or_renew() and not a.is_leader()
    assert "500" in a.last_error
    fake_kube.clear_injections()
    assert a.try_acquire_or_renew()
    # The API fails while leading: a keeps writing only until its renew deadline.
    fake_kube.fail_next("PUT", "/leases", 503, count=None)
    clock.t += 2
    assert not a.try_acquire_or_renew()
    assert a.is_leader()  # 2s after the last good renewal
    clock.t += 8
    assert not a.is_leader()


def test_timing_must_be_consistent(kube: Kube) -> None:
    clock = Clock()
    with pytest.raises(ValueError, match="longer than the renew deadline"):
        elector(kube, "a", clock, lease_duration=10, renew_deadline=10)
    with pytest.raises(ValueError, match="retry period"):
        elector(kube, "a", clock, renew_deadline=2, retry_period=2)


def test_leader_flags_problem_is_the_electors_own_rule() -> None:
    """The start-up check of the leader flags refuses exactly what ``LeaderElector`` would refuse."""

    def flags(lease: float, renew: float, retry: float) -> Namespace:
        return Namespace(lease_duration=lease, renew_deadline=renew, retry_period=retry)

    assert leader_flags_problem(flags(15, 10, 2)) is None
    assert "(got 5s, 10s, 2s)" in (leader_flags_problem(flags(5, 10, 2)) or "")
    assert leader_flags_problem(flags(15, 2.4, 2)) is not None  # 2.4 is not > 1.2 x 2
    assert leader_flags_problem(flags(15, 2.41, 2)) is None


def test_connect_elected_checks_the_flags_and_names_the_replica(
    fake_kube: FakeKube, kubeconfig: Path
) -> None:
    """The start of every elected program (annotator, rebalancer): bad leader flags and a kubeconfig that
    does not load are configuration errors; the client names the program and the replica on every call."""

    def flags(kubeconfig: str, identity: str | None, lease: float = 15) -> Namespace:
        return Namespace(lease_duration=lease, renew_deadline=10, retry_period=2, identity=identity,
                         kubeconfig=kubeconfig, api_timeout=5.0)  # fmt: skip

    with pytest.raises(LeaderFlagsError, match=r"\(got 5s, 10s, 2s\)"):
        connect_elected(flags(str(kubeconfig), "r-7", lease=5), "ballast-test/1.0")
    with pytest.raises(KubeConfigError):
        connect_elected(flags(str(kubeconfig.parent / "missing"), "r-7"), "ballast-test/1.0")
    identity, kube = connect_elected(flags(str(kubeconfig), "r-7"), "ballast-test/1.0")
    try:
        kube.get("/api/v1/nodes")
    finally:
        kube.close()
    assert identity == "r-7"
    assert {r.headers.get("User-Agent") for r in fake_kube.requests} == {"ballast-test/1.0 (r-7)"}
    identity, kube = connect_elected(flags(str(kubeconfig), None), "ballast-test/1.0")
    kube.close()
    assert identity and identity != "r-7"  # the host's, with a random suffix


def test_confirm_reads_the_lease_back_and_a_stolen_lease_stops_at_once(
    fake_kube: FakeKube, kube: Kube
) -> None:
    clock = Clock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew() and a.term == 1
    assert a.confirm()
    # an outside write (an operator, a buggy client) hands the Lease to someone else
    lease = fake_kube.get("leases", "ballast-annotator", namespace=NS)
    assert lease is not None
    lease["spec"]["holderIdentity"] = "thief"
    fake_kube.update(lease)
    assert a.is_leader()  # its own bookkeeping still says yes until the next renewal ...
    assert not a.confirm()  # ... the read-back does not, and leadership ends there
    assert not a.is_leader()


def test_confirm_says_no_past_the_renew_deadline_whatever_the_read_says(
    fake_kube: FakeKube, kube: Kube
) -> None:
    clock = Clock()
    a = elector(kube, "a", clock, renew_deadline=10.0)
    assert a.try_acquire_or_renew()
    clock.t += 9.9
    assert a.confirm()
    clock.t += 0.2  # no renewal for 10.1 s: the Lease still names a, and no other replica has taken it
    assert not a.confirm()


def test_a_term_starts_only_when_the_lease_changes_hands(fake_kube: FakeKube, kube: Kube) -> None:
    clock = Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    assert a.try_acquire_or_renew() and a.try_acquire_or_renew() and a.term == 1
    assert a.release()
    assert b.try_acquire_or_renew() and b.term == 1
    assert b.release()
    assert a.try_acquire_or_renew() and a.term == 2


def test_a_renewal_that_finds_the_lease_taken_ends_leadership_at_that_attempt(
    fake_kube: FakeKube, kube: Kube
) -> None:
    clock = Clock()
    a = elector(kube, "a", clock)
    assert a.try_acquire_or_renew()
    lease = fake_kube.get("leases", "ballast-annotator", namespace=NS)
    assert lease is not None
    lease["spec"]["holderIdentity"] = "thief"
    fake_kube.update(lease)
    clock.t += 2
    # the renewal from the cached Lease conflicts (409); the Lease is read at once, not at the next retry
    assert not a.try_acquire_or_renew()
    assert not a.is_leader()
    assert spec(fake_kube)["holderIdentity"] == "thief"
