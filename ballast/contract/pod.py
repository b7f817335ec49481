"""What the agent's CPU manager and the extender's NUMA accounting read from a pod's JSON, one way for both.

- QoS class computed from the spec the way the kubelet does (``ComputePodQOS``), not taken from
  ``status.qosClass``: the status is written by the kubelet and lags, and the rule must be the kubelet's
  own for eligibility to match it.
- Per container: kind (init, sidecar = restartable init container, app) and the number of exclusive
  CPUs it qualifies for (the kubelet's ``guaranteedCPUs``: pod QoS Guaranteed, integer CPU request).
- The pod-level exclusive CPU count (the kubelet's ``podGuaranteedCPUs``, sidecars included).
- The container ids and running state from the status, runtime prefix (``containerd://``) stripped.
- The two crane annotations, the cpu policy and the topology result, the latter parsed by
  ``ballast.contract.topology_result`` (JSON and shape only; whether its NUMA ids exist and its total matches
  is ``ballast.contract.exclusive``'s call).
- Whether a DaemonSet controls the pod (``is_daemonset_pod``: its controller ownerReference, the rule
  the kubelet and kube-scheduler use); the extender neither estimates nor NUMA-places those pods.
- When the pod was bound to its node (``bound_at``): the one rule the extender's estimates, the rebalancer
  and the hot value (annotator and agent) date a placement by.

Everything here is pure and never raises on a malformed pod: problems are recorded on ``KubeletPod`` and the
affected containers simply do not qualify.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import Any

from ballast.contract.quantity import QuantityError, parse_quantity
from ballast.contract.seal import SEAL_ANNOTATION
from ballast.contract.times import parse_rfc3339
from ballast.contract.topology_result import (
    CPU_POLICY_ANNOTATION,
    TOPOLOGY_RESULT_ANNOTATION,
    TopologyResult,
    TopologyResultError,
    parse_topology_result,
)

__all__ = [
    "ContainerInfo",
    "ContainerKind",
    "ContainerStatus",
    "KubeletPod",
    "QOSClass",
    "bound_at",
    "compute_qos",
    "is_daemonset_pod",
    "parse_pod",
]


class QOSClass(StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


class ContainerKind(StrEnum):
    INIT = "init"
    SIDECAR = "sidecar"
    """An init container with ``restartPolicy: Always``: runs alongside the app containers."""
    APP = "app"


@dataclass(frozen=True, slots=True)
class ContainerInfo:
    name: str
    kind: ContainerKind
    exclusive_cpus: int
    """CPUs this container gets exclusively when its pod's policy pins CPUs; 0 = shared pool."""


@dataclass(frozen=True, slots=True)
class ContainerStatus:
    name: str
    container_id: str
    """Without the ``<runtime>://`` prefix; empty when the status has none yet."""
    runtime: str
    """The prefix: ``containerd``, ``cri-o``, ``docker``; empty when unknown."""
    running: bool
    restart_count: int = 0


@dataclass(frozen=True)
class KubeletPod:
    """A pod as the kubelet reads it (``parse_pod``): QoS, containers and their exclusive CPUs, statuses,
    the topology result. What the load model reads of a pod (requests and limits) is
    ``ballast.model.podinfo.PodDemand``."""

    uid: str
    namespace: str
    name: str
    node_name: str
    scheduler_name: str
    phase: str
    qos: QOSClass
    created: str
    """``metadata.creationTimestamp`` (RFC 3339 sorts as text); orders allocations oldest first."""
    containers: tuple[ContainerInfo, ...]
    """Init containers (and sidecars) in spec order, then app containers."""
    statuses: Mapping[str, ContainerStatus]
    cpu_policy: str | None
    """The raw ``cpu-policy`` annotation (``None`` when absent)."""
    topology_result: tuple[tuple[int, int], ...] | None
    """``((numa id, cpus), ...)`` from a well-formed ``topology-result``; ``None`` when absent or bad."""
    topology_result_error: str | None
    problems: tuple[str, ...] = ()
    topology_result_text: str | None = None
    """The ``topology-result`` annotation as written (what its seal covers)."""
    topology_result_seal: str | None = None
    """The ``ballast.io/topology-result-seal`` annotation (``ballast.contract.seal``), ``None`` when
    absent."""
    topology_result_memory: Mapping[int, int] = field(default_factory=dict)
    """Memory bytes per NUMA id the topology result states (the extender counts it; the agent does not)."""
    daemonset: bool = False
    """A DaemonSet controls the pod (``is_daemonset_pod``)."""
    _by_name: Mapping[str, ContainerInfo] = field(default_factory=dict, repr=False, compare=False)

    @property
    def terminal(self) -> bool:
        """Succeeded or Failed: its containers will not run again, its CPUs can go back to the pool."""
        return self.phase in ("Succeeded", "Failed")

    @property
    def exclusive_cpus(self) -> int:
        """The kubelet's ``podGuaranteedCPUs``: max(init containers with the sidecars before them,
        app containers plus sidecars)."""
        init_peak = 0
        sidecars = 0
        apps = 0
        for c in self.containers:
            if c.kind is ContainerKind.SIDECAR:
                sidecars += c.exclusive_cpus
            elif c.kind is ContainerKind.INIT:
                init_peak = max(init_peak, sidecars + c.exclusive_cpus)
            else:
                apps += c.exclusive_cpus
        return max(init_peak, apps + sidecars)

    def container(self, name: str) -> ContainerInfo | None:
        return self._by_name.get(name)


