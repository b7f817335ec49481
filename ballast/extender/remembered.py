"""Nodes remembered from whole-node requests: bounded in time and count.

A standalone extender (no cluster access) learns nodes only from kube-scheduler's whole-node requests. It
keeps each node's last parse so the next request with the same resourceVersion skips the parse, and /nodes
shows them. Without a bound, one big request (or names that churn) would stay in memory and in /nodes
for ever.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cachetools import TTLCache

from ballast.model.nodestate import NodeState

REMEMBER_SECONDS = 600.0
"""A node not sent again for this long is forgotten (kube-scheduler sends every feasible node per pod)."""
REMEMBER_CAP = 20_000
"""At most this many nodes: above Kubernetes' tested 5 000-node limit, so one request always fits."""


class RememberedNodes(TTLCache[str, NodeState]):
    """A TTL + size bounded map of node name to parse that records which names it dropped, so the verdict
    board built over it can drop them too (``drain_forgotten``) outside the cache's own bookkeeping."""

    def __init__(self, maxsize: int, ttl: float, timer: Callable[[], float]) -> None:
        super().__init__(maxsize, ttl, timer=timer)
        self._forgotten: list[str] = []

    def popitem(self) -> tuple[str, NodeState]:
        key, value = super().popitem()
        self._forgotten.append(key)
        return key, value

    def expire(self, time: Any = None) -> list[tuple[str, NodeState]]:
        expired = super().expire(time)
        self._forgotten.extend(k for k, _ in expired)
        return expired

    def drain_forgotten(self) -> list[str]:
        """Names dropped since the last call (by age or by the cap)."""
        out, self._forgotten = self._forgotten, []
        return out
