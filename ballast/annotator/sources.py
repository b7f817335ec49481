"""Watch handlers that keep the annotator's view of the cluster: nodes, and bindings from pods or events.

They follow ``ballast.kube.client.Handler`` (``replace`` after every full list, ``apply`` per watch event)
and do no
I/O themselves, so tests feed them dicts. Each keeps only what the annotator needs: for a node its
InternalIPs and the annotations Ballast writes; for a pod or event only a ``Binding`` in
``BindingRecords``, and only while it is inside the hot-value horizon.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ballast.annotator.bindings import (
    EVENTS,
    PODS,
    BindingRecords,
    binding_from_event,
    binding_from_pod,
    pod_uid,
)
from ballast.annotator.matching import NodeAddresses
from ballast.model.load_source import LOAD_SOURCE_KEY

__all__ = ["EventBindings", "NodeIndex", "NodeInfo", "PodBindings", "node_info"]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    internal_ips: tuple[str, ...]
    annotations: Mapping[str, str] = field(default_factory=dict)
    """Only the keys the annotator writes (policy metrics and the hot value)."""

    @property
    def addresses(self) -> NodeAddresses:
        return NodeAddresses(self.name, self.internal_ips)


def node_info(obj: Mapping[str, Any], keys: frozenset[str] | set[str]) -> NodeInfo | None:
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        return None
    addresses = (obj.get("status") or {}).get("addresses") or ()
    ips = tuple(str(a["address"]) for a in addresses if a.get("type") == "InternalIP" and a.get("address"))
    annotations = meta.get("annotations") or {}
    mine = {k: v for k, v in annotations.items() if k in keys and isinstance(v, str)}
    return NodeInfo(str(name), ips, mine)


class NodeIndex:
    """Nodes by name; fed by a node Reflector (or one list, for ``--once``) and by our own patch answers."""

    def __init__(self, keys: Iterable[str]) -> None:
        # The writer's stamp is always kept: whose values these are decides whether to write at all.
        self.keys = frozenset(keys) | {LOAD_SOURCE_KEY}
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeInfo] = {}

    def replace(self, objects: list[dict[str, Any]], resource_version: str = "") -> None:
        nodes = {}
        for obj in objects:
            info = node_info(obj, self.keys)
            if info is not None:
                nodes[info.name] = info
        with self._lock:
            self._nodes = nodes

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        info = node_info(obj, self.keys)
        if info is None:
            return
        with self._lock:
            if event_type == "DELETED":
                self._nodes.pop(info.name, None)
            else:
                self._nodes[info.name] = info

    def update(self, obj: Mapping[str, Any]) -> None:
        """A node as our own patch returned it (fresher than the watch event that will follow)."""
        info = node_info(obj, self.keys)
        if info is not None:
            with self._lock:
                if info.name in self._nodes:
                    self._nodes[info.name] = info

    def snapshot(self) -> list[NodeInfo]:
        with self._lock:
            return list(self._nodes.values())

    def get(self, name: str) -> NodeInfo | None:
        return self._nodes.get(name)

    def __len__(self) -> int:
        return len(self._nodes)


class PodBindings:
    """Bindings from pods (list + watch): the source of truth, including deletions."""

    source = PODS

    def __init__(self, records: BindingRecords, clock: Callable[[], float] = time.time) -> None:
        self.records = records
        self.clock = clock

    def replace(self, objects: list[dict[str, Any]], resource_version: str = "") -> None:
        now = self.clock()
        bindings = []
        for pod in objects:
            b = binding_from_pod(pod)
            if b is not None:
                bindings.append(b)
            elif (uid := pod_uid(pod)) and self.records.get(uid) is not None:
                self.records.forget(uid, now)  # listed, but no longer counts (terminating, finished)
        self.records.replace_source(PODS, bindings, now)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        now = self.clock()
        uid = pod_uid(obj)
        if not uid:
            return
        if event_type == "DELETED":
            self.records.forget(uid, now)
            return
        b = binding_from_pod(obj)
        if b is not None:
            self.records.observe(b, now, PODS)
        elif self.records.get(uid) is not None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            self.records.forget(uid, now)


class EventBindings:
    """Bindings from ``Scheduled`` events (crane's source). Events cannot say that a pod went away, and
    an event that expires (its TTL, usually 1h) says nothing about the pod, so nothing is ever forgotten
    here except by age."""

    source = EVENTS

    def __init__(self, records: BindingRecords, clock: Callable[[], float] = time.time) -> None:
        self.records = records
        self.clock = clock

    def replace(self, objects: list[dict[str, Any]], resource_version: str = "") -> None:
        now = self.clock()
        for event in objects:
            b = binding_from_event(event)
            if b is not None:
                self.records.observe(b, now, EVENTS)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "DELETED":
            return
        b = binding_from_event(obj)
        if b is not None:
            self.records.observe(b, self.clock(), EVENTS)
