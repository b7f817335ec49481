"""The cycle's decisions: who is a victim, in which order, where it fits, and the limits."""

from __future__ import annotations

from typing import Any

from ballast.model.estimation import metric_plan
from ballast.rebalancer.classify import Tracker
from ballast.rebalancer.fit import Target, why_not
from ballast.rebalancer.limits import Limiter
from ballast.rebalancer.plan import plan_cycle
from ballast.rebalancer.victims import split
from tests.rebalancer.helpers import NOW, facts, node, pfacts, pod, policy


def run(nodes: list[dict[str, Any]], pods: list[dict[str, Any]], cycles: int = 3, **rebalance: Any):
    p, s = policy(**rebalance)
    nf = facts(nodes, p)
    by_node: dict[str, list] = {}
    for f in pfacts(p, *pods):
        by_node.setdefault(f.node, []).append(f)
    tracker, limiter = Tracker(), Limiter(s.limits)
    plan = None
    for _ in range(cycles):
        plan = plan_cycle(nf, lambda n: by_node.get(n, []), p, s, tracker, limiter, NOW)
    assert plan is not None
    return plan


HOT_POD_CPU = "2"  # estimate 0.85 * 2 = 1.7 CPU = 0.2125 of 8


def test_nothing_moves_before_the_count_nor_without_a_cool_node() -> None:
    nodes = [node("hot", 0.95), node("cool", 0.2)]
    pods = [pod("a", "hot", cpu=HOT_POD_CPU)]
    early = run(nodes, pods, cycles=2)
    assert early.evictions == [] and early.idle and "long enough" in early.idle
    assert early.nodes[0].status == "waiting: hot for 2 of 3 cycles"
    assert [c.outcome for c in early.nodes[0].candidates] == ["waiting"]
    none_cool = run([node("hot", 0.95), node("busy", 0.6)], pods)
    assert none_cool.evictions == [] and none_cool.idle == "no cool node to move pods to"
    acted = run(nodes, pods)
    assert [(c.pod.name, c.target) for c in acted.evictions] == [("a", "cool")]
    assert acted.evictions[0].message == (
        "cpu_usage_avg_5m 0.95 > high 0.80 for 3 cycles; usage estimated (cpu 1700m, memory 179Mi); "
        "fits on cool"
    )


def test_victims_until_the_projection_is_below_high() -> None:
    # 0.95 - 0.2125 = 0.7375 < 0.80: one victim is enough although two may go
    plan = run([node("hot", 0.95), node("cool", 0.2)],
               [pod("a", "hot", cpu="2"), pod("b", "hot", cpu="2", owner_name="db-x")])  # fmt: skip
    assert len(plan.evictions) == 1
    # 1-CPU pods (0.10625 each): 0.95 -> 0.84375 -> 0.7375, two go, the per-node limit
    plan = run([node("hot", 0.95), node("cool", 0.1)],
               [pod(x, "hot", cpu="1", owner_name=f"o{x}") for x in "abc"])  # fmt: skip
    assert len(plan.evictions) == 2
    # 500m pods (0.053 each) from 0.99: four would be needed, the limit stops at two
    plan = run([node("hot", 0.99), node("cool", 0.1)],
               [pod(x, "hot", cpu="500m", owner_name=f"o{x}") for x in "abcd"])  # fmt: skip
    assert len(plan.evictions) == 2
    assert plan.nodes[0].status.startswith("stopped by a limit: 2 evictions per node")
    assert [c.outcome for c in plan.nodes[0].candidates] == ["evict", "evict", "limited"]


