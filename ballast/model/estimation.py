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
``bindVerb`` the bind check (``ballast.extender.load_bind``) has the last word, counting placed pods only.

This module is the formula, pure: what a pod is estimated to use and what the estimates on a node add
per metric. Which estimates are on which node, and for how long, is ``ballast.model.ledger.Ledger``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ballast.model.nodestate import NodeState
from ballast.model.podinfo import PodDemand
from ballast.model.policy import Estimation, Policy


# Not frozen: made several times per pod on the scheduler's path, and a frozen dataclass sets each field
# through object.__setattr__ (1.4 us against 0.3 us for twelve fields). Nothing mutates one.
@dataclass(slots=True)
class Estimate:
    uid: str
    pod: str
    """``namespace/name`` for people reading /nodes (``PodDemand.label``); empty for /nodes' placeholder."""
    node: str
    cpu_milli: int
    memory_bytes: int
    at: float
    """When the pod was placed (bind, PodScheduled time, or the tentative hold)."""
    tentative: bool = False
    priority: int | None = None
    """The pod's ``spec.priority`` when known (bind judges a prod pod against the prod limits)."""

    def amount(self, resource: str) -> int:
        return self.cpu_milli if resource == "cpu" else self.memory_bytes if resource == "memory" else 0

    def to_json(self, now: float) -> dict[str, object]:
        return {
            "pod": self.pod or None,
            "uid": self.uid,
            "cpuMilli": self.cpu_milli,
            "memoryBytes": self.memory_bytes,
            "placedSecondsAgo": round(now - self.at, 3),
            "tentative": self.tentative,
        }


def estimate_usage(pod: PodDemand, est: Estimation) -> tuple[int, int]:
    """(cpu millicores, memory bytes) a pod is expected to use soon after it starts."""
    cpu = max(pod.cpu_request_milli, pod.cpu_limit_milli)
    mem = max(pod.memory_request_bytes, pod.memory_limit_bytes)
    cpu = round(cpu * est.cpu_factor) if cpu else est.default_cpu_milli
    mem = round(mem * est.memory_factor) if mem else est.default_memory_bytes
    return cpu, mem


MetricPlan = tuple[tuple[str, str, float], ...]
"""(metric, resource, ttl) for every metric that maps to a resource Ballast can estimate."""


def metric_plan(policy: Policy) -> MetricPlan:
    """(metric, resource, ttl) for every metric that maps to a resource Ballast can estimate."""
    out = []
    for metric in policy.sync_periods:
        resource = policy.resource_of(metric)
        if resource in ("cpu", "memory"):
            ttl = policy.estimation.ttl if policy.estimation.ttl is not None else policy.valid_for(metric)
            out.append((metric, resource, ttl))
    return tuple(out)


def counts(e: Estimate, measured_at: float, ttl: float, now: float) -> bool:
    """Whether an estimate still adds to a metric measured at ``measured_at``: the pod was placed after
    the measurement and the estimate has not outlived its TTL.

    A pod placed in the same second as the measurement counts: annotations carry whole seconds, and so
    does a pod's ``PodScheduled`` time (what the pod watch records when Ballast did not bind it), so a pod
    bound at 10:00:00.4 after a measurement stamped 10:00:00 reads as placed at 10:00:00. A measurement
    (an average over minutes, evaluated before it was stamped) cannot include a pod bound that second;
    dropping its estimate made a burst right after a new measurement pile onto the nodes it filled."""
    return e.at >= measured_at and e.at + ttl > now


def units(
    load: NodeState, plan: MetricPlan, estimates: Iterable[Estimate], now: float, skip: str | None = None
) -> dict[str, int]:
    """Estimated amounts (millicores or bytes) counted per metric on this node, leaving out ``skip``.

    Runs on every recomputation of a node, up to three times per pod bound, over every estimate of the
    node for every metric. Metrics of one resource measured at the same time (the agent stamps all its
    values at once) count the same estimates unless one of them outlives a metric's TTL, so while the
    oldest estimate is inside every TTL each distinct measurement time is summed once."""
    estimates = [e for e in estimates if e.uid != skip] if skip is not None else list(estimates)
    out: dict[str, int] = {}
    if not estimates:
        return out
    oldest = min([e.at for e in estimates])
    summed: dict[tuple[str, float], int] = {}
    for metric, resource, ttl in plan:
        sample = load.samples.get(metric)
        if sample is None:
            continue
        # ``counts`` inlined: this loop runs per estimate per metric on every recomputation of a node
        measured_at = sample.order_at
        within_ttl = oldest + ttl > now
        total = summed.get((resource, measured_at)) if within_ttl else None
        if total is None:
            if resource == "cpu":
                total = sum([e.cpu_milli for e in estimates if e.at >= measured_at and e.at + ttl > now])
            elif resource == "memory":
                total = sum([e.memory_bytes for e in estimates if e.at >= measured_at and e.at + ttl > now])
            else:
                total = 0
            if within_ttl:
                summed[resource, measured_at] = total
        if total:
            out[metric] = total
    return out


def extra(
    load: NodeState,
    plan: MetricPlan,
    counted: Mapping[str, int],
    incoming: Estimate | None = None,
    minus: Mapping[str, int] | None = None,
) -> dict[str, float]:
    """Usage ratios to add per metric: ``extra(metric) = (counted + incoming - minus) / allocatable``.

    ``counted`` is what ``units`` found on the node; ``incoming`` the pod being placed; ``minus`` amounts
    per resource to take away (preemption victims). Metrics without a sample get nothing.
    """
    out: dict[str, float] = {}
    for metric, resource, _ttl in plan:
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


def still_counted(
    load: NodeState, plan: MetricPlan, estimates: Iterable[Estimate], now: float
) -> list[Estimate]:
    """Estimates still counted for at least one metric of this node, and tentative holds (what /nodes
    shows)."""
    out = []
    for e in estimates:
        for metric, _resource, ttl in plan:
            sample = load.samples.get(metric)
            if sample is not None and counts(e, sample.order_at, ttl, now):
                out.append(e)
                break
        else:
            if e.tentative:
                out.append(e)
    return out
