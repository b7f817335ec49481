"""The rebalancer on real nodes: real busy pods make a node hot by the agent's own measurement, a
PodDisruptionBudget over pods the kubelet made Ready holds, and once it is gone the rebalancer evicts
through the Eviction API, the kubelet ends the process, and the Deployment's replacement, placed by the real
kube-scheduler calling Ballast's extender, runs on the cooler node.

Two real nodes on one machine share one ``/proc``: an agent on the cool node would measure the same busy
machine. So only the hot node runs an agent; the cool node's load is written the way the annotator writes
it (a fresh ``cpu_usage_avg_5m`` with its source stamp), which the extender and the rebalancer read alike.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from ballast.contract.nodeload import NODELOAD_PATH, parse_status
from ballast.kube.client import ApiError, Kube
from ballast.testing.binaries import MissingPiece
from ballast.testing.controlplane import ControlPlane, wait_until
from ballast.testing.parts import missing_part
from ballast.testing.realnode import (
    BURN,
    NodeAgent,
    RealNodePool,
    busybox_pod,
    require_real_nodes,
    wait_running,
)
from tests.cluster.test_extender_e2e import CRD as NRT_CRD
from tests.cluster.test_extender_e2e import SCHEDULER, Extender, scheduler_config
from tests.cluster.test_rebalancer_e2e import NS, Rebalancer, apply, deployment, pods_of

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NODELOAD_CRD = ROOT / "scheduler_config" / "crd-nodeload.yaml"
METRIC = "cpu_usage_avg_5m"
HOT, COOL = "rn-hot", "rn-cool"
HIGH, LOW = 0.40, 0.30
"""Two busy pods held at 500m each keep one of this machine's two CPUs busy: the hot node measures about
0.5 and more, above ``HIGH``."""
POLICY: dict[str, Any] = {
    "apiVersion": "scheduler.policy.crane.io/v1alpha1",
    "kind": "DynamicSchedulerPolicy",
    "spec": {
        "syncPolicy": [{"name": METRIC, "period": "3s"}],
        "predicate": [{"name": METRIC, "maxLimitPecent": 0.95}],
        "priority": [{"name": METRIC, "weight": 1}],
        "rebalance": {
            "thresholds": [{"name": METRIC, "high": HIGH, "low": LOW}],
            "consecutiveAbnormal": 2,
            "consecutiveNormal": 2,
            "limits": {"perNode": 1, "perCycle": 1, "perWorkload": 1, "workloadWindow": "5m",
                       "evictionsPerSecond": 1},
        },
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def rig(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    require_real_nodes()
    try:
        control_plane.start_controller_manager()
    except MissingPiece as exc:
        missing_part(str(exc))
    for crd in (NODELOAD_CRD, NRT_CRD):
        control_plane.kubectl("apply", "-f", str(crd))
        control_plane.kubectl("wait", "--for", "condition=Established", "--timeout", "120s", "-f", str(crd))
    work = tmp_path_factory.mktemp("rebalance")
    policy = work / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY))
    pool = RealNodePool(control_plane)
    ext = Extender(control_plane, policy=policy)
    things: list[Any] = []
    try:
        hot, cool = pool.get(HOT), pool.get(COOL)
        ext.start()
        control_plane.start_scheduler(scheduler_config(ext.url))
        yield {
            "cp": control_plane,
            "hot": hot,
            "cool": cool,
            "policy": policy,
            "work": work,
            "things": things,
        }
    finally:
        for thing in reversed(things):
            thing.stop()
        control_plane.kubectl("delete", "deployment,poddisruptionbudget", "--all", "-n", NS, "--timeout=120s",
                              check=False)  # fmt: skip
        control_plane.stop_scheduler()
        ext.stop()
        pool.close()
        control_plane.stop_controller_manager()
        control_plane.kubectl("delete", "nodeloads", "--all", "--ignore-not-found")


def busy_deployment(name: str, replicas: int) -> dict[str, Any]:
    """A Deployment of busy pods for Ballast's scheduler, each held at 500m."""
    pod = busybox_pod(name, BURN, scheduler_name=SCHEDULER, requests={"cpu": "100m", "memory": "16Mi"},
                      limits={"cpu": "500m"})  # fmt: skip
    workload = deployment(name, replicas)
    workload["spec"]["template"]["spec"] = pod["spec"]
    return workload


