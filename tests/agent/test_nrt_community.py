"""The agent's community NRT (v1alpha2): built from crane's, ``available`` per zone, published and read back
by the extender's parser, and ``--publish``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import config as k8s_config

from ballast.agent.cpuset import CPUSet
from ballast.agent.kubelet_config import KubeletSettings
from ballast.agent.nrt.community import build_community_nrt, community_merge_patch
from ballast.agent.nrt.crane import build_nrt
from ballast.agent.nrt.publisher import Publisher, PublisherMetrics, Result
from ballast.agent.topology.model import CPUTopology
from ballast.agent.topology.sysfs import read_topology
from ballast.cli import build_parser
from ballast.contract.podfingerprint import fingerprint
from ballast.extender.numa.community import CommunityTopology, parse_community
from ballast.kube.client import Kube
from ballast.testing.fakekube import FakeKube, make_node
from tests.agent.sysfs_fixtures import TWO_SOCKETS_HT, write_sysfs
from tests.agent.test_crd import violations

NODE = "worker-1"
COMMUNITY = "noderesourcetopologies.topology.node.k8s.io"
CRD = Path(__file__).resolve().parents[2] / "scheduler_config" / "crd-noderesourcetopology-v1alpha2.yaml"


class StaticSource:
    description = "test settings"

    def settings(self) -> KubeletSettings:
        return KubeletSettings()


@pytest.fixture
def topology(tmp_path: Path) -> CPUTopology:
    return read_topology(write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT))


def crane(topology: CPUTopology, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return build_nrt(
        node_name=NODE, node_uid="u1", topology=topology, kubelet=KubeletSettings(), node_labels=labels
    )


def test_available_is_allocatable_minus_what_the_cpu_manager_handed_out(topology: CPUTopology) -> None:
    zone1 = topology.cpus_in_numa(1)
    held = {
        "p1": ("shop", "kafka", CPUSet(list(zone1)[:4])),
        "p2": ("shop", "db", CPUSet(list(topology.cpus_in_numa(0))[-2:])),
    }
    base = crane(topology)
    obj = build_community_nrt(base, topology, held)
    parsed = parse_community(obj)
    assert isinstance(parsed, CommunityTopology), parsed
    assert (parsed.policy, parsed.scope) == ("single-numa-node", "pod")
    by_zone = {z.name: z for z in parsed.zones}
    for crane_zone in base["zones"]:
        z = by_zone["node-" + crane_zone["name"][4:]]
        assert z.allocatable["cpu"] == int(crane_zone["resources"]["allocatable"]["cpu"]) * 1000
    assert by_zone["node-1"].available["cpu"] == by_zone["node-1"].allocatable["cpu"] - 4000
    assert by_zone["node-0"].available["cpu"] == by_zone["node-0"].allocatable["cpu"] - 2000
    assert parsed.fingerprint == fingerprint([("shop", "kafka"), ("shop", "db")])
    assert obj["zones"][0]["costs"][0]["name"] == "node-0"


def test_a_pod_not_yet_named_holds_its_cpus_but_is_not_in_the_fingerprint(topology: CPUTopology) -> None:
    """After a restart the checkpoint's pods hold CPUs before the pod list names them (``CPUManager.held``):
    ``available`` subtracts them at once; the pods fingerprint lists pods by name, so it waits."""
    held = {"p1": ("shop", "kafka", CPUSet(list(topology.cpus_in_numa(1))[:4])),
            "restored": ("", "", CPUSet(list(topology.cpus_in_numa(0))[-2:]))}  # fmt: skip
    parsed = parse_community(build_community_nrt(crane(topology), topology, held))
    assert isinstance(parsed, CommunityTopology), parsed
    by_zone = {z.name: z for z in parsed.zones}
    assert by_zone["node-0"].available["cpu"] == by_zone["node-0"].allocatable["cpu"] - 2000
    assert parsed.fingerprint == fingerprint([("shop", "kafka")])


def test_the_object_passes_the_crd_schema(topology: CPUTopology) -> None:
    schema = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    obj = build_community_nrt(crane(topology), topology, {"p": ("a", "b", topology.cpus_in_numa(0))})
    assert violations(schema, obj) == []


def test_policy_none_when_the_agent_does_not_hold_pods_to_one_zone(topology: CPUTopology) -> None:
    aware_off = build_community_nrt(
        crane(topology, {"topology.crane.io/topology-awareness": "false"}), topology, {}
    )
    parsed = parse_community(aware_off)
    assert isinstance(parsed, CommunityTopology) and parsed.policy == "none" and not parsed.filters
    assert aware_off["topologyPolicies"] == ["None"]


def test_merge_patch_is_empty_when_quantities_only_differ_in_spelling(topology: CPUTopology) -> None:
    desired = build_community_nrt(crane(topology), topology, {})
    stored = yaml.safe_load(yaml.safe_dump(desired))
    stored["zones"][0]["resources"][0]["allocatable"] = (
        str(int(stored["zones"][0]["resources"][0]["allocatable"]) * 1000) + "m"
    )
    assert community_merge_patch(stored, desired) == {}
    held = {"p": ("a", "b", topology.cpus_in_numa(0))}
    changed = community_merge_patch(stored, build_community_nrt(crane(topology), topology, held))
    assert set(changed) == {"zones", "attributes"}


@pytest.fixture
def kube(kubeconfig: Path) -> Iterator[Kube]:
    client = k8s_config.new_client_from_config(config_file=str(kubeconfig))
    yield Kube(client)
    client.close()


def test_publisher_writes_both_objects_and_follows_assignments(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology
) -> None:
    fake_kube.register_custom_resource(
        "topology.node.k8s.io", "v1alpha2", "noderesourcetopologies", "NodeResourceTopology"
    )
    fake_kube.add(make_node(NODE))
    held: dict[str, Any] = {}
    metrics = PublisherMetrics()
    pub = Publisher(
        kube,
        NODE,
        topology,
        StaticSource(),
        metrics=metrics,
        publish={"crane", "community"},
        held=lambda: held,
    )
    assert pub.publish_once() is Result.CREATED
    stored = fake_kube.get(COMMUNITY, NODE)
    assert isinstance(parse_community(stored), CommunityTopology)
    assert fake_kube.get("noderesourcetopologies.topology.crane.io", NODE) is not None
    fake_kube.clear_requests()
    assert pub.publish_once() is Result.UNCHANGED
    assert [r.method for r in fake_kube.requests if r.method != "GET"] == []
    held["p"] = ("shop", "kafka", CPUSet(list(topology.cpus_in_numa(1))[:2]))
    pub.publish_once()
    after = parse_community(fake_kube.get(COMMUNITY, NODE))
    assert isinstance(after, CommunityTopology)
    z1 = after.zones[1]
    assert z1.available["cpu"] == z1.allocatable["cpu"] - 2000
    assert after.fingerprint == fingerprint([("shop", "kafka")])
    values = {
        s.labels["result"]: s.value
        for m in metrics.registry.collect()
        for s in m.samples
        if s.name == "ballast_agent_community_nrt_publishes_total"
    }
    assert values["created"] == 1 and values["unchanged"] == 1 and values["patched"] == 1


def test_a_missing_community_crd_does_not_stop_the_crane_object(
    fake_kube: FakeKube, kube: Kube, topology: CPUTopology, caplog: pytest.LogCaptureFixture
) -> None:
    fake_kube.add(make_node(NODE))
    pub = Publisher(kube, NODE, topology, StaticSource(), publish={"crane", "community"})
    with caplog.at_level("ERROR", logger="ballast.agent.publisher"):
        assert pub.publish_once() is Result.CREATED
        assert pub.publish_once() is Result.UNCHANGED
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "crd-noderesourcetopology-v1alpha2.yaml" in errors[0]
    assert pub.published is not None and pub.ready.is_set()


def test_publish_flag() -> None:
    parse = build_parser().parse_args
    assert parse(["agent"]).publish == {"crane"}
    assert parse(["agent", "--publish", "crane,community"]).publish == {"crane", "community"}
    assert parse(["agent", "--publish", "community"]).publish == {"community"}
    with pytest.raises(SystemExit):
        parse(["agent", "--publish", "v1alpha2"])
