"""The rebalancer deciding by what pods really use, and never moving a pod back and forth, on the real
control plane: kube-apiserver v1.36.2 with the NodeLoad CRD, kube-controller-manager (each Deployment's
ReplicaSet recreates what is evicted) and kube-scheduler calling the Ballast extender (it places the
replacements).

No kubelet and no agent run: the test plays both (``LoadAgent``). It marks bound pods Running, removes
evicted ones (what a kubelet confirms), and, whenever the pods on a node change (and every few seconds),
writes what an agent would measure: the node's ``cpu_usage_avg_5m`` annotation = background + the sum of
its pods' *true* usage / allocatable, and the node's NodeLoad status listing each pod's true usage. A pod's
true usage is a property of its workload (an annotation on the Deployment's pod template), so a replacement
uses what the pod it replaces used.
"""

from __future__ import annotations

import contextlib
import math
import random
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from ballast.contract.nodeload import (
    GROUP,
    PLURAL,
    VERSION,
    NodeLoadStatus,
    PodUsage,
    new_object,
    render_status,
)
from ballast.testing.controlplane import ControlPlane, create_nodes, node_body, wait_until
from tests.cluster.test_extender_e2e import SCHEDULER, Extender, scheduler_config
from tests.cluster.test_rebalancer_e2e import (  # noqa: F401 (kcm and running are fixtures)
    NS,
    POLICY,
    Rebalancer,
    apply,
    events,
    kcm,
    pods_of,
    running,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "scheduler_config" / "crd-nodeload.yaml"
METRIC = "cpu_usage_avg_5m"
USAGE = "test.ballast.io/true-usage-cores"
"""Pod-template annotation: the cores this workload's pod really uses (what the test's agent reports)."""
CPUS = 8
HIGH, LOW = 0.80, 0.45


def iso(when: float) -> str:
    return datetime.fromtimestamp(when, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class LoadAgent:
    """The kubelets and the Ballast agents of every node, in one thread of the test."""

    def __init__(
        self, cp: ControlPlane, background: dict[str, float], *, nodeloads: bool, refresh: float = 5.0
    ) -> None:
        from kubernetes import client as k8s_client

        api = cp.api()
        self.core = k8s_client.CoreV1Api(api)
        self.custom = k8s_client.CustomObjectsApi(api)
        self.background = dict(background)
        self.nodeloads = nodeloads
        self.refresh = refresh
        self.written: dict[str, tuple[Any, float]] = {}
        self.loads: dict[str, float] = {}
        """Each node's true load as last written."""
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, name="load-agent", daemon=True)

    def start(self) -> None:
        self.step()
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(20)

    def set_background(self, node: str, value: float) -> None:
        with self.lock:
            self.background[node] = value
        self.step()

    def _run(self) -> None:
        while not self.stop.wait(0.3):
            try:
                self.step()
            except Exception as exc:  # reported by check(); the loop goes on like an agent would
                self.errors.append(exc)

    def check(self) -> None:
        assert not self.errors, self.errors[-1]

    def step(self) -> None:
        with self.lock:
            now = time.time()
            stamp = math.floor(
                now
            )  # taken before the list: a report stamped later saw every change before it
            on: dict[str, list[Any]] = defaultdict(list)
            for p in self.core.list_namespaced_pod(NS).items:
                if p.metadata.deletion_timestamp:  # evicted: the kubelet would stop it and confirm
                    with contextlib.suppress(ApiException):
                        self.core.delete_namespaced_pod(p.metadata.name, NS, grace_period_seconds=0)
                    continue
                if not p.spec.node_name:
                    continue
                if p.status.phase != "Running":
                    with contextlib.suppress(ApiException):
                        ready = {"type": "Ready", "status": "True", "lastTransitionTime": iso(now)}
                        self.core.patch_namespaced_pod_status(
                            p.metadata.name, NS, {"status": {"phase": "Running", "conditions": [ready]}}
                        )
                on[p.spec.node_name].append(p)
            for node, background in self.background.items():
                usages = [
                    (p, float((p.metadata.annotations or {}).get(USAGE, "0"))) for p in on.get(node, [])
                ]
                value = background + sum(u for _, u in usages) / CPUS
                key = (round(value, 5), sorted(p.metadata.uid for p, _ in usages))
                last = self.written.get(node)
                if last is not None and last[0] == key and now - last[1] < self.refresh:
                    continue
                self.core.patch_node(
                    node, {"metadata": {"annotations": {METRIC: f"{value:.5f},{iso(stamp)}"}}}
                )
                if self.nodeloads:
                    self._nodeload(node, stamp, value, usages)
                self.written[node] = (key, now)
                self.loads[node] = value

    def _nodeload(self, node: str, stamp: float, value: float, usages: list[tuple[Any, float]]) -> None:
        pods = tuple(PodUsage(NS, p.metadata.name, p.metadata.uid, u, 64 * 2**20) for p, u in usages)
        status = render_status(NodeLoadStatus(stamp, 300.0, value * CPUS, 2**30, pods))
        write_nodeload(self.custom, node, status)


def write_nodeload(custom: Any, node: str, status: dict[str, Any]) -> None:
    try:
        obj = custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, node)
    except ApiException as exc:
        if exc.status != 404:
            raise
        obj = custom.create_cluster_custom_object(GROUP, VERSION, PLURAL, new_object(node, None))
    obj["status"] = status
    custom.replace_cluster_custom_object_status(GROUP, VERSION, PLURAL, node, obj)


