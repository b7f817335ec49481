"""Ballast under the real kube-scheduler v1.36.2, wired as the shipped scheduler-config-node-cache.yaml says.

Names mode (``nodeCacheCapable: true``), filter + prioritize + preempt + bind, ``ignorable: false``. The
extender runs as its own process (``ballast extender --kubeconfig``) against the loopback API server, so these
tests see the real call pattern: asynchronous binding, retries and backoff, preemption, an extender that
disappears and comes back.

Load numbers used below, with the shipped policy (cpu_usage_avg_5m limit 0.65, cpu estimate 85 % of the
request): a node of 8 CPUs annotated at 0.40 takes two 1-CPU pods (0.40 + 2 x 0.10625 = 0.6125) and
rejects a third (0.71875).
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from ballast.testing.controlplane import (
    ControlPlane,
    Server,
    bound_pods,
    create_nodes,
    free_port,
    node_body,
    pod_body,
    spawn,
    wait_bound,
    wait_until,
)
from ballast.testing.fakekube import make_nrt

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "scheduler_config" / "scheduler-config-node-cache.yaml"
POLICY = ROOT / "scheduler_config" / "policy.yaml"
CRD = ROOT / "scheduler_config" / "crd-noderesourcetopology.yaml"
SCHEDULER = "ballast-scheduler"
TOPOLOGY_RESULT = "topology.crane.io/topology-result"


def stamp(age: timedelta = timedelta(0)) -> str:
    return (datetime.now(UTC) - age).strftime("%Y-%m-%dT%H:%M:%SZ")


def load(value: float, age: timedelta = timedelta(0)) -> dict[str, str]:
    return {"cpu_usage_avg_5m": f"{value:.5f},{stamp(age)}"}


STALE = timedelta(hours=1)  # cpu_usage_avg_5m counts for period 3m + 5m


class Extender:
    """``ballast extender`` as a subprocess on a fixed port, so it can be killed and restarted in place."""

    def __init__(self, cp: ControlPlane, policy: Path = POLICY) -> None:
        self.cp = cp
        self.policy = policy
        self.port = free_port()
        self.server: Server | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self.cp.workdir
        self.starts += 1
        argv = [sys.executable, "-m", "ballast", "extender",
                "--host", "127.0.0.1", "--port", str(self.port), "--policy", str(self.policy),
                "--kubeconfig", str(self.cp.kubeconfig), "--policy-poll", "0"]  # fmt: skip
        name = f"ballast-extender-{self.port}-{self.starts}"  # one log per start, not shared by two extenders
        self.server = spawn(name, argv, self.cp.workdir, env=dict(os.environ))

        def ready() -> bool:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=5) as resp:
                return resp.status == 200

        wait_until(ready, self.server, "ballast extender /readyz")

    def kill(self) -> None:
        assert self.server
        self.server.kill()

    def stop(self) -> None:
        if self.server:
            self.server.stop()

    def requests(self, verb: str) -> float:
        """``ballast_extender_requests_total`` for ``verb`` with status 200, from /metrics."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            if family.name == "ballast_extender_requests"
            for sample in family.samples
            if sample.name.endswith("_total") and sample.labels == {"verb": verb, "code": "200"}
        )


def scheduler_config(extender_url: str) -> dict[str, Any]:
    """The shipped configuration, pointed at the test extender; everything else as shipped."""
    config = yaml.safe_load(SHIPPED.read_text())
    (ext,) = config["extenders"]
    assert ext["nodeCacheCapable"] is True and ext["bindVerb"] == "bind" and ext["preemptVerb"] == "preempt"
    ext["urlPrefix"] = extender_url
    return config


@pytest.fixture
def ballast(cluster: ControlPlane) -> Iterator[Extender]:
    """A running extender and a kube-scheduler calling it the shipped way."""
    # The NRT CRD first: an extender started without it retries that watch only every 30 s.
    cluster.kubectl("apply", "-f", str(CRD))
    cluster.kubectl("wait", "--for", "condition=Established", "--timeout", "120s", "-f", str(CRD))
    ext = Extender(cluster)
    ext.start()
    try:
        cluster.start_scheduler(scheduler_config(ext.url))
        yield ext
    finally:
        cluster.stop_scheduler()
        ext.stop()


