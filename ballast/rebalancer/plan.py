"""One rebalancing cycle's decisions, from the nodes and pods the watches hold (pure; no API calls).

1. Read every node (``classify.read_node``) and count its cycles (``classify.Tracker``).
2. Nothing happens unless some node is hot with its count at ``consecutiveAbnormal`` and some node is
   cool: the plan says which is missing.
3. Hot nodes are taken in order of how far they are above ``high`` (the worst first). A node acts only
   when its count is reached and its last eviction is older than its hot measurements.
4. On an acting node the candidates (``victims``) are picked one by one until every hot metric is projected
   below its ``high``, each counted at its measured usage when its node's fresh NodeLoad lists it, else at
   its estimate (``victims.usage_of``). A replacement of a pod moved earlier waits until its new node has
   been measured with it (``classify.Tracker.settling``). A pick must pass the limits (``limits``) and fit
   on a cool node (``fit``), tried coolest first; the node it fits on is reserved for the rest of the
   cycle, so ten victims never all count on the same room. When a node's allocatable for a hot metric's
   resource cannot be read, or the metric measures no resource (a pressure metric), no relief can be
   projected: it gives one victim a cycle, and the next measurement says whether another is needed.

The plan lists every eviction with its target and the message its Event carries, and per node what was
decided about each candidate and why: the ``/rebalance`` view and ``--once --json`` show it as it is.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ballast.contract.times import format_rfc3339
from ballast.model.estimation import metric_plan
from ballast.model.load import projected_load
from ballast.model.policy import Policy
from ballast.model.rebalance_policy import RebalanceSettings
from ballast.rebalancer.classify import COOL, HOT, Reading, Tracker, read_node
from ballast.rebalancer.fit import NodeFacts, Target, why_not
from ballast.rebalancer.limits import Limiter
from ballast.rebalancer.pods import PodFacts
from ballast.rebalancer.victims import Usage, excess, order_key, relief, split, usage_of

Measured = Callable[[str], Mapping[str, tuple[int, int]]]
"""Node name -> its fresh measured usages by pod uid (``nodeloads.NodeLoadCache.fresh`` at the cycle's
time); empty where there is none."""

__all__ = ["NodePlan", "Plan", "PodDecision", "plan_cycle"]

EVICT, NO_FIT, LIMITED, SKIPPED, WAITING = "evict", "no_fit", "limited", "skipped", "waiting"
TARGETS_PER_CANDIDATE = 256
"""Cool nodes a candidate is tried on, coolest first: the cost of a pod that fits nowhere stays bounded
in a cluster with thousands of cool nodes (the coolest 256 are where a move helps most anyway)."""
NO_FIT_PER_NODE = 5
"""Candidates of one hot node that fit nowhere before its turn ends for this cycle (the next cycle tries
again): when five pods fit on no cool node, the rest rarely do, and checking them all costs
candidates x cool nodes."""


@dataclass(slots=True)
class PodDecision:
    """What one cycle decided about one pod of a hot node, and why (the ``/rebalance`` view's entries)."""

    pod: PodFacts
    outcome: str
    """``evict`` (planned), ``no_fit``, ``limited``, ``skipped`` (never a candidate), ``waiting``
    (the node does not act yet: the order it would take them in)."""
    why: str
    target: str | None = None
    message: str | None = None
    """The Event's message for an eviction."""
    result: str | None = None
    """What the eviction call did (set by the evictor): evicted, pdb_blocked, throttled, unknown, error,
    not attempted."""
    usage: Usage | None = None
    """What the pod takes off its node, ``measured`` or ``estimated`` (candidates of a hot node)."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.pod.to_json(), "outcome": self.outcome, "why": self.why}
        if self.usage is not None:
            out["usage"] = self.usage.to_json()
        if self.target:
            out["target"] = self.target
        if self.result:
            out["result"] = self.result
        return out


@dataclass(slots=True)
class NodePlan:
    name: str
    reading: Reading
    abnormal: int
    normal: int
    status: str
    candidates: list[PodDecision] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.name,
            "state": self.reading.state,
            "values": {k: round(v, 5) for k, v in self.reading.values.items()},
            "hot": [{"metric": h.metric, "value": h.value, "high": h.high} for h in self.reading.hot],
            "consecutiveAbnormal": self.abnormal,
            "consecutiveNormal": self.normal,
            "status": self.status,
            "candidates": [c.to_json() for c in self.candidates],
        }


@dataclass(slots=True)
class Plan:
    at: float
    idle: str | None = None
    """Why the cycle evicts nothing at all (no hot node acting, no cool node), or ``None``."""
    nodes: list[NodePlan] = field(default_factory=list)
    """Every hot node, and every node whose abnormal count is above zero."""
    evictions: list[PodDecision] = field(default_factory=list)
    states: Counter[str] = field(default_factory=Counter)
    cool: list[str] = field(default_factory=list)

    def outcomes(self) -> Counter[str]:
        return Counter(c.outcome for n in self.nodes for c in n.candidates)

    @staticmethod
    def _eviction(c: PodDecision) -> dict[str, Any]:
        out = {"pod": c.pod.key, "node": c.pod.node, "target": c.target, "message": c.message}
        return {**out, "usage": c.usage.to_json() if c.usage else None, "result": c.result}

    def to_json(self) -> dict[str, Any]:
        return {
            "at": format_rfc3339(self.at),
            "idle": self.idle,
            "nodes": dict(sorted(self.states.items())),
            "coolNodes": self.cool[:50],
            "coolNodeCount": len(self.cool),
            "evictions": [self._eviction(c) for c in self.evictions],
            "watched": [n.to_json() for n in self.nodes],
        }


def _message(reading: Reading, count: int, target: str, usage: Usage) -> str:
    hot = ", ".join(f"{h.metric} {h.value:.2f} > high {h.high:.2f}" for h in reading.hot)
    use = f"usage {usage.source} (cpu {usage.cpu_milli}m, memory {usage.memory_bytes // 2**20}Mi)"
    return f"{hot} for {count} cycles; {use}; fits on {target}"


class _Targets:
    """The cool nodes, coolest first (the extender's projected load), built into ``Target`` on first use."""

    def __init__(
        self,
        names: list[str],
        nodes: Mapping[str, NodeFacts],
        pods_on: Callable[[str], list[PodFacts]],
        policy: Policy,
        now: float,
    ) -> None:
        self.nodes = nodes
        self.pods_on = pods_on
        self.policy = policy
        self.now = now
        self.order: list[tuple[float, str]] = sorted(
            (projected_load(nodes[n].load, policy, now) or 0.0, n) for n in names
        )
        self.built: dict[str, Target] = {}
        self.no_fit: dict[tuple[Any, ...], list[str]] = {}
        """Pod shapes that fit nowhere this cycle, with the reasons: reservations only ever fill targets,
        so within a cycle a shape that fits nowhere never will."""

    def get(self, name: str) -> Target:
        t = self.built.get(name)
        if t is None:
            t = self.built[name] = Target.of(self.nodes[name], self.pods_on(name))
        return t

    def moved(self, name: str, key: float) -> None:
        """A victim was reserved on ``name``: it sorts by its new projected load."""
        for i, (_, n) in enumerate(self.order):
            if n == name:
                del self.order[i]
                break
        bisect.insort(self.order, (key, name))


def _shape(pod: PodFacts, usage: Usage) -> tuple[Any, ...]:
    """What the fit check reads of a pod: two pods of one shape fit on the same nodes."""
    return (
        pod.cpu_request_milli, pod.memory_request_bytes, pod.cpu_milli, pod.memory_bytes,
        tuple(sorted(pod.node_selector.items())), pod.affinity_terms, pod.tolerations, usage,
    )  # fmt: skip


def _find_target(
    pod: PodFacts,
    usage: Usage,
    targets: _Targets,
    policy: Policy,
    settings: RebalanceSettings,
    plan: Any,
    now: float,
) -> tuple[Target | None, list[str]]:
    shape = _shape(pod, usage)
    if (known := targets.no_fit.get(shape)) is not None:
        return None, known
    reasons: list[str] = []
    for _, name in targets.order[:TARGETS_PER_CANDIDATE]:
        t = targets.get(name)
        why = why_not(pod, t, policy, settings, plan, now, usage)
        if why is None:
            return t, reasons
        if len(reasons) < 3:
            reasons.append(f"{name}: {why}")
    targets.no_fit[shape] = reasons
    return None, reasons


def plan_cycle(
    nodes: Mapping[str, NodeFacts],
    pods_on: Callable[[str], list[PodFacts]],
    policy: Policy,
    settings: RebalanceSettings,
    tracker: Tracker,
    limiter: Limiter,
    now: float,
    measured: Measured | None = None,
) -> Plan:
    """Decide this cycle's evictions. Updates ``tracker`` (cycle counts, owners moved) and ``limiter``
    (this cycle's counts); the caller commits evictions that happen."""
    plan = Plan(at=now)
    tracker.forget_moves(now)
    limiter.begin(settings.limits)
    readings: dict[str, Reading] = {}
    hot: list[tuple[float, str]] = []
    for name, facts in nodes.items():
        reading = read_node(facts.load, settings, now)
        readings[name] = reading
        counts = tracker.observe(name, reading, settings)
        plan.states[reading.state] += 1
        if reading.state == HOT:
            hot.append((max(h.value - h.high for h in reading.hot), name))
        elif reading.state == COOL:
            plan.cool.append(name)
        elif counts.abnormal:
            plan.nodes.append(
                NodePlan(name, reading, counts.abnormal, counts.normal, f"not hot now ({reading.state})")
            )
    tracker.retain(nodes)
    hot.sort(key=lambda x: (-x[0], x[1]))
    acting = [
        n
        for _, n in hot
        if tracker.counts[n].abnormal >= settings.consecutive_abnormal
        and tracker.waiting_for_data(n, readings[n]) is None
    ]
    if not hot:
        plan.idle = "no hot node"
    elif not acting:
        plan.idle = "no hot node has stayed hot long enough (or each waits for a newer measurement)"
    elif not plan.cool:
        plan.idle = "no cool node to move pods to"
    targets = _Targets(plan.cool, nodes, pods_on, policy, now) if plan.idle is None else None
    mplan = metric_plan(policy)
    thresholds = {t.name: t for t in settings.thresholds}
    for _, name in hot:
        reading = readings[name]
        counts = tracker.counts[name]
        node = NodePlan(name, reading, counts.abnormal, counts.normal, "acting")
        plan.nodes.append(node)
        candidates, skipped = split(pods_on(name), settings)
        node.candidates.extend(PodDecision(p, SKIPPED, why) for p, why in skipped)
        on_node = measured(name) if measured is not None else {}
        usage = {p.uid: usage_of(p, on_node) for p in candidates}
        settled = []
        for p in candidates:
            why = tracker.settling(p.workload, p.placed, name, settings)
            if why is None:
                settled.append(p)
            else:
                node.candidates.append(PodDecision(p, SKIPPED, why, usage=usage[p.uid]))
        candidates = settled
        load = nodes[name].load
        if counts.abnormal < settings.consecutive_abnormal:
            node.status = f"waiting: hot for {counts.abnormal} of {settings.consecutive_abnormal} cycles"
        elif (since := tracker.waiting_for_data(name, reading)) is not None:
            node.status = f"waiting for a measurement newer than its last eviction at {format_rfc3339(since)}"
        elif targets is None:
            node.status = f"idle: {plan.idle}"
        if node.status != "acting" or targets is None:
            over = excess({h.metric: h.value for h in reading.hot}, reading.hot)
            for pod in sorted(candidates, key=lambda p: order_key(p, usage[p.uid], over, load, thresholds)):
                node.candidates.append(
                    PodDecision(pod, WAITING, "the node does not act this cycle", usage=usage[pod.uid])
                )
            continue
        projected = {h.metric: h.value for h in reading.hot}
        remaining = list(candidates)
        misses = 0
        while remaining:
            over = excess(projected, reading.hot)
            if not over:
                break
            pod = min(remaining, key=lambda p: order_key(p, usage[p.uid], over, load, thresholds))
            remaining.remove(pod)
            use = usage[pod.uid]
            if (why := limiter.refuse(pod, now)) is not None:
                node.candidates.append(PodDecision(pod, LIMITED, why, usage=use))
                if limiter.node_full(name) or limiter.cycle_full():
                    node.status = f"stopped by a {why}"
                    break
                continue
            target, reasons = _find_target(pod, use, targets, policy, settings, mplan, now)
            if target is None:
                detail = "; ".join(reasons) if reasons else "no cool node"
                node.candidates.append(
                    PodDecision(pod, NO_FIT, f"fits on no cool node ({detail})", usage=use)
                )
                misses += 1
                if misses >= NO_FIT_PER_NODE:
                    node.status = f"stopped: {misses} candidates fit on no cool node (tried again next cycle)"
                    break
                continue
            target.reserve(pod, now, use)
            targets.moved(target.node.name, target.standing(policy, mplan, now))
            limiter.plan(pod)
            tracker.moving(pod.workload, now)
            unreadable = []
            for h in reading.hot:
                r = relief(use, load, thresholds[h.metric])
                if r is None:
                    unreadable.append(h.metric)
                else:
                    projected[h.metric] -= r
            why = "takes " + ", ".join(
                f"{h.metric} to {projected[h.metric]:.2f}" for h in reading.hot if h.metric not in unreadable
            ) if len(unreadable) < len(reading.hot) else "relieves it"  # fmt: skip
            choice = PodDecision(
                pod,
                EVICT,
                f"{why} ({use.source})",
                target=target.node.name,
                message=_message(reading, counts.abnormal, target.node.name, use),
                usage=use,
            )
            node.candidates.append(choice)
            plan.evictions.append(choice)
            if unreadable:
                node.status = f"acting: one victim a cycle ({_unprojected(unreadable, thresholds)})"
                break
        if node.status == "acting" and excess(projected, reading.hot):
            node.status = "acting: still above high after every candidate that could go"
    return plan


def _unprojected(metrics: list[str], thresholds: Mapping[str, Any]) -> str:
    """Why the relief of ``metrics`` cannot be projected, for the node's status."""
    signals = [m for m in metrics if thresholds[m].resource is None]
    unread = [m for m in metrics if m not in signals]
    why = []
    if unread:
        why.append(f"allocatable for {', '.join(unread)} cannot be read, so its relief cannot be projected")
    if signals:
        why.append(f"{', '.join(signals)} measures no resource: no pod's share of it can be projected")
    return "; ".join(why)