@pytest.fixture
def crd(kcm: ControlPlane) -> Iterator[ControlPlane]:  # noqa: F811 (the fixture imported above)
    kcm.kubectl("apply", "-f", str(CRD))
    kcm.kubectl("wait", "--for", "condition=Established", "--timeout", "120s", "-f", str(CRD))
    yield kcm
    kcm.kubectl("delete", "nodeloads", "--all", "--wait=false", check=False)


def policy_file(path: Path, predicate_limit: float = 0.65, **rebalance: Any) -> Path:
    doc = yaml.safe_load(POLICY.read_text())
    for p in doc["spec"]["predicate"]:
        if p["name"] == METRIC:
            p["maxLimitPecent"] = predicate_limit
    doc["spec"]["rebalance"] = {
        "thresholds": [{"name": METRIC, "high": HIGH, "low": LOW}],
        "consecutiveAbnormal": 2,
        "consecutiveNormal": 2,
        "limits": {"perNode": 2, "perCycle": 10, "perNamespace": 10, "perWorkload": 10,
                   "workloadWindow": "5m", "evictionsPerSecond": 20},
        **rebalance,
    }  # fmt: skip
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def scheduled(crd: ControlPlane) -> Iterator[Callable[[Path], Extender]]:
    """Start the extender on a policy, and kube-scheduler calling it the shipped way."""
    started: list[Extender] = []

    def start(policy: Path) -> Extender:
        ext = Extender(crd, policy)
        ext.start()
        started.append(ext)
        crd.start_scheduler(scheduler_config(ext.url))
        return ext

    yield start
    crd.stop_scheduler()
    for ext in started:
        ext.stop()


@pytest.fixture
def agents() -> Iterator[list[LoadAgent]]:
    started: list[LoadAgent] = []
    yield started
    for a in started:
        a.close()


def workload(name: str, cpu: str, usage_cores: float) -> dict[str, Any]:
    spec = {
        "schedulerName": SCHEDULER,
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
        "terminationGracePeriodSeconds": 30,
    }  # fmt: skip
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {USAGE: f"{usage_cores:.3f}"}},
                "spec": spec,
            },
        },
    }


def live(core: Any) -> list[Any]:
    return [
        p
        for p in core.list_namespaced_pod(NS).items
        if p.spec.node_name and not p.metadata.deletion_timestamp
    ]


def minimum_evictions(usages: list[float], load: float) -> int:
    """Fewest pods whose true usage brings ``load`` below high: the heaviest first."""
    count = 0
    for u in sorted(usages, reverse=True):
        if load < HIGH:
            break
        load -= u / CPUS
        count += 1
    assert load < HIGH, "the scenario must be solvable by evictions"
    return count


# ------------------------------------------------------------------------------------- measured usage

N_NODES, N_PODS, N_HOT = 8, 24, 3
SEED = 30


