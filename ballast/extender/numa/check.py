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
from dataclasses import dataclass
from typing import Protocol

from cachetools import TTLCache

from ballast.extender.numa.community import Demand
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
from ballast.model.podinfo import PodRecord
from ballast.model.policy_store import PolicyStore


class TopologySource(Protocol):
    """What the NUMA checks ask of the cluster (``ballast.extender.cache.ClusterCache``)."""

    def topology(self, node: str) -> NodeTopology | None: ...

    def zone_usage(self, node: str) -> ZoneUsage: ...

    def pins_cpus(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class NumaNeed:
    """What one request's pod needs of NUMA zones, read once (``NumaCheck.need``) for every check of the
    request: filter's rejections, prioritize's scores."""

    crane: NumaRequest | None
    """Exclusive CPUs on nodes with a crane NRT that pins them."""
    community: Demand | None
    """Aligned resources on nodes with a v1alpha2 object that filters (``CommunityCheck``)."""


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

    def need(self, pod: PodRecord) -> NumaNeed | None:
        """What the pod needs of NUMA zones, when any check applies to it (else ``None``: prioritize keeps
        the board's scores, filter rejects nothing for NUMA)."""
        crane = self.request(pod)
        community = self.community.demand(pod) if self.community is not None else None
        if crane is None and community is None:
            return None
        return NumaNeed(crane, community)

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

    def request(self, pod: PodRecord) -> NumaRequest | None:
        """The pod's exclusive-CPU need, when it has one and some node pins CPUs (else no NUMA work).

        Reading the pod's containers for it costs as much as the rest of a small prioritize, so it is
        skipped outright while no node's NRT says Ballast pins CPUs (bind looks at the node first too)."""
        info = pod.info
        if info.daemonset or self.source is None or not self.source.pins_cpus():
            return None
        req = numa_request(pod.obj, pod.detail)
        if info.uid:
            self._seen[info.uid] = req
        return req

    def filter(self, need: NumaNeed, passing: list[str], failed: dict) -> set[str]:
        """Reject passing nodes where a pod that needs exclusive CPUs does not fit the NUMA zones; the
        reasons go into ``failed``, the rejected names come back."""
        out = set()
        req = need.crane
        if req is not None:
            for name in passing:
                f = self.fit(req, name)
                if f is not None and not f.ok:
                    failed[name] = f.reason
                    out.add(name)
            if out:
                self._rejected(len(out))
        if self.community is not None and need.community is not None:
            rest = [n for n in passing if n not in out] if out else passing
            out |= self.community.filter(need.community, rest, failed)
        return out

    def scores(self, need: NumaNeed, hosts: list[str], scores: list[int]) -> bool:
        """Fold the NUMA score into a NUMA pod's ``scores`` (one per host, in place); True when any score
        changed."""
        changed = False
        req = need.crane
        if req is not None:
            weight = self.store.current.topology.score_weight
            for i, host in enumerate(hosts):
                f = self.fit(req, host)
                if f is not None:
                    scores[i] = combine(scores[i], numa_score(f), weight)
                    changed = True
        community = self.community
        if (
            community is not None
            and need.community is not None
            and community.scores(need.community, hosts, scores)
        ):
            changed = True
        return changed
