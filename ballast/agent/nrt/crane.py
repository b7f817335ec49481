"""The node's ``NodeResourceTopology`` (``topology.crane.io/v1alpha1``): build it, diff it, patch it.

Pure functions over plain dicts (the JSON the API server speaks), so the publishing loop is only
"build desired, diff with what is stored, send the merge patch when they differ".

Compatible with crane's agent and scheduler plugin, with two deliberate fixes: each zone's
``reservedCPUNums`` counts the reserved CPUs actually in that NUMA node (crane puts them all on the
first zones), and ``allocatable`` is always written (crane leaves it ``{}`` when nothing is reserved,
which makes its own scheduler see no free CPU).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from ballast.agent.cpuset import CPUSet
from ballast.agent.kubelet_config import KubeletSettings
from ballast.agent.topology.model import CPUTopology
from ballast.agent.topology.reserved import reserved_cpus
from ballast.contract.nrt import API_VERSION, KIND
from ballast.contract.quantity import QuantityError, parse_quantity
from ballast.contract.topology_result import (
    AWARENESS_KEY,
    EXCLUSIVE_PODS_ATTRIBUTE,
    parse_go_bool,
    render_zone_pods,
)

__all__ = [
    "CPU_MANAGER_DISABLED_ATTRIBUTE",
    "RESERVED_CPUS_ATTRIBUTE",
    "build_nrt",
    "nrt_differs",
    "nrt_merge_patch",
]

RESERVED_CPUS_ATTRIBUTE = "go.crane.io/reserved-system-cpus"
CPU_MANAGER_DISABLED_ATTRIBUTE = "ballast.io/cpu-manager-disabled-reason"
OWNED_ATTRIBUTES = (RESERVED_CPUS_ATTRIBUTE, CPU_MANAGER_DISABLED_ATTRIBUTE)
"""Top-level attribute keys this agent writes and removes; other keys belong to someone else."""

STATIC_KUBELET_REASON = (
    "kubelet cpuManagerPolicy is static: the kubelet pins exclusive CPUs itself, "
    "so the Ballast agent leaves cpusets alone"
)


def build_nrt(
    *,
    node_name: str,
    node_uid: str,
    topology: CPUTopology,
    kubelet: KubeletSettings,
    node_labels: Mapping[str, str] | None = None,
    reserved: CPUSet | None = None,
    exclusive: Mapping[str, CPUSet] | None = None,
) -> dict[str, Any]:
    """The desired NRT object for a node.

    ``exclusive`` (pod UID -> the CPUs the CPU manager pinned for it) is published per zone in the
    ``EXCLUSIVE_PODS_ATTRIBUTE`` attribute, so the extender counts what the agent really holds.

    ``reserved`` defaults to the kubelet's reserved CPU set (``reserved_cpus``); pass it when the caller
    already computed it. Raises ``NotEnoughCPUsError`` when the kubelet reserves more CPUs than exist.
    """
    if reserved is None:
        reserved = reserved_cpus(topology, kubelet)
    awareness = parse_go_bool((node_labels or {}).get(AWARENESS_KEY, ""))
    policy = {
        "cpuManagerPolicy": "None" if kubelet.cpu_manager_is_static else "Static",
        "topologyManagerPolicy": "None" if awareness is False else "SingleNUMANodePodLevel",
    }

    held_back = kubelet.reserved_resources()
    reserved_list = {name: str(q) for name, q in held_back.items()}
    if kubelet.reserved_system_cpus is not None:
        reserved_list["cpu"] = str(len(kubelet.reserved_system_cpus))
    memory_to_reserve = max(held_back["memory"].ceil(), 0) if "memory" in held_back else 0

    zones = []
    for node in topology.numa_nodes:
        cpus = cpus_here = topology.cpus_in_numa(node.id)
        zone_reserved = len(cpus & reserved)
        capacity = {"cpu": str(len(cpus))}
        allocatable = {"cpu": str(len(cpus) - zone_reserved)}
        if node.memory_bytes is not None:
            # Reserved memory is taken from the zones in id order, each giving what it has.
            taken = min(memory_to_reserve, node.memory_bytes)
            memory_to_reserve -= taken
            capacity["memory"] = str(node.memory_bytes)
            allocatable["memory"] = str(node.memory_bytes - taken)
        zone: dict[str, Any] = {"name": f"node{node.id}", "type": "Node"}
        if node.distances:
            zone["costs"] = [{"name": f"node{other}", "value": d} for other, d in node.distances]
        zone["resources"] = {
            "capacity": capacity,
            "allocatable": allocatable,
            "reservedCPUNums": zone_reserved,
        }
        if exclusive is not None:
            held = {uid: len(cpus & cpus_here) for uid, cpus in exclusive.items()}
            zone["attributes"] = {EXCLUSIVE_PODS_ATTRIBUTE: render_zone_pods(held)}
        zones.append(zone)

    attributes = {}
    if kubelet.reserved_system_cpus is not None:
        attributes[RESERVED_CPUS_ATTRIBUTE] = str(kubelet.reserved_system_cpus)
    if kubelet.cpu_manager_is_static:
        attributes[CPU_MANAGER_DISABLED_ATTRIBUTE] = STATIC_KUBELET_REASON

    nrt: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": node_name,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
            ],
        },
        "craneManagerPolicy": policy,
    }
    if reserved_list:
        nrt["reserved"] = reserved_list
    nrt["zones"] = zones
    if attributes:
        nrt["attributes"] = attributes
    return nrt


# --- comparing and patching ---------------------------------------------------------------------------


def _quantity(value: Any) -> Fraction | tuple[str, Any]:
    """A quantity's value for comparison; anything unparseable compares by its raw form."""
    try:
        return parse_quantity(value)
    except QuantityError:
        return ("unparseable", value)


