"""Exclusive CPUs on a real node, end to end: the real kube-scheduler with Ballast's extender binding
(``bindVerb``), a real kubelet running the pods, Ballast's agent pinning them through the node's containerd.

What a user would check is what is asserted: the CPUs each container's processes may run on
(``Cpus_allowed_list`` in ``/proc/<pid>/status``), after restarts of the container, the agent, the kubelet
and containerd, after the pod goes, and with a kubelet that pins CPUs itself (``cpuManagerPolicy: static``),
where the agent stands down and its NodeResourceTopology says so.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ballast.agent.cpuset import CPUSet
from ballast.kube.client import ApiError, Kube
from ballast.testing.containerd import cpus_allowed
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
from tests.cluster.test_extender_e2e import CRD, SCHEDULER, Extender, scheduler_config

pytestmark = pytest.mark.integration

NODE = "rn-pin"
RESULT = "topology.crane.io/topology-result"
NRT = "/apis/topology.crane.io/v1alpha1/noderesourcetopologies"
ALL = CPUSet.parse(f"0-{os.cpu_count() - 1}")
RECONCILE = 10.0
"""The agent reconciles every second here (``--cpu-manager-reconcile-period 1s``); a container is on the
right CPUs well within this, on two cores shared with the control plane."""


@pytest.fixture(scope="module")
def rig(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One real node with the agent pinning, Ballast's extender and the real kube-scheduler calling it."""
    require_real_nodes()
    control_plane.kubectl("apply", "-f", str(CRD))
    control_plane.kubectl("wait", "--for", "condition=Established", "--timeout", "120s", "-f", str(CRD))
    pool = RealNodePool(control_plane)
    ext = Extender(control_plane)
    agent = None
    try:
        node = pool.get(NODE)
        agent = NodeAgent(control_plane, node, tmp_path_factory.mktemp("agent"), cpu_manager=True)
        kube = Kube(control_plane.api())
        wait_until(lambda: nrt_policy(kube) == "Static", agent.server, "the agent's NRT saying Static", 60)
        ext.start()
        control_plane.start_scheduler(scheduler_config(ext.url))
        yield {"pool": pool, "node": node, "agent": agent, "kube": kube, "ext": ext}
    finally:
        control_plane.stop_scheduler()
        ext.stop()
        if agent is not None:
            agent.stop()
        pool.close()
        control_plane.kubectl(
            "delete", "noderesourcetopologies.topology.crane.io", "--all", "--ignore-not-found"
        )


def nrt_policy(kube: Kube) -> str | None:
    try:
        obj = kube.get(f"{NRT}/{NODE}")
    except ApiError:
        return None
    return (obj.get("craneManagerPolicy") or {}).get("cpuManagerPolicy")


def guaranteed(name: str) -> dict[str, Any]:
    """A Guaranteed 1-CPU burner for Ballast's scheduler, topology-aware: the extender picks its zone."""
    return busybox_pod(
        name,
        BURN,
        scheduler_name=SCHEDULER,
        requests={"cpu": "1", "memory": "32Mi"},
        limits={"cpu": "1", "memory": "32Mi"},
        annotations={"topology.crane.io/topology-awareness": "true"},
    )


def containers(node: RealNode, core: Any) -> dict[str, list[int]]:
    """``pod/container`` -> the pids of that container's processes, for every running container of every
    pod on the node (sandboxes' pause processes are not containers: the agent never touches them)."""
    found: dict[str, list[int]] = {}
    base = Path("/sys/fs/cgroup/cpu") / node.root.strip("/")
    for pod in core.list_namespaced_pod("default").items:
        if pod.spec.node_name != node.name:
            continue
        for status in pod.status.container_statuses or []:
            if not status.container_id or not status.state.running:
                continue
            cid = status.container_id.rpartition("/")[2]
            pids = [
                int(p)
                for procs in base.glob(f"kubepods/**/pod{pod.metadata.uid}/{cid}/cgroup.procs")
                for p in procs.read_text().split()
            ]
            if pids:
                found[f"{pod.metadata.name}/{status.name}"] = pids
    return found


def allowed(node: RealNode, core: Any) -> dict[str, CPUSet]:
    """``pod/container`` -> the CPUs its processes may run on (one set: they must all agree)."""
    out: dict[str, CPUSet] = {}
    for key, pids in containers(node, core).items():
        sets = set()
        for pid in pids:
            try:
                sets.add(cpus_allowed(pid))
            except (OSError, AssertionError):
                continue  # exited between the listing and the read
        if len(sets) == 1:
            out[key] = sets.pop()
    return out


