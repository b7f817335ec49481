"""Would a pod evicted from a hot node be placed on this cool node? (pure)

The check answers before the eviction what kube-scheduler with the Ballast extender will decide after it,
for the constraints that decide most placements:

- the node is schedulable (not cordoned) and the pod tolerates its ``NoSchedule`` / ``NoExecute`` taints;
- ``nodeSelector`` and required node affinity (``matchExpressions``: In, NotIn, Exists, DoesNotExist,
  Gt, Lt) match the node's labels;
- requests fit allocatable: cpu, memory and the pod count, counting the pods bound there and the victims
  already sent there this cycle (kube-scheduler's NodeResourcesFit);
- the extender's own filter (``ballast.model.load.check_node``, the same function) passes with the estimates
  of pods placed since the node was measured, of the victims already sent there, and of this pod: the
  extender counts a replacement by its estimate, so that is what it will check;
- the node does not go above any rebalance ``high`` (it may reach it: the hot rule, ``classify.above_high``)
  with the pods placed since its measurement (their estimates) and the victims sent there, each at its
  ``victims.margin`` (its measured usage, or the larger of its request and its estimate), so a move never
  makes a new hot node that the next cycle would move the pod away from again.

Not modelled (the scheduler may still decide otherwise; the evicted pod's owner recreates it anyway):
inter-pod affinity and anti-affinity, topology spread constraints, host ports, volume topology and
attach limits, extended resources, preferred (soft) affinity, NUMA placement, and other extenders or
plugins. The rebalancer never evicts a pod whose check fails on every cool node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ballast.contract.annotations import fresh
from ballast.contract.quantity import parse_quantity
from ballast.model.estimation import Estimate, MetricPlan, extra, units
from ballast.model.load import check_node, projected_load
from ballast.model.nodestate import NodeState, parse_node
from ballast.model.policy import Policy
from ballast.model.rebalance_policy import RebalanceSettings
from ballast.rebalancer.classify import above_high
from ballast.rebalancer.pods import PodFacts
from ballast.rebalancer.victims import ESTIMATED, MEASURED, Usage, margin

__all__ = ["NodeFacts", "Target", "node_facts", "why_not"]


@dataclass(frozen=True, slots=True)
class NodeFacts:
    load: NodeState
    labels: Mapping[str, str]
    taints: tuple[tuple[str, str, str], ...]
    """(key, value, effect) of the NoSchedule and NoExecute taints."""
    unschedulable: bool
    allocatable_pods: int | None

    @property
    def name(self) -> str:
        return self.load.name


def node_facts(node: Mapping[str, Any], policy: Policy, now: float) -> NodeFacts:
    """Read one Node (as the API server sends it); never raises. A node whose labels, taints or
    allocatable cannot be read is kept as cordoned (never a target) with its load as ``parse_node``
    reads it: one node's content never stops the watch."""
    try:
        return _node_facts(node, policy, now)
    except Exception:
        return NodeFacts(parse_node(node, policy, now), {}, (), True, None)


