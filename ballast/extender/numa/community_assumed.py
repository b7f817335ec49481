"""Pods placed on community-NRT nodes that the published ``available`` does not count yet.

An exporter publishes ``available`` some time after the kubelet admitted a pod (nfd-topology-updater every
60 seconds by default, or on a pod event), so without a record a burst of pods would all see the same free
zone and the kubelet would reject all but the first. What bind chose is kept here per node, zone by zone,
and subtracted from ``available`` until the node's object is known to count the pod: its
``nodeTopologyPodsFingerprint`` equals the signature of the pods the extender knows there (the
reference plugin's overreserve cache does the same), or, for exporters that publish no fingerprint, the
record's time-to-live runs out (the resync timeout).

No I/O; the owner (``ballast.extender.numa.community_view``) calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ballast.extender.numa.community import Taken


@dataclass(frozen=True, slots=True)
class Assumed:
    uid: str
    namespace: str
    name: str
    node: str
    placements: tuple[tuple[str, Mapping[str, int]], ...]
    at: float


class AssumedRecord:
    def __init__(self, ttl: float, clock: Callable[[], float]) -> None:
        self.ttl = ttl
        self.clock = clock
        self._by_uid: dict[str, Assumed] = {}
        self._by_node: dict[str, dict[str, Assumed]] = {}

    def assume(self, entry: Assumed) -> None:
        self.forget(entry.uid)
        self._by_uid[entry.uid] = entry
        self._by_node.setdefault(entry.node, {})[entry.uid] = entry

    def forget(self, uid: str) -> Assumed | None:
        entry = self._by_uid.pop(uid, None)
        if entry is not None:
            on_node = self._by_node.get(entry.node)
            if on_node is not None:
                on_node.pop(uid, None)
                if not on_node:
                    del self._by_node[entry.node]
        return entry

    def any_on(self, node: str) -> bool:
        """Whether the node has entries (expired ones included): the per-request check before a copy."""
        return node in self._by_node

    def has(self, uid: str) -> bool:
        return uid in self._by_uid

    def on_node(self, node: str) -> list[Assumed]:
        """The node's entries still within their time-to-live (expired ones leave here)."""
        entries = self._by_node.get(node)
        if not entries:
            return []
        cutoff = self.clock() - self.ttl
        old = [u for u, e in entries.items() if e.at < cutoff]
        for uid in old:
            self.forget(uid)
        return list(entries.values())

    def taken(self, node: str) -> dict[str, dict[str, int]]:
        t = Taken()
        t.add(p for e in self.on_node(node) for p in e.placements)
        return t.by_zone

    def settle(self, node: str, uids: Iterable[str] | None = None) -> int:
        """Drop the node's entries (only ``uids`` when given): the published object counts them now."""
        entries = self._by_node.get(node, {})
        gone = list(entries) if uids is None else [u for u in uids if u in entries]
        for uid in gone:
            self.forget(uid)
        return len(gone)

    def __len__(self) -> int:
        return len(self._by_uid)