def pinned_state(rig: dict[str, Any], exclusive: dict[str, int]) -> dict[str, CPUSet] | None:
    """The node's containers' CPUs when they show a consistent pinning: each pod in ``exclusive`` on exactly
    that many CPUs of its own, every other container on all the rest; else ``None``."""
    now = allowed(rig["node"], rig["ext"].cp.core())
    mine = {k: v for k, v in now.items() if k.split("/")[0] in exclusive}
    if {k.split("/")[0] for k in mine} != set(exclusive):
        return None
    taken = CPUSet()
    for key, cpus in mine.items():
        if len(cpus) != exclusive[key.split("/")[0]] or cpus & taken:
            return None
        taken = taken | cpus
    shared = ALL - taken
    if any(cpus != shared for key, cpus in now.items() if key not in mine):
        return None
    return now


def wait_pinned(
    rig: dict[str, Any], exclusive: dict[str, int], what: str, timeout: float = RECONCILE
) -> dict[str, CPUSet]:
    state: dict[str, CPUSet] | None = None

    def check() -> bool:
        nonlocal state
        state = pinned_state(rig, exclusive)
        return state is not None

    try:
        wait_until(check, rig["agent"].server, what, timeout)
    except RuntimeError as e:
        raise AssertionError(f"{e}; containers now: {allowed(rig['node'], rig['ext'].cp.core())}") from None
    assert state is not None
    return state


def exclusive_of(state: dict[str, CPUSet], pod: str) -> CPUSet:
    (cpus,) = [v for k, v in state.items() if k.startswith(f"{pod}/")]
    return cpus


def test_a_guaranteed_pod_runs_on_its_own_cpus_through_restarts_and_gives_them_back(
    rig: dict[str, Any],
) -> None:
    core = rig["ext"].cp.core()
    node: RealNode = rig["node"]
    names = ["shared-a", "exclusive", "shared-b"]
    core.create_namespaced_pod("default", busybox_pod("shared-a", "exec sleep 3600", node=node.name))
    try:
        wait_running(core, ["shared-a"])
        core.create_namespaced_pod("default", guaranteed("exclusive"))
        pods = wait_running(core, ["exclusive"])
        assert pods["exclusive"].spec.node_name == node.name
        result = json.loads(pods["exclusive"].metadata.annotations[RESULT])  # written by the extender's bind
        assert [z["name"] for z in result] == ["node0"] and result[0]["resources"]["capacity"]["cpu"] == "1"
        state = wait_pinned(rig, {"exclusive": 1}, "the exclusive pod pinned, the other off its CPU")
        mine = exclusive_of(state, "exclusive")

        # its container killed: the kubelet starts a new one, which the agent pins to the same CPU
        (pid,) = containers(node, core)["exclusive/c"][:1]
        os.kill(pid, signal.SIGKILL)
        wait_until(
            lambda: (
                (
                    core.read_namespaced_pod("exclusive", "default")
                    .status.container_statuses[0]
                    .restart_count
                    or 0
                )
                >= 1
            ),
            None,
            "the container restarted",
            60,
        )
        wait_running(core, ["exclusive"])
        assert (
            exclusive_of(wait_pinned(rig, {"exclusive": 1}, "the restarted container pinned"), "exclusive")
            == mine
        )

        # a new pod starts on the shared pool
        core.create_namespaced_pod("default", busybox_pod("shared-b", "exec sleep 3600", node=node.name))
        wait_running(core, ["shared-b"])
        state = wait_pinned(rig, {"exclusive": 1}, "the new pod on the shared CPUs")
        assert state["shared-b/c"] == ALL - mine

        # the agent restarts: every assignment is kept (its checkpoint), nothing moves
        agent: NodeAgent = rig["agent"]
        agent.stop()
        agent.start()
        time.sleep(3)  # a few reconcile periods of the new agent
        assert (
            exclusive_of(wait_pinned(rig, {"exclusive": 1}, "pins kept across an agent restart"), "exclusive")
            == mine
        )

        # the pod goes: its CPU returns to the shared pool
        delete_pods(core, ["exclusive"])
        state = wait_pinned(rig, {}, "the CPU back in the shared pool")
        assert state["shared-a/c"] == ALL and state["shared-b/c"] == ALL
    finally:
        delete_pods(core, names)


