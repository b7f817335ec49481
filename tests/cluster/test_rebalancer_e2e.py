"""``ballast rebalancer`` against the real control plane: kube-apiserver v1.36.2 (Eviction API,
PodDisruptionBudgets, Events, Leases), kube-controller-manager (a Deployment's ReplicaSet recreates what is
evicted, the disruption controller computes PDB status) and, where replacements must be placed, the real
kube-scheduler calling the Ballast extender.

The rebalancer runs as its own process (``ballast rebalancer --kubeconfig``, Lease leader election on) with
a 1 s interval; the tests write the nodes' load annotations the annotator would write. No kubelet runs:
pods are marked Running and Ready through the status subresource, so PDBs count them healthy (an evicted
Pending pod would ignore its PDB), and an evicted pod keeps its deletionTimestamp (no kubelet confirms).

Load numbers: 8-CPU nodes, 1-CPU pods (estimate 0.85 CPU = 0.10625 of the node). A node at 0.95 with
high 0.80 needs two victims (0.95 -> 0.84375 -> 0.7375).
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from ballast.testing.binaries import MissingPiece
from ballast.testing.controlplane import (
    ControlPlane,
    Server,
    create_nodes,
    free_port,
    node_body,
    scraped,
    spawn,
    wait_until,
)
from ballast.testing.parts import missing_part
from tests.cluster.test_extender_e2e import SCHEDULER, Extender, ballast  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "scheduler_config" / "policy.yaml"
NS = "default"
METRIC = "cpu_usage_avg_5m"


def load(value: float) -> dict[str, str]:
    return {METRIC: f"{value:.5f},{datetime.now(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"}


def write_policy(path: Path, **rebalance: Any) -> Path:
    doc = yaml.safe_load(POLICY.read_text())
    doc["spec"]["rebalance"] = {
        "thresholds": [{"name": METRIC, "high": 0.80, "low": 0.45}],
        "consecutiveAbnormal": 3,
        "consecutiveNormal": 2,
        "limits": {"perNode": 2, "perCycle": 10, "perWorkload": 2, "workloadWindow": "5m",
                   "evictionsPerSecond": 20},
        **rebalance,
    }  # fmt: skip
    path.write_text(yaml.safe_dump(doc))
    return path


class Rebalancer:
    """``ballast rebalancer`` as a subprocess; ``view()`` reads its ``/rebalance``, ``metric()`` its
    ``/metrics``."""

    def __init__(self, cp: ControlPlane, policy: Path, *flags: str) -> None:
        assert cp.workdir
        self.port = free_port()
        argv = [sys.executable, "-m", "ballast", "rebalancer", "--kubeconfig", str(cp.kubeconfig),
                "--policy", str(policy), "--interval", "1s", "--metrics-address", "127.0.0.1",
                "--metrics-port", str(self.port), "--lease-namespace", NS, *flags]  # fmt: skip
        self.server: Server = spawn(f"rebalancer-{self.port}", argv, cp.workdir, env=dict(os.environ))

        def ready() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5) as resp:
                return resp.status == 200

        wait_until(ready, self.server, "ballast rebalancer /readyz")

    def view(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/rebalance", timeout=5) as resp:
            return json.load(resp)

    def watched(self, node: str) -> dict[str, Any] | None:
        cycle = self.view().get("lastCycle") or {}
        return next((n for n in cycle.get("watched", []) if n["node"] == node), None)

    def metric(self, name: str, **labels: str) -> float:
        return scraped(f"http://127.0.0.1:{self.port}", name, **labels)

    def stop(self) -> None:
        self.server.stop()

    def close(self) -> None:
        """Kill the process: the test is over, there is nothing to step down for."""
        self.server.kill()


@pytest.fixture
def kcm(cluster: ControlPlane) -> Iterator[ControlPlane]:
    """The control plane with kube-controller-manager; afterwards the workloads go first (orphaning their
    pods), so the ``cluster`` fixture's cleanup is not fought by a ReplicaSet recreating what it deletes."""
    try:
        cluster.start_controller_manager()
    except MissingPiece as exc:
        missing_part(str(exc))
    try:
        yield cluster
    finally:
        # orphaning needs the garbage collector (in kube-controller-manager): wait for it before stopping it
        cluster.kubectl("delete", "deployment,replicaset,poddisruptionbudget", "--all", "-n", NS,
                        "--cascade=orphan", "--timeout=120s", check=False)  # fmt: skip
        cluster.stop_controller_manager()