def _resources(raw: Any) -> dict[str, Any]:
    return {k: _quantity(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}


def _zone_key(zone: Any) -> Any:
    """A zone reduced to what it means: quantities by value, missing and empty alike."""
    if not isinstance(zone, Mapping):
        return ("unparseable", zone)
    res = zone.get("resources") if isinstance(zone.get("resources"), Mapping) else {}
    costs = zone.get("costs") if isinstance(zone.get("costs"), list) else []
    return (
        zone.get("name"),
        zone.get("type"),
        zone.get("parent") or None,
        sorted((str(c.get("name")), c.get("value")) for c in costs if isinstance(c, Mapping)),
        dict(zone.get("attributes") or {}),
        _resources(res.get("capacity")),
        _resources(res.get("allocatable")),
        res.get("reservedCPUNums") or 0,
    )


def _owner_key(ref: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        ref.get("apiVersion"),
        ref.get("kind"),
        ref.get("name"),
        ref.get("uid"),
        bool(ref.get("controller")),
    )


def nrt_merge_patch(existing: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that makes ``existing`` carry ``desired`` in the fields Ballast owns.

    Owned: the owner reference to the Node, ``craneManagerPolicy``, ``reserved``, ``zones`` and the
    attribute keys in ``OWNED_ATTRIBUTES``. Server-set metadata, other owners, labels, annotations and
    foreign attribute keys are left alone. Quantities compare by value (``"4"`` equals ``"4000m"``).
    Returns ``{}`` when nothing needs to change; with no existing object, the whole desired object.
    """
    if existing is None:
        return copy.deepcopy(dict(desired))
    patch: dict[str, Any] = {}

    desired_refs = list((desired.get("metadata") or {}).get("ownerReferences") or [])
    existing_refs = list((existing.get("metadata") or {}).get("ownerReferences") or [])
    present = {_owner_key(r) for r in existing_refs if isinstance(r, Mapping)}
    if any(_owner_key(r) not in present for r in desired_refs):
        ours = {r.get("uid") for r in desired_refs}
        others = [r for r in existing_refs if not (isinstance(r, Mapping) and r.get("uid") in ours)]
        patch["metadata"] = {"ownerReferences": copy.deepcopy(desired_refs) + copy.deepcopy(others)}

    old_policy = (
        existing.get("craneManagerPolicy") if isinstance(existing.get("craneManagerPolicy"), Mapping) else {}
    )
    policy_patch = {
        k: v for k, v in (desired.get("craneManagerPolicy") or {}).items() if old_policy.get(k) != v
    }
    if policy_patch:
        patch["craneManagerPolicy"] = policy_patch

    old_reserved, new_reserved = existing.get("reserved"), desired.get("reserved")
    if not new_reserved:
        if old_reserved:
            patch["reserved"] = None
    elif not isinstance(old_reserved, Mapping):
        patch["reserved"] = dict(new_reserved)
    else:
        reserved_patch: dict[str, Any] = {k: None for k in old_reserved if k not in new_reserved}
        reserved_patch.update(
            {
                k: v
                for k, v in new_reserved.items()
                if k not in old_reserved or _quantity(old_reserved[k]) != _quantity(v)
            }
        )
        if reserved_patch:
            patch["reserved"] = reserved_patch

    old_zones = existing.get("zones") if isinstance(existing.get("zones"), list) else []
    new_zones = list(desired.get("zones") or [])
    if [_zone_key(z) for z in old_zones] != [_zone_key(z) for z in new_zones]:
        patch["zones"] = copy.deepcopy(new_zones) if new_zones else None

    old_attrs = existing.get("attributes") if isinstance(existing.get("attributes"), Mapping) else {}
    new_attrs = desired.get("attributes") or {}
    attr_patch = {k: new_attrs.get(k) for k in OWNED_ATTRIBUTES if old_attrs.get(k) != new_attrs.get(k)}
    if attr_patch:
        patch["attributes"] = attr_patch

    return patch


def nrt_differs(existing: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """Whether ``existing`` needs an update to match ``desired`` (``nrt_merge_patch`` would not be empty)."""
    return bool(nrt_merge_patch(existing, desired))
