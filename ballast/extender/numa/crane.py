"""NUMA-aware placement from NodeResourceTopology (crane's NodeResourceTopologyMatch, without its bugs).

Pure functions: parse an NRT once per event, read what a pod needs, say whether and how it fits a node,
and what to write into the ``topology.crane.io/topology-result`` annotation. Pods are read with the
agent's own parser (``ballast.contract.pod``) and results with the one ``ballast.contract.topology_result``,
so the
extender and the CPU manager agree on which pods need exclusive CPUs (the kubelet's rule: Guaranteed QoS,
integer CPU requests) and on the annotation's format.

Differences from crane, on purpose:
- a node without an NRT passes (crane rejected it: fail-closed for every node without crane-agent);
- ``numa`` and ``none`` pods take no CPUs exclusively, so their results do not count as taken;
- memory in a result is written as memory (crane wrote the CPU value);
- the score never divides by zero and failure reasons list each zone's free amount and the need.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ballast.contract.exclusive import CPUPolicy, decide_exclusive
from ballast.contract.pod import KubeletPod, QOSClass, parse_pod
from ballast.contract.quantity import (
    QuantityError,
    format_cpu_milli,
    format_quantity,
    parse_bytes,
    parse_cpu_milli,
)
from ballast.contract.topology_result import (
    AWARENESS_KEY,
    EXCLUSIVE_PODS_ATTRIBUTE,
    parse_go_bool,
    parse_zone_pods,
)

SINGLE_NUMA = "SingleNUMANodePodLevel"


@dataclass(frozen=True, slots=True)
class Zone:
    name: str
    numa: int
    cpu_milli: int
    memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class NodeTopology:
    node: str
    static: bool
    """``cpuManagerPolicy: Static``: Ballast's agent pins CPUs here; otherwise the kubelet decides."""
    aware: bool
    """``topologyManagerPolicy: SingleNUMANodePodLevel``: pods need one zone unless they say otherwise."""
    zones: tuple[Zone, ...]
    held: Mapping[str, Mapping[str, int]] | None = None
    """What the agent says it pins, zone name -> {pod UID: CPUs} (``EXCLUSIVE_PODS_ATTRIBUTE``);
    ``None`` when the NRT does not say (an agent without it, crane's): then topology results count."""


def parse_nrt(obj: Mapping[str, Any]) -> NodeTopology | None:
    """Read an NRT; ``None`` when it is unusable (the node is then treated as having no NRT)."""
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    policy = obj.get("craneManagerPolicy") or {}
    if not isinstance(name, str) or not isinstance(policy, Mapping):
        return None
    zones = []
    held: dict[str, dict[str, int]] | None = {}
    for z in obj.get("zones") or []:
        if not isinstance(z, Mapping) or z.get("type", "Node") != "Node":
            continue
        zname = z.get("name")
        if not isinstance(zname, str) or not zname.startswith("node") or not zname[4:].isdigit():
            continue
        res = z.get("resources") or {}
        alloc = res.get("allocatable") or res.get("capacity") or {} if isinstance(res, Mapping) else {}
        try:
            cpu = parse_cpu_milli(alloc["cpu"]) if "cpu" in alloc else 0
            mem = parse_bytes(alloc["memory"]) if "memory" in alloc else None
        except QuantityError:
            continue
        zones.append(Zone(zname, int(zname[4:]), max(0, cpu), mem))
        attrs = z.get("attributes")
        pods = parse_zone_pods(attrs.get(EXCLUSIVE_PODS_ATTRIBUTE)) if isinstance(attrs, Mapping) else None
        if pods is None:
            held = None  # one zone without it: the NRT does not say what the agent holds
        elif held is not None:
            held[zname] = pods
    zones.sort(key=lambda z: z.numa)
    return NodeTopology(
        node=name,
        static=policy.get("cpuManagerPolicy") == "Static",
        aware=policy.get("topologyManagerPolicy", SINGLE_NUMA) == SINGLE_NUMA,
        zones=tuple(zones),
        held=held if zones and held is not None else None,
    )


@dataclass(frozen=True, slots=True)
class NumaRequest:
    cpus: int
    """Exclusive CPUs the pod needs (the kubelet's podGuaranteedCPUs)."""
    memory_bytes: int
    aware: bool | None
    """The pod's ``topology-awareness`` annotation, ``None`` when absent (the NRT decides)."""
    policy: str

    def is_aware(self, topo: NodeTopology) -> bool:
        return self.aware if self.aware is not None else topo.aware


def numa_request(pod: Mapping[str, Any], info: KubeletPod | None = None) -> NumaRequest | None:
    """What a pod needs from NUMA zones, or ``None`` when it takes no exclusive CPUs. ``info`` is the pod
    already read by ``parse_pod``, when the caller has it."""
    if info is None:
        info = parse_pod(pod)
    if info.cpu_policy == CPUPolicy.NONE.value or info.exclusive_cpus <= 0 or info.daemonset:
        return None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(AWARENESS_KEY)
    aware = parse_go_bool(raw) if isinstance(raw, str) else None
    memory = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        lim = ((c.get("resources") or {}).get("limits") or {}) if isinstance(c, Mapping) else {}
        with contextlib.suppress(QuantityError):
            memory += parse_bytes(lim["memory"]) if "memory" in lim else 0
    policy = info.cpu_policy if info.cpu_policy in {p.value for p in CPUPolicy} else CPUPolicy.EXCLUSIVE.value
    return NumaRequest(info.exclusive_cpus, memory, aware, policy)


