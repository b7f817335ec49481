"""Which estimates sit on which node, and for how long: the ``Ledger`` (threaded, TTL caches).

The formula (what one pod is estimated to use, what the estimates add per metric) is
``ballast.model.estimation``;
the ledger keeps the bound and tentative estimates, bounded in time and count, and tells listeners (the
verdict boards) which nodes changed.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping

from ballast.model import estimation
from ballast.model.estimation import Estimate, estimate_usage, metric_plan
from ballast.model.nodestate import NodeState
from ballast.model.podinfo import PodDemand
from ballast.model.policy import Policy

MAX_PODS = 200_000


class _Expiring:
    """Estimates by pod UID, each forgotten ``ttl`` seconds after it was stored, at most ``maxsize`` of
    them (past it the one stored first goes): what the ledger needs of cachetools' ``TTLCache``, at a dict
    lookup and one comparison per read. The ledger reads it for every estimate of a node each time the
    node is worked out, and ``TTLCache``'s reads (its timer context, the recency reordering) were a third
    of the bind verb's own CPU. Not thread-safe: the ledger's lock guards it.

    Stored in the order stored, which is the order of expiry while the clock goes forward, so expiring
    drops from the front; a clock stepped back only leaves expired entries longer in memory, never
    returns one (every read compares)."""

    __slots__ = ("_items", "clock", "maxsize", "ttl")

    def __init__(self, maxsize: int, ttl: float, clock: Callable[[], float]) -> None:
        self._items: OrderedDict[str, tuple[float, Estimate]] = OrderedDict()
        self.maxsize = maxsize
        self.ttl = ttl
        self.clock = clock

    def get(self, uid: str, now: float | None = None) -> Estimate | None:
        item = self._items.get(uid)
        if item is None:
            return None
        return item[1] if (self.clock() if now is None else now) < item[0] else None

    def __contains__(self, uid: str) -> bool:
        return self.get(uid) is not None

    def pop(self, uid: str, default: None = None) -> Estimate | None:
        item = self._items.pop(uid, None)
        if item is None or self.clock() >= item[0]:
            return default
        return item[1]

    def __delitem__(self, uid: str) -> None:
        del self._items[uid]

    def __setitem__(self, uid: str, e: Estimate) -> None:
        now = self.clock()
        items = self._items
        items.pop(uid, None)
        self.expire(now)
        while len(items) >= self.maxsize:
            items.popitem(last=False)
        items[uid] = (now + self.ttl, e)

    def expire(self, now: float | None = None) -> None:
        """Drop what has expired, from the front."""
        now = self.clock() if now is None else now
        items = self._items
        while items:
            expires, _ = next(iter(items.values()))
            if expires > now:
                return
            items.popitem(last=False)

    def items(self) -> Iterator[tuple[str, Estimate]]:
        """The live estimates."""
        now = self.clock()
        return ((uid, e) for uid, (expires, e) in self._items.items() if now < expires)

    def __len__(self) -> int:
        return len(self._items)


class Ledger:
    """Estimates per node, bounded in time (TTL caches) and memory (``MAX_PODS``); thread-safe.

    Writers are the bind verb, the pod watch and prioritize/filter holds; readers are filter, score and
    the debug endpoints. All operations are O(estimates on one node), never O(all pods).
    """

    def __init__(self, policy: Policy, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._by_node: dict[str, set[str]] = {}
        self._swept_at = clock()
        self.listeners: list[Callable[[set[str]], None]] = []
        """Called with the nodes whose estimates changed (the verdict board recomputes them)."""
        self._configure(policy)

    def _configure(self, policy: Policy) -> None:
        self._policy = policy
        self._plan = metric_plan(policy)
        ttls = [ttl for _, _, ttl in self._plan]
        self._longest_counted = max(ttls, default=0.0)
        """The longest any placement can still count (0 without a metric to count it for)."""
        self.shortest_ttl = min(ttls, default=600.0)
        old_bound = getattr(self, "_bound", None)
        old_tentative = getattr(self, "_tentative", None)
        self._bound = _Expiring(MAX_PODS, max(ttls, default=600.0), self.clock)
        self._tentative = _Expiring(MAX_PODS, policy.estimation.tentative_ttl, self.clock)
        if old_bound is None or old_tentative is None:
            return
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
        self._sweep()

    def _sweep(self) -> None:
        """Drop index entries whose estimate expired (the TTL caches forget silently), at most once per
        the shortest TTL: ``on_node`` prunes only the nodes it is asked about, so nodes nobody asked about
        any more kept their entries (3 001 an hour after their nodes were gone). Called under the lock."""
        now = self.clock()
        if now - self._swept_at < self.shortest_ttl:
            return
        self._swept_at = now
        bound, tentative = self._bound, self._tentative
        bound.expire()
        tentative.expire()
        for node in list(self._by_node):
            uids = self._by_node[node]
            uids.difference_update([u for u in uids if u not in bound and u not in tentative])
            if not uids:
                del self._by_node[node]

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

    def hold(self, pod: PodDemand, node: str, now: float | None = None) -> None:
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
            e = Estimate(
                pod.uid,
                pod.label,
                node,
                cpu,
                mem,
                now,
                tentative=True,
                priority=pod.priority,
            )
            self._tentative[pod.uid] = e
            self._index(e, touched)
        self._notify(touched)

    def bound(
        self,
        pod: PodDemand | None,
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
        touched: set[str] = set()
        with self._lock:
            longest = self._longest_counted
            existing = self._bound.get(uid, now)
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
                known = (cpu, mem, pod.label)
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
        now = self.clock()
        with self._lock:
            return self._bound.get(uid, now) or self._tentative.get(uid, now)

    # -- readers ---------------------------------------------------------------------------------

    def on_node(self, node: str) -> list[Estimate]:
        """Live estimates on a node (expired ones are pruned from the index on the way)."""
        with self._lock:
            uids = self._by_node.get(node)
            if not uids:
                return []
            out = []
            stale = []
            now = self.clock()
            # ``_Expiring.get`` inlined (twice per estimate, for every estimate of the node, several times
            # per pod placed): a live entry is one stored until after ``now``.
            bound, tentative = self._bound._items.get, self._tentative._items.get
            for uid in uids:
                item = bound(uid)
                if item is None or now >= item[0]:
                    item = tentative(uid)
                    if item is not None and now >= item[0]:
                        item = None
                if item is None or item[1].node != node:
                    stale.append(uid)
                else:
                    out.append(item[1])
            for uid in stale:
                uids.discard(uid)
            if not uids:
                self._by_node.pop(node, None)
            return out

    def incoming(self, pod: PodDemand, now: float) -> Estimate:
        cpu, mem = estimate_usage(pod, self._policy.estimation)
        return Estimate(pod.uid, pod.label, "", cpu, mem, now, tentative=True, priority=pod.priority)

    def units(
        self, load: NodeState, now: float, skip: str | None = None, bound_only: bool = False
    ) -> dict[str, int]:
        """Estimated amounts (millicores or bytes) counted per metric on this node, no incoming pod;
        ``bound_only`` leaves out tentative holds (what the bind check counts: only placements)."""
        if not self._by_node.get(load.name):
            return {}
        estimates = self.on_node(load.name)
        if bound_only:
            estimates = [e for e in estimates if not e.tentative]
        return estimation.units(load, self._plan, estimates, now, skip)

    def standing(
        self, load: NodeState, now: float
    ) -> tuple[list[Estimate], dict[str, int], dict[str, float]]:
        """The node's live estimates and what they add per metric, as amounts (``units``) and as ratios
        (``extra``), from one read of the index: what the verdict board recomputes a node from."""
        estimates, counted = self.standing_units(load, now)
        return estimates, counted, estimation.extra(load, self._plan, counted)

    def extra_of(self, load: NodeState, counted: Mapping[str, int]) -> dict[str, float]:
        """The ratios ``counted`` amounts add per metric on this node (``estimation.extra``)."""
        return estimation.extra(load, self._plan, counted)

    def standing_units(self, load: NodeState, now: float) -> tuple[list[Estimate], dict[str, int]]:
        """The node's live estimates and what they add per metric, as amounts (``units``)."""
        estimates = self.on_node(load.name)
        return estimates, estimation.units(load, self._plan, estimates, now)

    def extra(
        self,
        load: NodeState,
        now: float,
        incoming: Estimate | None = None,
        minus: Mapping[str, int] | None = None,
        skip: str | None = None,
        bound_only: bool = False,
    ) -> dict[str, float]:
        """Usage ratios to add per metric on this node (``ballast.model.estimation.extra``).

        ``incoming`` is the pod being filtered (added everywhere, and its own earlier hold is skipped so it
        is not counted twice); ``skip`` leaves out one pod's hold (prioritize re-scoring that pod);
        ``minus`` subtracts amounts per resource (preemption victims); ``bound_only`` counts placed pods
        only, no tentative holds (the bind check).
        """
        if not self._by_node.get(load.name) and incoming is None and not minus:
            return {}
        if incoming is not None:
            skip = incoming.uid
        return estimation.extra(load, self._plan, self.units(load, now, skip, bound_only), incoming, minus)

    def counted(self, load: NodeState, now: float) -> list[Estimate]:
        """Estimates still counted for at least one metric of this node (what /nodes shows)."""
        return estimation.still_counted(load, self._plan, self.on_node(load.name), now)
