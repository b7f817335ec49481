"""Community NodeResourceTopology (v1alpha2) under the real kube-scheduler v1.36.2 calling Ballast.

The CRD is the shipped ``scheduler_config/crd-noderesourcetopology-v1alpha2.yaml``, applied to the real API
server, so every object here (shaped like nfd-topology-updater's: two NUMA zones, one nearly full) passed
its schema. Nodes have no kubelet: the test plays the exporter and updates the objects itself.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ballast.contract.podfingerprint import fingerprint
from ballast.testing.controlplane import (
    ControlPlane,
    bound_pods,
    create_nodes,
    node_body,
    pod_body,
    wait_bound,
    wait_until,
)
from ballast.testing.nrt_community import nrt, two_zones, zone
from tests.cluster.test_extender_e2e import (
    CRD,
    SCHEDULER,
    Extender,
    scheduler_config,
    settled,
    unschedulable,
    wait_unschedulable,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CRD_V1ALPHA2 = ROOT / "scheduler_config" / "crd-noderesourcetopology-v1alpha2.yaml"
RESOURCE = "noderesourcetopologies.topology.node.k8s.io"
SIX = {"cpu": "6", "memory": "1Gi"}


@pytest.fixture
def ballast(cluster: ControlPlane) -> Iterator[Extender]:
    for crd in (CRD, CRD_V1ALPHA2):  # before the extender starts: it retries a missing watch every 30 s
        cluster.kubectl("apply", "-f", str(crd))
        cluster.kubectl("wait", "--for", "condition=Established", "--timeout", "120s", "-f", str(crd))
    ext = Extender(cluster)
    ext.start()
    try:
        cluster.start_scheduler(scheduler_config(ext.url))
        yield ext
    finally:
        cluster.stop_scheduler()
        ext.stop()
        cluster.kubectl("delete", RESOURCE, "--all", "--wait=true")


def publish(cluster: ControlPlane, *objects: dict[str, Any]) -> None:
    """Create or replace the objects through the real API server (which validates them against the CRD)."""
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))


def nodes_view(ext: Extender) -> dict[str, dict[str, Any]]:
    with urllib.request.urlopen(f"{ext.url}/nodes", timeout=5) as resp:
        return {n["name"]: n for n in json.load(resp)["nodes"]}


def wait_seen(ext: Extender, want: dict[str, str]) -> None:
    """Wait until /nodes shows each node's v1alpha2 object (``want``: node -> its topologyManagerPolicy)."""

    def seen() -> bool:
        view = nodes_view(ext)
        return all(
            view.get(n, {}).get("numaCommunity", {}).get("topologyManagerPolicy") == p
            for n, p in want.items()
        )

    wait_until(seen, None, f"the extender holding the v1alpha2 objects of {sorted(want)}")


def create_pods(
    core: Any, names: list[str], requests: dict[str, str] | None = None, limits: dict[str, str] | None = None
) -> None:
    for name in names:
        core.create_namespaced_pod(
            "default", pod_body(name, scheduler_name=SCHEDULER, requests=requests, limits=limits)
        )


def test_a_guaranteed_pod_never_lands_where_no_zone_has_room_and_a_burst_never_overbooks(
    cluster: ControlPlane, ballast: Extender
) -> None:
    core = cluster.core()
    publish(cluster, two_zones("nearly-full", 2, 4), two_zones("roomy", 8, 2))
    create_nodes(core, [node_body("nearly-full", cpu="16"), node_body("roomy", cpu="16")])
    wait_seen(ballast, {"nearly-full": "single-numa-node", "roomy": "single-numa-node"})
    # Five at once: only roomy's node-0 has 6 free, and nothing updates the objects meanwhile.
    names = [f"g6-{i}" for i in range(5)]
    create_pods(core, names, SIX, SIX)
    wait_until(lambda: settled(core, set(names)), None, "every pod bound or Unschedulable")
    placed = bound_pods(core)
    assert list(placed.values()) == ["roomy"], placed
    view = nodes_view(ballast)["roomy"]["numaCommunity"]
    assert view["zones"][0]["assumed"]["cpu"] == 6000 and view["assumedPods"] == [
        f"default/{next(iter(placed))}"
    ]
    # an exporter update that does not count the pod yet (its fingerprint signs no pods) keeps it assumed
    (first,) = placed
    publish(cluster, two_zones("roomy", 8, 3, fingerprint=fingerprint([])))
    wait_until(
        lambda: nodes_view(ballast)["roomy"]["numaCommunity"]["zones"][1]["available"]["cpu"] == 3000,
        None,
        "the extender reading the update",
    )
    assert nodes_view(ballast)["roomy"]["numaCommunity"]["assumedPods"] == [f"default/{first}"]
    # the exporter catches up: node-0 shows the pod's CPUs gone and signs the pods it counted
    publish(cluster, two_zones("roomy", 2, 3, fingerprint=fingerprint([("default", first)])))
    wait_until(
        lambda: nodes_view(ballast)["roomy"]["numaCommunity"]["assumedPods"] == [],
        None,
        "the assumption settled by the fingerprint",
    )
    assert bound_pods(core) == placed