@pytest.fixture
def running(kcm: ControlPlane) -> Iterator[list[Rebalancer]]:
    started: list[Rebalancer] = []
    yield started
    for r in started:
        r.stop()


def deployment(name: str, replicas: int, *, node: str | None = None, scheduler: str | None = None) -> dict:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "1", "memory": "256Mi"}}}],
        "terminationGracePeriodSeconds": 30,
    }  # fmt: skip
    if node:
        spec["nodeName"] = node
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def apply(cp: ControlPlane, *objects: dict[str, Any]) -> None:
    cp.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(o) for o in objects))


def pods_of(core: Any, app: str) -> list[Any]:
    return list(core.list_namespaced_pod(NS, label_selector=f"app={app}").items)


def mark_running(core: Any, app: str) -> None:
    """What a kubelet would report: Running and Ready (a PDB counts only Ready pods as healthy)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for pod in pods_of(core, app):
        if pod.spec.node_name and pod.status.phase != "Running" and not pod.metadata.deletion_timestamp:
            core.patch_namespaced_pod_status(pod.metadata.name, NS, {"status": {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
            }})  # fmt: skip


def bound_running(core: Any, app: str, n: int) -> list[Any]:
    def ok() -> list[Any] | None:
        mark_running(core, app)
        pods = [p for p in pods_of(core, app) if p.spec.node_name and p.status.phase == "Running"]
        return pods if len(pods) >= n else None

    found: list[Any] = []

    def done() -> bool:
        nonlocal found
        found = ok() or []
        return bool(found)

    wait_until(done, None, f"{n} pods of {app} bound and Running")
    return found


def events(core: Any, reason: str, uids: set[str] | None = None) -> list[Any]:
    """Events with this reason (on these pods: earlier tests' Events stay in the namespace)."""
    return [
        e
        for e in core.list_namespaced_event(NS).items
        if e.reason == reason and (uids is None or e.involved_object.uid in uids)
    ]


def set_load(core: Any, node: str, value: float) -> None:
    core.patch_node(node, {"metadata": {"annotations": load(value)}})


def test_a_hot_node_is_rebalanced_within_the_limits_onto_cool_nodes(
    kcm: ControlPlane,
    ballast: Extender,  # noqa: F811 (the fixture imported above)
    running: list[Rebalancer],
    tmp_path: Path,
) -> None:
    core = kcm.core()
    create_nodes(core, [node_body("node-a", annotations=load(0.20))])  # room for four under 0.65
    apply(kcm, deployment("web", 4, scheduler=SCHEDULER))
    originals = {p.metadata.uid for p in bound_running(core, "web", 4)}
    # cool nodes arrive, and node-a turns hot
    create_nodes(
        core, [node_body("node-b", annotations=load(0.20)), node_body("node-c", annotations=load(0.20))]
    )
    set_load(core, "node-a", 0.95)
    r = Rebalancer(kcm, write_policy(tmp_path / "policy.yaml"), "--leader-elect")
    running.append(r)
    wait_until(lambda: r.metric("ballast_rebalancer_evictions_total", result="evicted") >= 2, r.server,
               "two evictions")  # fmt: skip

    def replaced() -> bool:
        mark_running(core, "web")
        live = [p for p in pods_of(core, "web") if not p.metadata.deletion_timestamp and p.spec.node_name]
        return len(live) == 4 and sum(p.metadata.uid not in originals for p in live) == 2

    wait_until(replaced, None, "two replacements bound")
    pods = pods_of(core, "web")
    evicted = [p for p in pods if p.metadata.deletion_timestamp]
    assert len(evicted) == 2 and {p.metadata.uid for p in evicted} <= originals
    assert {p.spec.node_name for p in evicted} == {"node-a"}
    new = [p for p in pods if p.metadata.uid not in originals]
    assert {p.spec.node_name for p in new} <= {"node-b", "node-c"}, [p.spec.node_name for p in new]
    # the Events say why, on the evicted pods
    reasons = {e.involved_object.uid: e.message for e in events(core, "Rebalanced")}
    for p in evicted:
        assert reasons[p.metadata.uid].startswith("evicted: cpu_usage_avg_5m 0.95 > high 0.80 for ")
        assert "; fits on node-" in reasons[p.metadata.uid]
    # node-a waits for a measurement newer than its evictions; one arrives, still hot: the workload's
    # limit (2 per 5m) holds the rest
    wait_until(lambda: "waiting for a measurement newer" in r.watched("node-a")["status"], r.server,
               "node-a waiting for a newer measurement")  # fmt: skip
    time.sleep(1.1)  # annotations carry whole seconds
    set_load(core, "node-a", 0.95)
    wait_until(lambda: r.metric("ballast_rebalancer_evictions_total", result="limited") >= 2, r.server,
               "the limit to stop further evictions")  # fmt: skip
    assert r.metric("ballast_rebalancer_evictions_total", result="evicted") == 2
    assert sum(1 for p in pods_of(core, "web") if p.metadata.deletion_timestamp) == 2
    assert r.view()["leader"] is True


def hot_and_cool(core: Any, cool: float = 0.20) -> None:
    create_nodes(
        core, [node_body("node-a", annotations=load(0.95)), node_body("node-b", annotations=load(cool))]
    )


def test_a_pdb_blocks_every_eviction(kcm: ControlPlane, running: list[Rebalancer], tmp_path: Path) -> None:
    core = kcm.core()
    hot_and_cool(core)
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "db", "namespace": NS},
           "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": "db"}}}}  # fmt: skip
    apply(kcm, deployment("db", 3, node="node-a"), pdb)
    uids = {p.metadata.uid for p in bound_running(core, "db", 3)}

    def healthy() -> bool:
        status = json.loads(kcm.kubectl("get", "pdb", "db", "-n", NS, "-o", "json")).get("status", {})
        return status.get("currentHealthy") == 3 and status.get("disruptionsAllowed") == 0

    wait_until(healthy, None, "the PDB counting three healthy pods")
    r = Rebalancer(kcm, write_policy(tmp_path / "policy.yaml"))
    running.append(r)
    # refused, then retried in later cycles
    wait_until(lambda: r.metric("ballast_rebalancer_evictions_total", result="pdb_blocked") >= 4, r.server,
               "evictions refused by the PDB in two cycles")  # fmt: skip
    assert r.metric("ballast_rebalancer_evictions_total", result="evicted") == 0
    assert r.metric("ballast_rebalancer_api_calls_total", call="eviction", code="429") >= 4
    pods = pods_of(core, "db")
    assert {p.metadata.uid for p in pods} == uids and not any(p.metadata.deletion_timestamp for p in pods)
    assert events(core, "RebalanceBlocked", uids) and not events(core, "Rebalanced", uids)


