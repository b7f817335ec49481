"""The few facts about a pod that scheduling decisions need, read once per request."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from app.model.bad_request import BadRequest
from common.podspec import is_daemonset_pod
from common.quantity import parse_bytes as memory_bytes
from common.quantity import parse_cpu_milli as cpu_milli


@dataclass(frozen=True, slots=True)
class PodInfo:
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


def _resources(containers: Any, field: str) -> list[tuple[int, int, int, int]]:
    if containers is None:
        return []
    if not isinstance(containers, list):
        raise BadRequest(field, "expected a list of containers")
    out = []
    for i, c in enumerate(containers):
        if not isinstance(c, Mapping):
            raise BadRequest(f"{field}[{i}]", "expected a container object")
        res = c.get("resources") or {}
        if not isinstance(res, Mapping):
            raise BadRequest(f"{field}[{i}].resources", "expected an object")
        req = res.get("requests") or {}
        lim = res.get("limits") or {}
        if not isinstance(req, Mapping) or not isinstance(lim, Mapping):
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


def _effective(app: list[tuple[int, ...]], init: list[tuple[int, ...]], idx: int) -> int:
    """The kubelet's effective pod value: max(sum over app containers, max over init containers)."""
    return max(sum(c[idx] for c in app), max((c[idx] for c in init), default=0))


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise BadRequest("Pod.spec", "expected an object")
    app = _resources(spec.get("containers"), "Pod.spec.containers")
    init = _resources(spec.get("initContainers"), "Pod.spec.initContainers")
    return PodInfo(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        daemonset=is_daemonset_pod(meta),
        cpu_request_milli=_effective(app, init, 0),
        cpu_limit_milli=_effective(app, init, 1),
        memory_request_bytes=_effective(app, init, 2),
        memory_limit_bytes=_effective(app, init, 3),
        priority=_priority(spec.get("priority")),
    )


def _priority(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
