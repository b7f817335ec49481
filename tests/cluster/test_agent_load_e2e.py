"""``ballast agent --report-load`` against the real kube-apiserver, measuring the real kernel.

The agent runs as its own process for a node of the test cluster. Its pod is a real pod cgroup made by
the test (cgroup v1 ``cpuacct`` and ``memory``, under a parent named for this test run) with a real CPU
burner in it. The tests read what the agent wrote back from the API server: crane-format annotations with
the ``ballast.io/load-source`` stamp and the hot value on its Node, a NodeLoad owned by the Node with
only its status written and at most once per report interval; another source's fresh values left alone;
and the extender, under the real kube-scheduler, rejecting the node once the burner makes it hot.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ballast.agent.cgroup_paths import pod_cgroup_parts
from ballast.contract.nodeload import NODELOAD_PATH, parse_status
from ballast.contract.pod import QOSClass
from ballast.kube.client import ApiError, Kube
from ballast.testing.controlplane import (
    ControlPlane,
    Server,
    create_nodes,
    free_port,
    node_body,
    pod_body,
    scraped,
    spawn,
    wait_bound,
    wait_until,
)
from tests.agent import load_processes as lp
from tests.cluster.test_extender_e2e import Extender, create_pods, scheduler_config

pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="real cgroups need root")]

ROOT = Path(__file__).resolve().parents[2]
NODELOAD_CRD = ROOT / "scheduler_config" / "crd-nodeload.yaml"
NRT_CRD = ROOT / "scheduler_config" / "crd-noderesourcetopology.yaml"
CPU_LIMIT = 0.40
"""One spinning process keeps one of this machine's two CPUs busy all the time, so the node's
utilisation is at least about 0.5 whatever else runs: above this limit."""
POLICY = {
    "apiVersion": "scheduler.policy.crane.io/v1alpha1",
    "kind": "DynamicSchedulerPolicy",
    "spec": {
        "syncPolicy": [
            {"name": "cpu_usage_avg_5m", "period": "3s"},
            {"name": "cpu_usage_max_avg_1h", "period": "1m"},
            {"name": "mem_usage_avg_5m", "period": "3s"},
            {"name": "gpu_usage_avg_5m", "period": "3s"},  # not the agent's: left to the annotator
        ],
        "predicate": [{"name": "cpu_usage_avg_5m", "maxLimitPecent": CPU_LIMIT}],
        "priority": [{"name": "cpu_usage_avg_5m", "weight": 1}],
        "hotValue": [{"timeRange": "5m", "count": 1}],
    },
}
HELD_MIB = 32
RATIO = re.compile(r"^(0|1)\.\d{5},\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


class Agent:
    """``ballast agent --report-load`` for one node, its cgroup root a temporary v1 tree."""

    def __init__(self, cp: ControlPlane, node: str, work: Path, cgroup_root: Path, policy: Path) -> None:
        assert cp.workdir
        self.port = free_port()
        kubelet = work / "kubelet-config.yaml"
        kubelet.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
        argv = [sys.executable, "-m", "ballast", "agent", "--node-name", node,
                "--kubeconfig", str(cp.kubeconfig), "--kubelet-config", str(kubelet), "--cpu-manager", "off",
                "--cpu-state-file", str(work / "state" / "cpu_manager_state"),
                "--metrics-address", "127.0.0.1", "--metrics-port", str(self.port),
                "--report-load", "--load-sample-interval", "1s", "--load-report-interval", "2s",
                "--policy", str(policy), "--cgroup-root", str(cgroup_root)]  # fmt: skip
        self.server: Server = spawn(f"ballast-agent-{node}", argv, cp.workdir, env=dict(os.environ))

    def metric(self, name: str, **labels: str) -> float:
        return scraped(f"http://127.0.0.1:{self.port}", name, **labels)

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def nodeload_crd(cluster: ControlPlane) -> Iterator[None]:
    cluster.kubectl("apply", "-f", str(NODELOAD_CRD))
    cluster.kubectl("wait", "--for=condition=Established", "crd/nodeloads.ballast.io", "--timeout=60s")
    try:
        yield
    finally:
        cluster.kubectl("delete", "nodeloads", "--all", "--ignore-not-found")


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(POLICY))
    return path


def bind_pod(kube: Kube, name: str, node: str) -> dict[str, Any]:
    """A burstable pod bound to ``node`` (as the scheduler would have), returned as stored."""
    body = pod_body(name, requests={"cpu": "100m"})
    body["spec"]["nodeName"] = node
    return kube.create("/api/v1/namespaces/default/pods", body)


def burn_in_pod_cgroup(root: Path, uid: str) -> list[Any]:
    """A burner and a process holding ``HELD_MIB`` in the pod's cgroup (cpuacct and memory), the kubelet's
    cgroupfs layout; each starts its work once inside, so the pod cgroup is charged for it."""
    parts = pod_cgroup_parts(uid, QOSClass.BURSTABLE, "cgroupfs")
    cpu_dir = lp.make_pod_cgroup(root / "cpuacct", parts)
    memory_dir = lp.make_pod_cgroup(root / "memory", parts)
    procs = [lp.start(lp.BURN), lp.start(lp.HOLD, str(HELD_MIB))]
    for proc in procs:
        lp.enter(cpu_dir, proc.pid)
        lp.enter(memory_dir, proc.pid)
        lp.go(proc)
    assert procs[1].stdout is not None and procs[1].stdout.readline().strip() == "held"
    return procs


def annotations(kube: Kube, node: str) -> dict[str, str]:
    return kube.get(f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}


def test_the_agent_writes_its_nodes_annotations_and_nodeload_from_the_kernel(
    cluster: ControlPlane, nodeload_crd: None, policy_file: Path, tmp_path: Path
) -> None:
    kube = Kube(cluster.api())
    create_nodes(cluster.core(), [node_body("load-a")])
    node_uid = kube.get("/api/v1/nodes/load-a")["metadata"]["uid"]
    pod = bind_pod(kube, "burner", "load-a")
    uid = pod["metadata"]["uid"]
    (tmp_path / "cg").mkdir()
    with lp.v1_root(tmp_path / "cg") as root:
        procs = burn_in_pod_cgroup(root, uid)
        agent = Agent(cluster, "load-a", tmp_path, root, policy_file)
        try:
            keys = {"cpu_usage_avg_5m", "cpu_usage_max_avg_1h", "mem_usage_avg_5m", "node_hot_value"}
            wait_until(lambda: keys <= set(annotations(kube, "load-a")), agent.server, "the load annotations")
            wait_until(
                lambda: uid in nodeload_pods(kube, "load-a"), agent.server, "the pod in NodeLoad load-a"
            )
            # The policy file changes (a ConfigMap volume swaps it in one step): the agent follows it.
            changed = dict(POLICY, spec=dict(POLICY["spec"]))
            changed["spec"]["syncPolicy"] = [
                *POLICY["spec"]["syncPolicy"],
                {"name": "mem_usage_max_avg_1d", "period": "3s"},
            ]
            (tmp_path / "next-policy.yaml").write_text(yaml.safe_dump(changed))
            (tmp_path / "next-policy.yaml").replace(policy_file)
            wait_until(
                lambda: "mem_usage_max_avg_1d" in annotations(kube, "load-a"),
                agent.server,
                "the reloaded policy",
            )
            started = time.monotonic()
            writes_before = agent.metric("ballast_agent_load_writes_total", object="nodeload")
            time.sleep(6)  # three report intervals: the write budget is counted over them
            writes = agent.metric("ballast_agent_load_writes_total", object="nodeload") - writes_before
            elapsed = time.monotonic() - started
            obj = kube.get(f"{NODELOAD_PATH}/load-a")
            node = annotations(kube, "load-a")
        finally:
            agent.stop()
            for proc in procs:
                lp.stop(proc)
    # crane's format, the agent's stamp, the hot value counted from the one pod bound here
    for key in ("cpu_usage_avg_5m", "cpu_usage_max_avg_1h", "mem_usage_avg_5m"):
        assert RATIO.match(node[key]), node[key]
    assert node["ballast.io/load-source"] == "agent/load-a"
    assert node["node_hot_value"].split(",")[0] == "1"
    assert "gpu_usage_avg_5m" not in node
    assert float(node["cpu_usage_avg_5m"].split(",")[0]) >= CPU_LIMIT  # one CPU of two always busy
    assert agent.server.tail(400).count("gpu_usage_avg_5m is not one the agent measures") == 1
    # the NodeLoad: owned by the Node, only a status, the burner's real usage in it
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "load-a", "uid": node_uid}
    ]
    assert set(obj) == {"apiVersion", "kind", "metadata", "status"}
    status = parse_status(obj)
    assert status is not None and status.window == 300
    (mine,) = [p for p in status.pods if p.uid == uid]
    assert (mine.namespace, mine.name) == ("default", "burner")
    assert mine.cpu >= 0.1  # a spinning interpreter: some of a core
    assert mine.memory >= HELD_MIB << 20  # the block the holder wrote into
    assert status.node_cpu >= mine.cpu * 0.9
    # at most one status write per report interval (2 s)
    assert 1 <= writes <= elapsed / 2 + 1


def test_another_sources_fresh_values_are_left_alone_and_counted(
    cluster: ControlPlane, nodeload_crd: None, policy_file: Path, tmp_path: Path
) -> None:
    kube = Kube(cluster.api())
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    theirs = {"ballast.io/load-source": "annotator", "cpu_usage_avg_5m": f"0.12345,{now}"}
    create_nodes(cluster.core(), [node_body("load-b", annotations=theirs)])
    (tmp_path / "cg").mkdir()
    with lp.v1_root(tmp_path / "cg") as root:
        agent = Agent(cluster, "load-b", tmp_path, root, policy_file)
        try:
            wait_until(
                lambda: agent.metric("ballast_agent_load_source_conflicts_total") >= 2,
                agent.server,
                "the agent seeing the annotator's values",
            )
            # its own object is still written: the NodeLoad has one writer
            wait_until(lambda: _exists(kube, "load-b"), agent.server, "NodeLoad load-b")
            node = annotations(kube, "load-b")
        finally:
            agent.stop()
    assert {k: node[k] for k in theirs} == theirs
    assert "mem_usage_avg_5m" not in node and "node_hot_value" not in node
    assert agent.server.tail(200).count("annotator wrote its load annotations") == 1  # logged once


def _exists(kube: Kube, name: str) -> bool:
    try:
        return parse_status(kube.get(f"{NODELOAD_PATH}/{name}")) is not None
    except ApiError:
        return False


def nodeload_pods(kube: Kube, name: str) -> set[str]:
    """The pod uids NodeLoad ``name``'s status lists (none while it has no readable status)."""
    try:
        status = parse_status(kube.get(f"{NODELOAD_PATH}/{name}"))
    except ApiError:
        return set()
    return {p.uid for p in status.pods} if status is not None else set()