def test_a_dry_run_deletes_nothing_and_leaves_events(
    kcm: ControlPlane, running: list[Rebalancer], tmp_path: Path
) -> None:
    core = kcm.core()
    hot_and_cool(core)
    apply(kcm, deployment("dry", 3, node="node-a"))
    uids = {p.metadata.uid for p in bound_running(core, "dry", 3)}
    r = Rebalancer(kcm, write_policy(tmp_path / "policy.yaml"), "--dry-run")
    running.append(r)
    wait_until(lambda: len(events(core, "RebalanceDryRun", uids)) >= 2, r.server, "two dry-run Events")
    (message, *_) = [e.message for e in events(core, "RebalanceDryRun", uids)]
    assert message.startswith("dry run, would evict: cpu_usage_avg_5m 0.95 > high 0.80 for 3 cycles")
    assert message.endswith("fits on node-b")
    assert r.metric("ballast_rebalancer_evictions_total", result="evicted", dry_run="true") == 2
    assert r.metric("ballast_rebalancer_api_calls_total", call="eviction") == 0
    pods = pods_of(core, "dry")
    assert {p.metadata.uid for p in pods} == uids and not any(p.metadata.deletion_timestamp for p in pods)
    # the node waits for a measurement newer than the (dry) evictions: no second round on the same data
    wait_until(lambda: "waiting for a measurement newer" in r.watched("node-a")["status"], r.server,
               "node-a waiting for a newer measurement")  # fmt: skip
    assert len(events(core, "RebalanceDryRun", uids)) == 2