def create_pods(core: Any, names: list[str], **kwargs: Any) -> None:
    for name in names:
        core.create_namespaced_pod("default", pod_body(name, scheduler_name=SCHEDULER, **kwargs))


def unschedulable(core: Any, names: set[str]) -> bool:
    """True when the scheduler has marked every pod in ``names`` Unschedulable (and left it unbound)."""
    marked = set()
    for pod in core.list_namespaced_pod("default").items:
        if pod.metadata.name in names and not pod.spec.node_name:
            for cond in pod.status.conditions or []:
                if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
                    marked.add(pod.metadata.name)
    return marked == names


def wait_unschedulable(core: Any, names: set[str]) -> None:
    wait_until(lambda: unschedulable(core, names), None, f"{sorted(names)} marked Unschedulable")


def test_pods_land_only_on_nodes_that_pass(cluster: ControlPlane, ballast: Extender) -> None:
    core = cluster.core()
    create_nodes(
        core,
        [
            node_body("idle", annotations=load(0.20)),
            node_body("overloaded", annotations=load(0.90)),
            node_body("overloaded-2", annotations=load(0.80)),
        ],
    )
    names = [f"web-{i}" for i in range(6)]
    create_pods(core, names, requests={"cpu": "100m"})
    placed = wait_bound(core, names)
    assert set(placed.values()) == {"idle"}, placed
    assert ballast.requests("filter") >= 1 and ballast.requests("bind") >= len(names)


def test_an_overloaded_node_never_gets_a_pod_and_a_stale_one_does(
    cluster: ControlPlane, ballast: Extender
) -> None:
    core = cluster.core()
    create_nodes(
        core,
        [
            node_body("overloaded", annotations=load(0.90)),
            node_body("stale", annotations=load(0.90, age=STALE)),
        ],
    )
    names = [f"api-{i}" for i in range(4)]
    create_pods(core, names, requests={"cpu": "100m"})
    assert set(wait_bound(core, names).values()) == {"stale"}
    # and with only the overloaded node left, a pod waits, marked Unschedulable by the real scheduler
    core.delete_node("stale")
    core.create_namespaced_pod("default", pod_body("waits", scheduler_name=SCHEDULER))
    wait_unschedulable(core, {"waits"})
    assert "waits" not in bound_pods(core)


def settled(core: Any, names: set[str]) -> bool:
    """Every pod in ``names`` is either bound or marked Unschedulable by the scheduler."""
    bound = set(bound_pods(core))
    return unschedulable(core, names - bound)


def test_a_burst_never_pushes_a_node_over_its_limit(cluster: ControlPlane, ballast: Extender) -> None:
    """All pods at once: the scheduler's next filter often arrives before the previous bind lands, and
    it picks among the passing nodes by its own totals and random tie-breaks, not by Ballast's holds; the
    bind check refuses what would overfill a node and the scheduler retries those pods."""
    core = cluster.core()
    nodes = create_nodes(core, [node_body(f"n{i}", annotations=load(0.40)) for i in range(4)])
    names = [f"burst-{i}" for i in range(12)]
    create_pods(core, names, requests={"cpu": "1"})
    wait_until(lambda: settled(core, set(names)), None, "every pod bound or Unschedulable")
    per_node = Counter(bound_pods(core).values())
    assert per_node == dict.fromkeys(nodes, 2), per_node


def test_numa_result_is_written_and_a_zone_is_never_overbooked(
    cluster: ControlPlane, ballast: Extender
) -> None:
    core = cluster.core()
    zone = {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}
    nrt = make_nrt("numa", zones=[{"name": f"node{i}", "type": "Node", "resources": zone} for i in range(2)])
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(nrt))
    create_nodes(core, [node_body("numa", cpu="16")])

    def nrt_seen() -> bool:
        with urllib.request.urlopen(f"{ballast.url}/nodes", timeout=5) as resp:
            nodes = {n["name"]: n for n in json.load(resp)["nodes"]}
        return bool(nodes.get("numa", {}).get("numa", {}).get("nrt"))

    wait_until(nrt_seen, None, "the extender's cache holding the node's NodeResourceTopology")
    # Guaranteed, integer CPUs: exclusive; SingleNUMANodePodLevel: one zone each, so two of five fit.
    names = [f"kafka-{i}" for i in range(5)]
    exact = {"cpu": "3", "memory": "1Gi"}
    create_pods(core, names, requests=exact, limits=exact)
    wait_until(lambda: settled(core, set(names)), None, "every pod bound or Unschedulable")
    assert len(bound_pods(core)) == 2, bound_pods(core)
    zones = []
    for name in bound_pods(core):
        pod = core.read_namespaced_pod(name, "default")
        result = yaml.safe_load(pod.metadata.annotations[TOPOLOGY_RESULT])
        assert [(z["name"], z["resources"]["capacity"]["cpu"]) for z in result] in (
            [("node0", "3")],
            [("node1", "3")],
        ), result
        zones.append(result[0]["name"])
    assert sorted(zones) == ["node0", "node1"]


