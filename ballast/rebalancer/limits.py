"""How many evictions a cycle may make, and where (pure; the pace per second is the evictor's).

Why each limit exists:
- per node per cycle: the node's load is an average over minutes; two victims already make a
  difference the next measurement will show, and a node emptied at once answers a spike with an outage;
- per namespace per cycle: one team's workloads are not all restarted together;
- per cycle: a bad threshold or a broken annotator costs at most this many restarts a cycle;
- per workload (its owner, a Deployment's ReplicaSets together) within a window: a replica set keeps
  most of its pods while the moved ones start, PodDisruptionBudgets or not.

Planned evictions count at once (the plan stops at a limit); the per-workload window keeps only
evictions that happened or may have happened (``commit``: evicted, or an unknown outcome), so a
PodDisruptionBudget refusal does not use up the window. The window is kept per pod UID: a new leader's
rebuilt promises (``ballast.rebalancer.promises``) and this replica's own count once, and an unknown outcome
whose pod is seen unchanged is taken back (``forget``). A history known to be incomplete (a new leader
whose window outlasts the Events it rebuilt the history from: ``unknown_until``) allows no eviction until
every eviction it may be missing has left the window.
"""

from __future__ import annotations

from collections import Counter

from ballast.model.rebalance_policy import Limits
from ballast.rebalancer.pods import PodFacts

__all__ = ["Limiter"]


class Limiter:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._history: dict[str, dict[str, float]] = {}
        """workload -> pod UID -> when the eviction call was made"""
        self.unknown_until = float("-inf")
        """Before this time an eviction an earlier leader made may be missing from the history."""
        self.unknown_why = ""
        self.begin(limits)

    def begin(self, limits: Limits) -> None:
        """Start a cycle (with the policy's current limits)."""
        self.limits = limits
        self.total = 0
        self.by_node: Counter[str] = Counter()
        self.by_namespace: Counter[str] = Counter()
        self.by_workload: Counter[str] = Counter()

    def _recent(self, workload: str, now: float) -> int:
        times = self._history.get(workload)
        if not times:
            return 0
        for uid in [u for u, t in times.items() if t <= now - self.limits.workload_window]:
            del times[uid]
        if not times:
            del self._history[workload]
            return 0
        return len(times)

    def node_full(self, node: str) -> bool:
        return self.by_node[node] >= self.limits.per_node

    def cycle_full(self) -> bool:
        return self.total >= self.limits.per_cycle

    def refuse(self, pod: PodFacts, now: float) -> str | None:
        """Why evicting ``pod`` now would break a limit, or ``None``."""
        lim = self.limits
        if self.total >= lim.per_cycle:
            return f"limit: {lim.per_cycle} evictions per cycle reached"
        if self.by_node[pod.node] >= lim.per_node:
            return f"limit: {lim.per_node} evictions per node per cycle reached"
        if self.by_namespace[pod.namespace] >= lim.per_namespace:
            return f"limit: {lim.per_namespace} evictions per namespace per cycle reached in {pod.namespace}"
        if now < self.unknown_until:
            return f"limit: {self.unknown_why}"
        recent = self._recent(pod.workload, now) + self.by_workload[pod.workload]
        if recent >= lim.per_workload:
            return (
                f"limit: {lim.per_workload} eviction(s) of {pod.workload} per "
                f"{lim.workload_window:g}s reached"
            )
        return None

    def plan(self, pod: PodFacts) -> None:
        self.total += 1
        self.by_node[pod.node] += 1
        self.by_namespace[pod.namespace] += 1
        self.by_workload[pod.workload] += 1

    def commit(self, pod: PodFacts, now: float) -> None:
        """The eviction happened, may have (unknown outcome), or in a dry run would have: it counts in the
        workload's window."""
        self.remember(pod.workload, pod.uid, now)

    def remember(self, workload: str, uid: str, at: float) -> None:
        """Count an eviction call of ``uid`` at ``at`` (the later time when it is already counted)."""
        times = self._history.setdefault(workload, {})
        times[uid] = max(at, times.get(uid, at))

    def history_unknown(self, until: float, why: str) -> None:
        """Evictions made before the history was rebuilt may be missing from it; they have all left every
        workload's window at ``until``, so no pod is evicted before then (``why`` says so in the plan)."""
        self.unknown_until = max(self.unknown_until, until)
        self.unknown_why = why

    def forget(self, workload: str, uid: str) -> None:
        """An unknown outcome that did not evict: it stops counting."""
        times = self._history.get(workload)
        if times is not None:
            times.pop(uid, None)
            if not times:
                del self._history[workload]