def test_a_hot_node_without_a_cool_node_is_left_alone(
    kcm: ControlPlane, running: list[Rebalancer], tmp_path: Path
) -> None:
    core = kcm.core()
    hot_and_cool(core, cool=0.60)  # node-b is normal, not cool
    apply(kcm, deployment("alone", 2, node="node-a"))
    uids = {p.metadata.uid for p in bound_running(core, "alone", 2)}
    r = Rebalancer(kcm, write_policy(tmp_path / "policy.yaml"))
    running.append(r)
    wait_until(lambda: (r.watched("node-a") or {}).get("consecutiveAbnormal", 0) >= 5, r.server,
               "node-a hot for five cycles")  # fmt: skip
    cycle = r.view()["lastCycle"]
    assert cycle["idle"] == "no cool node to move pods to" and cycle["evictions"] == []
    assert r.metric("ballast_rebalancer_evictions_total") == 0
    assert {p.metadata.uid for p in pods_of(core, "alone")} == uids


def test_a_spike_shorter_than_consecutive_abnormal_moves_nothing(
    kcm: ControlPlane, running: list[Rebalancer], tmp_path: Path
) -> None:
    core = kcm.core()
    hot_and_cool(core)
    apply(kcm, deployment("spike", 2, node="node-a"))
    uids = {p.metadata.uid for p in bound_running(core, "spike", 2)}
    r = Rebalancer(kcm, write_policy(tmp_path / "policy.yaml", consecutiveAbnormal=8))
    running.append(r)
    wait_until(lambda: (r.watched("node-a") or {}).get("consecutiveAbnormal", 0) >= 2, r.server,
               "node-a hot for two cycles")  # fmt: skip
    set_load(core, "node-a", 0.50)  # the spike ends
    wait_until(lambda: (r.watched("node-a") or {"state": "gone"}).get("state") != "hot", r.server,
               "node-a read as normal again")  # fmt: skip
    wait_until(lambda: r.watched("node-a") is None, r.server, "two normal cycles resetting the count")
    set_load(core, "node-a", 0.95)  # hot again: counting starts over
    wait_until(lambda: (r.watched("node-a") or {}).get("consecutiveAbnormal", 0) >= 1, r.server,
               "node-a hot again")  # fmt: skip
    watched = r.watched("node-a")
    assert watched is not None and watched["consecutiveAbnormal"] < 8
    assert watched["status"].startswith("waiting: hot for")
    assert [c["outcome"] for c in watched["candidates"]] == ["waiting", "waiting"]
    assert r.metric("ballast_rebalancer_evictions_total") == 0
    assert not events(core, "Rebalanced", uids) and not events(core, "RebalanceDryRun", uids)
    assert {p.metadata.uid for p in pods_of(core, "spike")} == uids
    assert not any(p.metadata.deletion_timestamp for p in pods_of(core, "spike"))
