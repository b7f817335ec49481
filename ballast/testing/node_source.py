"""A fixed set of parsed nodes as the extender's ``NodeSource``: no pods, no NodeResourceTopology."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ballast.extender.numa.crane import NodeTopology, ZoneUsage
from ballast.model.nodestate import NodeState
from ballast.model.podinfo import PodDemand


class StaticSource:
    def __init__(self, loads: dict[str, NodeState]) -> None:
        self.loads = loads
        self.node_listeners: list[Callable[[str, dict[str, Any] | None], None]] = []
        self.bound_listeners: list[Callable[[str, str], None]] = []
        """Told ``(uid, node)`` by ``bind`` (the cache's pod watch does it in the service)."""

    def bind(self, uid: str, node: str) -> None:
        for cb in self.bound_listeners:
            cb(uid, node)

    def node(self, name: str) -> NodeState | None:
        return self.loads.get(name)

    def node_names(self) -> Iterable[str]:
        return list(self.loads)

    def pod(self, uid: str) -> PodDemand | None:
        return None

    def topology(self, node: str) -> NodeTopology | None:
        return None

    def zone_usage(self, node: str) -> ZoneUsage:
        return ZoneUsage()

    def pins_cpus(self) -> bool:
        return False