def test_who_may_never_go() -> None:
    p, s = policy()
    pods = pfacts(
        p,
        pod("ds", "hot", owner="DaemonSet"),
        pod("bare", "hot", owner=None),
        pod("custom", "hot", owner="FooSet"),
        pod("optout", "hot", annotations={"ballast.io/evict": "false"}),
        pod("mirror", "hot", annotations={"kubernetes.io/config.mirror": "x"}),
        pod("sys", "hot", namespace="kube-system"),
        pod("local", "hot", volumes=[{"name": "v", "emptyDir": {}}]),
        pod("gone", "hot", deletionTimestamp="2026-01-01T00:00:00Z"),
        pod("ok", "hot"),
        pod("sts", "hot", owner="StatefulSet"),
        pod("job", "hot", owner="Job"),
    )
    candidates, skipped = split(pods, s)
    assert [c.name for c in candidates] == ["ok", "sts"]
    why = {f.name: w for f, w in skipped}
    assert "DaemonSet" in why["ds"] and "nothing would recreate" in why["bare"]
    assert "FooSet" in why["custom"] and "ballast.io/evict" in why["optout"] and "Job" in why["job"]
    assert "mirror" in why["mirror"] and "kube-system" in why["sys"]
    assert "local storage" in why["local"] and "terminating" in why["gone"]
    _, s2 = policy(evictLocalStorage=True, excludedNamespaces=[])
    assert {c.name for c in split(pods, s2)[0]} == {"ok", "sts", "local", "sys"}


def test_order_priority_then_qos_then_match_then_youngest() -> None:
    nodes = [node("hot", 0.99), node("cool", 0.1)]

    def first(*pods: dict[str, Any]) -> str:
        return run(nodes, list(pods), perNode=1).evictions[0].pod.name

    assert (
        first(pod("high", "hot", priority=100, owner_name="a"), pod("low", "hot", priority=0, owner_name="b"))
        == "low"
    )
    assert (
        first(
            pod("g", "hot", qos="Guaranteed", owner_name="a"),
            pod("be", "hot", qos="BestEffort", owner_name="b"),
        )
        == "be"
    )
    # excess 0.19 of 8 CPUs = 1.52 CPU: a 2-CPU pod (estimate 1.7) is enough alone, a 0.5-CPU one is not
    assert (
        first(pod("small", "hot", cpu="500m", owner_name="a"), pod("match", "hot", cpu="2", owner_name="b"))
        == "match"
    )
    old = pod("old", "hot", created=NOW - 9000, owner_name="a")
    assert first(old, pod("young", "hot", created=NOW - 60, owner_name="b")) == "young"


def test_the_fit_check_and_reservations() -> None:
    p, s = policy()
    plan = metric_plan(p)
    nf = facts([node("c", 0.40, labels={"zone": "a"}, taints=[{"key": "gpu", "effect": "NoSchedule"}])], p)
    target = Target.of(nf["c"], [])
    victim = pfacts(p, pod("v", "hot", cpu="1"))[0]
    assert "taint gpu:NoSchedule" in why_not(victim, target, p, s, plan, NOW)
    tolerant = pfacts(p, pod("v", "hot", cpu="1", tolerations=[{"key": "gpu", "operator": "Exists"}]))[0]
    assert why_not(tolerant, target, p, s, plan, NOW) is None
    picky = pfacts(p, pod("v", "hot", node_selector={"zone": "b"}, tolerations=[{"operator": "Exists"}]))[0]
    assert "nodeSelector zone=b" in why_not(picky, target, p, s, plan, NOW)
    # the extender's filter with estimates: 0.40 + 2 x 0.10625 = 0.6125 passes 0.65, a third does not
    target.reserve(tolerant, NOW)
    target.reserve(tolerant, NOW)
    reason = why_not(tolerant, target, p, s, plan, NOW)
    assert reason is not None and reason.startswith("the extender's filter: load cpu_usage_avg_5m")
    big = pfacts(p, pod("big", "hot", cpu="7", tolerations=[{"operator": "Exists"}]))[0]
    assert why_not(big, target, p, s, plan, NOW) == "cpu requests exceed allocatable"
    cordoned = facts([node("x", 0.1, unschedulable=True)], p)["x"]
    assert why_not(victim, Target.of(cordoned, []), p, s, plan, NOW) == "cordoned"


