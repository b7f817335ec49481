"""Recent pod bindings per node and crane's hot value: pure, no I/O.

crane kept Scheduled events in one global min-heap capped at 1024 entries and scanned all of it for
every node and metric (O(nodes x heap)), counted an event again on every update, and kept counting pods
that were already deleted. Here:

- a binding is keyed by pod UID, so an update or a second source (pods and events) counts once;
- each node has its own time-ordered list, so "bindings since t" is one bisect (O(log n));
- a pod that is deleted, terminating or finished stops counting;
- memory is bounded: entries older than the longest hot-value window are dropped (a heap of expiry times
  makes that O(expired log n)), and each node keeps at most ``max_per_node`` of its newest bindings.

``binding_from_pod`` (``ballast.model.hot_value``, the agent's too) dates a binding by the pod's
``PodScheduled`` condition, which the API server sets when the pod is bound, so an annotator that starts
(or runs ``--once``) after the bindings still sees them. ``binding_from_event`` reads crane's source,
``Scheduled`` events, for clusters where Ballast may not watch pods.
"""

from __future__ import annotations

import heapq
import re
import threading
from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ballast.contract.times import parse_rfc3339
from ballast.model.hot_value import Binding, binding_from_pod, hot_value_of
from ballast.model.policy import HotValueWindow

__all__ = [
    "Binding",
    "BindingRecords",
    "binding_from_event",
    "binding_from_pod",
    "hot_value",
    "pod_uid",
]

PODS = "pods"
EVENTS = "events"

_SCHEDULED = re.compile(r"^Successfully assigned (?P<pod>\S+) to (?P<node>\S+?)\.?\s*$")


def pod_uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or "")


def binding_from_event(event: Mapping[str, Any]) -> Binding | None:
    """A binding from a ``Scheduled`` event (``Successfully assigned ns/pod to node``), else ``None``.

    Keyed by the involved pod's UID (``namespace/name`` when the event lacks it); dated by ``eventTime``,
    else ``firstTimestamp``, else ``lastTimestamp``, else the event's creation.
    """
    if event.get("reason") != "Scheduled":
        return None
    match = _SCHEDULED.match(str(event.get("message") or "").strip())
    if match is None:
        return None
    involved = event.get("involvedObject") or {}
    if involved.get("kind") not in (None, "Pod"):
        return None
    uid = involved.get("uid") or (
        f"{involved.get('namespace', '')}/{involved['name']}" if involved.get("name") else match["pod"]
    )
    meta = event.get("metadata") or {}
    when = None
    for stamp in (
        event.get("eventTime"),
        event.get("firstTimestamp"),
        event.get("lastTimestamp"),
        meta.get("creationTimestamp"),
    ):
        if (when := parse_rfc3339(stamp)) is not None:
            break
    if when is None:
        return None
    return Binding(str(uid), match["node"], when)