def _node_facts(node: Mapping[str, Any], policy: Policy, now: float) -> NodeFacts:
    meta = node.get("metadata") if isinstance(node.get("metadata"), Mapping) else {}
    spec = node.get("spec") if isinstance(node.get("spec"), Mapping) else {}
    status = node.get("status") if isinstance(node.get("status"), Mapping) else {}
    labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
    taints = tuple(
        (str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in spec.get("taints") or ()
        if isinstance(t, Mapping) and t.get("effect") in ("NoSchedule", "NoExecute")
    )
    alloc = status.get("allocatable") if isinstance(status.get("allocatable"), Mapping) else {}
    try:
        pods = int(parse_quantity(alloc["pods"])) if "pods" in alloc else None
    except (ValueError, ArithmeticError, TypeError):
        pods = None
    return NodeFacts(
        load=parse_node(node, policy, now),
        labels={str(k): str(v) for k, v in labels.items()},
        taints=taints,
        unschedulable=spec.get("unschedulable") is True,
        allocatable_pods=pods,
    )


@dataclass(slots=True)
class Target:
    """A cool node as this cycle's fit checks see it: what is bound there, and what this cycle sent."""

    node: NodeFacts
    requested_cpu_milli: int = 0
    requested_memory_bytes: int = 0
    pods: int = 0
    placed: list[Estimate] = field(default_factory=list)
    """Estimates of the pods bound there (the estimation rules decide which still count)."""
    reserved: list[PodFacts] = field(default_factory=list)
    """Victims sent here this cycle."""
    sent: list[Estimate] = field(default_factory=list)
    """The victims sent here, as the extender will count their replacements (their estimates)."""
    sent_margins: list[Estimate] = field(default_factory=list)
    """The victims sent here, at their margins (what the "no new hot node" check counts)."""

    @classmethod
    def of(cls, node: NodeFacts, pods: list[PodFacts]) -> Target:
        t = cls(node)
        for p in pods:
            if not p.active:
                continue
            t.requested_cpu_milli += p.cpu_request_milli
            t.requested_memory_bytes += p.memory_request_bytes
            t.pods += 1
            t.placed.append(Estimate(p.uid, p.key, node.name, p.cpu_milli, p.memory_bytes, p.placed))
        return t

    def _estimate(self, pod: PodFacts, cpu: int, memory: int, now: float) -> Estimate:
        return Estimate(pod.uid, pod.key, self.node.name, cpu, memory, now)

    def reserve(self, pod: PodFacts, now: float, usage: Usage | None = None) -> None:
        """``pod`` goes here; ``usage`` is what it takes off its node (its estimate when not given)."""
        room = margin(pod, usage or Usage(pod.cpu_milli, pod.memory_bytes, ESTIMATED))
        self.reserved.append(pod)
        self.requested_cpu_milli += pod.cpu_request_milli
        self.requested_memory_bytes += pod.memory_request_bytes
        self.pods += 1
        self.sent.append(self._estimate(pod, pod.cpu_milli, pod.memory_bytes, now))
        self.sent_margins.append(self._estimate(pod, room.cpu_milli, room.memory_bytes, now))

    def after(self, pod: PodFacts, plan: MetricPlan, now: float) -> dict[str, float]:
        """Usage ratios per metric the extender will add: the estimates counted here plus ``pod``'s."""
        load = self.node.load
        incoming = self._estimate(pod, pod.cpu_milli, pod.memory_bytes, now)
        return extra(load, plan, units(load, plan, [*self.placed, *self.sent], now), incoming)

    def after_margin(self, pod: PodFacts, room: Usage, plan: MetricPlan, now: float) -> dict[str, float]:
        """Usage ratios per metric with the victims sent here and ``pod`` at their margins."""
        load = self.node.load
        incoming = self._estimate(pod, room.cpu_milli, room.memory_bytes, now)
        return extra(load, plan, units(load, plan, [*self.placed, *self.sent_margins], now), incoming)

    def standing(self, policy: Policy, plan: MetricPlan, now: float) -> float:
        """The extender's projected load with what is counted here: the lower, the better the target."""
        load = self.node.load
        counted = units(load, plan, [*self.placed, *self.sent], now)
        value = projected_load(load, policy, now, extra(load, plan, counted))
        return value if value is not None else float("inf")


def _tolerated(taint: tuple[str, str, str], tolerations: tuple[tuple[str, str, str, str], ...]) -> bool:
    key, value, effect = taint
    for t_key, op, t_value, t_effect in tolerations:
        if t_effect and t_effect != effect:
            continue
        if not t_key and op == "Exists":
            return True
        if t_key == key and (op == "Exists" or t_value == value):
            return True
    return False


def _expression(labels: Mapping[str, str], key: str, op: str, values: tuple[str, ...]) -> bool:
    have = labels.get(key)
    if op == "In":
        return have in values
    if op == "NotIn":
        return have not in values
    if op == "Exists":
        return have is not None
    if op == "DoesNotExist":
        return have is None
    if op in ("Gt", "Lt") and have is not None and values:
        try:
            a, b = int(have), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def _constraints(pod: PodFacts, node: NodeFacts) -> str | None:
    if node.unschedulable:
        return "cordoned"
    for taint in node.taints:
        if not _tolerated(taint, pod.tolerations):
            key, value, effect = taint
            return f"taint {key}{'=' + value if value else ''}:{effect} not tolerated"
    for key, want in pod.node_selector.items():
        if node.labels.get(key) != want:
            return f"nodeSelector {key}={want} does not match"
    if pod.affinity_terms is not None and not any(
        all(_expression(node.labels, *e) for e in term) for term in pod.affinity_terms
    ):
        return "required node affinity does not match"
    return None


def why_not(
    pod: PodFacts,
    target: Target,
    policy: Policy,
    settings: RebalanceSettings,
    plan: MetricPlan,
    now: float,
    usage: Usage | None = None,
) -> str | None:
    """Why ``pod`` would not be placed on ``target`` now, or ``None`` when it fits. ``usage`` is what the
    pod takes off its node (measured or estimated; its estimate when not given)."""
    node = target.node
    if (problem := _constraints(pod, node)) is not None:
        return problem
    load = node.load
    if load.allocatable_cpu_milli is not None and (
        target.requested_cpu_milli + pod.cpu_request_milli > load.allocatable_cpu_milli
    ):
        return "cpu requests exceed allocatable"
    if load.allocatable_memory_bytes is not None and (
        target.requested_memory_bytes + pod.memory_request_bytes > load.allocatable_memory_bytes
    ):
        return "memory requests exceed allocatable"
    if node.allocatable_pods is not None and target.pods + 1 > node.allocatable_pods:
        return "pod count at allocatable"
    rejection = check_node(load, policy, now, target.after(pod, plan, now))
    if rejection is not None:
        return f"the extender's filter: {rejection.reason}"
    room = margin(pod, usage or Usage(pod.cpu_milli, pod.memory_bytes, ESTIMATED))
    added = target.after_margin(pod, room, plan, now)
    for t in settings.thresholds:
        if t.high is None:
            continue
        sample = fresh(load.samples.get(t.name), t.valid_for, now)
        if sample is None:
            continue
        value = sample.value + added.get(t.name, 0.0)
        # At the precision a load annotation carries (5 decimals), as the agent would publish the target's
        # load: a sum such as 0.6 + 0.2 that lands on ``high`` up to float rounding is at ``high``.
        if above_high(round(value, 5), t.high):
            how = "its measured usage" if room.source == MEASURED else "max(request, estimate)"
            return f"would go above high: {t.name} {value:.2f} > {t.high:.2f} with the pod at {how}"
    return None