def test_a_cpuset_changed_behind_the_agents_back_is_read_back_repaired_and_counted(
    rig: dict[str, Any],
) -> None:
    """The host's nodes have no NRI (containerd 1.6): the CRI reconcile reads every container's cpuset from
    its cgroup (v1 here) and sets again what differs; the window is one reconcile period at most."""
    core = rig["ext"].cp.core()
    node: RealNode = rig["node"]
    agent: NodeAgent = rig["agent"]
    names = ["meddled", "owner"]
    core.create_namespaced_pod("default", busybox_pod("meddled", "exec sleep 3600", node=node.name))
    core.create_namespaced_pod("default", guaranteed("owner"))
    try:
        wait_running(core, names)
        mine = exclusive_of(wait_pinned(rig, {"owner": 1}, "pinned before the meddling"), "owner")
        before = agent.metric("ballast_agent_cpuset_repairs_total", runtime="cri")
        pod = core.read_namespaced_pod("meddled", "default")
        cid = pod.status.container_statuses[0].container_id.rpartition("/")[2]
        base = Path("/sys/fs/cgroup/cpuset") / node.root.strip("/")
        (path,) = base.glob(f"kubepods/**/pod{pod.metadata.uid}/{cid}/cpuset.cpus")
        path.write_text(str(ALL))  # someone else's write: the shared container on the exclusive CPU too
        written = time.monotonic()
        assert allowed(node, core)["meddled/c"] == ALL
        state = wait_pinned(rig, {"owner": 1}, "the meddled cpuset repaired")
        took = time.monotonic() - written
        assert state["meddled/c"] == ALL - mine and CPUSet.parse(path.read_text().strip()) == ALL - mine
        wait_until(
            lambda: agent.metric("ballast_agent_cpuset_repairs_total", runtime="cri") >= before + 1,
            agent.server,
            "the repair counted",
            10,
        )
        print(f"repaired {took:.2f}s after the write (reconcile period 1s)")
    finally:
        delete_pods(core, names)


def test_kubelet_and_containerd_restarts_leave_no_container_on_the_wrong_cpus(rig: dict[str, Any]) -> None:
    core = rig["ext"].cp.core()
    node: RealNode = rig["node"]
    names = ["other", "pinned"]
    core.create_namespaced_pod("default", busybox_pod("other", "exec sleep 3600", node=node.name))
    core.create_namespaced_pod("default", guaranteed("pinned"))
    try:
        wait_running(core, names)
        mine = exclusive_of(wait_pinned(rig, {"pinned": 1}, "pinned before the restarts"), "pinned")
        for program in ("kubelet", "containerd"):
            node.kill(program)
            node.up()  # starts what is not running; waits for Ready
            wait_running(core, names)
            state = wait_pinned(rig, {"pinned": 1}, f"pins right once {program} answers again", 30)
            assert exclusive_of(state, "pinned") == mine, program
    finally:
        delete_pods(core, names)


def test_a_kubelet_with_the_static_cpu_manager_makes_the_agent_stand_down(rig: dict[str, Any]) -> None:
    """Last in the module: the node's kubelet is restarted with ``cpuManagerPolicy: static``."""
    kube: Kube = rig["kube"]
    rig["pool"].get(NODE, cpu_manager_policy="static")
    wait_until(lambda: nrt_policy(kube) == "None", rig["agent"].server, "the NRT saying None", 60)
    core = rig["ext"].cp.core()
    core.create_namespaced_pod("default", guaranteed("by-kubelet"))
    try:
        pods = wait_running(core, ["by-kubelet"])
        # the extender assigns no CPUs on a node whose NRT leaves them to the kubelet
        assert RESULT not in (pods["by-kubelet"].metadata.annotations or {})
        # the kubelet's own static policy pins (reservedSystemCPUs 0: the pod gets CPU 1, the shared pool 0)
        # and nothing moves it back: the agent left the cpusets alone
        for _ in range(3):
            state = wait_pinned(rig, {"by-kubelet": 1}, "the kubelet's own pinning")
            assert exclusive_of(state, "by-kubelet") == CPUSet.parse("1")
            time.sleep(2)
    finally:
        delete_pods(core, ["by-kubelet"])