def test_measured_usage_relieves_hot_nodes_within_1_2x_the_minimum_evictions(
    crd: ControlPlane,
    scheduled: Callable[[Path], Extender],
    running: list[Rebalancer],  # noqa: F811
    agents: list[LoadAgent],
    tmp_path: Path,
) -> None:
    """24 pods of 500m whose true usage is 0.1x to 2x their request (a fixed seeded set), placed by
    kube-scheduler with the extender on 8 nodes of 8 CPUs; then three nodes turn hot by background, each
    needing at least two or three of its heaviest pods to leave. The rebalancer with NodeLoads evicts
    within 1.2x the minimum number (by estimates, which cannot tell the heavy pods from the light, it
    takes about twice as many), relieves every hot node, and never makes a new one."""
    core = crd.core()
    names = [f"n{i}" for i in range(N_NODES)]
    create_nodes(core, [node_body(n, cpu=str(CPUS)) for n in names])
    agent = LoadAgent(crd, dict.fromkeys(names, 0.0), nodeloads=True)
    agents.append(agent)
    agent.start()
    policy = policy_file(tmp_path / "policy.yaml")
    scheduled(policy)
    rnd = random.Random(SEED)
    factors = [rnd.uniform(0.1, 2.0) for _ in range(N_PODS)]
    apply(crd, *(workload(f"w{i:02d}", "500m", 0.5 * f) for i, f in enumerate(factors)))
    wait_until(lambda: len(live(core)) == N_PODS, None, f"{N_PODS} pods bound")
    # the hot nodes: the three with the most pods; background makes each need its heaviest pods to go
    on: dict[str, list[float]] = defaultdict(list)
    for p in live(core):
        on[p.spec.node_name].append(float(p.metadata.annotations[USAGE]))
    hot = sorted(names, key=lambda n: (-len(on[n]), n))[:N_HOT]
    assert all(len(on[n]) >= 2 for n in hot), dict(on)
    minimum = 0
    for n in hot:
        heavy = sorted(on[n], reverse=True)
        # above high by the heaviest pod plus half the next: the minimum is two (three when the second
        # heaviest alone is less than half the first)
        target = HIGH + (heavy[0] + 0.5 * heavy[1]) / CPUS
        agent.set_background(n, target - sum(on[n]) / CPUS)
        minimum += minimum_evictions(on[n], agent.loads[n])
    assert all(agent.loads[n] > HIGH for n in hot)
    assert all(agent.loads[n] < LOW for n in names if n not in hot), agent.loads
    # earlier tests' Events stay in the namespace: count only this rebalancer's
    earlier = {e.metadata.uid for e in events(core, "Rebalanced")}
    r = Rebalancer(crd, policy, "--leader-elect")
    running.append(r)

    def settled() -> bool:
        agent.check()
        cycle = r.view().get("lastCycle") or {}
        return cycle.get("idle") == "no hot node" and len(live(core)) == N_PODS

    wait_until(settled, r.server, "every hot node relieved and every replacement bound", timeout=240)
    evicted = r.metric("ballast_rebalancer_evictions_total", result="evicted")
    assert 0 < evicted <= 1.2 * minimum, (evicted, minimum)
    assert all(agent.loads[n] < HIGH for n in names), agent.loads
    messages = [e.message for e in events(core, "Rebalanced") if e.metadata.uid not in earlier]
    assert len(messages) == evicted and all("usage measured (cpu " in m for m in messages), messages


# ------------------------------------------------------------------------------------- no ping-pong