class BindingRecords:
    """Bindings of the last ``horizon`` seconds, per node and time-ordered; thread-safe.

    Watch threads write (``observe``, ``forget``, ``replace_source``); the annotator reads
    (``count_since``) and calls ``expire`` once per cycle.
    """

    def __init__(self, horizon: float, max_per_node: int = 4096) -> None:
        if horizon <= 0:
            raise ValueError("horizon must be positive")
        if max_per_node <= 0:
            raise ValueError("max_per_node must be positive")
        self.horizon = horizon
        self.max_per_node = max_per_node
        self._lock = threading.Lock()
        self._by_uid: dict[str, tuple[str, float, str]] = {}
        """uid -> (node, when, source)."""
        self._per_node: dict[str, list[tuple[float, str]]] = {}
        """node -> sorted (when, uid)."""
        self._expiry: list[tuple[float, str]] = []
        """min-heap of (when, uid); entries whose uid was re-dated or forgotten are skipped lazily."""
        self._tombstones: dict[str, float] = {}
        """uid -> until when a forgotten pod is ignored (another source may still report it)."""
        self.dropped_over_cap = 0

    def __len__(self) -> int:
        return len(self._by_uid)

    # ---- writes

    def observe(self, binding: Binding, now: float, source: str = PODS) -> bool:
        """Record (or re-date) a binding; returns whether anything changed."""
        with self._lock:
            return self._observe(binding, now, source)

    def _observe(self, b: Binding, now: float, source: str) -> bool:
        if b.when < now - self.horizon or b.uid in self._tombstones:
            return False
        old = self._by_uid.get(b.uid)
        if old is not None:
            if old[0] == b.node and old[1] == b.when:
                if source == PODS and old[2] != PODS:
                    self._by_uid[b.uid] = (old[0], old[1], PODS)  # the pod watch is authoritative
                return False
            if old[2] == PODS and source != PODS:
                return False  # the pod itself says otherwise; an event does not override it
            self._remove(b.uid, old)
        self._by_uid[b.uid] = (b.node, b.when, source)
        times = self._per_node.setdefault(b.node, [])
        insort(times, (b.when, b.uid))
        heapq.heappush(self._expiry, (b.when, b.uid))
        if len(times) > self.max_per_node:
            _, uid = times[0]
            self._remove(uid, self._by_uid[uid])
            self.dropped_over_cap += 1
        return True

    def _remove(self, uid: str, entry: tuple[str, float, str]) -> None:
        node, when, _ = entry
        del self._by_uid[uid]
        times = self._per_node.get(node)
        if times is None:
            return
        i = bisect_left(times, (when, uid))
        if i < len(times) and times[i] == (when, uid):
            del times[i]
        if not times:
            del self._per_node[node]

    def forget(self, uid: str, now: float) -> bool:
        """The pod is gone (deleted, terminating or finished): it stops counting, from every source."""
        with self._lock:
            return self._forget(uid, now)

    def _forget(self, uid: str, now: float) -> bool:
        self._tombstones[uid] = now + self.horizon
        old = self._by_uid.get(uid)
        if old is None:
            return False
        self._remove(uid, old)
        return True

    def replace_source(self, source: str, bindings: Iterable[Binding], now: float) -> None:
        """A full list from ``source``: its records become exactly ``bindings`` (others are untouched).

        Pods of that source missing from the list were deleted while the watch was down: they are
        forgotten like a DELETED event.
        """
        fresh = {b.uid: b for b in bindings}
        with self._lock:
            gone = [u for u, (_, _, src) in self._by_uid.items() if src == source and u not in fresh]
            for uid in gone:
                self._forget(uid, now)
            for b in fresh.values():
                self._tombstones.pop(b.uid, None)  # listed again: it exists
                self._observe(b, now, source)

    def expire(self, now: float) -> int:
        """Drop bindings and tombstones older than the horizon; returns how many bindings went."""
        cutoff = now - self.horizon
        dropped = 0
        with self._lock:
            while self._expiry and self._expiry[0][0] < cutoff:
                when, uid = heapq.heappop(self._expiry)
                entry = self._by_uid.get(uid)
                if entry is not None and entry[1] == when:
                    self._remove(uid, entry)
                    dropped += 1
            if self._tombstones:
                for uid in [u for u, until in self._tombstones.items() if until < now]:
                    del self._tombstones[uid]
            if len(self._expiry) > 4 * max(len(self._by_uid), 1024):
                # Re-dated bindings leave stale heap entries behind; rebuild before they pile up.
                self._expiry = [(w, u) for u, (_, w, _) in self._by_uid.items()]
                heapq.heapify(self._expiry)
        return dropped

    # ---- reads

    def count_since(self, node: str, since: float) -> int:
        """Bindings on ``node`` at or after ``since`` (one bisect)."""
        times = self._per_node.get(node)
        if not times:
            return 0
        with self._lock:
            return len(times) - bisect_left(times, (since,))

    def nodes(self) -> list[str]:
        with self._lock:
            return list(self._per_node)

    def get(self, uid: str) -> tuple[str, float, str] | None:
        return self._by_uid.get(uid)


def hot_value(records: BindingRecords, node: str, now: float, windows: Sequence[HotValueWindow]) -> int:
    """crane's formula (``ballast.model.hot_value``, the agent's too) over the records of ``node``."""
    return hot_value_of(lambda since: records.count_since(node, since), now, windows)
