"""Each node's measured per-pod usage, kept by a watch on the agents' ``NodeLoad`` objects.

The agent on every node writes a ``NodeLoad`` (``ballast.contract.nodeload``) with each pod's mean CPU and
memory
over its window. The rebalancer prefers those numbers to the estimates from requests (``victims.usage_of``):
a pod that really uses 2 cores relieves its node by 2 cores, whatever it asked for. This cache is the
``ballast.kube.client.Reflector`` handler for the collection (optional: a cluster without the CRD is an empty
cache, and every pod falls back to its estimate).

What is kept is only what a cycle reads: per node, the report's time and ``uid -> (millicores, bytes)``
(about 150 bytes a pod). Each object is read by the contract's total ``parse_status`` and guarded on its
own, so one node writing garbage is "no measurement" for that node, never an exception out of the watch.
Freshness is decided when a cycle reads (``fresh``), not when the object arrives: a report that stops
coming ages out by itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ballast.contract.nodeload import NodeLoadStatus, parse_status

__all__ = ["Measured", "NodeLoadCache"]

log = logging.getLogger("ballast.rebalancer")

Measured = Mapping[str, tuple[int, int]]
"""Pod uid -> (cpu millicores, memory bytes) measured on one node."""

_NOTHING: Measured = {}
_Entry = tuple[NodeLoadStatus, dict[str, tuple[int, int]]]
"""The status without its pod list (its time, for ``is_fresh``), and the usages by uid."""


def _entry(obj: Any) -> tuple[str, _Entry | None] | None:
    """(node name, (update time, usages) or ``None`` for an unreadable status), or ``None`` for an
    object without a name."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        return None
    status = parse_status(obj)
    if status is None:
        return name, None
    usages = {p.uid: (round(p.cpu * 1000), p.memory) for p in status.pods}
    return name, (replace(status, pods=()), usages)


class NodeLoadCache:
    """``NodeLoad`` statuses by node name, reduced to what the victims and the fit check read."""

    def __init__(self, report_interval: float = 60.0) -> None:
        self.report_interval = report_interval
        self._lock = threading.Lock()
        self._by_node: dict[str, _Entry] = {}
        self.unreadable = 0
        """Objects seen whose status could not be read (no information for their node)."""

    def _read(self, obj: Any) -> tuple[str, _Entry | None] | None:
        try:
            return _entry(obj)
        except Exception:  # the parse is total; this guard keeps one object from ever stopping the watch
            log.exception("NodeLoad object could not be read; ignoring it")
            return None

    def replace(self, objects: list[dict[str, Any]], resource_version: str) -> None:
        fresh: dict[str, _Entry] = {}
        bad = 0
        for obj in objects:
            read = self._read(obj)
            if read is None or read[1] is None:
                bad += 1
                continue
            fresh[read[0]] = read[1]
        with self._lock:
            self._by_node = fresh
            self.unreadable = bad

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        read = self._read(obj)
        if read is None:
            return
        name, entry = read
        with self._lock:
            if event_type == "DELETED" or entry is None:
                self._by_node.pop(name, None)
                if entry is None and event_type != "DELETED":
                    self.unreadable += 1
            else:
                self._by_node[name] = entry

    def fresh(self, node: str, now: float) -> Measured:
        """The pods measured on ``node`` by a report within two report intervals of ``now`` (and not
        from further in the future than one: a broken clock's report does not stay fresh for ever);
        empty when there is none."""
        with self._lock:
            entry = self._by_node.get(node)
        if entry is None:
            return _NOTHING
        status, usages = entry
        return usages if status.is_fresh(now, self.report_interval) else _NOTHING

    def __len__(self) -> int:
        return len(self._by_node)