# --- quantities and QoS -------------------------------------------------------------------------------

_QOS_RESOURCES = ("cpu", "memory")


def _quantities(raw: Any, where: str, problems: list[str]) -> dict[str, Fraction]:
    out: dict[str, Fraction] = {}
    if raw is None:
        return out
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: expected an object")
        return out
    for name in _QOS_RESOURCES:
        if name in raw:
            try:
                out[name] = parse_quantity(raw[name])
            except QuantityError as e:
                problems.append(f"{where}.{name}: {e}")
    return out


def _requests_limits(resources: Any, where: str, problems: list[str]) -> tuple[dict, dict]:
    if resources is None:
        return {}, {}
    if not isinstance(resources, Mapping):
        problems.append(f"{where}: expected an object")
        return {}, {}
    requests = _quantities(resources.get("requests"), f"{where}.requests", problems)
    limits = _quantities(resources.get("limits"), f"{where}.limits", problems)
    # The API server defaults a missing request to the limit; pods built by hand may lack it.
    for name, value in limits.items():
        requests.setdefault(name, value)
    return requests, limits


def compute_qos(resource_sets: list[tuple[dict[str, Fraction], dict[str, Fraction]]]) -> QOSClass:
    """The kubelet's ``ComputePodQOS`` over (requests, limits) pairs of cpu and memory.

    Zero quantities are ignored. Guaranteed needs every container to set positive cpu and memory limits
    and the summed requests to equal the summed limits; nothing set at all is BestEffort.
    """
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    for req, lim in resource_sets:
        for name, q in req.items():
            if q > 0:
                requests[name] = requests.get(name, Fraction(0)) + q
        found = set()
        for name, q in lim.items():
            if q > 0:
                found.add(name)
                limits[name] = limits.get(name, Fraction(0)) + q
        if not found.issuperset(_QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return QOSClass.BEST_EFFORT
    if guaranteed:
        for name, req in requests.items():
            if limits.get(name) != req:
                guaranteed = False
                break
    if guaranteed and len(requests) == len(limits):
        return QOSClass.GUARANTEED
    return QOSClass.BURSTABLE


# --- the pod ------------------------------------------------------------------------------------------


def _split_container_id(raw: Any) -> tuple[str, str]:
    if not isinstance(raw, str) or not raw:
        return "", ""
    runtime, sep, cid = raw.partition("://")
    return (runtime, cid) if sep else ("", raw)


def _statuses(status: Mapping[str, Any]) -> dict[str, ContainerStatus]:
    out: dict[str, ContainerStatus] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        items = status.get(key)
        if not isinstance(items, list):
            continue
        for item in items:
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                continue
            runtime, cid = _split_container_id(item.get("containerID"))
            state = item.get("state")
            running = isinstance(state, Mapping) and isinstance(state.get("running"), Mapping)
            restarts = item.get("restartCount")
            restarts = restarts if isinstance(restarts, int) and not isinstance(restarts, bool) else 0
            out[item["name"]] = ContainerStatus(item["name"], cid, runtime, running, restarts)
    return out


def _exclusive_cpus(requests: Mapping[str, Fraction], guaranteed: bool) -> int:
    """The kubelet's ``guaranteedCPUs``: the CPU request when the pod is Guaranteed and it is whole."""
    if not guaranteed:
        return 0
    cpu = requests.get("cpu")
    if cpu is None or cpu <= 0 or cpu.denominator != 1:
        return 0
    return int(cpu)


def is_daemonset_pod(meta: Any) -> bool:
    """Whether a DaemonSet controls the pod: an ownerReference of kind DaemonSet with ``controller: true``
    (the kubelet's and kube-scheduler's rule; an owner that is not the controller does not count)."""
    owners = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    return isinstance(owners, list) and any(
        isinstance(o, Mapping) and o.get("kind") == "DaemonSet" and o.get("controller") is True
        for o in owners
    )


def bound_at(pod: Any) -> float | None:
    """When the pod was bound to its node, in Unix seconds; ``None`` when no time can be read. Never raises.

    The ``lastTransitionTime`` of its first ``PodScheduled`` condition with status ``True`` (the API server
    sets it when it binds the pod). Without one that reads, the pod's ``creationTimestamp``: a pod created
    with ``spec.nodeName`` set was bound when it was created. Both are read by the one time parser
    (``ballast.contract.times``), so a time without an offset is no time. Whether the pod is bound at all
    (``spec.nodeName``) is the caller's question.
    """
    if not isinstance(pod, Mapping):
        return None
    status = pod.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if isinstance(conditions, list):
        for cond in conditions:
            if (
                not isinstance(cond, Mapping)
                or cond.get("type") != "PodScheduled"
                or cond.get("status") != "True"
            ):
                continue
            when = parse_rfc3339(cond.get("lastTransitionTime"))
            if when is not None:
                return when
            break
    meta = pod.get("metadata")
    return parse_rfc3339(meta.get("creationTimestamp")) if isinstance(meta, Mapping) else None


def parse_pod(pod: Mapping[str, Any]) -> KubeletPod:
    """Read a pod's JSON (as the API server sends it) into a ``KubeletPod``; never raises on bad content."""
    problems: list[str] = []
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}

    parsed: list[tuple[str, ContainerKind, dict, dict]] = []
    for key, default_kind in (("initContainers", ContainerKind.INIT), ("containers", ContainerKind.APP)):
        items = spec.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            problems.append(f"spec.{key}: expected a list")
            continue
        for i, c in enumerate(items):
            if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
                problems.append(f"spec.{key}[{i}]: expected a container with a name")
                continue
            kind = default_kind
            if default_kind is ContainerKind.INIT and c.get("restartPolicy") == "Always":
                kind = ContainerKind.SIDECAR
            req, lim = _requests_limits(c.get("resources"), f"spec.{key}[{i}].resources", problems)
            parsed.append((c["name"], kind, req, lim))

    pod_resources = spec.get("resources")
    if isinstance(pod_resources, Mapping) and (pod_resources.get("requests") or pod_resources.get("limits")):
        # Pod-level resources (PodLevelResources): the kubelet computes QoS from them alone.
        qos = compute_qos([_requests_limits(pod_resources, "spec.resources", problems)])
    else:
        qos = compute_qos([(req, lim) for _, _, req, lim in parsed])
    guaranteed = qos is QOSClass.GUARANTEED and not problems
    containers = tuple(
        ContainerInfo(name, kind, _exclusive_cpus(req, guaranteed)) for name, kind, req, _ in parsed
    )

    raw_policy = annotations.get(CPU_POLICY_ANNOTATION)
    raw_result = annotations.get(TOPOLOGY_RESULT_ANNOTATION)
    raw_seal = annotations.get(SEAL_ANNOTATION)
    result: TopologyResult | None = None
    result_error: str | None = None
    if raw_result is not None:
        try:
            result = parse_topology_result(raw_result)
        except TopologyResultError as e:
            result_error = str(e)

    def text(mapping: Mapping[str, Any], key: str) -> str:
        value = mapping.get(key)
        return value if isinstance(value, str) else ""

    return KubeletPod(
        uid=text(meta, "uid"),
        namespace=text(meta, "namespace"),
        name=text(meta, "name"),
        node_name=text(spec, "nodeName"),
        scheduler_name=text(spec, "schedulerName") or "default-scheduler",
        phase=text(status, "phase"),
        qos=qos,
        created=text(meta, "creationTimestamp"),
        containers=containers,
        statuses=_statuses(status),
        cpu_policy=raw_policy if isinstance(raw_policy, str) else None,
        topology_result=result.cpus if result is not None else None,
        topology_result_error=result_error,
        problems=tuple(problems),
        topology_result_text=raw_result if isinstance(raw_result, str) else None,
        topology_result_seal=raw_seal if isinstance(raw_seal, str) else None,
        topology_result_memory=result.memory if result is not None else {},
        daemonset=is_daemonset_pod(meta),
        _by_name={c.name: c for c in containers},
    )
