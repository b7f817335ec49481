"""The rebalancer's promises under faults, against the real kube-apiserver v1.36.2 with the tests' own
fault-injecting proxy (``ballast.testing.faultproxy``) between each replica and the API server.

Each scenario counts the eviction calls that reached the API server (the proxy's record), never the
rebalancer's own word for it:

- an eviction the API server performed but whose reply was lost (a 500, a reset) counts for the workload's
  window: with ``perWorkload: 1`` there is exactly one eviction across cycles;
- a leader whose Lease calls fail (503) makes no eviction call after another replica holds the Lease, even
  from the middle of its pace sleep; one told to stop (SIGTERM) during that sleep makes none either;
- a leader SIGKILLed during an eviction leaves its promises to the next: no eviction from the same workload
  inside the window, none from the same node on the same measurement;
- a throttling 429 (``Retry-After``, no budget) is counted apart from a PodDisruptionBudget's 429, whose
  body as kube-apiserver writes it names the budget, and no eviction call comes before ``Retry-After``;
- an outside write that takes the Lease stops the leader at its next check, not at its next renewal.

No kubelet and no controller-manager run: pods are created bound, owned by a ReplicaSet that does not
exist (no garbage collector runs), and marked Running and Ready through the status subresource; an
evicted pod keeps its deletionTimestamp. Load numbers: 8-CPU nodes, 1-CPU pods; a node at 0.95 with high
0.80 needs two victims.
"""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ballast.kube.client import Kube, load_api_client, path_for
from ballast.program.leader import LeaderElector
from ballast.testing.controlplane import ControlPlane, create_nodes, node_body, wait_until
from ballast.testing.faultproxy import FaultProxy
from tests.cluster.test_rebalancer_e2e import (
    NS,
    Rebalancer,
    load,
    mark_running,
    pods_of,
    set_load,
    write_policy,
)

pytestmark = pytest.mark.integration

EVICTION = r"/pods/[^/]+/eviction$"
FAST_LEASE = ("--lease-duration", "4s", "--renew-deadline", "3s", "--retry-period", "1s")


def replica(
    cp: ControlPlane, started: list[Any], policy: Path, lease: str, *flags: str
) -> tuple[Rebalancer, FaultProxy]:
    """A rebalancer talking to the API server through its own proxy (a later ``--kubeconfig`` wins)."""
    proxy = FaultProxy(cp)
    started.append(proxy)
    r = Rebalancer(cp, policy, "--kubeconfig", str(proxy.kubeconfig()), "--leader-elect",
                   "--lease-name", lease, *FAST_LEASE, *flags)  # fmt: skip
    started.append(r)
    return r, proxy


def workload(core: Any, app: str, n: int, node: str) -> set[str]:
    """``n`` bound, Running pods of one ReplicaSet on ``node``; returns their UIDs."""
    owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-5d8f7c9b6",
             "uid": str(uuid.uuid4()), "controller": True}  # fmt: skip
    for i in range(n):
        core.create_namespaced_pod(NS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{app}-{i}", "labels": {"app": app}, "ownerReferences": [owner]},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": "1", "memory": "256Mi"}}}]},
        })  # fmt: skip

    def running() -> bool:
        mark_running(core, app)
        return all(p.status.phase == "Running" for p in pods_of(core, app))

    wait_until(running, None, f"{n} pods of {app} Running")
    return {p.metadata.uid for p in pods_of(core, app)}


def hot_and_cool(core: Any) -> None:
    create_nodes(
        core, [node_body("node-a", annotations=load(0.95)), node_body("node-b", annotations=load(0.20))]
    )


def performed(*proxies: FaultProxy) -> list[Any]:
    """Eviction calls the API server performed (201), whatever the client was told."""
    return [s for p in proxies for s in p.requests("POST", EVICTION) if s.status == 201]


def terminating(core: Any, app: str) -> int:
    return sum(1 for p in pods_of(core, app) if p.metadata.deletion_timestamp)


def newer_measurement(core: Any, node: str, value: float) -> None:
    time.sleep(1.1)  # annotations carry whole seconds: the next one must be newer than the last eviction
    set_load(core, node, value)