def cordon(core: Any, node: str, on: bool) -> None:
    core.patch_node(node, {"spec": {"unschedulable": on}})


def cool_load(core: Any) -> None:
    """The cool node's load as the annotator would write it: fresh for the rest of the test."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    annotations = {METRIC: f"0.05000,{now}", "ballast.io/load-source": "annotator"}
    core.patch_node(COOL, {"metadata": {"annotations": annotations}})


def measured(kube: Kube, node: str) -> float | None:
    value = (kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}).get(METRIC)
    return float(value.split(",")[0]) if value else None


def nodeload_lists(kube: Kube, node: str, uids: set[str]) -> bool:
    try:
        status = parse_status(kube.get(f"{NODELOAD_PATH}/{node}"))
    except ApiError:
        return False
    return status is not None and uids <= {p.uid for p in status.pods}


def test_a_hot_real_node_sheds_a_busy_pod_to_the_cool_one_and_a_pdb_holds_until_it_goes(
    rig: dict[str, Any],
) -> None:
    cp: ControlPlane = rig["cp"]
    core = cp.core()
    kube = Kube(cp.api())
    cordon(core, COOL, True)  # the Deployment starts on the hot node only
    apply(cp, busy_deployment("busy", 2))
    wait_until(lambda: len(pods_of(core, "busy")) == 2, None, "two pods", 60)
    first = wait_running(core, [p.metadata.name for p in pods_of(core, "busy")])
    assert {p.spec.node_name for p in first.values()} == {HOT}
    uids = {p.metadata.uid for p in first.values()}
    # a PDB that allows no disruption: both pods are Ready because the kubelet says so
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "busy", "namespace": NS},
           "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "busy"}}}}  # fmt: skip
    apply(cp, pdb)
    wait_until(
        lambda: (
            (core_policy(cp).read_namespaced_pod_disruption_budget("busy", NS).status.current_healthy or 0)
            == 2
        ),
        None,
        "the PDB counting both pods healthy",
        60,
    )
    cordon(core, COOL, False)
    cool_load(core)
    agent = NodeAgent(cp, rig["hot"], rig["work"] / "agent", policy=POLICY)
    rig["things"].append(agent)
    wait_until(
        lambda: (measured(kube, HOT) or 0) > HIGH, agent.server, "the agent measuring the hot node hot", 60
    )
    wait_until(
        lambda: nodeload_lists(kube, HOT, uids), agent.server, "both pods in the hot node's NodeLoad", 30
    )
    rebalancer = Rebalancer(cp, rig["policy"])
    rig["things"].append(rebalancer)

    wait_until(
        lambda: rebalancer.metric("ballast_rebalancer_evictions_total", result="pdb_blocked") >= 1,
        rebalancer.server,
        "an eviction the PDB refused",
        60,
    )
    time.sleep(3)
    assert {p.metadata.uid for p in pods_of(core, "busy") if not p.metadata.deletion_timestamp} == uids
    assert rebalancer.metric("ballast_rebalancer_evictions_total", result="evicted") == 0

    core_policy(cp).delete_namespaced_pod_disruption_budget("busy", NS)
    wait_until(
        lambda: rebalancer.metric("ballast_rebalancer_evictions_total", result="evicted") >= 1,
        rebalancer.server,
        "an eviction once the PDB is gone",
        60,
    )
    # the kubelet ends the evicted pod's process; the replacement runs on the cool node
    wait_until(
        lambda: (
            len(live := [p for p in pods_of(core, "busy") if not p.metadata.deletion_timestamp]) == 2
            and not uids <= {p.metadata.uid for p in live}
            and len(pods_of(core, "busy")) == 2
        ),
        None,
        "the evicted pod gone and its replacement created",
        60,
    )
    after = wait_running(core, [p.metadata.name for p in pods_of(core, "busy")])
    nodes = sorted(p.spec.node_name for p in after.values())
    assert nodes == [COOL, HOT], nodes
    moved = [p for p in after.values() if p.metadata.uid not in uids]
    assert len(moved) == 1 and moved[0].spec.node_name == COOL
    time.sleep(4)  # perWorkload 1: the other pod stays where it is
    assert rebalancer.metric("ballast_rebalancer_evictions_total", result="evicted") == 1


def core_policy(cp: ControlPlane) -> Any:
    from kubernetes import client as k8s_client

    return k8s_client.PolicyV1Api(cp.api())