def test_preemption_goes_through_the_extender(cluster: ControlPlane, ballast: Extender) -> None:
    core = cluster.core()
    from kubernetes import client as k8s_client

    scheduling = k8s_client.SchedulingV1Api(cluster.api())
    for name, value in (("e2e-low", 0), ("e2e-high", 1000)):
        scheduling.create_priority_class({"metadata": {"name": name}, "value": value})
    try:
        create_nodes(core, [node_body("small", cpu="2")])  # no load figures: only the CPU request decides
        create_pods(core, ["victim"], requests={"cpu": "2"}, priority_class="e2e-low")
        wait_bound(core, ["victim"])
        create_pods(core, ["vip"], requests={"cpu": "2"}, priority_class="e2e-high")

        # No kubelet: play its part and confirm the victim's termination once the scheduler evicts it.
        def evicted() -> bool:
            pod = core.read_namespaced_pod("victim", "default")
            return pod.metadata.deletion_timestamp is not None

        wait_until(evicted, None, "the victim evicted by the scheduler's preemption")
        core.delete_namespaced_pod("victim", "default", grace_period_seconds=0)
        assert wait_bound(core, ["vip"]) == {"vip": "small"}
        assert ballast.requests("preempt") >= 1
    finally:
        for name in ("e2e-low", "e2e-high"):
            scheduling.delete_priority_class(name)


def test_killing_the_extender_mid_burst_loses_no_pod_and_binds_none_twice(
    cluster: ControlPlane, ballast: Extender
) -> None:
    """``ignorable: false`` (as shipped): while the extender is down the scheduler fails each attempt (the
    pod's PodScheduled condition says so) and requeues the pod with backoff; nothing is bound without the
    extender. Once it is back on the same port, every pod is scheduled, each exactly once."""
    core = cluster.core()
    create_nodes(core, [node_body(f"n{i}", annotations=load(0.10)) for i in range(4)])
    first = [f"wave-{i}" for i in range(8)]
    create_pods(core, first, requests={"cpu": "500m"})
    wait_until(lambda: len(bound_pods(core)) >= 2, None, "the burst under way")
    ballast.kill()
    late = [f"late-{i}" for i in range(4)]
    create_pods(core, late, requests={"cpu": "500m"})

    def late_failed() -> bool:
        return all(
            any(c.type == "PodScheduled" and c.status == "False" for c in p.status.conditions or [])
            for p in core.list_namespaced_pod("default").items
            if p.metadata.name in late
        )

    wait_until(late_failed, None, "the late pods failing their attempts while the extender is down")
    assert not set(late) & set(bound_pods(core)), "a pod was bound while the extender was down"
    ballast.start()
    everything = first + late
    placed = wait_bound(core, everything)
    assert set(placed) == set(everything)
    # none lost, none duplicated: exactly the created pods exist, each bound to one node
    assert sorted(p.metadata.name for p in core.list_namespaced_pod("default").items) == sorted(everything)


EXAMPLES = ROOT / "scheduler_config" / "examples"