@pytest.mark.parametrize("nodeloads", [False, True], ids=["estimated", "measured"])
def test_no_ping_pong_each_pod_moves_at_most_once(
    crd: ControlPlane,
    scheduled: Callable[[Path], Extender],
    running: list[Rebalancer],  # noqa: F811
    agents: list[LoadAgent],
    tmp_path: Path,
    nodeloads: bool,
) -> None:
    """The scenario: one 3-CPU pod on 8-CPU nodes whose load is background 0.44 + its pods' requests,
    high 0.80, low 0.45, consecutiveAbnormal 2, perWorkload 10, the extender's cpu filter limit 0.90. The
    pod's node reads 0.815 (hot); moved, it would make the other node 0.815 too. It must not bounce: in
    twenty cycles of a hot node it moves at most once (here: never, the target has no room for it), and
    the policy (filter limit 0.90, above high) is reported."""
    core = crd.core()
    create_nodes(core, [node_body(n, cpu=str(CPUS)) for n in ("n1", "n4")])
    agent = LoadAgent(crd, {"n1": 0.44, "n4": 0.44}, nodeloads=nodeloads)
    agents.append(agent)
    agent.start()
    policy = policy_file(tmp_path / "policy.yaml", predicate_limit=0.90)
    scheduled(policy)
    apply(crd, workload("big", "3", 3.0))
    wait_until(lambda: len(live(core)) == 1, None, "the pod bound")
    wait_until(lambda: max(agent.loads.values()) > HIGH, None, "its node reading hot")
    r = Rebalancer(crd, policy, "--leader-elect")
    running.append(r)
    with urllib.request.urlopen(f"http://127.0.0.1:{r.port}/readyz", timeout=5) as resp:
        assert "policy warnings: cpu_usage_avg_5m: spec.predicate limit 0.9" in resp.read().decode()
    assert r.metric("ballast_rebalancer_policy_warnings") == 1
    start = r.metric("ballast_rebalancer_cycles_total", result="ok")
    wait_until(lambda: r.metric("ballast_rebalancer_cycles_total", result="ok") >= start + 20, r.server,
               "twenty cycles", timeout=120)  # fmt: skip
    agent.check()
    moves = r.metric("ballast_rebalancer_evictions_total", result="evicted")
    assert moves <= 1, f"the pod moved {moves:g} times"
    assert len(live(core)) == 1
    (watched,) = [n for n in r.view()["lastCycle"]["watched"] if n["state"] == "hot"]
    (candidate,) = watched["candidates"]
    assert candidate["outcome"] == "no_fit" and "would go above high" in candidate["why"]
    assert candidate["usage"]["source"] == ("measured" if nodeloads else "estimated")


# ------------------------------------------------------------------------------------- fallback


def test_without_a_fresh_nodeload_each_pod_falls_back_to_its_estimate(
    crd: ControlPlane,
    running: list[Rebalancer],  # noqa: F811
    tmp_path: Path,
) -> None:
    """Dry run on a hot node with two pods: a stale NodeLoad (updateTime ten minutes old) gives every pod
    its estimate; a fresh one listing only one pod gives that pod its measured usage and the other its
    estimate; the NodeLoad deleted, both are estimated again."""
    from kubernetes import client as k8s_client

    core = crd.core()
    custom = k8s_client.CustomObjectsApi(crd.api())
    stamp = iso(time.time())
    create_nodes(core, [node_body("hot", annotations={METRIC: f"0.95000,{stamp}"}),
                        node_body("cool", annotations={METRIC: f"0.10000,{stamp}"})])  # fmt: skip
    for name in ("a", "b"):
        d = workload(name, "500m", 1.0)
        d["spec"]["template"]["spec"]["nodeName"] = "hot"
        apply(crd, d)
    wait_until(lambda: len(live(core)) == 2, None, "two pods bound")
    uids = {p.metadata.labels["app"]: p.metadata.uid for p in live(core)}

    def status(at: float, *listed: str) -> dict[str, Any]:
        pods = tuple(PodUsage(NS, f"pod-{n}", uids[n], 1.5, 2**28) for n in listed)
        return render_status(NodeLoadStatus(math.floor(at), 300.0, 7.6, 2**30, pods))

    write_nodeload(custom, "hot", status(time.time() - 600, "a", "b"))
    r = Rebalancer(crd, policy_file(tmp_path / "policy.yaml", consecutiveAbnormal=1), "--dry-run",
                   "--load-report-interval", "1m")  # fmt: skip
    running.append(r)

    def sources() -> dict[str, str]:
        node = r.watched("hot") or {"candidates": []}
        return {c["pod"].split("/")[1].split("-")[0]: c["usage"]["source"] for c in node["candidates"]}

    wait_until(lambda: sources() == {"a": "estimated", "b": "estimated"}, r.server, "both estimated")
    write_nodeload(custom, "hot", status(time.time(), "a"))
    wait_until(lambda: sources() == {"a": "measured", "b": "estimated"}, r.server, "a measured, b estimated")
    (candidate,) = [c for c in r.watched("hot")["candidates"] if c["usage"]["source"] == "measured"]
    assert candidate["usage"]["cpuMilli"] == 1500
    custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "hot")
    wait_until(lambda: sources() == {"a": "estimated", "b": "estimated"}, r.server, "both estimated again")
