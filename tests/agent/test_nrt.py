"""The NodeResourceTopology the agent publishes, and how it is compared and patched."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from ballast.agent.cpuset import CPUSet
from ballast.agent.kubelet_config import KubeletSettings, parse_kubelet_config
from ballast.agent.nrt.crane import (
    CPU_MANAGER_DISABLED_ATTRIBUTE,
    RESERVED_CPUS_ATTRIBUTE,
    STATIC_KUBELET_REASON,
    build_nrt,
    nrt_differs,
    nrt_merge_patch,
)
from ballast.agent.topology.model import CPUTopology
from ballast.agent.topology.sysfs import read_topology
from ballast.contract.topology_result import AWARENESS_KEY, parse_go_bool
from ballast.testing.fakekube.patches import merge_patch
from tests.agent.sysfs_fixtures import (
    NO_NODE_DIR,
    ONE_SOCKET_NO_SMT,
    TWO_SOCKETS_HT,
    TWO_SOCKETS_TWO_NUMA_EACH,
    Machine,
    write_sysfs,
)

GiB = 2**30
UID = "7c2f9a4e-1b0d-4c55-9e8a-0d6f1a2b3c4d"


def discover(tmp_path: Path, machine: Machine) -> CPUTopology:
    return read_topology(write_sysfs(tmp_path / "sys", machine))


def owner(name: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": UID, "controller": True}]


def nrt_for(topology: CPUTopology, kubelet: KubeletSettings, labels: dict[str, str] | None = None) -> dict:
    return build_nrt(
        node_name="worker-1", node_uid=UID, topology=topology, kubelet=kubelet, node_labels=labels
    )


# --- exact bodies for real machine shapes ------------------------------------------------------------


def test_one_socket_machine(tmp_path: Path) -> None:
    kubelet = parse_kubelet_config(
        {"kubeReserved": {"cpu": "500m", "memory": "1Gi"}, "systemReserved": {"cpu": "500m"}}
    )
    assert nrt_for(discover(tmp_path, ONE_SOCKET_NO_SMT), kubelet) == {
        "apiVersion": "topology.crane.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": {"name": "worker-1", "ownerReferences": owner("worker-1")},
        "craneManagerPolicy": {
            "cpuManagerPolicy": "Static",
            "topologyManagerPolicy": "SingleNUMANodePodLevel",
        },
        "reserved": {"cpu": "1", "memory": "1Gi"},
        "zones": [
            {
                "name": "node0",
                "type": "Node",
                "costs": [{"name": "node0", "value": 10}],
                "resources": {
                    "capacity": {"cpu": "4", "memory": str(16 * GiB)},
                    "allocatable": {"cpu": "3", "memory": str(15 * GiB)},
                    "reservedCPUNums": 1,
                },
            }
        ],
    }


def test_two_socket_machine_with_a_static_kubelet_and_reserved_cpus_in_both_zones(tmp_path: Path) -> None:
    kubelet = parse_kubelet_config(
        {
            "cpuManagerPolicy": "static",
            "reservedSystemCPUs": "0,8,4",
            "kubeReserved": {"cpu": "1", "memory": "40Gi"},
        }
    )
    nrt = nrt_for(discover(tmp_path, TWO_SOCKETS_HT), kubelet, {AWARENESS_KEY: "false"})
    assert nrt == {
        "apiVersion": "topology.crane.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": {"name": "worker-1", "ownerReferences": owner("worker-1")},
        "craneManagerPolicy": {"cpuManagerPolicy": "None", "topologyManagerPolicy": "None"},
        # The cpu count comes from the explicit list, not from kubeReserved.
        "reserved": {"cpu": "3", "memory": "40Gi"},
        "zones": [
            {
                "name": "node0",
                "type": "Node",
                "costs": [{"name": "node0", "value": 10}, {"name": "node1", "value": 21}],
                "resources": {
                    "capacity": {"cpu": "8", "memory": str(32 * GiB)},
                    # 40Gi of reserved memory: all 32Gi of node0, then 8Gi of node1.
                    "allocatable": {"cpu": "6", "memory": "0"},
                    "reservedCPUNums": 2,
                },
            },
            {
                "name": "node1",
                "type": "Node",
                "costs": [{"name": "node0", "value": 21}, {"name": "node1", "value": 10}],
                "resources": {
                    "capacity": {"cpu": "8", "memory": str(32 * GiB)},
                    "allocatable": {"cpu": "7", "memory": str(24 * GiB)},
                    "reservedCPUNums": 1,
                },
            },
        ],
        "attributes": {
            RESERVED_CPUS_ATTRIBUTE: "0,4,8",
            CPU_MANAGER_DISABLED_ATTRIBUTE: STATIC_KUBELET_REASON,
        },
    }


def test_four_zone_machine_counts_reserved_cpus_where_they_are(tmp_path: Path) -> None:
    kubelet = parse_kubelet_config({"systemReserved": {"cpu": "2500m"}})
    nrt = nrt_for(discover(tmp_path, TWO_SOCKETS_TWO_NUMA_EACH), kubelet)
    assert nrt["reserved"] == {"cpu": "2500m"}
    # ceil(2.5) = 3 CPUs: core 0 (CPUs 0, 8) whole, then CPU 1; all three are in node0.
    assert [z["name"] for z in nrt["zones"]] == ["node0", "node1", "node2", "node3"]
    assert [z["resources"]["reservedCPUNums"] for z in nrt["zones"]] == [3, 0, 0, 0]
    assert [z["resources"]["allocatable"] for z in nrt["zones"]] == [
        {"cpu": "1", "memory": str(16 * GiB)},
        {"cpu": "4", "memory": str(16 * GiB)},
        {"cpu": "4", "memory": str(16 * GiB)},
        {"cpu": "4", "memory": str(16 * GiB)},
    ]
    assert nrt["zones"][2]["costs"] == [
        {"name": "node0", "value": 21},
        {"name": "node1", "value": 21},
        {"name": "node2", "value": 10},
        {"name": "node3", "value": 11},
    ]
    assert "attributes" not in nrt


def test_machine_without_numa_information(tmp_path: Path) -> None:
    nrt = nrt_for(discover(tmp_path, NO_NODE_DIR), KubeletSettings())
    assert "reserved" not in nrt
    assert nrt["zones"] == [
        {
            "name": "node0",
            "type": "Node",
            "resources": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}, "reservedCPUNums": 0},
        }
    ]


def test_precomputed_reserved_set_is_used(tmp_path: Path) -> None:
    topology = discover(tmp_path, TWO_SOCKETS_HT)
    nrt = build_nrt(
        node_name="n", node_uid=UID, topology=topology, kubelet=KubeletSettings(), reserved=CPUSet.of(4, 5)
    )
    assert [z["resources"]["reservedCPUNums"] for z in nrt["zones"]] == [0, 2]


@pytest.mark.parametrize(
    ("labels", "policy"),
    [
        (None, "SingleNUMANodePodLevel"),
        ({}, "SingleNUMANodePodLevel"),
        ({AWARENESS_KEY: "true"}, "SingleNUMANodePodLevel"),
        ({AWARENESS_KEY: "1"}, "SingleNUMANodePodLevel"),
        ({AWARENESS_KEY: "yes"}, "SingleNUMANodePodLevel"),  # not a Go bool: ignored
        ({AWARENESS_KEY: ""}, "SingleNUMANodePodLevel"),
        ({AWARENESS_KEY: "false"}, "None"),
        ({AWARENESS_KEY: "F"}, "None"),
        ({AWARENESS_KEY: "0"}, "None"),
        ({AWARENESS_KEY: "FALSE"}, "None"),
        ({"other": "false"}, "SingleNUMANodePodLevel"),
    ],
)
def test_awareness_label(labels: dict[str, str] | None, policy: str) -> None:
    topology = CPUTopology.from_cpus([(0, 0, 0, 0)])
    nrt = nrt_for(topology, KubeletSettings(), labels)
    assert nrt["craneManagerPolicy"]["topologyManagerPolicy"] == policy


@pytest.mark.parametrize(
    ("text", "value"),
    [
        *[(text, True) for text in ("1", "t", "T", "TRUE", "true", "True")],
        *[(text, False) for text in ("0", "f", "F", "FALSE", "false", "False")],
        *[(text, None) for text in ("tRUE", "yes", "", " true")],
    ],
)
def test_parse_go_bool(text: str, value: bool | None) -> None:
    assert parse_go_bool(text) is value


@pytest.mark.parametrize(("policy", "expected"), [("static", "None"), ("none", "Static"), ("", "Static")])
def test_static_kubelet_disables_the_agent_cpu_manager(policy: str, expected: str) -> None:
    nrt = nrt_for(CPUTopology.from_cpus([(0, 0, 0, 0)]), parse_kubelet_config({"cpuManagerPolicy": policy}))
    assert nrt["craneManagerPolicy"]["cpuManagerPolicy"] == expected
    assert (CPU_MANAGER_DISABLED_ATTRIBUTE in nrt.get("attributes", {})) is (expected == "None")


# --- diffing and patching ----------------------------------------------------------------------------


@pytest.fixture
def desired(tmp_path: Path) -> dict:
    kubelet = parse_kubelet_config(
        {
            "reservedSystemCPUs": "0",
            "kubeReserved": {"cpu": "1", "memory": "1Gi"},
            "systemReserved": {"pid": "100"},
        }
    )
    return nrt_for(discover(tmp_path, TWO_SOCKETS_HT), kubelet)


def stored(desired: dict) -> dict:
    """``desired`` as the API server returns it: with server-set metadata."""
    obj = copy.deepcopy(desired)
    obj["metadata"].update(
        {
            "uid": "0b7d",
            "resourceVersion": "48213",
            "generation": 3,
            "creationTimestamp": "2026-11-22T07:00:00Z",
            "managedFields": [{"manager": "ballast-agent", "operation": "Update"}],
        }
    )
    return obj


def test_same_object_does_not_differ(desired: dict) -> None:
    assert not nrt_differs(stored(desired), desired)
    assert nrt_merge_patch(stored(desired), desired) == {}


def test_quantities_compare_by_value(desired: dict) -> None:
    existing = stored(desired)
    existing["zones"][0]["resources"]["capacity"]["cpu"] = "8000m"
    existing["zones"][1]["resources"]["allocatable"]["cpu"] = 8  # an int-or-string stored as a number
    existing["zones"][0]["resources"]["capacity"]["memory"] = "32Gi"
    existing["reserved"]["memory"] = "1073741824"
    assert desired["zones"][0]["resources"]["capacity"]["cpu"] == "8"
    assert not nrt_differs(existing, desired)


def test_four_equals_four_thousand_milli() -> None:
    topology = CPUTopology.from_cpus([(c, c, 0, 0) for c in range(4)])
    desired = nrt_for(topology, KubeletSettings())
    existing = copy.deepcopy(desired)
    existing["zones"][0]["resources"]["capacity"]["cpu"] = "4000m"
    assert not nrt_differs(existing, desired)
    existing["zones"][0]["resources"]["capacity"]["cpu"] = "4001m"
    assert nrt_differs(existing, desired)


def test_foreign_fields_and_omitted_zero_are_ignored(desired: dict) -> None:
    existing = stored(desired)
    existing["metadata"]["labels"] = {"team": "infra"}
    existing["attributes"]["someone.else/key"] = "v"
    del existing["zones"][1]["resources"]["reservedCPUNums"]  # 0, omitted by Go's omitempty
    assert desired["zones"][1]["resources"]["reservedCPUNums"] == 0
    assert not nrt_differs(existing, desired)


def test_changed_allocatable_patches_the_zones(desired: dict) -> None:
    existing = stored(desired)
    existing["zones"][0]["resources"]["allocatable"]["cpu"] = "8"
    patch = nrt_merge_patch(existing, desired)
    assert patch == {"zones": desired["zones"]}
    assert nrt_differs(existing, desired)


def test_policy_change_patches_only_the_changed_key(desired: dict) -> None:
    existing = stored(desired)
    existing["craneManagerPolicy"]["cpuManagerPolicy"] = "None"
    assert nrt_merge_patch(existing, desired) == {"craneManagerPolicy": {"cpuManagerPolicy": "Static"}}


def test_reserved_keys_are_set_and_removed(desired: dict) -> None:
    existing = stored(desired)
    existing["reserved"]["ephemeral-storage"] = "1Gi"
    existing["reserved"]["cpu"] = "2"
    assert nrt_merge_patch(existing, desired) == {"reserved": {"ephemeral-storage": None, "cpu": "1"}}
    no_reserved = copy.deepcopy(desired)
    del no_reserved["reserved"]
    assert nrt_merge_patch(existing, no_reserved)["reserved"] is None


def test_owned_attributes_are_removed_when_no_longer_true(desired: dict) -> None:
    existing = stored(desired)
    existing["attributes"][CPU_MANAGER_DISABLED_ATTRIBUTE] = STATIC_KUBELET_REASON
    existing["attributes"]["someone.else/key"] = "v"
    assert nrt_merge_patch(existing, desired) == {"attributes": {CPU_MANAGER_DISABLED_ATTRIBUTE: None}}


def test_owner_reference_is_added_and_other_owners_are_kept(desired: dict) -> None:
    existing = stored(desired)
    other = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ballast-agent", "uid": "d5"}
    existing["metadata"]["ownerReferences"] = [other]
    patch = nrt_merge_patch(existing, desired)
    assert patch == {"metadata": {"ownerReferences": [*owner("worker-1"), other]}}


def test_no_existing_object_means_the_whole_desired_object(desired: dict) -> None:
    assert nrt_differs(None, desired)
    patch = nrt_merge_patch(None, desired)
    assert patch == desired
    assert patch is not desired


def test_applying_the_patch_converges(desired: dict) -> None:
    existing = stored(desired)
    existing["craneManagerPolicy"]["topologyManagerPolicy"] = "None"
    existing["reserved"] = {"cpu": "5", "pid": "100", "hugepages-2Mi": "1Gi"}
    existing["zones"] = existing["zones"][:1]
    existing["attributes"] = {RESERVED_CPUS_ATTRIBUTE: "0-1", "keep": "me"}
    del existing["metadata"]["ownerReferences"]
    patched = merge_patch(existing, nrt_merge_patch(existing, desired))
    assert not nrt_differs(patched, desired)
    assert patched["attributes"]["keep"] == "me"
    assert patched["metadata"]["resourceVersion"] == "48213"
    assert patched["reserved"] == desired["reserved"]