@dataclass
class ZoneUsage:
    """What is taken per zone on one node: exclusive CPUs (and memory) of pods with a topology result."""

    cpu_milli: dict[str, int] = field(default_factory=dict)
    memory_bytes: dict[str, int] = field(default_factory=dict)
    pods: dict[str, list[str]] = field(default_factory=dict)

    def add(self, pod: str, result: Iterable[tuple[str, int, int]]) -> None:
        for zone, cpu_milli, mem in result:
            self.cpu_milli[zone] = self.cpu_milli.get(zone, 0) + cpu_milli
            self.memory_bytes[zone] = self.memory_bytes.get(zone, 0) + mem
            self.pods.setdefault(zone, []).append(pod)


def exclusive_zones(
    pod: KubeletPod,
    topo: NodeTopology | None,
    allowed_schedulers: Collection[str],
    sealed: bool | None = None,
) -> list[tuple[str, int, int]] | None:
    """The zones a pod really holds exclusive CPUs in, by the agent's own rule
    (``ballast.contract.exclusive``):
    Guaranteed, whole CPUs, a pinning policy, a trusted scheduler, a result that names zones the node's
    NRT has and holds exactly the pod's CPUs. ``None`` when it holds none. Memory is per zone from the
    same result (the agent ignores it; the extender counts it when the policy is memory-aware)."""
    requested = CPUPolicy.EXCLUSIVE
    with contextlib.suppress(ValueError):
        requested = CPUPolicy(pod.cpu_policy) if pod.cpu_policy is not None else CPUPolicy.EXCLUSIVE
    known = {z.numa for z in topo.zones} if topo is not None else ()
    d = decide_exclusive(
        guaranteed=pod.qos is QOSClass.GUARANTEED,
        qos=str(pod.qos),
        exclusive_cpus=pod.exclusive_cpus,
        requested=requested,
        scheduler_name=pod.scheduler_name,
        allowed_schedulers=allowed_schedulers,
        result=pod.topology_result,
        result_error=pod.topology_result_error,
        known_numa=known,
        sealed=sealed,
    )
    if not d.pins or not d.zones:
        return None
    return [(f"node{n}", cpus * 1000, pod.topology_result_memory.get(n, 0)) for n, cpus in d.zones]


@dataclass(frozen=True, slots=True)
class Fit:
    ok: bool
    reason: str | None
    result: tuple[tuple[str, int, int], ...] = ()
    """(zone, cpus, memory bytes) to write into the topology result."""

    @property
    def zones_used(self) -> int:
        return len(self.result)


def _free(topo: NodeTopology, usage: ZoneUsage) -> list[tuple[Zone, int, int | None]]:
    out = []
    for z in topo.zones:
        cpu = z.cpu_milli - usage.cpu_milli.get(z.name, 0)
        mem = None if z.memory_bytes is None else z.memory_bytes - usage.memory_bytes.get(z.name, 0)
        out.append((z, cpu, mem))
    return out


def _cpus(milli: int) -> str:
    return format_cpu_milli(max(0, milli))


def fit(topo: NodeTopology, usage: ZoneUsage, req: NumaRequest, memory_aware: bool = False) -> Fit:
    """Whether and how ``req`` fits: one zone when aware (the fitting zone with most free CPU), else whole
    CPUs from the zones with most free first, across zones."""
    free = _free(topo, usage)
    need = req.cpus * 1000
    listing = ", ".join(f"{z.name} free {_cpus(cpu)}" for z, cpu, _ in free) or "no zones"
    if req.is_aware(topo):
        candidates = [
            (cpu, z, mem)
            for z, cpu, mem in free
            if cpu >= need and (not memory_aware or mem is None or mem >= req.memory_bytes)
        ]
        if not candidates:
            what = f"cpu {req.cpus}" + (
                f" and memory {format_quantity(req.memory_bytes, 'BinarySI')}"
                if memory_aware and req.memory_bytes
                else ""
            )
            return Fit(False, f"no single NUMA zone fits {what}: {listing}")
        _, zone, _ = max(candidates, key=lambda c: (c[0], -c[1].numa))
        memory = req.memory_bytes if memory_aware else 0
        return Fit(True, None, ((zone.name, req.cpus, memory),))
    whole = sorted(((cpu // 1000, z) for z, cpu, _ in free if cpu >= 1000), key=lambda c: (-c[0], c[1].numa))
    if sum(c for c, _ in whole) < req.cpus:
        return Fit(False, f"NUMA zones together cannot fit cpu {req.cpus}: {listing}")
    remaining = req.cpus
    taken = []
    for cpus, z in whole:
        if remaining <= 0:
            break
        take = min(cpus, remaining)
        taken.append((z.name, take, 0))
        remaining -= take
    return Fit(True, None, tuple(sorted(taken, key=lambda t: int(t[0][4:]))))


def numa_score(f: Fit) -> int:
    """Fewer zones score higher: 1 zone = 10, 2 = 5, 3 = 3, 4 = 2 (0 when it does not fit)."""
    return 10 // f.zones_used if f.ok and f.zones_used else 0


def combine(load_score: int, numa: int, weight: float) -> int:
    """The prioritize score of a NUMA pod: ``round((1 - w) * load + w * numa)``, half up, in 0..10."""
    return min(10, max(0, math.floor((1 - weight) * load_score + weight * numa + 0.5)))
