"""A pressure metric wherever a policy may name a metric: predicate, priority, pools, the rebalancer's
thresholds. It is a signal, not a resource's usage: the extender adds no estimate of a just-placed pod to it
and the rebalancer projects no pod's share of it (one victim a cycle, then the next measurement)."""

from __future__ import annotations

from typing import Any

import yaml

from ballast.contract.annotations import format_load
from ballast.model.estimation import metric_plan
from ballast.model.ledger import Ledger
from ballast.model.load import check_node, score_node
from ballast.model.nodestate import parse_node
from ballast.model.podinfo import PodDemand
from ballast.model.policy import Policy, load_policy, parse_policy
from ballast.model.rebalance_policy import RebalanceSettings, rebalance_settings
from ballast.rebalancer.classify import Tracker
from ballast.rebalancer.limits import Limiter
from ballast.rebalancer.plan import plan_cycle
from ballast.testing.parts import ROOT
from tests.rebalancer.helpers import BASE, NOW, facts, pfacts, pod, stamp

PEAK = load_policy(ROOT / "scheduler_config" / "examples" / "peak-aware-policy.yaml")
PRESSURE = "cpu_pressure_some_avg_5m"


def load_of(name: str, values: dict[str, float], labels: dict[str, str] | None = None) -> Any:
    ann = {m: format_load(v, NOW - 30) for m, v in values.items()}
    obj = {
        "metadata": {"name": name, "annotations": ann, "labels": labels or {}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}},
    }
    return parse_node(obj, PEAK, NOW)


CALM = {
    "cpu_usage_avg_5m": 0.2,
    "cpu_usage_max_avg_1h": 0.3,
    "mem_usage_avg_5m": 0.2,
    "cpu_usage_p95_5m": 0.3,
}


def test_the_peak_aware_policy_filters_on_pressure_and_adds_no_estimate_to_it() -> None:
    plan = {m: r for m, r, _ in metric_plan(PEAK)}
    assert plan["cpu_usage_avg_5m"] == "cpu" and plan["cpu_usage_p95_5m"] == "cpu"
    assert PRESSURE not in plan  # no estimate is ever counted on it
    assert check_node(load_of("ok", {**CALM, PRESSURE: 0.1}), PEAK, NOW) is None
    rejected = check_node(load_of("stalled", {**CALM, PRESSURE: 0.3}), PEAK, NOW)
    assert rejected is not None and rejected.metric == PRESSURE
    # Three 1-CPU pods just placed on a node at 0.2 of its pressure limit 0.25: the usage metrics count them
    # (0.2 + 3 x 0.85 / 4 > 0.65), the pressure metric does not move.
    node = load_of("n", {**CALM, PRESSURE: 0.2})
    ledger = Ledger(PEAK, clock=lambda: NOW)
    for i in range(3):
        ledger.hold(PodDemand("ns", f"p{i}", f"p{i}", False, 1000, 1000, 1 << 28, 1 << 28), "n", NOW - 5)
    extra = ledger.extra(node, NOW)
    assert extra.get("cpu_usage_avg_5m", 0) > 0.5
    assert extra.get(PRESSURE, 0.0) == 0.0
    rejected = check_node(node, PEAK, NOW, extra)
    assert rejected is not None and rejected.metric == "cpu_usage_avg_5m"  # on usage, not on pressure


def test_pressure_weighs_in_priority_and_pools_may_set_their_own_limit() -> None:
    doc = yaml.safe_load((ROOT / "scheduler_config" / "examples" / "peak-aware-policy.yaml").read_text())
    doc["spec"]["priority"].append({"name": PRESSURE, "weight": 1.0})
    doc["spec"]["nodePools"] = [
        {"name": "batch", "nodeSelector": {"matchLabels": {"pool": "batch"}},
         "predicate": [{"name": PRESSURE, "maxLimitPecent": 0.6}]},
    ]  # fmt: skip
    policy = parse_policy(yaml.safe_dump(doc))
    calm = parse_node(_node("a", {**CALM, PRESSURE: 0.0}), policy, NOW)
    stalled = parse_node(_node("b", {**CALM, PRESSURE: 0.2}), policy, NOW)
    assert score_node(calm, policy, NOW).raw > score_node(stalled, policy, NOW).raw
    batch = parse_node(_node("c", {**CALM, PRESSURE: 0.4}, {"pool": "batch"}), policy, NOW)
    web = parse_node(_node("d", {**CALM, PRESSURE: 0.4}), policy, NOW)
    assert check_node(batch, policy, NOW) is None  # the pool's 0.6
    rejected = check_node(web, policy, NOW)
    assert rejected is not None and rejected.metric == PRESSURE and rejected.limit == 0.25
    # a pool's plan carries no resource for it either
    assert batch.limits is not None
    plan, _ = batch.limits.plans(False)
    assert [r for m, _, _, r in plan if m == PRESSURE] == [""]


def _node(name: str, values: dict[str, float], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": labels or {},
            "annotations": {m: f"{v:.5f},{stamp(NOW - 30)}" for m, v in values.items()},
        },
        "spec": {"taints": []},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }


def test_a_node_hot_on_pressure_moves_one_victim_a_cycle() -> None:
    doc_extra = {
        "thresholds": [
            {"name": "cpu_usage_avg_5m", "high": 0.80, "low": 0.45},
            {"name": PRESSURE, "high": 0.30, "low": 0.05},
        ]
    }
    p, s = _with_pressure_sync(doc_extra)
    assert {t.name: t.resource for t in s.thresholds} == {"cpu_usage_avg_5m": "cpu", PRESSURE: None}
    nodes = [
        _node("stalled", {"cpu_usage_avg_5m": 0.5, PRESSURE: 0.6}),
        _node("cool", {"cpu_usage_avg_5m": 0.2, PRESSURE: 0.0}),
    ]
    pods = pfacts(p, *(pod(x, "stalled", cpu="1", owner_name=f"o{x}") for x in "abc"))
    tracker, limiter = Tracker(), Limiter(s.limits)
    plan = None
    for _ in range(3):
        plan = plan_cycle(
            facts(nodes, p), lambda n: pods if n == "stalled" else [], p, s, tracker, limiter, NOW
        )
    assert plan is not None
    # hot on pressure alone (its usage is below high): one pod goes, not every one the limits allow
    assert len(plan.evictions) == 1 and plan.evictions[0].target == "cool"
    stalled = next(n for n in plan.nodes if n.name == "stalled")
    assert "one victim a cycle" in stalled.status and "measures no resource" in stalled.status


def _with_pressure_sync(rebalance: dict[str, Any]) -> tuple[Policy, RebalanceSettings]:
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    doc["spec"]["syncPolicy"].append({"name": PRESSURE, "period": "3m"})
    doc["spec"]["rebalance"].update(rebalance)
    policy = parse_policy(yaml.safe_dump(doc))
    settings = rebalance_settings(policy)
    assert settings is not None
    return policy, settings
