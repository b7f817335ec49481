"""What the rebalancer needs to know about a pod, read once when the pod watch delivers it (pure).

``PodFacts`` holds who owns the pod, whether it may be evicted (and why not), how it would be ordered
among victims, and what it asks of a node (requests, node selector, required node affinity,
tolerations) for the fit check. Reading never raises: a pod whose resources cannot be read is kept, but
never evicted (``skip`` says why), since its estimate would be a guess.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from ballast.contract.pod import bound_at, parse_pod
from ballast.contract.times import parse_rfc3339
from ballast.model.bad_request import BadRequest
from ballast.model.estimation import estimate_usage
from ballast.model.podinfo import PodDemand, pod_info
from ballast.model.policy import Estimation

__all__ = ["EVICT_ANNOTATION", "QOS_ORDER", "PodFacts", "pod_facts", "reestimate", "skip_reason"]

EVICT_ANNOTATION = "ballast.io/evict"
"""``"false"`` keeps a pod where it is; the rebalancer never evicts it."""
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
RECREATING_OWNERS = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController"})
"""Controllers that create a replacement when their pod is evicted, with nothing lost but the restart. Not
DaemonSet (its pod would come back on the same node), not bare pods (nothing brings them back), not Job
(the replacement starts the work over, and an eviction may count against the Job's backoffLimit), not
unknown custom owners (an operator's controller may or may not recreate: keep its pods)."""
QOS_ORDER = {"BestEffort": 0, "Burstable": 1, "Guaranteed": 2}
"""Victim order: BestEffort pods go first, Guaranteed last (the kubelet's eviction order)."""
LOCAL_VOLUMES = ("emptyDir", "hostPath")


@dataclass(frozen=True, slots=True)
class PodFacts:
    uid: str
    namespace: str
    name: str
    node: str
    owner_kind: str
    owner_name: str
    workload: str
    """``namespace/Kind/name`` of the workload the per-workload limit counts: a ReplicaSet made by a
    Deployment counts as its Deployment (a rollout's new ReplicaSet is the same workload)."""
    priority: int
    qos: str
    created: float
    placed: float
    """When the pod was bound (``ballast.contract.pod.bound_at``; 0 unknown): what estimates date from."""
    cpu_milli: int
    memory_bytes: int
    """The estimate (``ballast.model.estimation.estimate_usage``): what leaves a node with the pod."""
    cpu_request_milli: int
    memory_request_bytes: int
    cpu_limit_milli: int
    memory_limit_bytes: int
    node_selector: Mapping[str, str]
    affinity_terms: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] | None
    """Required node affinity as OR-ed terms of AND-ed (key, operator, values); ``None``: no affinity."""
    tolerations: tuple[tuple[str, str, str, str], ...]
    """(key, operator, value, effect) per toleration."""
    terminating: bool
    local_storage: bool
    """An emptyDir or hostPath volume: its data would be lost (evicted only with ``evictLocalStorage``)."""
    active: bool
    """Not Succeeded or Failed: the pod holds its requests on the node."""
    skip: str | None
    """Why this pod is never a victim, or ``None`` when it may be one."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.key,
            "owner": f"{self.owner_kind}/{self.owner_name}" if self.owner_kind else None,
            "priority": self.priority,
            "qos": self.qos,
            "estimate": {"cpuMilli": self.cpu_milli, "memoryBytes": self.memory_bytes},
        }


def _controller(meta: Mapping[str, Any]) -> tuple[str, str]:
    owners = meta.get("ownerReferences")
    if isinstance(owners, list):
        for o in owners:
            if isinstance(o, Mapping) and o.get("controller") is True:
                return str(o.get("kind") or ""), str(o.get("name") or "")
    return "", ""


def _workload(namespace: str, kind: str, name: str, labels: Mapping[str, Any]) -> str:
    if kind == "ReplicaSet":
        h = labels.get("pod-template-hash")
        if isinstance(h, str) and h and name.endswith("-" + h):
            return f"{namespace}/Deployment/{name[: -len(h) - 1]}"
    return f"{namespace}/{kind or 'Pod'}/{name}"


def _affinity(spec: Mapping[str, Any]) -> tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] | None:
    try:
        required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        terms = required["nodeSelectorTerms"]
    except (KeyError, TypeError):
        return None
    out = []
    for term in terms if isinstance(terms, list) else []:
        exprs = term.get("matchExpressions") if isinstance(term, Mapping) else None
        out.append(
            tuple(
                (str(e.get("key")), str(e.get("operator")), tuple(str(v) for v in e.get("values") or ()))
                for e in exprs or ()
                if isinstance(e, Mapping)
            )
        )
    return tuple(out)


def _tolerations(spec: Mapping[str, Any]) -> tuple[tuple[str, str, str, str], ...]:
    items = spec.get("tolerations")
    return tuple(
        (str(t.get("key") or ""), str(t.get("operator") or "Equal"), str(t.get("value") or ""),
         str(t.get("effect") or ""))
        for t in items if isinstance(t, Mapping)
    ) if isinstance(items, list) else ()  # fmt: skip


def _local_storage(spec: Mapping[str, Any]) -> bool:
    volumes = spec.get("volumes")
    return isinstance(volumes, list) and any(
        isinstance(v, Mapping) and any(k in v for k in LOCAL_VOLUMES) for v in volumes
    )


def skip_reason(
    *,
    owner_kind: str,
    annotations: Mapping[str, Any],
    terminating: bool,
    active: bool,
    daemonset: bool,
) -> str | None:
    """Why a pod must not be evicted whatever the settings (excluded namespaces and local storage are
    settings: ``ballast.rebalancer.victims`` applies them)."""
    if terminating:
        return "already terminating"
    if not active:
        return "finished (Succeeded or Failed)"
    if MIRROR_ANNOTATION in annotations:
        return "mirror (static) pod: the kubelet owns it"
    if daemonset or owner_kind == "DaemonSet":
        return "DaemonSet pod: it would come back on the same node"
    if str(annotations.get(EVICT_ANNOTATION, "")).lower() == "false":
        return f'annotated {EVICT_ANNOTATION}: "false"'
    if not owner_kind:
        return "no controller: nothing would recreate it"
    if owner_kind not in RECREATING_OWNERS:
        return f"owner kind {owner_kind} is not known to recreate its pods"
    return None


def reestimate(facts: PodFacts, est: Estimation) -> PodFacts:
    """The same pod under another policy's estimation settings."""
    info = PodDemand(facts.namespace, facts.name, facts.uid, False, facts.cpu_request_milli,
                   facts.cpu_limit_milli, facts.memory_request_bytes, facts.memory_limit_bytes)  # fmt: skip
    cpu, mem = estimate_usage(info, est)
    return replace(facts, cpu_milli=cpu, memory_bytes=mem)


_EMPTY: Mapping[str, str] = MappingProxyType({})
_SHARED: dict[Any, Any] = {}
_SHARED_CAP = 65_536
"""Distinct toleration tuples and node selectors kept for sharing; past this the table starts again."""


def _shared(value: Any, key: Any = None) -> Any:
    """One instance of each repeated value (stored under ``key``, by default the value itself): 100 000
    pods carry a handful of distinct toleration lists (mostly the two the API server adds to every pod)
    and node selectors, and one copy each is enough."""
    key = value if key is None else key
    if len(_SHARED) >= _SHARED_CAP:
        _SHARED.clear()
    return _SHARED.setdefault(key, value)


def _selector_view(pairs: tuple[tuple[str, str], ...]) -> Mapping[str, str]:
    """The node selector as a read-only mapping, one per distinct selector."""
    if not pairs:
        return _EMPTY
    view = _SHARED.get(("nodeSelector", pairs))
    return view if view is not None else _shared(MappingProxyType(dict(pairs)), ("nodeSelector", pairs))


def _name(value: Any) -> str:
    """A string read from the pod, interned: namespaces, node and owner names, kinds and QoS classes repeat
    across pods, and the cache keeps one copy of each."""
    return sys.intern(value) if isinstance(value, str) else sys.intern(str(value or ""))


def pod_facts(pod: Mapping[str, Any], est: Estimation) -> PodFacts:
    """Read one pod (as the API server sends it). Never raises: a pod that cannot be read (a case none of
    the readers foresaw) is kept with no requests and ``skip`` saying why, so it is never a victim and one
    pod never stops the watch that brought it."""
    try:
        return _pod_facts(pod, est)
    except Exception as exc:
        meta = pod.get("metadata") if isinstance(pod, Mapping) else None
        meta = meta if isinstance(meta, Mapping) else {}
        spec = pod.get("spec") if isinstance(pod, Mapping) else None
        node = spec.get("nodeName") if isinstance(spec, Mapping) else None
        uid, namespace, name = (meta.get(k) for k in ("uid", "namespace", "name"))
        text = lambda v: v if isinstance(v, str) else ""  # noqa: E731
        return PodFacts(
            uid=text(uid), namespace=_name(text(namespace)), name=text(name), node=_name(text(node)),
            owner_kind="", owner_name="", workload="", priority=0, qos="BestEffort", created=0.0,
            placed=0.0, cpu_milli=0, memory_bytes=0, cpu_request_milli=0, memory_request_bytes=0,
            cpu_limit_milli=0, memory_limit_bytes=0, node_selector=_EMPTY, affinity_terms=None,
            tolerations=(), terminating=False, local_storage=False, active=True,
            skip=" ".join(f"cannot be read: {type(exc).__name__}: {str(exc)[:160]}".split()),
        )  # fmt: skip


def _pod_facts(pod: Mapping[str, Any], est: Estimation) -> PodFacts:
    meta = pod.get("metadata") if isinstance(pod.get("metadata"), Mapping) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    namespace = _name(meta.get("namespace"))
    kind, owner = _controller(meta)
    problem = None
    try:
        info: PodDemand | None = pod_info(pod)
    except BadRequest as exc:
        info, problem = None, f"resources cannot be read: {exc}"
    cpu, mem = estimate_usage(info, est) if info is not None else (0, 0)
    qos = status.get("qosClass")
    if qos not in QOS_ORDER:
        qos = parse_pod(pod).qos.value
    created = parse_rfc3339(meta.get("creationTimestamp")) or 0.0
    priority = spec.get("priority")
    terminating = bool(meta.get("deletionTimestamp"))
    active = status.get("phase") not in ("Succeeded", "Failed")
    skip = problem or skip_reason(
        owner_kind=kind,
        annotations=annotations,
        terminating=terminating,
        active=active,
        daemonset=info.daemonset if info is not None else False,
    )
    selector = spec.get("nodeSelector")
    selector = (
        tuple(sorted((str(k), str(v)) for k, v in selector.items())) if isinstance(selector, Mapping) else ()
    )
    return PodFacts(
        uid=str(meta.get("uid") or ""),
        namespace=namespace,
        name=str(meta.get("name") or ""),
        node=_name(spec.get("nodeName")),
        owner_kind=_name(kind),
        owner_name=_name(owner),
        workload=_name(_workload(namespace, kind, owner, labels)),
        priority=priority if isinstance(priority, int) and not isinstance(priority, bool) else 0,
        qos=_name(qos),
        created=created,
        placed=bound_at(pod) or 0.0,
        cpu_milli=cpu,
        memory_bytes=mem,
        cpu_request_milli=info.cpu_request_milli if info is not None else 0,
        memory_request_bytes=info.memory_request_bytes if info is not None else 0,
        cpu_limit_milli=info.cpu_limit_milli if info is not None else 0,
        memory_limit_bytes=info.memory_limit_bytes if info is not None else 0,
        node_selector=_selector_view(selector),
        affinity_terms=_shared(_affinity(spec)),
        tolerations=_shared(_tolerations(spec)),
        terminating=terminating,
        local_storage=_local_storage(spec),
        active=active,
        skip=skip,
    )
