"""``ballast agent --report-load`` on a real node: a real kubelet, real pods, real pod cgroups.

The reference is the kubelet's own ``/stats/summary`` (cAdvisor's per-pod ``usageNanoCores`` and
``workingSetBytes``), read over the same minute the agent measures. Both the kubelet's default
``cgroupRoot`` (``/``: pods under ``/kubepods``) and one of its own (``/<node>``, as kind and several
kubelets on one host have) are run; an agent that cannot tell where the pod cgroups are says so.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ballast.contract.nodeload import NODELOAD_PATH, parse_status
from ballast.kube.client import ApiError, Kube
from ballast.testing.controlplane import ControlPlane, wait_until
from ballast.testing.realnode import (
    BURN,
    NodeAgent,
    RealNode,
    RealNodePool,
    busybox_pod,
    delete_pods,
    require_real_nodes,
    wait_running,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NODELOAD_CRD = ROOT / "scheduler_config" / "crd-nodeload.yaml"
POLICY = {
    "apiVersion": "scheduler.policy.crane.io/v1alpha1",
    "kind": "DynamicSchedulerPolicy",
    "spec": {
        "syncPolicy": [
            {"name": "cpu_usage_avg_5m", "period": "3s"},
            {"name": "mem_usage_avg_5m", "period": "3s"},
        ],
        "predicate": [{"name": "cpu_usage_avg_5m", "maxLimitPecent": 0.9}],
        "priority": [{"name": "cpu_usage_avg_5m", "weight": 1}],
    },
}
HELD_MIB = 48
"""Written into the pod's /dev/shm (a tmpfs charged to the pod's memory cgroup, 64 MiB by default)."""
TOLERANCE = 0.25
MEASURE_SECONDS = 30.0


@pytest.fixture(scope="module")
def node_pool(control_plane: ControlPlane) -> Iterator[RealNodePool]:
    require_real_nodes()
    control_plane.kubectl("apply", "-f", str(NODELOAD_CRD))
    control_plane.kubectl("wait", "--for=condition=Established", "crd/nodeloads.ballast.io", "--timeout=60s")
    pool = RealNodePool(control_plane)
    try:
        yield pool
    finally:
        pool.close()
        control_plane.kubectl("delete", "nodeloads", "--all", "--ignore-not-found")


def real_node(pool: RealNodePool, kind: str) -> RealNode:
    """``default``: the kubelet's default cgroupRoot ``/`` (pods under ``/kubepods``); ``custom``: its own."""
    return pool.get(f"rn-{kind}", cgroup_root="/" if kind == "default" else "")


def nodeload_status(kube: Kube, node: str) -> Any:
    try:
        return parse_status(kube.get(f"{NODELOAD_PATH}/{node}"))
    except ApiError:
        return None


def kubelet_figures(node: RealNode, uids: dict[str, str]) -> dict[str, tuple[float, float, float]]:
    """name -> (time of cAdvisor's sample, its cumulative CPU nanoseconds, working set bytes)."""
    figures = {}
    for name, uid in uids.items():
        stats = node.pod_stats(uid) or {}
        cpu, memory = stats.get("cpu") or {}, stats.get("memory") or {}
        when = datetime.fromisoformat(cpu["time"].replace("Z", "+00:00")).timestamp()
        figures[name] = (when, float(cpu["usageCoreNanoSeconds"]), float(memory["workingSetBytes"]))
    return figures


def close(measured: float, reference: float) -> bool:
    return reference > 0 and abs(measured - reference) <= TOLERANCE * reference