def test_the_extender_rejects_the_node_once_a_burner_makes_it_hot(
    cluster: ControlPlane, nodeload_crd: None, policy_file: Path, tmp_path: Path
) -> None:
    cluster.kubectl("apply", "-f", str(NRT_CRD))
    cluster.kubectl("wait", "--for", "condition=Established", "--timeout", "120s", "-f", str(NRT_CRD))
    kube = Kube(cluster.api())
    create_nodes(cluster.core(), [node_body("hot"), node_body("spare")])
    ext = Extender(cluster, policy=policy_file)
    ext.start()
    (tmp_path / "cg").mkdir()
    burner = lp.start(lp.BURN)
    try:
        lp.go(burner)  # on the machine the agent measures: node "hot" is this machine
        with lp.v1_root(tmp_path / "cg") as root:
            agent = Agent(cluster, "hot", tmp_path, root, policy_file)
            try:
                wait_until(lambda: "cpu_usage_avg_5m" in annotations(kube, "hot"), agent.server, "hot's load")
                measured = float(annotations(kube, "hot")["cpu_usage_avg_5m"].split(",")[0])
                cluster.start_scheduler(scheduler_config(ext.url))
                names = [f"web-{i}" for i in range(4)]
                create_pods(cluster.core(), names, requests={"cpu": "100m"})
                placed = wait_bound(cluster.core(), names)
                filtered = ext.requests("filter")
            finally:
                agent.stop()
    finally:
        lp.stop(burner)
        cluster.stop_scheduler()
        ext.stop()
    assert measured > CPU_LIMIT
    assert set(placed.values()) == {"spare"}, placed
    assert filtered >= 1