def test_ten_victims_do_not_all_count_on_one_target() -> None:
    # one cool node with room for two 1-CPU estimates under the 0.65 filter (0.40 + 0.2125)
    hot = [node(f"hot{i}", 0.99) for i in range(3)]
    pods = [pod(f"p{i}{j}", f"hot{i}", cpu="1", owner_name=f"o{i}{j}") for i in range(3) for j in range(2)]
    plan = run([*hot, node("cool", 0.40)], pods, perCycle=10, perNamespace=10)
    assert len(plan.evictions) == 2
    outcomes = plan.outcomes()
    assert outcomes["evict"] == 2 and outcomes["no_fit"] == 4


def test_recently_placed_pods_count_on_the_target() -> None:
    # two pods bound to the cool node after its measurement fill its room: nothing fits there
    hot = node("hot", 0.99)
    cool = node("cool", 0.40, at=NOW - 60)
    placed = [pod(f"new{i}", "cool", cpu="1", owner_name="x") for i in range(2)]
    for pl in placed:
        pl["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2027-01-15T08:00:00Z"}
        ]
    plan = run([hot, cool], [pod("v", "hot", cpu="1"), *placed])
    assert plan.evictions == [] and plan.outcomes()["no_fit"] == 1


def test_limits_per_namespace_and_workload() -> None:
    p, s = policy(perWorkload=1, workloadWindow="5m")
    limiter = Limiter(s.limits)
    a, b = pfacts(p, pod("a", "n1", owner_name="web-abc"), pod("b", "n2", owner_name="web-abc"))
    assert a.workload == "default/Deployment/web"
    assert limiter.refuse(a, NOW) is None
    limiter.plan(a)
    assert "eviction(s) of default/Deployment/web" in limiter.refuse(b, NOW)
    limiter.commit(a, NOW)
    limiter.begin(s.limits)
    assert limiter.refuse(b, NOW + 299) is not None
    assert limiter.refuse(b, NOW + 301) is None
    p, s = policy(perNamespace=1)
    limiter = Limiter(s.limits)
    a, b = pfacts(p, pod("a", "n1", owner_name="x"), pod("b", "n2", owner_name="y"))
    limiter.plan(a)
    assert "per namespace" in limiter.refuse(b, NOW)


def test_the_view_says_why() -> None:
    plan = run([node("hot", 0.95), node("cool", 0.2), node("mid", 0.6)],
               [pod("a", "hot", cpu="2"), pod("ds", "hot", owner="DaemonSet")])  # fmt: skip
    view = plan.to_json()
    assert view["nodes"] == {"cool": 1, "hot": 1, "normal": 1}
    (watched,) = view["watched"]
    assert watched["node"] == "hot" and watched["consecutiveAbnormal"] == 3
    by_pod = {c["pod"]: c for c in watched["candidates"]}
    assert by_pod["default/a"]["outcome"] == "evict" and by_pod["default/a"]["target"] == "cool"
    assert by_pod["default/ds"]["outcome"] == "skipped" and "DaemonSet" in by_pod["default/ds"]["why"]


def test_the_cost_of_pods_that_fit_nowhere_is_bounded(monkeypatch) -> None:
    """Eight candidates of one shape that fit nowhere (a nodeSelector no cool node matches): the cool
    nodes are checked once for the shape, and the node's turn ends after five misses."""
    import ballast.rebalancer.plan as plan_module

    calls = []
    real = plan_module.why_not
    monkeypatch.setattr(plan_module, "why_not", lambda *a: calls.append(a[1].node.name) or real(*a))
    pods = [
        pod(f"p{i}", "hot", cpu="500m", owner_name=f"o{i}", node_selector={"disk": "ssd"}) for i in range(8)
    ]
    plan = run([node("hot", 0.99), *[node(f"cool{i}", 0.1) for i in range(4)]], pods)
    (hot,) = [n for n in plan.nodes if n.name == "hot"]
    assert [c.outcome for c in hot.candidates] == ["no_fit"] * 5
    assert hot.status.startswith("stopped: 5 candidates fit on no cool node")
    assert "nodeSelector disk=ssd does not match" in hot.candidates[4].why
    assert len(calls) == 4  # the one acting cycle (the third) checks the four cool nodes once for the shape
