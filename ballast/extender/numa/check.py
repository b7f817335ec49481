"""The NUMA side of the verbs: which pods need exclusive CPUs, whether they fit the zones of a node that
pins CPUs, the nodes filter rejects for it and the score prioritize folds in. What filter learnt about a
pod is remembered for bind (``ballast.extender.numa.crane_bind``), which only gets names.

The zone arithmetic is ``ballast.extender.numa.crane`` (pure); this module asks the cluster source for a
node's
topology and zone usage.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from cachetools import TTLCache

from ballast.extender.numa.community_check import CommunityCheck
from ballast.extender.numa.crane import (
    Fit,
    NodeTopology,
    NumaRequest,
    ZoneUsage,
    combine,
    fit,
    numa_request,
    numa_score,
)
from ballast.extender.numa.crane_bind import MISSING
from ballast.model.podinfo import PodInfo
from ballast.model.policy_store import PolicyStore


class TopologySource(Protocol):
    """What the NUMA checks ask of the cluster (``ballast.extender.cache.ClusterCache``)."""

    def topology(self, node: str) -> NodeTopology | None: ...

    def zone_usage(self, node: str) -> ZoneUsage: ...

    def pins_cpus(self) -> bool: ...


class NumaCheck:
    def __init__(
        self,
        store: PolicyStore,
        source: TopologySource | None,
        rejected: Callable[[int], None],
        clock: Callable[[], float] = time.time,
        community: CommunityCheck | None = None,
    ) -> None:
        """``rejected(count)`` counts nodes filter rejects for NUMA (the ``numa`` rejection metric);
        ``community`` makes the same checks on nodes with a community NRT (v1alpha2) and no crane one, when
        those are watched."""
        self.store = store
        self.source = source
        self._rejected = rejected
        self._seen: TTLCache[str, NumaRequest | None] = TTLCache(100_000, 900, timer=clock)
        """What filter learnt about each pod's NUMA need, for bind (which only gets names)."""
        self.community = community

    def wants(self, pod_obj: dict[str, Any], pod: PodInfo) -> bool:
        """Whether any NUMA check applies to the pod (prioritize then takes the per-node path)."""
        if self.request(pod_obj, pod) is not None:
            return True
        return self.community is not None and self.community.demand(pod_obj, pod) is not None

    def seen(self, uid: str) -> NumaRequest | object | None:
        """The pod's NumaRequest, None (no NUMA need), or ``MISSING`` when filter did not look at it."""
        return self._seen.get(uid, MISSING)

    def fit(self, req: NumaRequest, node: str) -> Fit | None:
        """The NUMA fit on a node whose NRT says Ballast pins CPUs there; ``None`` otherwise (passes)."""
        if self.source is None:
            return None
        topo = self.source.topology(node)
        if topo is None or not topo.static or not topo.zones:
            return None
        return fit(topo, self.source.zone_usage(node), req, self.store.current.topology.memory_aware)

    def request(self, pod_obj: dict[str, Any], pod: PodInfo) -> NumaRequest | None:
        """The pod's exclusive-CPU need, when it has one and some node pins CPUs (else no NUMA work).

        Parsing the pod's containers for it costs as much as the rest of a small prioritize, so it is
        skipped outright while no node's NRT says Ballast pins CPUs (bind looks at the node first too)."""
        if pod.daemonset or self.source is None or not self.source.pins_cpus():
            return None
        req = numa_request(pod_obj)
        if pod.uid:
            self._seen[pod.uid] = req
        return req

    def filter(self, pod_obj: dict[str, Any], pod: PodInfo, passing: list[str], failed: dict) -> set[str]:
        """Reject passing nodes where a pod that needs exclusive CPUs does not fit the NUMA zones; the
        reasons go into ``failed``, the rejected names come back."""
        out = set()
        req = self.request(pod_obj, pod)
        if req is not None:
            for name in passing:
                f = self.fit(req, name)
                if f is not None and not f.ok:
                    failed[name] = f.reason
                    out.add(name)
            if out:
                self._rejected(len(out))
        if self.community is not None:
            rest = [n for n in passing if n not in out] if out else passing
            out |= self.community.filter(pod_obj, pod, rest, failed)
        return out

    def scores(self, pod_obj: dict[str, Any], pod: PodInfo, out: list[dict[str, Any]]) -> bool:
        """Fold the NUMA score into a NUMA pod's scores; True when any score changed."""
        changed = False
        req = self.request(pod_obj, pod)
        if req is not None:
            weight = self.store.current.topology.score_weight
            for entry in out:
                f = self.fit(req, entry["Host"])
                if f is not None:
                    entry["Score"] = combine(entry["Score"], numa_score(f), weight)
                    changed = True
        if self.community is not None and self.community.scores(pod_obj, pod, out):
            changed = True
        return changed
