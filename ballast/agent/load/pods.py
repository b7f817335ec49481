"""The pods bound to this node, as the agent's pod watch delivers them (a ``ballast.kube.client.Reflector``
handler): what is measured (each pod's cgroup) and what the hot value counts (their binding times).

A pod that is terminating or finished is still measured while its cgroup is there (it still uses the
node) but no longer counts for the hot value (the annotator's rule, ``ballast.model.hot_value``).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ballast.agent.load.sampler import PodRef
from ballast.contract.pod import parse_pod
from ballast.model.hot_value import binding_from_pod

__all__ = ["NodePods"]


@dataclass(frozen=True, slots=True)
class _Pod:
    ref: PodRef
    bound_at: float | None


class NodePods:
    """This node's pods by uid; thread-safe (the watch thread writes, the load loop reads)."""

    def __init__(self, node_name: str) -> None:
        self.node_name = node_name
        self._lock = threading.Lock()
        self._pods: dict[str, _Pod] = {}
        self.synced = threading.Event()

    def _parse(self, obj: Mapping[str, Any]) -> _Pod | None:
        try:
            info = parse_pod(obj)
        except Exception:  # one bad object is no information for that pod, never an exception out of a watch
            return None
        if not info.uid or info.node_name != self.node_name:
            return None
        if info.phase in ("Succeeded", "Failed"):
            return None  # its containers are gone; a cgroup left behind is the kubelet's to clean up
        binding = binding_from_pod(obj)
        return _Pod(PodRef(info.uid, info.namespace, info.name, info.qos), binding.when if binding else None)

    # ``ballast.kube.client.Reflector`` handler protocol
    def replace(self, objects: Iterable[dict[str, Any]], resource_version: str = "") -> None:
        pods = {p.ref.uid: p for p in map(self._parse, objects) if p is not None}
        with self._lock:
            self._pods = pods
        self.synced.set()

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        if not uid:
            return
        pod = None if event_type == "DELETED" else self._parse(obj)
        with self._lock:
            if pod is None:
                self._pods.pop(uid, None)
            else:
                self._pods[uid] = pod

    def refs(self) -> list[PodRef]:
        with self._lock:
            return [p.ref for p in self._pods.values()]

    def count_bound_since(self) -> Callable[[float], int]:
        """``count_since(t)`` over a snapshot of the binding times, for ``ballast.model.hot_value``."""
        with self._lock:
            times = sorted(p.bound_at for p in self._pods.values() if p.bound_at is not None)
        return lambda since: len(times) - bisect_left(times, since)
