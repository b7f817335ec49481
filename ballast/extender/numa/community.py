"""NUMA fit against the community NodeResourceTopology (``topology.node.k8s.io/v1alpha2``): pure logic.

Nodes that run the kubelet's own static CPU manager with the Topology Manager publish their zones through
nfd-topology-updater or the resource-topology-exporter. The kubelet admits a pod there only when its
Topology Manager finds a NUMA zone for it (``single-numa-node``), and rejects it otherwise with
``TopologyAffinityError``; this module answers the same question from the published ``available`` per zone,
so the extender can filter such nodes out before kube-scheduler sends the pod there.

Parsing happens once per watch event (``parse_community``); a request only reads the parsed zones.

Which parts of a pod are checked follows the kubelet's hint providers, the ground truth of admission:
- exclusive CPUs: containers of a Guaranteed pod with a whole CPU request (the CPU manager's only hints);
- memory and hugepages: Guaranteed pods only (the memory manager gives hints to no other pod);
- extended resources (devices): any QoS class (the device manager gives hints to every pod);
- a resource no zone reports is not NUMA-aligned on that node and passes (the scheduler's node-level
  resource check still applies); other native resources (ephemeral-storage, pods) are never per zone.
scheduler-plugins' NodeResourceTopologyMatch differs in two places, both stricter than the kubelet: it
compares fractional CPU requests of Guaranteed pods against zones (the kubelet gives those no exclusive
CPUs and no NUMA hint), and rejects a Guaranteed pod's memory on a node whose zones report no memory.

The zone the kubelet picks among several that fit is the lowest NUMA id (single-numa-node takes the
narrowest hint and breaks ties by order), so the accounting here subtracts from that zone too.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ballast.contract.pod import ContainerKind, KubeletPod, QOSClass, parse_pod
from ballast.contract.podfingerprint import ATTRIBUTE as FINGERPRINT_ATTRIBUTE
from ballast.contract.podfingerprint import METHOD_ATTRIBUTE as FINGERPRINT_METHOD_ATTRIBUTE
from ballast.contract.quantity import QuantityError, format_cpu_milli, format_quantity, parse_quantity

POLICY_ATTRIBUTE = "topologyManagerPolicy"
SCOPE_ATTRIBUTE = "topologyManagerScope"

POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
SCOPES = ("container", "pod")
SINGLE_NUMA_NODE = "single-numa-node"

LEGACY_POLICIES: Mapping[str, tuple[str, str | None]] = {
    "SingleNUMANodeContainerLevel": ("single-numa-node", "container"),
    "SingleNUMANodePodLevel": ("single-numa-node", "pod"),
    "Restricted": ("restricted", None),
    "RestrictedContainerLevel": ("restricted", "container"),
    "RestrictedPodLevel": ("restricted", "pod"),
    "BestEffort": ("best-effort", None),
    "BestEffortContainerLevel": ("best-effort", "container"),
    "BestEffortPodLevel": ("best-effort", "pod"),
    "None": ("none", None),
}
"""The deprecated ``topologyPolicies`` values and the (policy, scope) each stands for."""

HOST_LEVEL_NATIVE = frozenset({"ephemeral-storage", "storage", "pods"})
"""Native resources the kubelet never aligns to a NUMA zone."""


@dataclass(frozen=True, slots=True)
class CommunityZone:
    name: str
    numa: int
    available: Mapping[str, int]
    """Per resource: CPU in millicores, everything else in its base unit (bytes, devices)."""
    allocatable: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class CommunityTopology:
    node: str
    policy: str
    """The Topology Manager policy: one of ``POLICIES``; only ``single-numa-node`` filters."""
    scope: str
    zones: tuple[CommunityZone, ...]
    fingerprint: str | None = None
    """``nodeTopologyPodsFingerprint``: the pods the exporter counted in ``available``."""
    fingerprint_method: str | None = None
    resource_version: str | None = None
    reported: frozenset[str] = frozenset()
    """The resources some zone reports (the others are not NUMA-aligned on this node)."""
    filters: bool = False
    """Policy single-numa-node with zones: the only objects a pod can fail on."""
    shape: tuple[Any, ...] = ()
    """Everything a fit and its score depend on (scope, each zone's amounts), hashable: nodes with the
    same shape get the same answer, so a request computes it once per shape (idle nodes share one)."""


@dataclass(frozen=True, slots=True)
class Malformed:
    """A v1alpha2 object the extender cannot use: no information for its node (it passes)."""

    node: str
    reason: str


class _Bad(ValueError):
    pass


def _attributes(raw: Any, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise _Bad(f"{where}: expected a list of {{name, value}}")
    out = {}
    for i, a in enumerate(raw):
        if (
            not isinstance(a, Mapping)
            or not isinstance(a.get("name"), str)
            or not isinstance(a.get("value"), str)
        ):
            raise _Bad(f"{where}[{i}]: expected {{name, value}} strings")
        out[a["name"]] = a["value"]
    return out


def _amount(resource: str, raw: Any, where: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, str | int):
        raise _Bad(f"{where}: {raw!r} is not a quantity")
    try:
        value = parse_quantity(raw)
    except QuantityError as exc:
        raise _Bad(f"{where}: {exc}") from None
    if value < 0:
        raise _Bad(f"{where}: {raw!r} is negative")
    return math.ceil(value * 1000) if resource == "cpu" else math.ceil(value)


def _numa_id(name: str) -> int | None:
    """``node-3`` -> 3 (the API's ``NameToID``); ``None`` for any other spelling."""
    prefix, _, digits = name.partition("-")
    if prefix != "node" or not digits.isdigit() or (len(digits) > 1 and digits[0] == "0"):
        return None
    return int(digits)


def _policy(obj: Mapping[str, Any], attributes: Mapping[str, str]) -> tuple[str, str]:
    policy = attributes.get(POLICY_ATTRIBUTE)
    scope = attributes.get(SCOPE_ATTRIBUTE)
    if policy is None:
        legacy = obj.get("topologyPolicies")
        if legacy is not None and not isinstance(legacy, list):
            raise _Bad("topologyPolicies: expected a list")
        for value in legacy or ():
            if value not in LEGACY_POLICIES:
                raise _Bad(f"topologyPolicies: unknown policy {value!r}")
        if legacy:
            policy, legacy_scope = LEGACY_POLICIES[legacy[0]]
            scope = scope or legacy_scope
    policy = policy or "none"
    scope = scope or "container"  # the kubelet's default scope
    if policy not in POLICIES:
        raise _Bad(f"attributes.{POLICY_ATTRIBUTE}: unknown policy {policy!r}")
    if scope not in SCOPES:
        raise _Bad(f"attributes.{SCOPE_ATTRIBUTE}: unknown scope {scope!r}")
    return policy, scope


def _zone(raw: Any, i: int) -> CommunityZone | None:
    where = f"zones[{i}]"
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
        raise _Bad(f"{where}: expected a zone with a name")
    if raw.get("type") != "Node":
        return None  # sockets, cores, caches: not what the Topology Manager aligns to
    numa = _numa_id(raw["name"])
    if numa is None:
        raise _Bad(f"{where}: NUMA zone name {raw['name']!r} is not node-<id>")
    resources = raw.get("resources") or []
    if not isinstance(resources, list):
        raise _Bad(f"{where}.resources: expected a list")
    available: dict[str, int] = {}
    allocatable: dict[str, int] = {}
    for j, r in enumerate(resources):
        rw = f"{where}.resources[{j}]"
        if not isinstance(r, Mapping) or not isinstance(r.get("name"), str):
            raise _Bad(f"{rw}: expected a resource with a name")
        name = r["name"]
        for key in ("capacity", "allocatable", "available"):
            if key not in r:
                raise _Bad(f"{rw}: {name} has no {key}")
        _amount(name, r["capacity"], f"{rw}.capacity")
        allocatable[name] = _amount(name, r["allocatable"], f"{rw}.allocatable")
        available[name] = _amount(name, r["available"], f"{rw}.available")
    return CommunityZone(raw["name"], numa, available, allocatable)


def parse_community(obj: Mapping[str, Any]) -> CommunityTopology | Malformed:
    """Read a v1alpha2 object once, when its watch event arrives. Never raises: anything unusable (no
    zones, a quantity that does not parse or is negative, an unknown policy) comes back ``Malformed``."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    node = name if isinstance(name, str) else ""
    try:
        if not node:
            raise _Bad("metadata.name: missing")
        attributes = _attributes(obj.get("attributes"), "attributes")
        policy, scope = _policy(obj, attributes)
        raw_zones = obj.get("zones")
        if not isinstance(raw_zones, list) or not raw_zones:
            raise _Bad("zones: missing or empty")
        zones = [z for i, raw in enumerate(raw_zones) if (z := _zone(raw, i)) is not None]
        if not zones:
            raise _Bad("zones: none of type Node")
        if len({z.numa for z in zones}) != len(zones):
            raise _Bad("zones: a NUMA zone appears twice")
    except _Bad as exc:
        return Malformed(node, str(exc))
    zones.sort(key=lambda z: z.numa)
    rv = meta.get("resourceVersion") if isinstance(meta, Mapping) else None
    return CommunityTopology(
        node=node,
        policy=policy,
        scope=scope,
        zones=tuple(zones),
        fingerprint=attributes.get(FINGERPRINT_ATTRIBUTE),
        fingerprint_method=attributes.get(FINGERPRINT_METHOD_ATTRIBUTE),
        resource_version=rv if isinstance(rv, str) else None,
        reported=frozenset(r for z in zones for r in z.available),
        filters=policy == SINGLE_NUMA_NODE,
        shape=(
            scope,
            tuple(
                (z.name, tuple(sorted(z.available.items())), tuple(sorted(z.allocatable.items())))
                for z in zones
            ),
        ),
    )


# -- what a pod asks the Topology Manager to align ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Demand:
    """The parts of a pod the kubelet aligns to one NUMA zone, per container and for the whole pod."""

    qos: str
    containers: tuple[tuple[str, str, Mapping[str, int]], ...]
    """``(name, kind, aligned requests)`` in spec order; kind is ``init``, ``sidecar`` or ``app``."""
    pod: Mapping[str, int]
    """The pod's effective request of the same resources (the pod scope's single hint)."""
    _steps: dict[tuple[str, frozenset[str]], tuple[tuple[str, str, dict[str, int]], ...]] = field(
        default_factory=dict, compare=False, repr=False
    )
    """``steps`` memo: most nodes of a cluster share a scope and a set of reported resources."""

    def steps(self, scope: str, reported: frozenset[str]) -> tuple[tuple[str, str, dict[str, int]], ...]:
        """What is checked, in order, on a node with ``scope`` whose zones report ``reported``:
        ``(name, kind, resources)``, leaving out resources no zone reports and steps left empty."""
        key = (scope, reported)
        steps = self._steps.get(key)
        if steps is None:
            raw = [("pod", "app", self.pod)] if scope == "pod" else self.containers
            steps = tuple(
                (n, k, w) for n, k, full in raw if (w := {r: v for r, v in full.items() if r in reported})
            )
            self._steps[key] = steps
        return steps


def _native(resource: str) -> bool:
    return "/" not in resource or resource.startswith("kubernetes.io/")


def _aligned(resource: str, guaranteed: bool, exclusive: bool) -> bool:
    if resource == "cpu":
        return exclusive
    if resource == "memory" or resource.startswith("hugepages-"):
        return guaranteed
    return not _native(resource)  # a device: the device manager hints for every QoS class


def _requests(container: Any) -> dict[str, Any]:
    res = container.get("resources") if isinstance(container, Mapping) else None
    req = res.get("requests") if isinstance(res, Mapping) else None
    return dict(req) if isinstance(req, Mapping) else {}


def community_demand(pod: Mapping[str, Any], info: KubeletPod | None = None) -> Demand | None:
    """What ``pod`` needs aligned, or ``None`` when nothing of it is (a BestEffort or Burstable pod without
    devices, a Guaranteed pod with only fractional CPUs and no memory, a pod with unreadable resources).
    ``info`` is the pod already read by ``parse_pod``, when the caller has it."""
    if info is None:
        info = parse_pod(pod)
    if info.problems or info.daemonset:
        return None
    guaranteed = info.qos is QOSClass.GUARANTEED
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    raw = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    by_name = {c.get("name"): c for c in raw if isinstance(c, Mapping)}
    containers = []
    for c in info.containers:
        wanted: dict[str, int] = {}
        for resource, quantity in _requests(by_name.get(c.name)).items():
            if not isinstance(resource, str) or not _aligned(resource, guaranteed, c.exclusive_cpus > 0):
                continue
            try:
                amount = _amount(resource, quantity, resource)
            except _Bad:
                return None
            if amount:
                wanted[resource] = amount
        containers.append((c.name, str(c.kind), wanted))
    if not any(w for _, _, w in containers):
        return None
    return Demand(str(info.qos), tuple(containers), _effective(containers))


def _effective(containers: Iterable[tuple[str, str, Mapping[str, int]]]) -> dict[str, int]:
    """The kubelet's effective pod request per resource: max(the peak of each init container with the
    sidecars started before it, the app containers plus all sidecars)."""
    peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    apps: dict[str, int] = {}
    for _, kind, wanted in containers:
        for r, v in wanted.items():
            if kind == ContainerKind.SIDECAR:
                sidecars[r] = sidecars.get(r, 0) + v
            elif kind == ContainerKind.INIT:
                peak[r] = max(peak.get(r, 0), sidecars.get(r, 0) + v)
            else:
                apps[r] = apps.get(r, 0) + v
    out = {}
    for r in {*peak, *sidecars, *apps}:
        out[r] = max(peak.get(r, 0), apps.get(r, 0) + sidecars.get(r, 0))
    return out


# -- fit and score -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommunityFit:
    ok: bool
    reason: str | None = None
    placements: tuple[tuple[str, Mapping[str, int]], ...] = ()
    """``(zone, resources)`` the pod takes, zone by zone: what bind records as assumed."""
    free_after: float = 0.0
    """The mean share of allocatable left free in the zones used, over the aligned resources."""

    @property
    def zones_used(self) -> int:
        return len({z for z, _ in self.placements})


@functools.lru_cache(maxsize=4096)
def _show(resource: str, amount: int) -> str:
    if resource == "cpu":
        return f"cpu {format_cpu_milli(amount)}"
    if resource == "memory" or resource.startswith("hugepages-"):
        return f"{resource} {format_quantity(amount, 'BinarySI')}"
    return f"{resource} {amount}"


def _free(
    zones: tuple[CommunityZone, ...],
    taken: Mapping[str, Mapping[str, int]],
    used: Mapping[str, Mapping[str, int]] | None = None,
) -> dict[str, dict[str, int]]:
    """Per zone, what is free: ``available`` minus ``taken`` (assumed) minus ``used`` (this pod)."""
    out = {}
    for z in zones:
        minus, mine = taken.get(z.name, {}), (used or {}).get(z.name, {})
        out[z.name] = {r: v - minus.get(r, 0) - mine.get(r, 0) for r, v in z.available.items()}
    return out


def _listing(free: Mapping[str, Mapping[str, int]], resources: Iterable[str]) -> str:
    names = sorted(resources)
    parts = []
    for zone, have in free.items():
        shown = ", ".join(_show(r, max(0, have[r])) for r in names if r in have)
        parts.append(f"{zone} free {shown or 'nothing reported'}")
    return "; ".join(parts)


def _lowest_with_room(
    topo: CommunityTopology,
    wanted: Mapping[str, int],
    taken: Mapping[str, Mapping[str, int]],
    used: Mapping[str, Mapping[str, int]],
) -> str | None:
    """The lowest NUMA zone with room for ``wanted`` (the kubelet's choice), without copying any zone."""
    for z in topo.zones:
        minus, mine = taken.get(z.name), used.get(z.name)
        have = z.available
        for r, v in wanted.items():
            left = have.get(r, 0)
            if minus:
                left -= minus.get(r, 0)
            if mine:
                left -= mine.get(r, 0)
            if left < v:
                break
        else:
            return z.name
    return None


def community_fit(
    topo: CommunityTopology,
    demand: Demand,
    taken: Mapping[str, Mapping[str, int]] | None = None,
    *,
    score: bool = True,
) -> CommunityFit:
    """Whether the kubelet of ``topo``'s node would admit a pod with ``demand`` under single-numa-node,
    with ``taken`` (assumed at bind, per zone) subtracted from the published ``available``. A policy
    other than single-numa-node always fits (the kubelet admits the pod whatever the zones hold).

    Runs once per node per request, so it copies no zone while the pod fits; the reason of a misfit is
    written only then. ``score=False`` (filter) skips what only the score and bind need: a fit comes
    back without its placements."""
    if not topo.filters:
        return _PASS
    steps = demand.steps(topo.scope, topo.reported)
    if not steps:
        return _PASS
    taken = taken or {}
    used: dict[str, dict[str, int]] = {}
    """What this pod's earlier containers took, per zone (container scope)."""
    placements: list[tuple[str, Mapping[str, int]]] = []
    for name, kind, wanted in steps:
        zone = _lowest_with_room(topo, wanted, taken, used)
        if zone is None:
            what = ", ".join(_show(r, v) for r, v in sorted(wanted.items()))
            subject = "the pod" if topo.scope == "pod" else f"{kind} container {name}"
            listing = _listing(_free(topo.zones, taken, used), wanted)
            return CommunityFit(False, f"no single NUMA zone fits {subject} ({what}): {listing}")
        if kind == ContainerKind.INIT:
            continue  # runs before the app containers, which reuse what it held
        placements.append((zone, wanted))
        into = used.setdefault(zone, {})
        for r, v in wanted.items():
            into[r] = into.get(r, 0) + v
    if not score:
        return _PASS  # filter reads only ``ok``: no placements, no new object per node
    return CommunityFit(True, None, tuple(placements), _free_after(topo, taken, used))


def _free_after(
    topo: CommunityTopology, taken: Mapping[str, Mapping[str, int]], used: Mapping[str, Mapping[str, int]]
) -> float:
    """The mean share of allocatable left free in the zones the pod uses, over the resources it takes."""
    shares = []
    for z in topo.zones:
        mine = used.get(z.name)
        if not mine:
            continue
        minus = taken.get(z.name, {})
        for r, v in mine.items():
            alloc = z.allocatable.get(r, 0)
            if alloc > 0:
                shares.append(max(0, z.available.get(r, 0) - minus.get(r, 0) - v) / alloc)
    return sum(shares) / len(shares) if shares else 0.0


_PASS = CommunityFit(True)
"""The fit on a node that does not filter, or of a pod asking nothing its zones report."""


def community_score(f: CommunityFit) -> int:
    """0..10: fewer zones first (the score is divided by the zones used), then least allocated (the share
    of the used zones left free after the pod). 0 when the pod does not fit."""
    if not f.ok or not f.placements:
        return 0
    return min(10, max(0, math.floor(10 * f.free_after / f.zones_used + 0.5)))


@dataclass
class Taken:
    """Per zone, what is assumed taken on one node (``ballast.extender.numa.community_assumed``)."""

    by_zone: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, placements: Iterable[tuple[str, Mapping[str, int]]]) -> None:
        for zone, wanted in placements:
            into = self.by_zone.setdefault(zone, {})
            for r, v in wanted.items():
                into[r] = into.get(r, 0) + v
