"""Hot, cool or neither, and for how many cycles (pure).

A node's reading uses only fresh values (the extender's rule: ``timestamp + period + 5m`` in the future;
a missing, stale or unreadable annotation is no information):

- *hot*: some metric with a ``high`` has a fresh value above it;
- *cool*: not hot, and every metric with a ``low`` has a fresh value below it (a metric without
  information keeps a node from being cool: an unknown node is never a target);
- *normal*: neither, with at least one fresh value;
- *unknown*: no threshold metric has a fresh value.

The ``Tracker`` counts cycles as koord-descheduler's anomaly detector does: a hot cycle adds one to the
abnormal count and clears the normal run; ``consecutiveNormal`` normal (or cool) cycles in a row clear the
abnormal count; an unknown cycle changes nothing (missing data neither condemns nor clears a node). A node is
acted on only while it reads hot and its count has reached ``consecutiveAbnormal``, so a spike shorter than
that moves nothing. After an eviction from a node, it is left alone until a measurement newer than the
eviction arrives for every metric that made it hot: no second round on the data that caused the first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from app.model.annotations import fresh
from app.model.nodestate import NodeLoad
from app.model.rebalance_policy import RebalanceSettings

__all__ = ["Counts", "HotMetric", "Reading", "Tracker", "read_node"]

HOT, COOL, NORMAL, UNKNOWN = "hot", "cool", "normal", "unknown"


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


def read_node(load: NodeLoad, settings: RebalanceSettings, now: float) -> Reading:
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
        if t.high is not None and sample.value > t.high:
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


class Tracker:
    """Per-node cycle counts and the post-eviction wait; lives as long as the process (a new leader
    starts counting from zero, which only delays action)."""

    def __init__(self) -> None:
        self.counts: dict[str, Counts] = {}

    def observe(self, name: str, reading: Reading, settings: RebalanceSettings) -> Counts:
        c = self.counts.get(name)
        if c is None:
            c = self.counts[name] = Counts()
        if reading.state == HOT:
            c.abnormal += 1
            c.normal = 0
        elif reading.state in (NORMAL, COOL):
            c.normal += 1
            if c.normal >= settings.consecutive_normal:
                c.abnormal = 0
        return c

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
