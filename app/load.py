"""Load-aware verdicts and scores: crane-scheduler's Dynamic plugin semantics, as pure functions.

Filter: a node is rejected when a *fresh* value of a predicate metric is above its limit. Missing,
stale or unreadable values never reject (they are "no information").

Score (crane's 0..100 scale, then mapped to the extender's 0..10):
    raw   = int( sum((1 - u) * w * 100) / sum(w) )   over priority metrics with a fresh value
    final = clamp(raw - int(hot * 10), 0, 100)       hot = node_hot_value while fresh (5 minutes)
    score = round_half_up(final / 10)
Unlike crane, a metric without information is left out of *both* sums (crane counted it as fully
used, which ranked a node with one missing metric below a busier, fully measured one). A node with no
information for any priority metric scores 0, so measured nodes win over unmeasured ones.

``extra`` carries estimated usage ratios per metric (``{"cpu_usage_avg_5m": 0.08}``) of pods placed
after that metric was last measured; they are added to the measured value (see ``app.estimation``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from app.annotations import HOT_VALUE_VALID_SECONDS
from app.durations import format_duration
from app.nodestate import NodeLoad
from app.policy import Policy

MAX_EXTENDER_SCORE = 10
_NO_EXTRA: Mapping[str, float] = {}


@dataclass(frozen=True, slots=True)
class Rejection:
    metric: str
    value: float
    extra: float
    limit: float
    age: float

    @property
    def reason(self) -> str:
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
    load: NodeLoad, policy: Policy, now: float, extra: Mapping[str, float] = _NO_EXTRA
) -> Rejection | None:
    """Return why the node is overloaded, or ``None`` when it passes."""
    samples = load.samples
    for name, limit, valid, _resource in policy.predicate_plan:
        sample = samples.get(name)
        if sample is None or sample.timestamp + valid <= now:
            continue
        add = extra.get(name, 0.0) if extra else 0.0
        if sample.value + add > limit:
            return Rejection(name, sample.value, add, limit, now - sample.timestamp)
    return None


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
    load: NodeLoad,
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
    for name, weight, valid, _resource in policy.priority_plan:
        sample = samples.get(name)
        fresh = sample is not None and sample.timestamp + valid > now
        add = extra.get(name, 0.0) if extra else 0.0
        contribution = 0.0
        if fresh:
            used = min(1.0, sample.value + add)  # type: ignore[union-attr]
            contribution = (1.0 - used) * weight * 100.0
            total += contribution
            weights += weight
        if explain:
            terms.append(ScoreTerm(name, weight, sample.value if sample else None, add, fresh, contribution))
    raw = int(total / weights) if weights > 0 else 0
    hot = 0.0
    if load.hot is not None and load.hot.is_fresh(now, HOT_VALUE_VALID_SECONDS):
        hot = load.hot.value
    final = min(100, max(0, raw - int(hot * 10)))
    return Score(raw, hot, final, to_extender_score(final), tuple(terms))
