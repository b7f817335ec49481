"""Hot, cool or neither, and for how many cycles (pure).

A node's reading uses only fresh values (the extender's rule: ``timestamp + period + 5m`` in the future;
a missing, stale or unreadable annotation is no information):

- *hot*: some metric with a ``high`` has a fresh value above it;
- *cool*: not hot, and every metric with a ``low`` has a fresh value below it (a metric without
  information keeps a node from being cool: an unknown node is never a target);
- *normal*: neither, with at least one fresh value;
- *unknown*: no threshold metric has a fresh value.

The ``Tracker`` counts cycles: a hot cycle adds one to the abnormal count and clears the normal run;
``consecutiveNormal`` normal (or cool) cycles in a row clear the abnormal count; an unknown cycle changes
nothing (missing data neither condemns nor clears a node). A node is acted on in the cycle whose hot reading
brings its count to ``consecutiveAbnormal`` (the Nth hot cycle) and in every later cycle while it stays hot,
so a spike shorter than N cycles moves nothing. (koord-descheduler's anomaly detector, which this resembles,
acts only after *more* than N abnormal observations when N > 1, one cycle later; Ballast acts at N, for
every N, so ``consecutiveAbnormal: 1`` and ``2`` differ.) After an eviction from a node, it is left alone
until a measurement newer than the eviction arrives for every metric that made it hot: no second round on
the data that caused the first.

A pod that arrived on its node as the replacement of a pod this rebalancer moved (same workload, that is
the same owner, a Deployment's ReplicaSets together; placed after the eviction) is not moved again until
its new node has read hot for ``consecutiveAbnormal`` cycles on measurements newer than its arrival
(``settling``): a node's count may include cycles from before the pod came, and those say nothing about
the node with it. A new leader learns the moves from the Events it rebuilds its promises from.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from ballast.contract.annotations import fresh
from ballast.contract.times import format_rfc3339
from ballast.model.nodestate import NodeState
from ballast.model.rebalance_policy import RebalanceSettings

__all__ = ["MOVED_MEMORY", "Counts", "HotMetric", "Reading", "Tracker", "above_high", "read_node"]

HOT, COOL, NORMAL, UNKNOWN = "hot", "cool", "normal", "unknown"
MOVED_MEMORY = 3600.0
"""Seconds an eviction is remembered to recognise its replacement: a replacement scheduled later than an
hour after its eviction is treated like any other pod."""


def above_high(value: float, high: float) -> bool:
    """The hot rule: a value counts as hot only *above* ``high`` (koord-descheduler's
    ``used > threshold``); a value exactly at ``high`` is not hot. The fit check applies the same rule to
    a target's projected load, so a move may bring a target to ``high`` but not above it."""
    return value > high


@dataclass(frozen=True, slots=True)
class HotMetric:
    metric: str
    value: float
    high: float
    timestamp: float


@dataclass(frozen=True, slots=True)
class Reading:
    state: str
    hot: tuple[HotMetric, ...] = ()
    values: dict[str, float] = field(default_factory=dict)
    """Fresh values of the threshold metrics."""


def read_node(load: NodeState, settings: RebalanceSettings, now: float) -> Reading:
    values: dict[str, float] = {}
    hot: list[HotMetric] = []
    cool = True
    for t in settings.thresholds:
        sample = fresh(load.samples.get(t.name), t.valid_for, now)
        if sample is None:
            if t.low is not None:
                cool = False
            continue
        values[t.name] = sample.value
        if t.high is not None and above_high(sample.value, t.high):
            hot.append(HotMetric(t.name, sample.value, t.high, sample.timestamp))
        if t.low is not None and not sample.value < t.low:
            cool = False
    if hot:
        return Reading(HOT, tuple(hot), values)
    if not values:
        return Reading(UNKNOWN, (), values)
    return Reading(COOL if cool else NORMAL, (), values)


@dataclass(slots=True)
class Counts:
    abnormal: int = 0
    normal: int = 0
    evicted_at: float | None = None
    """When the rebalancer last evicted (or, dry, would have evicted) from this node."""
    hot_measured: deque[float] = field(default_factory=deque)
    """The measurement time (the oldest hot metric's timestamp) of each of the last
    ``consecutiveAbnormal`` hot cycles of the current abnormal run."""


class Tracker:
    """Per-node cycle counts and the post-eviction wait; lives as long as the process (a new leader
    starts counting from zero, which only delays action)."""

    def __init__(self) -> None:
        self.counts: dict[str, Counts] = {}
        self.moved: dict[str, float] = {}
        """Workload (``PodFacts.workload``: the owner, a Deployment's ReplicaSets together) -> when the
        rebalancer last chose to evict, or (a new leader, from the Events) evicted, one of its pods. The
        replacement is a new pod, so it is recognised by its owner, not by the pod."""

    def observe(self, name: str, reading: Reading, settings: RebalanceSettings) -> Counts:
        c = self.counts.get(name)
        if c is None:
            c = self.counts[name] = Counts()
        if reading.state == HOT:
            c.abnormal += 1
            c.normal = 0
            c.hot_measured.append(min(h.timestamp for h in reading.hot))
            while len(c.hot_measured) > settings.consecutive_abnormal:
                c.hot_measured.popleft()
        elif reading.state in (NORMAL, COOL):
            c.normal += 1
            if c.normal >= settings.consecutive_normal:
                c.abnormal = 0
                c.hot_measured.clear()
        return c

    def moving(self, workload: str, at: float) -> None:
        """A pod of ``workload`` is moved: its replacement settles before it may move again."""
        if self.moved.get(workload, float("-inf")) < at:
            self.moved[workload] = at

    def forget_moves(self, now: float) -> None:
        for owner in [o for o, at in self.moved.items() if at <= now - MOVED_MEMORY]:
            del self.moved[owner]

    def settling(self, workload: str, placed: float, node: str, settings: RebalanceSettings) -> str | None:
        """Why a pod of ``workload`` placed at ``placed`` on ``node`` may not move yet, or ``None``.

        A pod placed at or after an eviction of its workload's pod (``placed`` has whole seconds, so the
        second of the eviction counts) is its replacement; it may go once ``node``'s last
        ``consecutiveAbnormal`` hot cycles all read measurements newer than ``placed``."""
        at = self.moved.get(workload)
        if at is None or placed + 1 <= at:
            return None
        c = self.counts.get(node)
        seen = sum(1 for t in c.hot_measured if t > placed) if c is not None else 0
        need = settings.consecutive_abnormal
        if seen >= need:
            return None
        return (
            f"moved here (placed {format_rfc3339(placed)}, after its workload's eviction): waits until "
            f"{node} reads hot for {need} cycles on measurements newer than its arrival ({seen} so far)"
        )

    def retain(self, names: Iterable[str]) -> None:
        """Forget nodes that are gone."""
        keep = set(names)
        for name in [n for n in self.counts if n not in keep]:
            del self.counts[name]

    def evicted(self, name: str, at: float) -> None:
        self.counts.setdefault(name, Counts()).evicted_at = at

    def waiting_for_data(self, name: str, reading: Reading) -> float | None:
        """The eviction time this node waits past (some hot metric is not newer), or ``None``."""
        c = self.counts.get(name)
        if c is None or c.evicted_at is None:
            return None
        if any(h.timestamp <= c.evicted_at for h in reading.hot):
            return c.evicted_at
        return None
