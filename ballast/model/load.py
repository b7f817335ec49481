"""Load-aware verdicts and scores: crane-scheduler's Dynamic plugin semantics, as pure functions.

Two scorings (``spec.scoring``). The default, ``relative``, ranks the candidates of one prioritize call:

    load(node) = sum((u + extra) * w) / sum(w) + hot / 10       over fresh priority metrics
    after(node) = load(node) + this pod's estimate, in the same weighted units (``project``)
    score = 10                                              for the least ``after`` (and loads equal to it)
    score = round_half_up(7 * (worst - after) / (worst - best))   for the other candidates with information

(with ``spec.dominantResourceWeight`` D > 0 the node's dominant resource, of cpu and memory the one whose
own weighted load with the estimates already on the node is higher, joins the mean as one more term:
``load = (sum((u + extra) * w) + D * max_r load_r) / (sum(w) + D) + hot / 10``, koordinator's rule on
the node's standing loads; see ``projected_load``),
so the least loaded candidate after the pod scores 10, alone unless tied, every other candidate at most 7
(``RUNNER_UP``: three levels below, enough that kube-scheduler's own request-based plugin scores do not
overturn the choice in a burst), the most loaded 0, and equal loads score equally. The levels separate the
candidates actually in play (crane's absolute scale gives nodes whose loads differ by less than 0.1 the
same score, and a burst piles onto such ties). ``crane`` keeps crane's formula:

Filter: a node is rejected when a *fresh* value of a predicate metric is above its limit. Missing,
stale or unreadable values never reject (they are "no information"), unless the predicate's
``onMissing`` is ``reject``: then such a node is rejected for that metric with its own reason (and the
metric label ``missing:<metric>``). The limits are the node's own (``NodeState.limits``: its pool and its
thresholds annotation, ``ballast.model.pools``), the prod ones for a prod pod.

Score (crane's 0..100 scale, then mapped to the extender's 0..10):
    raw   = int( sum((1 - u) * w * 100) / sum(w) )   over priority metrics with a fresh value
    final = clamp(raw - int(hot * 10), 0, 100)       hot = node_hot_value while fresh (5 minutes)
    score = round_half_up(final / 10)
Unlike crane, a metric without information is left out of *both* sums (crane counted it as fully
used, which ranked a node with one missing metric below a busier, fully measured one). A node with no
information for any priority metric scores 0, so measured nodes win over unmeasured ones.

``extra`` carries estimated usage ratios per metric (``{"cpu_usage_avg_5m": 0.08}``) of pods placed
after that metric was last measured; they are added to the measured value (see ``ballast.model.estimation``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ballast.contract.annotations import HOT_VALUE_VALID_SECONDS, fresh
from ballast.contract.durations import format_duration
from ballast.model.nodestate import NodeState
from ballast.model.policy import Policy

MAX_EXTENDER_SCORE = 10
_NO_EXTRA: Mapping[str, float] = {}


MISSING_PREFIX = "missing:"
"""Metric label of a rejection for missing data (``onMissing: reject``)."""


@dataclass(frozen=True, slots=True)
class Rejection:
    metric: str
    value: float
    extra: float
    limit: float
    age: float
    missing: bool = False
    """No fresh value and ``onMissing: reject`` (``value``, ``extra`` and ``age`` mean nothing)."""

    @property
    def label(self) -> str:
        """The ``metric`` label of the rejection counters: the metric, or ``missing:<metric>``."""
        return MISSING_PREFIX + self.metric if self.missing else self.metric

    @property
    def reason(self) -> str:
        if self.missing:
            return (
                f"load {self.metric} has no fresh value (missing, stale or unreadable) and its onMissing "
                "is reject"
            )
        if self.extra:
            used = (
                f"{self.value:.5f} measured + {self.extra:.5f} estimated (this pod and pods placed since) "
                f"= {self.value + self.extra:.5f}"
            )
        else:
            used = f"{self.value:.5f}"
        return (
            f"load {self.metric} is {used}, above the limit {self.limit:g} "
            f"(measured {format_duration(self.age)} ago)"
        )


def check_node(
    load: NodeState,
    policy: Policy,
    now: float,
    extra: Mapping[str, float] = _NO_EXTRA,
    prod: bool = False,
) -> Rejection | None:
    """Return why the node is overloaded (or unmeasured where that rejects), or ``None`` when it passes.
    Over-limit metrics are reported before missing ones, each in plan order."""
    samples = load.samples
    plan, missing = (load.limits or policy.limits).plans(prod)
    for name, limit, valid, _resource in plan:
        sample = fresh(samples.get(name), valid, now)
        if sample is None:
            continue
        add = extra.get(name, 0.0) if extra else 0.0
        if sample.value + add > limit:
            return Rejection(name, sample.value, add, limit, now - sample.timestamp)
    for name, valid in missing:
        if fresh(samples.get(name), valid, now) is None:
            return Rejection(name, 0.0, 0.0, 0.0, 0.0, missing=True)
    return None


def priority_plan(load: NodeState, policy: Policy) -> tuple[tuple[str, float, float, str], ...]:
    """The node's priority terms: its pool's weights where the pool sets them, else the policy's."""
    limits = load.limits
    return limits.priority_plan if limits is not None else policy.priority_plan


