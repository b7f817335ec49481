"""The extender's view of the community NodeResourceTopology objects, kept current by their watch.

Each object is parsed when its event arrives (``ballast.extender.numa.community.parse_community``); a request
then costs a dict lookup per node. A malformed object is no information for its node (the node passes),
counted and kept with its reason for ``/nodes``. Beside the objects sits the assumed record
(``ballast.extender.numa.community_assumed``): zones bind chose that ``available`` does not count yet, settled
when a node's ``nodeTopologyPodsFingerprint`` matches the pods the extender knows there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ballast.contract.podfingerprint import fingerprint
from ballast.extender.numa.community import (
    CommunityTopology,
    Malformed,
    community_demand,
    community_fit,
    parse_community,
)
from ballast.extender.numa.community_assumed import Assumed, AssumedRecord

log = logging.getLogger("ballast.nrt_community")

PodsOn = Callable[[str], Iterable[Any]]
"""The pods the extender knows bound to a node: records with ``namespace``, ``name`` and ``info``."""

EXCLUSIVE_METHOD = "with-exclusive-resources"


def _exclusive(record: Any) -> bool:
    """A pod with exclusive CPUs as far as the cache's summary tells: requests equal limits, whole CPUs
    (how exporters with the ``with-exclusive-resources`` method choose the pods they sign)."""
    info = getattr(record, "info", None)
    if info is None:
        return False
    cpu = info.cpu_request_milli
    return (
        cpu > 0
        and cpu % 1000 == 0
        and cpu == info.cpu_limit_milli
        and info.memory_request_bytes == info.memory_limit_bytes > 0
    )


class CommunityView:
    def __init__(
        self,
        pods_on: PodsOn,
        *,
        assume_ttl: float = 120.0,
        clock: Callable[[], float] = time.time,
        on_malformed: Callable[[Malformed], None] | None = None,
    ) -> None:
        self.pods_on = pods_on
        self.clock = clock
        self.on_malformed = on_malformed
        """Called for each event that brings a malformed object (the extender counts them)."""
        self.lock = threading.RLock()
        self.topologies: dict[str, CommunityTopology] = {}
        self.malformed: dict[str, Malformed] = {}
        self.filtering: set[str] = set()
        """Nodes whose object has policy single-numa-node and zones: the only ones a pod can fail on."""
        self.record = AssumedRecord(assume_ttl, clock)
        self.settled = 0
        """Assumed entries dropped because the published fingerprint showed them counted."""

    # -- watch handler -------------------------------------------------------------------------------

    def replace(self, objects: list[dict[str, Any]], resource_version: str) -> None:
        parsed = [parse_community(o) for o in objects if isinstance(o, Mapping)]
        with self.lock:
            self.topologies = {p.node: p for p in parsed if isinstance(p, CommunityTopology)}
            self.malformed = {p.node: p for p in parsed if isinstance(p, Malformed)}
            self.filtering = {n for n, t in self.topologies.items() if t.filters}
            for node in list(self.topologies):
                self._settle(node)
        for bad in self.malformed.values():
            self._bad(bad)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or not name:
            return
        parsed = None if event_type == "DELETED" else parse_community(obj)
        with self.lock:
            self.topologies.pop(name, None)
            self.malformed.pop(name, None)
            self.filtering.discard(name)
            if isinstance(parsed, CommunityTopology):
                self.topologies[name] = parsed
                if parsed.filters:
                    self.filtering.add(name)
                self._settle(name)
            elif isinstance(parsed, Malformed):
                self.malformed[name] = parsed
            else:
                self.record.settle(name)  # no object, no information: nothing to subtract from
        if isinstance(parsed, Malformed):
            self._bad(parsed)

    def _bad(self, bad: Malformed) -> None:
        log.warning(
            "NodeResourceTopology v1alpha2 of node %s is unusable (%s); the node passes", bad.node, bad.reason
        )
        if self.on_malformed is not None:
            self.on_malformed(bad)

    # -- reads -----------------------------------------------------------------------------------------

    def topology(self, node: str) -> CommunityTopology | None:
        return self.topologies.get(node)

    def any_filtering(self) -> bool:
        return bool(self.filtering)

    def taken(self, node: str) -> dict[str, dict[str, int]]:
        """Per zone, what bind assumed on the node; most nodes have nothing, read without the lock."""
        if not self.record.any_on(node):
            return {}
        with self.lock:
            return self.record.taken(node)

    def assumed_on(self, node: str) -> list[Assumed]:
        with self.lock:
            return self.record.on_node(node)

    # -- the assumed record ----------------------------------------------------------------------------

    def assume(self, entry: Assumed) -> None:
        with self.lock:
            self.record.assume(entry)

    def forget(self, uid: str) -> None:
        with self.lock:
            self.record.forget(uid)

    def pod_appeared(self, pod: Mapping[str, Any], record: Any) -> None:
        """A pod newly bound in the pod watch (``record``: the cache's ``PodRecord``). One that bind did not
        record (another binder placed it, or a scheduler without Ballast as binder) is recorded here in the
        zones the kubelet will pick, so the pods that follow see them taken before the exporter does; a pod
        bound longer ago than the record's time-to-live, or that fits no zone (the kubelet will refuse it),
        is not."""
        node = record.node
        topo = self.topologies.get(node)
        if topo is None or not topo.filters or self.record.has(record.uid):
            return
        if record.scheduled_at is not None and record.scheduled_at < self.clock() - self.record.ttl:
            return
        demand = community_demand(pod)
        if demand is None:
            return
        with self.lock:
            f = community_fit(topo, demand, self.record.taken(node))
            if f.ok and f.placements:
                entry = Assumed(record.uid, record.namespace, record.name, node, f.placements, self.clock())
                self.record.assume(entry)

    def pod_bound(self, node: str) -> None:
        """A pod appeared on ``node`` in the pod watch: the published fingerprint may match now."""
        if node in self.topologies:
            with self.lock:
                self._settle(node)

    def _settle(self, node: str) -> None:
        """Drop the node's assumed entries when its object's fingerprint signs exactly the pods the
        extender knows there, assumed ones included (then ``available`` already counts them all)."""
        topo = self.topologies.get(node)
        entries = self.record.on_node(node)
        if topo is None or topo.fingerprint is None or not entries:
            return
        known = list(self.pods_on(node))
        if topo.fingerprint_method == EXCLUSIVE_METHOD:
            known = [r for r in known if _exclusive(r)]
        pods = {(r.namespace, r.name) for r in known} | {(e.namespace, e.name) for e in entries}
        if fingerprint(pods) == topo.fingerprint:
            self.settled += self.record.settle(node)
