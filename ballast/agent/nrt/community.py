"""The node's community ``NodeResourceTopology`` (``topology.node.k8s.io/v1alpha2``), from crane's.

With ``--publish community`` the agent writes the node's zones in the community API too, so consumers of
that API (scheduler-plugins' NodeResourceTopologyMatch, Ballast's extender on clusters that use it) can
use Ballast's agent. The zones are the ones of the crane object (``ballast.agent.nrt.crane.build_nrt``, the
one place
that reads the topology and the kubelet's reservations), renamed to the API's ``node-<id>``, with
``available`` = allocatable minus the CPUs the CPU manager has handed out exclusively in that zone.

What it states, and why:
- ``topologyManagerPolicy: single-numa-node`` with scope ``pod`` only where the crane object says the agent
  pins CPUs one zone per pod (``Static`` + ``SingleNUMANodePodLevel``); otherwise ``none``, because then
  nothing the agent does holds a pod to one zone (and where the kubelet pins CPUs itself, the agent knows
  none of its assignments: NFD or the resource-topology-exporter should publish those nodes);
- memory is listed with ``available`` equal to allocatable: the agent pins no memory;
- ``nodeTopologyPodsFingerprint`` (method ``with-exclusive-resources``) signs the pods whose CPUs
  ``available`` subtracts, so a consumer can tell when the object counts a pod it placed.

Pure functions over plain dicts, like ``ballast.agent.nrt.crane``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ballast.agent.cpumanager.state import HeldCPUs
from ballast.agent.cpuset import CPUSet
from ballast.agent.topology.model import CPUTopology
from ballast.contract.nrt import COMMUNITY_API_VERSION, KIND
from ballast.contract.podfingerprint import ATTRIBUTE as FINGERPRINT_ATTRIBUTE
from ballast.contract.podfingerprint import METHOD_ATTRIBUTE as FINGERPRINT_METHOD_ATTRIBUTE
from ballast.contract.podfingerprint import fingerprint
from ballast.contract.quantity import QuantityError, parse_quantity

__all__ = ["Held", "build_community_nrt", "community_merge_patch"]

Held = Mapping[str, HeldCPUs | tuple[str, str, CPUSet]]
"""Pod UID -> (namespace, name, the CPUs the CPU manager assigned it exclusively): ``CPUManager.held``."""

OWNED_FIELDS = ("topologyPolicies", "zones", "attributes")


def _zone_name(crane_name: str) -> str:
    return f"node-{crane_name[4:]}" if crane_name.startswith("node") else crane_name


def build_community_nrt(crane: Mapping[str, Any], topology: CPUTopology, held: Held) -> dict[str, Any]:
    """The v1alpha2 object saying what ``crane`` (the desired crane NRT) says, with ``available``."""
    policy = crane.get("craneManagerPolicy") or {}
    aligned = (
        policy.get("cpuManagerPolicy") == "Static"
        and policy.get("topologyManagerPolicy") == "SingleNUMANodePodLevel"
    )
    taken_cpus = CPUSet()
    for _, _, cpus in held.values():
        taken_cpus = taken_cpus | cpus
    zones = []
    for z in crane.get("zones") or []:
        numa = int(z["name"][4:])
        res = z.get("resources") or {}
        capacity, allocatable = res.get("capacity") or {}, res.get("allocatable") or {}
        resources = []
        for name in ("cpu", "memory"):
            if name not in allocatable:
                continue
            available = allocatable[name]
            if name == "cpu":
                in_zone = len(taken_cpus & topology.cpus_in_numa(numa))
                available = str(max(0, int(allocatable["cpu"]) - in_zone))
            resources.append(
                {
                    "name": name,
                    "capacity": capacity.get(name, allocatable[name]),
                    "allocatable": allocatable[name],
                    "available": available,
                }
            )
        zone: dict[str, Any] = {"name": _zone_name(z["name"]), "type": "Node", "resources": resources}
        if z.get("costs"):
            zone["costs"] = [{"name": _zone_name(c["name"]), "value": c["value"]} for c in z["costs"]]
        zones.append(zone)
    meta = crane.get("metadata") or {}
    return {
        "apiVersion": COMMUNITY_API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": meta.get("name"),
            "ownerReferences": copy.deepcopy(meta.get("ownerReferences") or []),
        },
        "topologyPolicies": ["SingleNUMANodePodLevel" if aligned else "None"],
        "zones": zones,
        "attributes": [
            {"name": "topologyManagerPolicy", "value": "single-numa-node" if aligned else "none"},
            {"name": "topologyManagerScope", "value": "pod"},
            {"name": FINGERPRINT_ATTRIBUTE, "value": fingerprint((ns, n) for ns, n, _ in held.values() if n)},
            {"name": FINGERPRINT_METHOD_ATTRIBUTE, "value": "with-exclusive-resources"},
        ],
    }


def _value(v: Any) -> Any:
    try:
        return parse_quantity(v)
    except (QuantityError, TypeError):
        return ("unparseable", v)


def _meaning(field: str, value: Any) -> Any:
    """A field reduced to what it means: quantities by value."""
    if field != "zones" or not isinstance(value, list):
        return value
    out = []
    for z in value:
        if not isinstance(z, Mapping):
            out.append(z)
            continue
        res = [
            {k: (_value(v) if k != "name" else v) for k, v in r.items()} if isinstance(r, Mapping) else r
            for r in z.get("resources") or []
        ]
        out.append({**z, "resources": res})
    return out


def community_merge_patch(existing: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch that makes ``existing`` say what ``desired`` says (lists are replaced whole, as a
    merge patch does); ``{}`` when it does, the whole object when there is none."""
    if existing is None:
        return copy.deepcopy(dict(desired))
    return {
        f: copy.deepcopy(desired.get(f))
        for f in OWNED_FIELDS
        if _meaning(f, existing.get(f)) != _meaning(f, desired.get(f))
    }