def explain(ballast: Extender, pod: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{ballast.url}/explain", data=json.dumps({"Pod": pod}).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.load(resp)


def test_the_examples_are_scheduled_as_their_readme_says(cluster: ControlPlane, ballast: Extender) -> None:
    """scheduler_config/examples/ as an operator applies them: the real API server takes both files, Ballast
    places the Deployment's pod on the node that passes, and the Guaranteed pod gets one zone with its 2
    CPUs; /explain answers what the README says to look for."""
    core = cluster.core()
    zone = {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}
    nrt = make_nrt("numa", zones=[{"name": f"node{i}", "type": "Node", "resources": zone} for i in range(2)])
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(nrt))
    create_nodes(
        core,
        [
            node_body("numa", cpu="8", annotations=load(0.20)),
            node_body("busy", cpu="8", annotations=load(0.90)),
        ],
    )

    def nrt_seen() -> bool:
        with urllib.request.urlopen(f"{ballast.url}/nodes", timeout=5) as resp:
            nodes = {n["name"]: n for n in json.load(resp)["nodes"]}
        return bool(nodes.get("numa", {}).get("numa", {}).get("nrt"))

    wait_until(nrt_seen, None, "the extender's cache holding the node's NodeResourceTopology")
    deployment = EXAMPLES / "deployment.yaml"
    cluster.kubectl("apply", "--dry-run=server", "-n", "default", "-f", str(deployment))
    cluster.kubectl("apply", "-n", "default", "-f", str(EXAMPLES / "guaranteed-pod.yaml"))
    # One of the Deployment's pods, as its ReplicaSet would create it (no controller manager runs here).
    template = yaml.safe_load(deployment.read_text())["spec"]["template"]
    web = {"metadata": {"name": "ballast-example-web-1", **template["metadata"]}, "spec": template["spec"]}
    core.create_namespaced_pod("default", web)
    placed = wait_bound(core, ["ballast-example-pinned", "ballast-example-web-1"])
    assert placed == {"ballast-example-pinned": "numa", "ballast-example-web-1": "numa"}
    pinned = core.read_namespaced_pod("ballast-example-pinned", "default")
    (chosen,) = json.loads(pinned.metadata.annotations[TOPOLOGY_RESULT])
    assert chosen["name"] in ("node0", "node1") and chosen["resources"]["capacity"] == {"cpu": "2"}
    for name in placed:
        pod = core.api_client.sanitize_for_serialization(core.read_namespaced_pod(name, "default"))
        answer = explain(ballast, pod)
        views = {v["name"]: v for v in answer["nodes"]}
        assert answer["favoured"] == "numa", answer
        assert views["busy"]["filter"]["passes"] is False
        assert "above the limit" in views["busy"]["filter"]["reason"]
        assert views["numa"]["score"]["projectedLoad"] is not None


def test_restarting_the_api_server_mid_drain_binds_every_pod_once(
    cluster: ControlPlane, ballast: Extender
) -> None:
    """kube-apiserver killed mid-drain (every connection reset, Bindings in flight among them) and started
    again on the same port: the extender's bind transport opens new connections, kube-scheduler retries
    the binds that failed, and every pod ends bound once, counted once on its node by the extender."""
    core = cluster.core()
    create_nodes(core, [node_body(f"n{i}", annotations=load(0.10)) for i in range(4)])
    names = [f"drain-{i:03d}" for i in range(240)]
    cluster.stop_scheduler()  # a backlog, so the restart lands mid-drain
    create_pods(core, names, requests={"cpu": "10m"})
    cluster.start_scheduler(scheduler_config(ballast.url))
    # Polled closely: kube-scheduler drains a few hundred pods a second here, so a poll every 0.2 s could
    # see the drain only once it is over.
    deadline = time.monotonic() + 60
    while (before := len(bound_pods(core))) < 5:
        assert time.monotonic() < deadline, "the drain never started"
        time.sleep(0.01)
    cluster.restart_apiserver(kill=True)
    assert before < len(names), "the drain ended before the restart: nothing was tested"
    core = cluster.core()
    placed = wait_bound(core, names)
    assert sorted(p.metadata.name for p in core.list_namespaced_pod("default").items) == sorted(names)

    def counted() -> dict[str, str]:
        seen: dict[str, str] = {}
        for node in {f"n{i}" for i in range(4)}:
            with urllib.request.urlopen(f"{ballast.url}/nodes/{node}", timeout=5) as resp:
                for pod in json.load(resp)["estimation"]["pods"]:
                    name = pod["pod"].removeprefix("default/")
                    assert name not in seen, f"{name} counted on {seen[name]} and {node}"
                    seen[name] = node
        return seen

    wait_until(lambda: counted() == placed, None, "the extender counting each pod once, where it is")