@pytest.mark.parametrize("lost", [500, 0], ids=["500", "reset"])
def test_an_eviction_whose_reply_is_lost_counts_for_the_workload_window(
    clean: ControlPlane, started: list[Any], tmp_path: Path, lost: int
) -> None:
    core = clean.core()
    hot_and_cool(core)
    app = f"lost{lost}"
    workload(core, app, 4, "node-a")
    policy = write_policy(tmp_path / "policy.yaml", consecutiveAbnormal=1,
                          limits={"perNode": 2, "perCycle": 10, "perWorkload": 1, "workloadWindow": "10m",
                                  "evictionsPerSecond": 20})  # fmt: skip
    proxy = FaultProxy(clean)
    started.append(proxy)
    proxy.add(
        EVICTION, "lose", method="POST", status=lost, times=1
    )  # the API server evicts; the reply is lost
    r = Rebalancer(clean, policy, "--kubeconfig", str(proxy.kubeconfig()), "--leader-elect", "--lease-name",
                   f"lost-{lost}", *FAST_LEASE)  # fmt: skip
    started.append(r)
    wait_until(lambda: r.metric("ballast_rebalancer_evictions_total", result="unknown") >= 1, r.server,
               "an eviction of unknown outcome")  # fmt: skip
    assert len(performed(proxy)) == 1 and terminating(core, app) == 1
    # counted as done: the node waits for a newer measurement; one comes, still hot: the window holds
    wait_until(lambda: "waiting for a measurement newer" in (r.watched("node-a") or {}).get("status", ""),
               r.server, "node-a waiting for a newer measurement")  # fmt: skip
    limited = r.metric("ballast_rebalancer_evictions_total", result="limited")
    newer_measurement(core, "node-a", 0.95)
    wait_until(lambda: r.metric("ballast_rebalancer_evictions_total", result="limited") >= limited + 2,
               r.server, "the workload's window to stop the other pods in two cycles")  # fmt: skip
    assert len(proxy.requests("POST", EVICTION)) == 1 and terminating(core, app) == 1
    assert r.metric("ballast_rebalancer_evictions_total", result="error") == 0
    reasons = [
        e.reason for e in core.list_namespaced_event(NS).items if e.source.component == "ballast-rebalancer"
    ]
    assert reasons == ["RebalanceUnknown"]


def test_a_leader_whose_lease_calls_fail_makes_no_eviction_call_once_another_holds_it(
    clean: ControlPlane, started: list[Any], tmp_path: Path
) -> None:
    core = clean.core()
    hot_and_cool(core)
    for i in range(2):  # two workloads: the per-workload limit does not stop the second eviction
        workload(core, f"lease{i}", 2, "node-a")
    # one eviction every 20 s: the second waits in the pace sleep while the Lease is lost
    policy = write_policy(tmp_path / "policy.yaml", consecutiveAbnormal=1,
                          limits={"perNode": 2, "perCycle": 10, "perWorkload": 1, "workloadWindow": "10m",
                                  "evictionsPerSecond": 0.05})  # fmt: skip
    a, proxy_a = replica(clean, started, policy, "two-replicas")
    wait_until(lambda: a.view()["leader"], a.server, "replica a leading")
    b, proxy_b = replica(clean, started, policy, "two-replicas")
    wait_until(lambda: len(performed(proxy_a)) == 1, a.server, "a's first eviction")
    proxy_a.add(r"/leases", "answer", status=503, body=b'{"kind":"Status","code":503}')
    # b takes the Lease once a's record has not changed for the lease duration
    wait_until(lambda: b.view()["leader"], b.server, "replica b leading")
    taken = min(s.at for s in proxy_b.requests("PUT", "/leases/two-replicas") if s.status == 200)
    # a's pace sleep ends (20 s after its first eviction) while b holds the Lease, and its cycle ends

    def cycle_over() -> bool:
        evictions = (a.view()["lastCycle"] or {}).get("evictions") or []
        return len(evictions) == 2 and all(e.get("result") for e in evictions)

    wait_until(cycle_over, a.server, "the end of a's cycle")
    late = [s for s in proxy_a.requests("POST", EVICTION) if s.at > taken]
    assert late == [], f"replica a called the Eviction API {len(late)} time(s) after b took the Lease"
    assert a.view()["leader"] is False


def test_sigterm_during_the_pace_sleep_evicts_nothing_after_stepping_down(
    clean: ControlPlane, started: list[Any], tmp_path: Path
) -> None:
    core = clean.core()
    hot_and_cool(core)
    for i in range(2):
        workload(core, f"term{i}", 2, "node-a")
    policy = write_policy(tmp_path / "policy.yaml", consecutiveAbnormal=1,
                          limits={"perNode": 2, "perCycle": 10, "perWorkload": 1, "workloadWindow": "10m",
                                  "evictionsPerSecond": 0.1})  # fmt: skip
    r, proxy = replica(clean, started, policy, "sigterm")
    wait_until(lambda: len(performed(proxy)) == 1, r.server, "the first eviction")
    r.server.proc.send_signal(signal.SIGTERM)  # the second eviction waits 10 s in the pace sleep
    assert r.server.proc.wait(60) == 0
    assert len(proxy.requests("POST", EVICTION)) == 1
    assert "stepping down" in r.server.tail(200)
    lease = Kube(load_api_client(str(clean.kubeconfig))).get(
        path_for("coordination.k8s.io/v1", "leases", NS, "sigterm")
    )
    assert lease["spec"].get("holderIdentity") in (None, "")  # handed back


