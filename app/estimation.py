"""Estimated load of pods placed after the last measurement: what closes crane's burst gap.

Node metrics lag: a value measured at 10:00 does not include a pod bound at 10:01. Until a node's
metric annotation is newer than a pod's binding (or the estimate's TTL passes, by default the metric's
sync period + 5m), Ballast adds the pod's estimated usage to that metric:

    estimate(resource) = max(request, limit) * factor     (cpu 85 %, memory 70 %)
                       = 250m / 200Mi                      when the pod sets neither
    extra(metric)      = sum(estimates of pods placed after the metric's timestamp) / allocatable

kube-scheduler binds asynchronously, so the next pod's ``filter`` can run before the previous pod's
``bind`` reaches Ballast. ``prioritize`` therefore places a short-lived *tentative* estimate on the pod's
best-scoring node (and ``filter`` does when only one node passes); ``bind`` (or the pod watch) turns it
into a bound estimate on the node really chosen, and an unconfirmed hold expires after
``spec.estimation.tentativeTTL`` (30 s). A burst filtered back to back therefore sees its own
earlier members. Holds sit on Ballast's favourite, which is not always the scheduler's choice, so with
``bindVerb`` the bind check (``app.load_bind``) has the last word, counting placed pods only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from cachetools import TTLCache

from app.nodestate import NodeLoad
from app.podinfo import PodInfo
from app.policy import Estimation, Policy

MAX_PODS = 200_000


@dataclass(frozen=True, slots=True)
class Estimate:
    uid: str
    pod: str
    """``namespace/name`` for people reading /nodes."""
    node: str
    cpu_milli: int
    memory_bytes: int
    at: float
    """When the pod was placed (bind, PodScheduled time, or the tentative hold)."""
    tentative: bool = False

    def amount(self, resource: str) -> int:
        return self.cpu_milli if resource == "cpu" else self.memory_bytes if resource == "memory" else 0

    def to_json(self, now: float) -> dict[str, object]:
        return {
            "pod": self.pod,
            "uid": self.uid,
            "cpuMilli": self.cpu_milli,
            "memoryBytes": self.memory_bytes,
            "placedSecondsAgo": round(now - self.at, 3),
            "tentative": self.tentative,
        }


def estimate_usage(pod: PodInfo, est: Estimation) -> tuple[int, int]:
    """(cpu millicores, memory bytes) a pod is expected to use soon after it starts."""
    cpu = max(pod.cpu_request_milli, pod.cpu_limit_milli)
    mem = max(pod.memory_request_bytes, pod.memory_limit_bytes)
    cpu = round(cpu * est.cpu_factor) if cpu else est.default_cpu_milli
    mem = round(mem * est.memory_factor) if mem else est.default_memory_bytes
    return cpu, mem


def _metric_plan(policy: Policy) -> tuple[tuple[str, str, float], ...]:
    """(metric, resource, ttl) for every metric that maps to a resource Ballast can estimate."""
    out = []
    for metric in policy.sync_periods:
        resource = policy.resource_of(metric)
        if resource in ("cpu", "memory"):
            ttl = policy.estimation.ttl if policy.estimation.ttl is not None else policy.valid_for(metric)
            out.append((metric, resource, ttl))
    return tuple(out)


class Ledger:
    """Estimates per node, bounded in time (TTL caches) and memory (``MAX_PODS``); thread-safe.

    Writers are the bind verb, the pod watch and prioritize/filter holds; readers are filter, score and
    the debug endpoints. All operations are O(estimates on one node), never O(all pods).
    """

    def __init__(self, policy: Policy, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._by_node: dict[str, set[str]] = {}
        self.listeners: list[Callable[[set[str]], None]] = []
        """Called with the nodes whose estimates changed (the verdict board recomputes them)."""
        self._configure(policy)

    def _configure(self, policy: Policy) -> None:
        self._policy = policy
        self._plan = _metric_plan(policy)
        longest = max((ttl for _, _, ttl in self._plan), default=600.0)
        self.shortest_ttl = min((ttl for _, _, ttl in self._plan), default=600.0)
        old_bound = getattr(self, "_bound", {})
        old_tentative = getattr(self, "_tentative", {})
        self._bound: TTLCache[str, Estimate] = TTLCache(MAX_PODS, longest, timer=self.clock)
        self._tentative: TTLCache[str, Estimate] = TTLCache(
            MAX_PODS, policy.estimation.tentative_ttl, timer=self.clock
        )
        for uid, e in list(old_bound.items()):
            self._bound[uid] = e
        for uid, e in list(old_tentative.items()):
            self._tentative[uid] = e

    def set_policy(self, policy: Policy) -> None:
        with self._lock:
            self._configure(policy)

    # -- writers ---------------------------------------------------------------------------------
    # Writers collect the nodes they touched and tell the listeners after releasing the lock.

    def _index(self, e: Estimate, touched: set[str]) -> None:
        self._by_node.setdefault(e.node, set()).add(e.uid)
        touched.add(e.node)

    def _unindex(self, uid: str, node: str, touched: set[str]) -> None:
        if (uids := self._by_node.get(node)) is not None:
            uids.discard(uid)
            if not uids:
                del self._by_node[node]
        touched.add(node)

    def _notify(self, touched: set[str]) -> None:
        if touched:
            for listener in self.listeners:
                listener(touched)

    def hold(self, pod: PodInfo, node: str, now: float | None = None) -> None:
        """Tentatively place a pod that was scored but not yet bound (no-op once it is bound)."""
        if not pod.uid:
            return
        now = self.clock() if now is None else now
        cpu, mem = estimate_usage(pod, self._policy.estimation)
        touched: set[str] = set()
        with self._lock:
            if pod.uid in self._bound:
                return
            old = self._tentative.get(pod.uid)
            if old is not None:
                if old.node == node and now - old.at < 1.0:
                    return  # the same hold, refreshed within a second: nothing changes
                self._unindex(pod.uid, old.node, touched)
            e = Estimate(pod.uid, f"{pod.namespace}/{pod.name}", node, cpu, mem, now, tentative=True)
            self._tentative[pod.uid] = e
            self._index(e, touched)
        self._notify(touched)

    def bound(
        self,
        pod: PodInfo | None,
        uid: str,
        node: str,
        at: float,
        name: str = "",
        size: tuple[int, int] | None = None,
    ) -> None:
        """Record a pod placed on ``node`` at ``at``; keeps an existing record for the same node.

        The size comes from ``size`` (estimated cpu millicores, memory bytes), else from ``pod``, else
        from the pod's tentative hold."""
        now = self.clock()
        longest = max((ttl for _, _, ttl in self._plan), default=0.0)
        touched: set[str] = set()
        with self._lock:
            existing = self._bound.get(uid)
            if existing is not None and existing.node == node:
                return
            held = self._tentative.pop(uid, None)
            if held is not None:
                self._unindex(uid, held.node, touched)
            if existing is not None:
                del self._bound[uid]
                self._unindex(uid, existing.node, touched)
            known: tuple[int, int, str] | None = None
            if size is not None:
                known = (size[0], size[1], name)
            elif pod is not None:
                cpu, mem = estimate_usage(pod, self._policy.estimation)
                known = (cpu, mem, f"{pod.namespace}/{pod.name}")
            elif held is not None:
                known = (held.cpu_milli, held.memory_bytes, held.pod)
            # Unknown size (the pod watch will report it) or placed so long ago that every measurement
            # already includes it: nothing to record.
            if known is not None and at + longest > now:
                e = Estimate(uid, name or known[2], node, known[0], known[1], at)
                self._bound[uid] = e
                self._index(e, touched)
        self._notify(touched)

    def forget(self, uid: str) -> None:
        """A pod deleted, finished or failed to bind: its estimate leaves at once."""
        touched: set[str] = set()
        with self._lock:
            for cache in (self._bound, self._tentative):
                e = cache.pop(uid, None)
                if e is not None:
                    self._unindex(uid, e.node, touched)
        self._notify(touched)

    def drop_tentative(self, uid: str) -> None:
        touched: set[str] = set()
        with self._lock:
            e = self._tentative.pop(uid, None)
            if e is not None:
                self._unindex(uid, e.node, touched)
        self._notify(touched)

    def known(self, uid: str) -> Estimate | None:
        with self._lock:
            return self._bound.get(uid) or self._tentative.get(uid)

    # -- readers ---------------------------------------------------------------------------------

    def on_node(self, node: str) -> list[Estimate]:
        """Live estimates on a node (expired ones are pruned from the index on the way)."""
        with self._lock:
            uids = self._by_node.get(node)
            if not uids:
                return []
            out = []
            stale = []
            for uid in uids:
                e = self._bound.get(uid) or self._tentative.get(uid)
                if e is None or e.node != node:
                    stale.append(uid)
                else:
                    out.append(e)
            for uid in stale:
                uids.discard(uid)
            if not uids:
                self._by_node.pop(node, None)
            return out

    def incoming(self, pod: PodInfo, now: float) -> Estimate:
        cpu, mem = estimate_usage(pod, self._policy.estimation)
        return Estimate(pod.uid, f"{pod.namespace}/{pod.name}", "", cpu, mem, now, tentative=True)

    def units(
        self,
        load: NodeLoad,
        now: float,
        skip: str | None = None,
        bound_only: bool = False,
        estimates: list[Estimate] | None = None,
    ) -> dict[str, int]:
        """Estimated amounts (millicores or bytes) counted per metric on this node, no incoming pod;
        ``bound_only`` leaves out tentative holds (what the bind check counts: only placements).
        ``estimates``: the node's ``on_node`` already read by the caller."""
        out: dict[str, int] = {}
        if estimates is None:
            if not self._by_node.get(load.name):
                return out
            estimates = self.on_node(load.name)
        if bound_only:
            estimates = [e for e in estimates if not e.tentative]
        for metric, resource, ttl in self._plan:
            sample = load.samples.get(metric)
            if sample is None:
                continue
            total = 0
            for e in estimates:
                if e.uid != skip and e.at > sample.timestamp and e.at + ttl > now:
                    total += e.amount(resource)
            if total:
                out[metric] = total
        return out

    def extra(
        self,
        load: NodeLoad,
        policy: Policy,
        now: float,
        incoming: Estimate | None = None,
        minus: Mapping[str, int] | None = None,
        skip: str | None = None,
        bound_only: bool = False,
        units: Mapping[str, int] | None = None,
    ) -> dict[str, float]:
        """Usage ratios to add per metric on this node.

        ``incoming`` is the pod being filtered (added everywhere, and its own earlier hold is skipped so it
        is not counted twice); ``skip`` leaves out one pod's hold (prioritize re-scoring that pod);
        ``minus`` subtracts amounts per resource (preemption victims); ``bound_only`` counts placed pods
        only, no tentative holds (the bind check). ``units``: this node's ``units(load, now)`` already
        worked out by the caller (no incoming pod, nothing skipped, holds counted).
        """
        if units is not None and incoming is None and skip is None and not bound_only:
            counted: Mapping[str, int] = units
        else:
            if not self._by_node.get(load.name) and incoming is None and not minus:
                return {}
            if incoming is not None:
                skip = incoming.uid
            counted = self.units(load, now, skip, bound_only)
        out: dict[str, float] = {}
        for metric, resource, _ttl in self._plan:
            if load.samples.get(metric) is None:
                continue  # no information: nothing to add to
            alloc = load.allocatable_cpu_milli if resource == "cpu" else load.allocatable_memory_bytes
            if not alloc:
                continue
            total = counted.get(metric, 0)
            if incoming is not None:
                total += incoming.amount(resource)
            if minus:
                total -= minus.get(resource, 0)
            if total:
                out[metric] = total / alloc
        return out

    def counted(self, load: NodeLoad, now: float) -> list[Estimate]:
        """Estimates still counted for at least one metric of this node (what /nodes shows)."""
        out = []
        for e in self.on_node(load.name):
            for metric, _resource, ttl in self._plan:
                sample = load.samples.get(metric)
                if sample is not None and e.at > sample.timestamp and e.at + ttl > now:
                    out.append(e)
                    break
            else:
                if e.tentative:
                    out.append(e)
        return out