@dataclass(frozen=True, slots=True)
class ScoreTerm:
    metric: str
    weight: float
    value: float | None
    extra: float
    fresh: bool
    contribution: float
    """``(1 - u) * w * 100`` for a fresh value, else 0 and the term is left out."""


@dataclass(frozen=True, slots=True)
class Score:
    raw: int
    hot: float
    final: int
    score: int
    terms: tuple[ScoreTerm, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {
            "score": self.score,
            "score100": self.final,
            "loadScore100": self.raw,
            "hotValue": self.hot,
            "hotPenalty100": int(self.hot * 10),
            "terms": [
                {
                    "metric": t.metric,
                    "weight": t.weight,
                    "value": t.value,
                    "estimatedExtra": t.extra,
                    "fresh": t.fresh,
                    "contribution": round(t.contribution, 5),
                }
                for t in self.terms
            ],
        }


def to_extender_score(final: int) -> int:
    """Map 0..100 to the extender's 0..10, rounding half up (Go ints must not be floats on the wire)."""
    return min(MAX_EXTENDER_SCORE, max(0, (final + 5) // 10))


def score_node(
    load: NodeState,
    policy: Policy,
    now: float,
    extra: Mapping[str, float] = _NO_EXTRA,
    explain: bool = False,
) -> Score:
    """Score a node; with ``explain`` the per-metric terms are kept for the debug endpoints."""
    total = 0.0
    weights = 0.0
    terms: list[ScoreTerm] = []
    samples = load.samples
    dominant = policy.dominant_resource_weight
    by_resource: dict[str, list[float]] = {}
    for name, weight, valid, resource in priority_plan(load, policy):
        sample = samples.get(name)
        counts = fresh(sample, valid, now) is not None
        add = extra.get(name, 0.0) if extra else 0.0
        contribution = 0.0
        if counts:
            used = min(1.0, sample.value + add)  # type: ignore[union-attr]
            contribution = (1.0 - used) * weight * 100.0
            total += contribution
            weights += weight
            if dominant and weight > 0 and resource in RESOURCES:
                sums = by_resource.setdefault(resource, [0.0, 0.0])
                sums[0] += contribution
                sums[1] += weight
        if explain:
            terms.append(ScoreTerm(name, weight, sample.value if sample else None, add, counts, contribution))
    if by_resource:
        # koordinator's dominant-resource term: the least free resource's score counts ``dominant`` more.
        total += dominant * min(s / w for s, w in by_resource.values())
        weights += dominant
    raw = int(total / weights) if weights > 0 else 0
    hot = 0.0
    if (hot_sample := fresh(load.hot, HOT_VALUE_VALID_SECONDS, now)) is not None:
        hot = hot_sample.value
    final = min(100, max(0, raw - int(hot * 10)))
    return Score(raw, hot, final, to_extender_score(final), tuple(terms))


RESOURCES = ("cpu", "memory")
"""The resources a node's dominant one is chosen among: those Ballast estimates a pod's use of."""


HOT_LOAD_PER_UNIT = 0.1
"""One unit of hot value weighs like 10 % more load: crane's ``hot * 10`` points on its 0..100 scale."""


def resource_loads(
    load: NodeState, policy: Policy, now: float, extra: Mapping[str, float] = _NO_EXTRA
) -> dict[str, float]:
    """Each resource's projected load: the weighted mean of its fresh priority metrics with ``extra``
    added (only resources with a fresh metric of positive weight appear). The largest is the node's
    dominant resource."""
    sums: dict[str, list[float]] = {}
    samples = load.samples
    for name, weight, valid, resource in priority_plan(load, policy):
        if resource not in RESOURCES or weight <= 0:
            continue
        sample = fresh(samples.get(name), valid, now)
        if sample is None:
            continue
        add = extra.get(name, 0.0) if extra else 0.0
        entry = sums.setdefault(resource, [0.0, 0.0])
        entry[0] += (sample.value + add) * weight
        entry[1] += weight
    return {r: total / weight for r, (total, weight) in sums.items()}


def dominant_of(loads: Mapping[str, float]) -> str | None:
    """The resource with the largest projected load (cpu on a tie), ``None`` without any."""
    return max(loads, key=lambda r: (loads[r], r == "cpu")) if loads else None


NO_POD = (0, 0)


def projected_load(
    load: NodeState,
    policy: Policy,
    now: float,
    extra: Mapping[str, float] = _NO_EXTRA,
    pod: tuple[int, int] = NO_POD,
) -> float | None:
    """The weighted load of the fresh priority metrics with ``extra`` (the estimates of pods placed on the
    node) and this ``pod``'s estimate (millicores, bytes) added, plus the hot penalty; ``None`` when no
    priority metric has a fresh value (no information: such a node scores 0).

    With ``spec.dominantResourceWeight`` D > 0, the node's dominant resource joins the mean as one more
    term of weight D: ``(sum(u * w) + D * max_r load_r) / (sum(w) + D)``, koordinator's LoadAware rule,
    with the node's standing resource loads (``resource_loads`` with ``extra``, this pod left out): a node
    ranks by what it is already shortest of, as dominant resource fairness serves the least served
    first. Measured (``bench.mixed_burst``), that balances mixed nodes better than counting the pod in
    the term, as koordinator does."""
    return project(load, policy, now, extra, pod)[0]


Projection = tuple[float | None, float, float]
"""(load, growth per millicore, growth per byte): the node's projected load after a pod estimated at
``cpu`` millicores and ``mem`` bytes is ``load + cpu * per_milli + mem * per_byte``."""


def project(
    load: NodeState,
    policy: Policy,
    now: float,
    extra: Mapping[str, float] = _NO_EXTRA,
    pod: tuple[int, int] = NO_POD,
) -> Projection:
    """``projected_load`` and how much it grows per millicore and per byte of a further pod, from one pass
    over the priority metrics: the form the verdict board keeps per node, worked out on events, so that
    ``projected_load(..., extra, pod=(cpu, mem))`` is ``load + cpu * per_milli + mem * per_byte`` with
    ``project(..., extra)``. A pod's estimate adds ``amount / allocatable`` to every metric of its
    resource; the dominant-resource term, on the standing loads, is a constant of the node."""
    total = weights = 0.0
    cpu_total = cpu_w = mem_total = mem_w = 0.0
    samples = load.samples
    for name, weight, valid, resource in priority_plan(load, policy):
        sample = fresh(samples.get(name), valid, now)
        if sample is None:
            continue
        standing = (sample.value + extra.get(name, 0.0) if extra else sample.value) * weight
        total += standing
        weights += weight
        if resource == "cpu":
            cpu_total += standing
            cpu_w += weight
        elif resource == "memory":
            mem_total += standing
            mem_w += weight
    if weights <= 0:
        return None, 0.0, 0.0
    alloc_cpu, alloc_mem = load.allocatable_cpu_milli, load.allocatable_memory_bytes
    if pod is not NO_POD:
        total += cpu_w * pod[0] / alloc_cpu if alloc_cpu else 0.0
        total += mem_w * pod[1] / alloc_mem if alloc_mem else 0.0
    dominant = policy.dominant_resource_weight
    if dominant > 0 and (cpu_w > 0 or mem_w > 0):
        # the standing load of each resource with a fresh metric of positive weight (``resource_loads``)
        total += dominant * max(
            cpu_total / cpu_w if cpu_w > 0 else -math.inf, mem_total / mem_w if mem_w > 0 else -math.inf
        )
        weights += dominant
    hot = 0.0
    if (hot_sample := fresh(load.hot, HOT_VALUE_VALID_SECONDS, now)) is not None:
        hot = hot_sample.value
    return (
        total / weights + hot * HOT_LOAD_PER_UNIT,
        cpu_w / weights / alloc_cpu if alloc_cpu else 0.0,
        mem_w / weights / alloc_mem if alloc_mem else 0.0,
    )


_TIE = 1e-9
"""Loads closer than this are equal (float noise must not split a tie into 10 and 7)."""
_HALF_UP = 0.5 + _TIE
"""Rounding half up, with the same tolerance: the same load reached by two sums in another order (the
verdict board's slope against the ledger's per-metric sum) lands on either side of an exact .5."""

RUNNER_UP = 7
"""The highest score of a candidate that is not the least loaded one. kube-scheduler adds
``score * weight * 10`` to its own plugin scores, and its request-based plugins (NodeResourcesFit's
LeastAllocated, NodeResourcesBalancedAllocation) favour the node with fewer pods, which in a burst is the
busier one: about 6 points per 500m/1Gi pod on an 8-CPU node, some 60 points after ten. With the shipped
weight 3, three levels are 90 points: the least loaded candidate keeps its lead through that, so
kube-scheduler picks the node prioritize holds the pod's estimate on, and the next pod sees the pod there
before its bind arrives (kube-scheduler binds asynchronously)."""


def relative_scores(loads: Sequence[float | None]) -> list[int]:
    """0..10 per candidate: 10 for the least projected load (and loads equal to it), the others from
    ``RUNNER_UP`` (just above the least) linearly down to 0 (the most), rounded half up; 0 for a candidate
    without information; 10 for all when every load is the same."""
    # Per candidate on every prioritize (5000 in a request at most): when every candidate has information
    # (the usual case) the list is used as it is and the comprehension skips the None test.
    complete = None not in loads
    known = loads if complete else [x for x in loads if x is not None]
    if not known:
        return [0] * len(loads)
    best = min(known)
    span = max(known) - best
    if span <= _TIE:
        return [0 if x is None else MAX_EXTENDER_SCORE for x in loads]
    scale = RUNNER_UP / span
    top = best + span
    tied = best + _TIE
    floor = math.floor
    if complete:
        return [MAX_EXTENDER_SCORE if x <= tied else floor((top - x) * scale + _HALF_UP) for x in loads]
    half = _HALF_UP
    return [
        0 if x is None else MAX_EXTENDER_SCORE if x <= tied else floor((top - x) * scale + half)
        for x in loads
    ]