def test_a_new_leader_keeps_the_promises_of_one_killed_during_an_eviction(
    clean: ControlPlane, started: list[Any], tmp_path: Path
) -> None:
    core = clean.core()
    hot_and_cool(core)
    workload(core, "killed", 4, "node-a")
    policy = write_policy(tmp_path / "policy.yaml", consecutiveAbnormal=1,
                          limits={"perNode": 2, "perCycle": 10, "perWorkload": 1, "workloadWindow": "10m",
                                  "evictionsPerSecond": 20})  # fmt: skip
    a, proxy_a = replica(clean, started, policy, "failover")
    wait_until(lambda: a.view()["leader"], a.server, "replica a leading")
    # a dies between the eviction and recording its outcome: only the Event written before the call remains
    proxy_a.add(r"/namespaces/default/events/", "stall", method="PATCH")
    wait_until(lambda: len(performed(proxy_a)) == 1, a.server, "a's eviction")
    a.server.kill()
    b, proxy_b = replica(clean, started, policy, "failover")
    wait_until(lambda: b.view()["leader"], b.server, "replica b leading")
    # the same measurement: node-a waits for a newer one, as it would have under a
    wait_until(lambda: "waiting for a measurement newer" in (b.watched("node-a") or {}).get("status", ""),
               b.server, "node-a waiting for a newer measurement under b")  # fmt: skip
    assert performed(proxy_b) == []
    # a newer measurement, still hot: the workload's window (1 per 10 min) holds under b too
    newer_measurement(core, "node-a", 0.95)
    wait_until(lambda: b.metric("ballast_rebalancer_evictions_total", result="limited") >= 2, b.server,
               "the window to stop the other pods of the workload")  # fmt: skip
    assert proxy_b.requests("POST", EVICTION) == [] and terminating(core, "killed") == 1


def test_throttling_is_not_a_pdb_and_its_retry_after_holds_the_next_call(
    clean: ControlPlane, started: list[Any], tmp_path: Path
) -> None:
    core = clean.core()
    hot_and_cool(core)
    workload(core, "budget", 2, "node-a")  # protected by a PDB: the real API server refuses with a 429
    workload(core, "free", 2, "node-a")
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "budget", "namespace": NS},
           "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "budget"}}}}  # fmt: skip
    Kube(load_api_client(str(clean.kubeconfig))).create(
        path_for("policy/v1", "poddisruptionbudgets", NS), pdb
    )
    policy = write_policy(tmp_path / "policy.yaml", consecutiveAbnormal=1,
                          limits={"perNode": 2, "perCycle": 10, "perWorkload": 1, "workloadWindow": "10m",
                                  "evictionsPerSecond": 20})  # fmt: skip
    proxy = FaultProxy(clean)
    started.append(proxy)
    # priority and fairness's answer: plain text, Retry-After, no budget named
    throttle = proxy.add(r"/pods/free-\d/eviction$", "answer", method="POST", status=429, times=1,
                         headers={"Retry-After": "5", "Content-Type": "text/plain"},
                         body=b"Too many requests, please try again later.\n")  # fmt: skip
    r = Rebalancer(clean, policy, "--kubeconfig", str(proxy.kubeconfig()), "--leader-elect", "--lease-name",
                   "throttle", *FAST_LEASE)  # fmt: skip
    started.append(r)
    wait_until(
        lambda: len(performed(proxy)) == 1, r.server, "the free workload's eviction after the throttle"
    )
    assert throttle.hits == 1
    assert r.metric("ballast_rebalancer_evictions_total", result="throttled") == 1
    refused = [s for s in proxy.requests("POST", r"/pods/budget-\d/eviction$") if s.status == 429]
    assert refused, "the PDB's refusal by the real API server"
    assert r.metric("ballast_rebalancer_evictions_total", result="pdb_blocked") == len(refused)
    # no eviction call before Retry-After
    calls = proxy.requests("POST", EVICTION)
    (throttled_at,) = [s.at for s in calls if s.status is None]
    assert all(s.at >= throttled_at + 4.9 for s in calls if s.at > throttled_at)


def test_a_lease_taken_by_an_outside_write_stops_the_leader_at_its_next_check(clean: ControlPlane) -> None:
    kube = Kube(load_api_client(str(clean.kubeconfig)))
    elector = LeaderElector(
        kube, NS, "stolen", "replica-a", lease_duration=15, renew_deadline=10, retry_period=2
    )
    assert elector.try_acquire_or_renew() and elector.confirm()
    path = path_for("coordination.k8s.io/v1", "leases", NS, "stolen")
    lease = kube.get(path)
    lease["spec"]["holderIdentity"] = "an-operator"
    kube.replace(path, lease)
    assert not elector.confirm()  # the next check, well before the next renewal (2 s) would notice
    assert not elector.is_leader()
