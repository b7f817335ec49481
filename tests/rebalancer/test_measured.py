"""Measured usage from NodeLoads, the target's margin, moved pods settling, and the smaller decision rules.

Pure: the plan with ``NodeLoadCache`` filled from NodeLoad objects as the agent renders them
(``ballast.contract.nodeload.render_status``), the way the watch fills it.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from ballast.contract.nodeload import NodeLoadStatus, PodUsage, new_object, render_status
from ballast.model.estimation import metric_plan
from ballast.model.policy import parse_policy
from ballast.rebalancer.classify import Tracker
from ballast.rebalancer.fit import Target, why_not
from ballast.rebalancer.limits import Limiter
from ballast.rebalancer.nodeloads import NodeLoadCache
from ballast.rebalancer.plan import SKIPPED, WAITING, plan_cycle
from ballast.rebalancer.policy_check import policy_warnings
from ballast.rebalancer.run import run as run_rebalancer
from ballast.rebalancer.victims import ESTIMATED, MEASURED
from ballast.testing.fakekube import FakeKube
from tests.rebalancer.helpers import BASE, NOW, facts, node, pfacts, pod, stamp
from tests.rebalancer.helpers import policy as base_policy
from tests.rebalancer.test_run import parse, policy_file, seed

INTERVAL = 60.0
WIDE = [{"name": "cpu_usage_avg_5m", "maxLimitPecent": 0.90}]
"""The scenario's extender limit, above high: only the rebalancer's own rule keeps a target below high."""


def policy(predicate: list[dict[str, Any]] | None = None, **rebalance: Any):
    """``helpers.policy`` with, when given, another ``spec.predicate``."""
    if predicate is None:
        return base_policy(**rebalance)
    saved = BASE["spec"]["predicate"]
    BASE["spec"]["predicate"] = predicate
    try:
        return base_policy(**rebalance)
    finally:
        BASE["spec"]["predicate"] = saved


def nodeload(
    name: str, usages: dict[str, float], *, at: float = NOW - 20, uids: dict[str, str] | None = None
) -> dict[str, Any]:
    """A NodeLoad as the agent writes it: ``usages`` is pod name -> cores (uid ``uid-NAME`` unless given)."""
    uids = uids or {}
    pods = tuple(
        PodUsage("default", n, uids.get(n, f"uid-{n}"), cores, 100 * 2**20) for n, cores in usages.items()
    )
    obj = new_object(name, None)
    obj["status"] = render_status(NodeLoadStatus(at, 300.0, sum(usages.values()), 2**30, pods))
    return obj


def cache(*objects: dict[str, Any]) -> NodeLoadCache:
    c = NodeLoadCache(INTERVAL)
    c.replace(list(objects), "1")
    return c


def run(
    nodes: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    loads: NodeLoadCache | None = None,
    *,
    cycles: int = 3,
    tracker: Tracker | None = None,
    at: float = NOW,
    predicate: list[dict[str, Any]] | None = None,
    **rebalance: Any,
):
    p, s = policy(predicate, **rebalance)
    nf = facts(nodes, p)
    by_node: dict[str, list] = {}
    for f in pfacts(p, *pods):
        by_node.setdefault(f.node, []).append(f)
    tracker = tracker or Tracker()
    limiter = Limiter(s.limits)
    plan = None
    for _ in range(cycles):
        plan = plan_cycle(
            nf, lambda n: by_node.get(n, []), p, s, tracker, limiter, at,
            measured=(lambda n: loads.fresh(n, at)) if loads is not None else None,
        )  # fmt: skip
    assert plan is not None
    return plan


HOT = 0.95  # of 8 CPUs: 1.2 CPU above high 0.80
FOUR = [pod(f"p{i}", "hot", cpu="500m", owner_name=f"w{i}", created=NOW - 3600 + i) for i in range(4)]
TRUE = {"p0": 0.1, "p1": 0.2, "p2": 1.0, "p3": 1.3}  # p3 alone takes the node to 0.7875


def test_measured_usage_orders_and_takes_the_fewest_victims() -> None:
    nodes = [node("hot", HOT), node("cool", 0.1)]
    # by estimates (0.425 CPU each) four pods would be needed; the per-node limit stops at two
    estimated = run(nodes, FOUR, perNode=4)
    assert len(estimated.evictions) == 3
    assert {c.usage.source for c in estimated.evictions} == {ESTIMATED}
    measured = run(nodes, FOUR, cache(nodeload("hot", TRUE)), perNode=4)
    assert [c.pod.name for c in measured.evictions] == ["p3"]
    (victim,) = measured.evictions
    assert victim.usage.source == MEASURED and victim.usage.cpu_milli == 1300
    assert "usage measured (cpu 1300m" in victim.message
    view = measured.to_json()
    assert view["evictions"][0]["usage"] == {
        "source": "measured",
        "cpuMilli": 1300,
        "memoryBytes": 100 * 2**20,
    }
    assert view["watched"][0]["candidates"][0]["usage"]["source"] == "measured"


def test_no_single_pod_suffices_then_the_heaviest_go_first() -> None:
    nodes = [node("hot", 0.99), node("cool", 0.1)]  # 1.52 CPU above high: p3 then p2
    plan = run(nodes, FOUR, cache(nodeload("hot", TRUE)), perNode=4)
    assert [c.pod.name for c in plan.evictions] == ["p3", "p2"]


def test_a_pod_alone_enough_goes_before_a_heavier_one_but_priority_still_comes_first() -> None:
    nodes = [node("hot", HOT), node("cool", 0.1)]
    loads = cache(nodeload("hot", {"p0": 1.25, "p1": 3.0}))
    two = [pod("p0", "hot", cpu="500m", owner_name="a"), pod("p1", "hot", cpu="500m", owner_name="b")]
    assert [c.pod.name for c in run(nodes, two, loads).evictions] == ["p0"]  # the smallest that is enough
    ranked = [pod("p0", "hot", cpu="500m", owner_name="a", priority=10), two[1]]
    assert [c.pod.name for c in run(nodes, ranked, loads).evictions] == ["p1"]


def test_each_pod_falls_back_to_its_estimate_without_a_fresh_measurement() -> None:
    nodes = [node("hot", HOT), node("cool", 0.1)]
    partial = run(nodes, FOUR, cache(nodeload("hot", {"p3": 1.3, "p0": 0.1})), cycles=2)
    sources = {c.pod.name: c.usage.source for c in partial.nodes[0].candidates}
    assert sources == {"p0": MEASURED, "p1": ESTIMATED, "p2": ESTIMATED, "p3": MEASURED}
    assert {c.outcome for c in partial.nodes[0].candidates} == {WAITING}
    stale = cache(nodeload("hot", TRUE, at=NOW - 2 * INTERVAL - 1))
    assert {c.usage.source for c in run(nodes, FOUR, stale, cycles=2).nodes[0].candidates} == {ESTIMATED}
    future = cache(nodeload("hot", TRUE, at=NOW + INTERVAL + 5))
    assert {c.usage.source for c in run(nodes, FOUR, future, cycles=2).nodes[0].candidates} == {ESTIMATED}
    other_node = cache(nodeload("cool", TRUE))  # a pod counts only on its own node's NodeLoad
    assert {c.usage.source for c in run(nodes, FOUR, other_node, cycles=2).nodes[0].candidates} == {ESTIMATED}


@pytest.mark.parametrize(
    "bad",
    [
        None, 7, "x", [], {}, {"metadata": {}}, {"metadata": {"name": 3}, "status": {}},
        {"metadata": {"name": "hot"}, "status": {"updateTime": "never"}},
        {"metadata": {"name": "hot"},
         "status": {"updateTime": stamp(NOW), "window": "5m", "node": {"cpu": "1e400", "memory": "1"}}},
    ],
)  # fmt: skip
def test_a_bad_nodeload_is_no_information_for_its_node_and_never_stops_the_watch(bad: Any) -> None:
    c = cache(bad, nodeload("other", {"p0": 1.0}))
    assert c.fresh("hot", NOW) == {} and c.fresh("other", NOW) == {"uid-p0": (1000, 100 * 2**20)}
    c.apply("MODIFIED", bad)
    c.apply("ADDED", nodeload("hot", {"p1": 0.5}))
    assert c.fresh("hot", NOW) == {"uid-p1": (500, 100 * 2**20)}
    c.apply("MODIFIED", {"metadata": {"name": "hot"}, "status": "garbage"})
    assert c.fresh("hot", NOW) == {}
    c.apply("DELETED", nodeload("other", {}))
    assert c.fresh("other", NOW) == {}


def test_the_target_counts_a_victim_at_its_measured_usage() -> None:
    """The target at 0.40 of 8 CPUs: the pod measured at 3 cores would take it to 0.775 (below 0.80), at
    3.5 cores to 0.8375; its estimate from a 500m request (0.425) would say 0.45."""
    nodes = [node("hot", 0.99), node("cool", 0.40)]
    pods = [pod("big", "hot", cpu="500m")]
    assert [c.target for c in run(nodes, pods, cache(nodeload("hot", {"big": 3.0}))).evictions] == ["cool"]
    refused = run(nodes, pods, cache(nodeload("hot", {"big": 3.5})))
    assert refused.evictions == []
    (choice,) = refused.nodes[0].candidates
    assert "would go above high: cpu_usage_avg_5m 0.84 > 0.80 with the pod at its measured usage" in (
        choice.why
    )


@pytest.mark.parametrize(
    ("background", "cpu", "high"),
    [
        (0.5, "2", 0.75),  # 0.5 + 2 CPUs / 8 = 0.75, binary-exact
        (0.1, "1600m", 0.3),  # 0.1 + 0.2 is 0.30000000000000004 in floats: at high as an annotation says it
    ],
)
def test_a_target_may_reach_high(background: float, cpu: str, high: float) -> None:
    """The hot rule's boundary: a node is hot only above high, so a move that brings a target exactly to
    high makes no new hot node (koord-descheduler rejects a target only when ``used > threshold``)."""
    p, s = policy(WIDE, thresholds=[{"name": "cpu_usage_avg_5m", "high": high, "low": high / 2}])
    nf = facts([node("c", background)], p)
    victim = pfacts(p, pod("v", "hot", cpu=cpu))[0]
    assert why_not(victim, Target.of(nf["c"], []), p, s, metric_plan(p), NOW) is None


def test_a_target_above_high_is_refused() -> None:
    """0.5 + 2.1 CPUs / 8 = 0.7625, above high 0.75."""
    p, s = policy(WIDE, thresholds=[{"name": "cpu_usage_avg_5m", "high": 0.75, "low": 0.6}])
    nf = facts([node("c", 0.5)], p)
    victim = pfacts(p, pod("v", "hot", cpu="2100m"))[0]
    why = why_not(victim, Target.of(nf["c"], []), p, s, metric_plan(p), NOW)
    assert why == "would go above high: cpu_usage_avg_5m 0.76 > 0.75 with the pod at max(request, estimate)"


def test_no_ping_pong_an_estimated_victim_needs_room_for_its_request() -> None:
    """The scenario: a 3-CPU pod on 8-CPU nodes, target background 0.44, high 0.80, the extender's limit
    0.90. Its estimate (2.55 CPU) predicts 0.76 on the target; really it adds 3/8 and the target reads
    0.815, hot, and the pod goes back. The target must have room for the request: no move."""
    nodes = [node("n1", 0.815), node("n4", 0.44)]
    pods = [pod("big", "n1", cpu="3")]
    plan = run(nodes, pods, predicate=WIDE, consecutiveAbnormal=2, perWorkload=10)  # fmt: skip
    assert plan.evictions == []
    assert "0.81 > 0.80 with the pod at max(request, estimate)" in plan.nodes[0].candidates[0].why
    # with a measured usage of 2.5 CPU (0.3125) it fits: 0.7525, and stays so
    loads = cache(nodeload("n1", {"big": 2.5}))
    assert [c.target for c in run(nodes, pods, loads, predicate=WIDE, consecutiveAbnormal=2).evictions] == [
        "n4"
    ]


def test_a_replacement_settles_before_it_moves_again() -> None:
    """The first move records the owner (the ReplicaSet); its replacement, placed on ``n4`` after the
    eviction, is not a victim there until ``n4`` has read hot for consecutiveAbnormal cycles on
    measurements newer than its arrival, however long ``n4`` has been hot before."""
    tracker = Tracker()
    first = run(
        [node("n1", 0.99), node("n4", 0.1)], [pod("web-1", "n1", owner_name="web-abc")], tracker=tracker
    )
    assert [c.pod.name for c in first.evictions] == ["web-1"]
    later = NOW + 120
    arrival = {"status": {"phase": "Running", "qosClass": "Burstable", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(NOW + 60)}]}}  # fmt: skip
    replacement = {**pod("web-2", "n4", owner_name="web-abc"), **arrival}
    # n4 turns hot on measurements older than the replacement's arrival (NOW + 30): counted three times
    hot_before = [node("n4", 0.99, at=NOW + 30), node("n5", 0.1, at=later - 10)]
    plan = run(hot_before, [replacement], tracker=tracker, at=later)
    (choice,) = plan.nodes[0].candidates
    assert plan.evictions == [] and choice.outcome == SKIPPED
    assert "moved here" in choice.why and "(0 so far)" in choice.why
    # measurements newer than its arrival: two cycles are not enough, the third is
    hot_after = [node("n4", 0.99, at=NOW + 90), node("n5", 0.1, at=later - 10)]
    assert run(hot_after, [replacement], tracker=tracker, at=later, cycles=2).evictions == []
    assert [
        c.pod.name for c in run(hot_after, [replacement], tracker=tracker, at=later, cycles=1).evictions
    ] == ["web-2"]
    # a pod of another owner on the same node, or one that was there before the eviction, is not held
    other = {**pod("db-1", "n4", owner_name="db-xyz"), **arrival}
    assert [c.pod.name for c in run(hot_before, [other], tracker=Tracker(), at=later).evictions] == ["db-1"]


def test_a_node_without_readable_cpu_allocatable_gives_one_victim_a_cycle() -> None:
    nodes = [node("hot", 0.95, alloc_cpu="lots"), node("cool", 0.1)]
    pods = [pod(f"p{i}", "hot", owner_name=f"w{i}") for i in range(3)]
    plan = run(nodes, pods)
    assert len(plan.evictions) == 1
    assert "one victim a cycle" in plan.nodes[0].status


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_node_acts_at_its_nth_hot_cycle(n: int) -> None:
    nodes = [node("hot", 0.99), node("cool", 0.1)]
    pods = [pod("a", "hot")]
    assert run(nodes, pods, cycles=n - 1, consecutiveAbnormal=n).evictions == [] if n > 1 else True
    assert len(run(nodes, pods, cycles=n, consecutiveAbnormal=n).evictions) == 1


def test_policy_warnings_name_a_filter_limit_missing_or_not_below_high() -> None:
    p, s = policy()
    assert policy_warnings(p, s) == ()  # the filter limit 0.65 is below high 0.80
    p, s = policy(predicate=[{"name": "cpu_usage_avg_5m", "maxLimitPecent": 0.90}])
    (warning,) = policy_warnings(p, s)
    assert warning.startswith(
        "cpu_usage_avg_5m: spec.predicate limit 0.9 is not below the rebalancer's high 0.8"
    )
    p, s = policy(predicate=[{"name": "cpu_usage_avg_5m", "maxLimitPecent": 0.80}])
    assert len(policy_warnings(p, s)) == 1  # at high is not below it
    p, s = policy(predicate=[])
    (warning,) = policy_warnings(p, s)
    assert "has no filter limit" in warning
    assert policy_warnings(parse_policy(_without_rebalance()), None) == ()


def _without_rebalance() -> str:
    import yaml

    doc = yaml.safe_load(yaml.safe_dump(BASE))
    del doc["spec"]["rebalance"]
    return yaml.safe_dump(doc)


def test_once_dry_run_json_says_which_usage_each_victim_was_counted_at(
    fake_kube: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    """``--once --dry-run --json`` against the fake API server with a fresh NodeLoad that lists one of the
    hot node's two pods: that one is ``measured`` (0.1 CPU), the other ``estimated`` (0.425 CPU, so it is
    the heavier and goes first); the Events say the same."""
    seed(fake_kube)
    rt = fake_kube.register_custom_resource(
        "ballast.io", "v1alpha1", "nodeloads", "NodeLoad", status_subresource=True
    )
    uid = fake_kube.get("pods", "web-0", namespace="default")["metadata"]["uid"]
    loaded = nodeload("hot", {"web-0": 0.1}, at=time.time() - 5, uids={"web-0": uid})
    fake_kube.add(loaded, resource=rt)
    out = io.StringIO()
    path = policy_file(tmp_path, consecutiveAbnormal=1)
    args = parse("--policy", str(path), "--kubeconfig", str(kubeconfig), "--once", "--dry-run", "--json")
    assert run_rebalancer(args, out=out) == 0
    view = json.loads(out.getvalue())
    assert view["watched"]["nodeLoads"] == 1
    evictions = view["lastCycle"]["evictions"]
    assert [(e["pod"], e["usage"]["source"]) for e in evictions] == [
        ("default/web-1", "estimated"),
        ("default/web-0", "measured"),
    ]
    assert evictions[1]["usage"]["cpuMilli"] == 100
    messages = sorted(e["message"] for e in fake_kube.list("events"))
    assert "usage estimated (cpu 425m" in messages[0] + messages[1]
    assert "usage measured (cpu 100m" in messages[0] + messages[1]


def test_a_new_leader_learns_the_moves_from_the_events_and_lets_the_replacement_settle() -> None:
    """The previous leader evicted a pod of ``default/Deployment/web`` (its Event says so); its
    replacement landed on ``n4``, which reads hot on measurements from before the replacement came. A new
    leader that rebuilt its promises from that Event leaves the replacement alone; one that had no Event
    to read would move it again."""
    from ballast.rebalancer.cache import NodeCache, PodCache
    from ballast.rebalancer.evictor import Evictor
    from ballast.rebalancer.metrics import RebalancerMetrics
    from ballast.rebalancer.run import Rebalancer
    from tests.rebalancer.test_promises import event
    from tests.rebalancer.test_run import Calls

    p, _ = policy(consecutiveAbnormal=1)
    arrival = {"status": {"phase": "Running", "qosClass": "Burstable", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(NOW - 60)}]}}  # fmt: skip
    replacement = {**pod("web-2", "n4", owner_name="web-abc"), **arrival}

    def new_leader(events: list[dict[str, Any]] | None) -> Any:
        nodes, pods = NodeCache(lambda: p, clock=lambda: NOW), PodCache(lambda: p)
        nodes.replace([node("n4", 0.99, at=NOW - 90), node("n5", 0.1, at=NOW - 10)], "1")
        pods.replace([replacement], "1")
        r = Rebalancer(lambda: p, nodes, pods, Evictor(Calls(), dry_run=True), RebalancerMetrics(),  # type: ignore[arg-type]
                       clock=lambda: NOW, sleep=lambda s: None, term=lambda: 1,
                       events=(lambda: (events, NOW)) if events is not None else None)  # fmt: skip
        plan = r.cycle()
        assert plan is not None
        return plan

    moved_before = [  # a dry run's Event: this leader runs dry too (a real one counts "Rebalanced")
        event(
            "uid-web-1", "RebalanceDryRun", NOW - 70, node="n1", workload="default/Deployment/web", dry=True
        )
    ]
    kept = new_leader(moved_before)
    (choice,) = kept.nodes[0].candidates
    assert kept.evictions == [] and choice.outcome == SKIPPED and "moved here" in choice.why
    assert [c.pod.name for c in new_leader([]).evictions] == ["web-2"]