@pytest.mark.parametrize("kind", ["default", "custom"])
def test_the_agent_measures_real_pods_as_the_kubelet_does(
    control_plane: ControlPlane, node_pool: RealNodePool, kind: str, tmp_path: Path
) -> None:
    """A CPU-limited burner at its limit, a Guaranteed burner at its CPU and a pod holding memory: the
    NodeLoad's figures within 25 % of the kubelet's ``/stats/summary`` over the same time."""
    node = real_node(node_pool, kind)
    core = control_plane.core()
    kube = Kube(control_plane.api())
    names = ["burst", "guaranteed", "memory"]
    core.create_namespaced_pod(
        "default",
        busybox_pod("burst", BURN, node=node.name, requests={"cpu": "100m"}, limits={"cpu": "500m"}),
    )
    core.create_namespaced_pod(
        "default",
        busybox_pod(
            "guaranteed",
            BURN,
            node=node.name,
            requests={"cpu": "1", "memory": "64Mi"},
            limits={"cpu": "1", "memory": "64Mi"},
        ),
    )
    core.create_namespaced_pod("default", busybox_pod(
        "memory", f"dd if=/dev/zero of=/dev/shm/fill bs=1M count={HELD_MIB} && exec sleep 3600",
        node=node.name, requests={"memory": "100Mi"}))  # fmt: skip
    agent = None
    try:
        pods = wait_running(core, names)
        uids = {name: pod.metadata.uid for name, pod in pods.items()}
        # cAdvisor's cumulative CPU counter at two of its housekeeping samples, the first as the agent
        # starts: the kubelet's mean over the time the agent's window mean covers (its usageNanoCores is a
        # rate over the last ~10 s only, which moves with whatever else the machine runs, and so does a
        # burner's share of two busy cores)
        first = kubelet_figures(node, uids)
        agent = NodeAgent(control_plane, node, tmp_path, policy=POLICY)
        wait_until(
            lambda: (
                (s := nodeload_status(kube, node.name)) is not None
                and set(uids.values()) <= {p.uid for p in s.pods}
            ),
            agent.server,
            f"every pod in NodeLoad {node.name}",
            60,
        )
        time.sleep(MEASURE_SECONDS)
        wait_until(
            lambda: all(
                kubelet_figures(node, uids)[n][0] > first[n][0] + MEASURE_SECONDS * 0.6 for n in names
            ),
            None,
            "the kubelet's next samples",
            30,
        )
        last = kubelet_figures(node, uids)
        status = nodeload_status(kube, node.name)
        missing = agent.metric("ballast_agent_load_pod_cgroups_missing")
    finally:
        if agent is not None:
            agent.stop()
        delete_pods(core, names)
    measured = {p.name: p for p in status.pods}
    figures = {  # name: (agent cores, kubelet cores, agent working set, kubelet working set)
        name: (
            measured[name].cpu,
            (last[name][1] - first[name][1]) / (last[name][0] - first[name][0]) / 1e9,
            measured[name].memory,
            last[name][2],
        )
        for name in names
    }
    assert missing == 0
    assert close(figures["burst"][0], figures["burst"][1]), figures
    assert close(figures["guaranteed"][0], figures["guaranteed"][1]), figures
    assert figures["burst"][1] <= 0.6, figures  # the kubelet's quota holds it at 500m
    assert close(figures["memory"][2], figures["memory"][3]), figures
    assert figures["memory"][2] >= (HELD_MIB - 4) << 20, figures  # the block the pod wrote is its working set


def test_an_agent_that_looks_in_the_wrong_place_says_so(
    control_plane: ControlPlane, node_pool: RealNodePool, tmp_path: Path
) -> None:
    """The kubelet runs with ``cgroupRoot: /<node>``; the agent is given a kubelet configuration that says
    nothing of it (the kubelet's defaults): pods are bound, none of their cgroups is under ``/kubepods``.
    The agent says so once in its log and in ``ballast_agent_load_pod_cgroups_missing``, instead of a
    NodeLoad that silently lists no pods."""
    node = real_node(node_pool, "custom")
    core = control_plane.core()
    core.create_namespaced_pod("default", busybox_pod("idle", "exec sleep 3600", node=node.name))
    defaults = tmp_path / "kubelet-defaults.yaml"
    defaults.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
    agent = None
    try:
        wait_running(core, ["idle"])
        work = tmp_path / "agent"
        agent = NodeAgent(control_plane, node, work, policy=POLICY, kubelet_config=defaults)
        wait_until(
            lambda: agent.metric("ballast_agent_load_pod_cgroups_missing") == 1,
            agent.server,
            "the agent saying it finds no pod cgroup",
            60,
        )
        time.sleep(4)  # more blind samples: still said once
        log = agent.server.tail(400)
    finally:
        if agent is not None:
            agent.stop()
        delete_pods(core, ["idle"])
    said = [line for line in log.splitlines() if "none of their cgroups is under" in line]
    assert len(said) == 1, log
    assert "/sys/fs/cgroup/cpuacct/kubepods" in said[0] and "cgroupRoot /" in said[0]