def test_best_effort_and_burstable_pods_are_not_filtered(cluster: ControlPlane, ballast: Extender) -> None:
    core = cluster.core()
    publish(cluster, two_zones("nearly-full", 2, 4))
    create_nodes(core, [node_body("nearly-full", cpu="32")])
    wait_seen(ballast, {"nearly-full": "single-numa-node"})
    create_pods(core, ["best-effort"])
    create_pods(core, ["burstable"], requests={"cpu": "6", "memory": "1Gi"})
    create_pods(core, ["fractional"], {"cpu": "5500m", "memory": "1Gi"}, {"cpu": "5500m", "memory": "1Gi"})
    assert set(wait_bound(core, ["best-effort", "burstable", "fractional"]).values()) == {"nearly-full"}
    create_pods(core, ["guaranteed"], SIX, SIX)
    wait_unschedulable(core, {"guaranteed"})
    pod = core.read_namespaced_pod("guaranteed", "default")
    (cond,) = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert "no single NUMA zone fits" in cond.message, cond.message


def test_nodes_with_policy_best_effort_or_restricted_pass(cluster: ControlPlane, ballast: Extender) -> None:
    core = cluster.core()
    publish(
        cluster,
        two_zones("best-effort", 2, 4, policy="best-effort"),
        nrt(
            "restricted",
            [zone(0, (8, 8, 2)), zone(1, (8, 8, 4))],
            policy=None,
            scope=None,
            legacy=["Restricted"],
        ),
    )
    create_nodes(core, [node_body("best-effort", cpu="16"), node_body("restricted", cpu="16")])
    wait_seen(ballast, {"best-effort": "best-effort", "restricted": "restricted"})
    names = ["g6-a", "g6-b"]
    create_pods(core, names, SIX, SIX)
    assert set(wait_bound(core, names).values()) <= {"best-effort", "restricted"}
    assert not unschedulable(core, set(names))


def test_the_api_server_rejects_what_the_schema_forbids(cluster: ControlPlane, ballast: Extender) -> None:
    """The CRD is not a formality: a quantity that is not one, or a zone without its available amount, is
    refused by the API server, so only the extender's own checks (negative values, unknown policies) are
    left to catch the rest, and those count as no information."""
    bad_quantity = two_zones("x", 2, 4)
    bad_quantity["zones"][0]["resources"][0]["available"] = "lots"
    no_available = two_zones("y", 2, 4)
    del no_available["zones"][0]["resources"][0]["available"]
    from kubernetes import client as k8s_client
    from kubernetes.client.exceptions import ApiException

    custom = k8s_client.CustomObjectsApi(cluster.api())
    for obj in (bad_quantity, no_available):
        with pytest.raises(ApiException) as refused:
            custom.create_cluster_custom_object(
                "topology.node.k8s.io", "v1alpha2", "noderesourcetopologies", obj
            )
        assert refused.value.status == 422, refused.value.body
    publish(cluster, two_zones("z", 2, 4, policy="strict"))
    wait_until(lambda: malformed_counted(ballast), None, "the extender counting z's object malformed")


def malformed_counted(ext: Extender) -> bool:
    with urllib.request.urlopen(f"{ext.url}/metrics", timeout=5) as resp:
        return "ballast_extender_nrt_malformed_total 1.0" in resp.read().decode()


def test_the_agents_v1alpha2_object_is_accepted_by_the_api_server_and_read_by_the_extender(
    cluster: ControlPlane, ballast: Extender, tmp_path: Path
) -> None:
    from ballast.agent.cpuset import CPUSet
    from ballast.agent.kubelet_config import KubeletSettings
    from ballast.agent.nrt.publisher import Publisher, Result
    from ballast.agent.topology.sysfs import read_topology
    from ballast.kube.client import Kube
    from tests.agent.sysfs_fixtures import TWO_SOCKETS_HT, write_sysfs

    class Settings:
        description = "test settings"

        def settings(self) -> KubeletSettings:
            return KubeletSettings()

    core = cluster.core()
    create_nodes(core, [node_body("agent-node", cpu="64")])
    topology = read_topology(write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT))
    zone1 = topology.cpus_in_numa(1)
    held = {"uid-1": ("default", "pinned", CPUSet(list(zone1)[:2]))}
    kube = Kube(cluster.api())
    publisher = Publisher(kube, "agent-node", topology, Settings(), publish={"community"}, held=lambda: held)
    assert publisher.publish_once() is Result.UNCHANGED  # the crane object is not published
    assert publisher.metrics.community_publishes.labels("created")._value.get() == 1
    wait_seen(ballast, {"agent-node": "single-numa-node"})
    view = nodes_view(ballast)["agent-node"]["numaCommunity"]
    z0, z1 = view["zones"]
    assert z1["available"]["cpu"] == z1["allocatable"]["cpu"] - 2000
    assert z0["available"]["cpu"] == z0["allocatable"]["cpu"]
    # the real scheduler, through Ballast, holds pods to what a zone has
    too_big = str(z0["available"]["cpu"] // 1000 + 1)
    fits = str(z1["available"]["cpu"] // 1000)
    create_pods(core, ["too-big"], {"cpu": too_big, "memory": "1Gi"}, {"cpu": too_big, "memory": "1Gi"})
    create_pods(core, ["fits"], {"cpu": fits, "memory": "1Gi"}, {"cpu": fits, "memory": "1Gi"})
    assert wait_bound(core, ["fits"]) == {"fits": "agent-node"}
    wait_unschedulable(core, {"too-big"})
    # an assignment changes: the next publish patches available
    held["uid-2"] = ("default", "fits", CPUSet(list(zone1)[2 : 2 + int(fits)]))
    publisher.publish_once()
    assert publisher.metrics.community_publishes.labels("patched")._value.get() == 1
    wait_until(
        lambda: (
            nodes_view(ballast)["agent-node"]["numaCommunity"]["zones"][1]["available"]["cpu"]
            == max(0, z1["allocatable"]["cpu"] - 2000 - int(fits) * 1000)
        ),
        None,
        "the extender reading the patched object",
    )
