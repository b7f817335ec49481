"""The few facts about a pod that scheduling decisions need, read once per request."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ballast.contract.pod import KubeletPod, is_daemonset_pod, parse_pod
from ballast.contract.quantity import parse_bytes as memory_bytes
from ballast.contract.quantity import parse_cpu_milli as cpu_milli
from ballast.model.bad_request import BadRequest


# Not frozen: made several times per pod on the scheduler's path, and a frozen dataclass sets each field
# through object.__setattr__ (1.4 us against 0.3 us for twelve fields). Nothing mutates one.
@dataclass(slots=True)
class PodDemand:
    """What a pod asks of a node, for load decisions: its effective requests and limits (the kubelet's
    sums), its priority, whether a DaemonSet runs it. The kubelet's view of a pod (QoS, exclusive CPUs) is
    ``ballast.contract.pod.KubeletPod``."""

    namespace: str
    name: str
    uid: str
    daemonset: bool
    cpu_request_milli: int
    cpu_limit_milli: int
    memory_request_bytes: int
    memory_limit_bytes: int
    priority: int | None = None
    """``spec.priority`` (set by admission from the pod's PriorityClass); prod pods are judged against
    ``spec.prod``'s limits."""

    @property
    def key(self) -> str:
        return self.uid or f"{self.namespace}/{self.name}"

    @property
    def label(self) -> str:
        """``namespace/name`` for people reading /nodes and /explain; the name alone when the pod has no
        namespace, empty for a pod without a name."""
        return f"{self.namespace}/{self.name}" if self.namespace and self.name else self.name


_MEMO_CAP = 4096


def _memo(parse: Callable[[Any], int]) -> Callable[[Any], int]:
    """``parse`` remembered per quantity string: pods repeat a handful of them ("50m", "64Mi"), and exact
    parsing (fractions) costs more than the rest of a request's pod reading. Invalid text raises as
    before and is not remembered (``lru_cache`` keeps no exceptions); anything but a string is parsed
    as it comes (it may not be hashable)."""
    cached = functools.lru_cache(maxsize=_MEMO_CAP)(parse)

    def parsed(text: Any) -> int:
        return cached(text) if type(text) is str else parse(text)

    return parsed


_cpu_milli = _memo(cpu_milli)
_memory_bytes = _memo(memory_bytes)


def _is_mapping(value: Any) -> bool:
    """``type(x) is dict`` first: JSON gives dicts, and the ABC check alone is several times slower."""
    return type(value) is dict or isinstance(value, Mapping)


def _resources(containers: Any, field: str) -> list[tuple[int, int, int, int]]:
    if containers is None:
        return []
    if not isinstance(containers, list):
        raise BadRequest(field, "expected a list of containers")
    out = []
    for i, c in enumerate(containers):
        if not _is_mapping(c):
            raise BadRequest(f"{field}[{i}]", "expected a container object")
        res = c.get("resources") or {}
        if not _is_mapping(res):
            raise BadRequest(f"{field}[{i}].resources", "expected an object")
        req = res.get("requests") or {}
        lim = res.get("limits") or {}
        if not _is_mapping(req) or not _is_mapping(lim):
            raise BadRequest(f"{field}[{i}].resources", "requests and limits must be objects")
        try:
            # The API server defaults requests to limits when only limits are set.
            cpu_lim = _cpu_milli(lim["cpu"]) if "cpu" in lim else 0
            cpu_req = _cpu_milli(req["cpu"]) if "cpu" in req else cpu_lim
            mem_lim = _memory_bytes(lim["memory"]) if "memory" in lim else 0
            mem_req = _memory_bytes(req["memory"]) if "memory" in req else mem_lim
        except ValueError as exc:
            raise BadRequest(f"{field}[{i}].resources", str(exc)) from exc
        if min(cpu_req, cpu_lim, mem_req, mem_lim) < 0:
            raise BadRequest(f"{field}[{i}].resources", "quantities must not be negative")
        out.append((cpu_req, cpu_lim, mem_req, mem_lim))
    return out


def _effective(app: list[tuple[int, ...]], init: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The kubelet's effective pod values (cpu request, cpu limit, memory request, memory limit): each the
    larger of the sum over app containers and the largest over init containers."""
    totals = app[0] if len(app) == 1 else tuple(map(sum, zip(*app, strict=True))) if app else (0, 0, 0, 0)
    if init:
        totals = tuple(map(max, totals, map(max, zip(*init, strict=True))))
    return totals


def pod_info(pod: Mapping[str, Any]) -> PodDemand:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise BadRequest("Pod.spec", "expected an object")
    app = _resources(spec.get("containers"), "Pod.spec.containers")
    init = _resources(spec.get("initContainers"), "Pod.spec.initContainers")
    cpu_request, cpu_limit, memory_request, memory_limit = _effective(app, init)
    return PodDemand(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        daemonset=is_daemonset_pod(meta),
        cpu_request_milli=cpu_request,
        cpu_limit_milli=cpu_limit,
        memory_request_bytes=memory_request,
        memory_limit_bytes=memory_limit,
        priority=_priority(spec.get("priority")),
    )


# Not frozen, for the same reason as ``PodDemand``; only ``detail`` fills its slot later, once.
@dataclass(slots=True)
class PodRecord:
    """The pod of one request, read once for everything that decides on it: filter and prioritize read
    ``info``, the NUMA checks ``detail``; nothing reads the object a second way.

    ``detail`` (the kubelet's view: QoS, each container's exclusive CPUs, the crane annotations) costs as
    much as the rest of a small prioritize, and only a pod some node may pin CPUs for needs it: it is
    parsed the first time it is asked for, and that reading serves every later question of the request."""

    obj: Mapping[str, Any]
    """The pod as the request carries it."""
    info: PodDemand
    _detail: KubeletPod | None = None

    @property
    def detail(self) -> KubeletPod:
        if self._detail is None:
            self._detail = parse_pod(self.obj)
        return self._detail


class PodDemandMemo:
    """``pod_info`` remembered per pod UID, with what it was read from.

    One pod is read three times on its way: filter's request, prioritize's, and the pod watch's event that
    it is bound, each a separate copy of the same pod. Reading its containers' resources was a sixth of
    Ballast's own CPU per pod; comparing what the reading depends on with what it was read from (the
    containers, init containers, priority and owners, compared whole, at C speed) costs a fraction of
    that. Anything different (another version of the pod, a resize, a caller's edited copy) is read
    again, so an answer never comes from a pod other than the one asked about. Bounded (``cap`` pods, the
    oldest go) and thread-safe: the verbs and the pod watch share it."""

    def __init__(self, cap: int = 1024) -> None:
        self.cap = cap
        self._lock = threading.Lock()
        self._read: dict[str, tuple[tuple[Any, ...], PodDemand]] = {}

    def __call__(self, pod: Mapping[str, Any]) -> PodDemand:
        meta = pod.get("metadata")
        spec = pod.get("spec")
        if type(meta) is not dict or type(spec) is not dict:
            return pod_info(pod)  # the unusual shapes (and their errors) take the plain path
        uid = meta.get("uid")
        if not uid or type(uid) is not str:
            return pod_info(pod)
        source = (
            spec.get("containers"),
            spec.get("initContainers"),
            spec.get("priority"),
            type(spec.get("priority")),  # 1 == True, but only one of them is a priority
            meta.get("ownerReferences"),
            meta.get("namespace"),
            meta.get("name"),
        )
        known = self._read.get(uid)
        if known is not None and known[0] == source:
            return known[1]
        info = pod_info(pod)
        with self._lock:
            read = self._read
            read.pop(uid, None)
            while len(read) >= self.cap:
                del read[next(iter(read))]
            read[uid] = (source, info)
        return info

    def record(self, pod: Mapping[str, Any]) -> PodRecord:
        """The request's one record of ``pod``, its ``info`` read through the memo."""
        return PodRecord(pod, self(pod))

    def __len__(self) -> int:
        return len(self._read)


read_pod = PodDemandMemo()
"""The extender's reading of pods: filter, prioritize (a ``record`` per request) and the pod watch share
it."""


def _priority(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
