"""Relative scoring (the default): candidates ranked by projected load after the pod, the least loaded 10
alone, the others 7 down to 0 for the most loaded; ``spec.scoring: crane`` keeps crane's absolute formula.
And a burst through it spreads like water, also under kube-scheduler's own scores and asynchronous binds."""

from __future__ import annotations

import dataclasses
import math
import random

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ballast.contract.annotations import format_hot_value, format_load
from ballast.extender.encode import ScoreAnswers
from ballast.extender.explain import explain
from ballast.extender.extender import Extender
from ballast.extender.metrics import ExtenderMetrics
from ballast.extender.wire import ExtenderArgs
from ballast.model.ledger import Ledger
from ballast.model.load import RUNNER_UP, projected_load, relative_scores
from ballast.model.nodestate import NodeState, parse_node
from ballast.model.podinfo import pod_info
from ballast.model.policy import PolicyError, load_policy, parse_policy
from ballast.model.policy_store import PolicyStore
from ballast.testing.node_source import StaticSource
from ballast.testing.parts import POLICY_FILE
from bench.spread import cv, water_fill
from tests.oracle import Oracle

RELATIVE = load_policy(POLICY_FILE)
CRANE = dataclasses.replace(RELATIVE, scoring="crane")
MEAN = dataclasses.replace(RELATIVE, dominant_resource_weight=0.0)
"""The shipped policy without its dominant-resource term: the weighted mean alone (crane's ranking)."""
NOW = 1_800_000_000.0
CPU_MILLI = 4000
MEMORY = 16 << 30
LIMIT = 0.65  # cpu_usage_avg_5m's predicate in the bundled policy


def make_node(name: str, usage: float, hot: int | None = None, policy=RELATIVE) -> NodeState:
    ann = {m: format_load(usage, NOW - 30) for m in policy.sync_periods}
    if hot is not None:
        ann["node_hot_value"] = format_hot_value(hot, NOW - 30)
    alloc = {"cpu": f"{CPU_MILLI}m", "memory": str(MEMORY)}
    return parse_node(
        {"metadata": {"name": name, "annotations": ann}, "status": {"allocatable": alloc}}, policy, NOW
    )


def pod(i: int, cpu: str = "200m", memory: str = "256Mi") -> dict:
    return {
        "metadata": {"name": f"p{i}", "namespace": "ns", "uid": f"u{i}"},
        "spec": {"containers": [{"resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
    }


def extender(loads: dict[str, NodeState], policy) -> Extender:
    return Extender(
        PolicyStore(policy), ExtenderMetrics(), StaticSource(loads), Ledger(policy, lambda: NOW), lambda: NOW
    )


def scores(ext: Extender, names: list[str], i: int = 0, encoded: bool = True) -> dict[str, int]:
    """The scores prioritize answers; ``encoded``: as the HTTP layer sends them (``ballast.extender.encode``),
    else as the verb decides them."""
    answer = ext.prioritize(ExtenderArgs(pod(i), None, names))
    parsed = orjson.loads(ScoreAnswers(ext.board)(answer)) if encoded else answer.entries()
    return {h["Host"]: h["Score"] for h in parsed}


# -- the pure ranking -------------------------------------------------------------------------------


def test_relative_scores_best_ten_alone_the_others_seven_down_to_zero() -> None:
    # 0.32: 7 * (0.44 - 0.32) / 0.14 = 6; 0.37: 7 * 0.07 / 0.14 = 3.5 rounds half up
    assert relative_scores([0.30, 0.32, 0.44, 0.37]) == [10, 6, 0, 4]
    assert relative_scores([0.30, 0.3000001, 0.5]) == [10, 7, 0]  # just above the least: three levels below
    assert relative_scores([0.30, 0.30 + 1e-12, 0.5]) == [10, 10, 0]  # float noise is a tie
    assert relative_scores([0.5, None, 0.2]) == [0, 0, 10]  # no information scores 0
    assert relative_scores([0.4, 0.4, 0.4]) == [10, 10, 10]  # all equal: all best
    assert relative_scores([None, None]) == [0, 0]
    assert relative_scores([]) == []


def _relative_by_definition(loads: list[float | None]) -> list[int]:
    """``relative_scores`` as its docstring says, one candidate at a time (no fast paths)."""
    known = [x for x in loads if x is not None]
    if not known:
        return [0] * len(loads)
    best, worst = min(known), max(known)
    out = []
    for x in loads:
        if x is None:
            out.append(0)
        elif worst - best <= 1e-9 or x <= best + 1e-9:
            out.append(10)
        else:
            out.append(math.floor((best + (worst - best) - x) * (RUNNER_UP / (worst - best)) + 0.5))
    return out


@given(st.lists(st.one_of(st.none(), st.floats(0, 3)), max_size=40), st.booleans())
def test_relative_scores_equal_the_definition_with_and_without_missing_loads(loads, complete) -> None:
    """The fast path for candidates that all have information gives the same scores as the general one."""
    if complete:
        loads = [x for x in loads if x is not None]
    assert relative_scores(loads) == _relative_by_definition(loads)


loads_st = st.lists(st.one_of(st.none(), st.floats(-1, 3, allow_nan=False)), min_size=1, max_size=40)


@given(loads=loads_st)
def test_relative_scores_properties(loads) -> None:
    out = relative_scores(loads)
    assert all(type(s) is int and 0 <= s <= 10 for s in out)
    known = [(x, s) for x, s in zip(loads, out, strict=True) if x is not None]
    assert all(s == 0 for x, s in zip(loads, out, strict=True) if x is None)
    if known:
        assert max(s for _, s in known) == 10  # the least loaded candidate is always best
        best = min(x for x, _ in known)
        if max(x for x, _ in known) - best > 1e-6:
            assert min(s for _, s in known) == 0  # the most loaded is worst when loads differ
        for x, s in known:  # the least loaded leads every other candidate by three levels
            if x > best + 1e-6:
                assert s <= RUNNER_UP
            if x == best:
                assert s == 10
    for x, s in known:  # monotonic: less load never scores lower; equal loads score equally
        for y, t in known:
            if x <= y:
                assert s >= t


# -- through the extender ---------------------------------------------------------------------------


def test_default_ranks_close_loads_apart_where_crane_ties() -> None:
    loads = {n: make_node(n, u) for n, u in (("a", 0.30), ("b", 0.32), ("c", 0.36))}
    # crane: (1 - u) * 100 -> 70, 68, 64 -> 7, 7, 6: a burst sees a and b as equal
    assert scores(extender(loads, CRANE), ["a", "b", "c"]) == {"a": 7, "b": 7, "c": 6}
    # relative: a leads; b is 7 * 0.04 / 0.06 = 4.67 -> 5
    assert scores(extender(loads, RELATIVE), ["a", "b", "c"]) == {"a": 10, "b": 5, "c": 0}


def test_relative_scores_the_load_after_this_pod() -> None:
    """A bigger node gains less load from the same pod: it can win although it is busier now."""
    small = make_node("small", 0.30)
    big = dataclasses.replace(
        make_node("big", 0.34), allocatable_cpu_milli=64000, allocatable_memory_bytes=256 << 30
    )
    ext = extender({"small": small, "big": big}, RELATIVE)
    assert scores(ext, ["small", "big"]) == {"small": 10, "big": 0}  # a small pod: "small" stays lower
    heavy = ExtenderArgs(pod(1, cpu="2", memory="4Gi"), None, ["small", "big"])
    got = {h["Host"]: h["Score"] for h in orjson.loads(ScoreAnswers(ext.board)(ext.prioritize(heavy)))}
    assert got == {"small": 0, "big": 10}  # 2 cores are 42 % of small (after 0.85) but 2.7 % of big


def test_hot_value_weighs_like_ten_percent_load_per_unit() -> None:
    loads = {
        "hot": make_node("hot", 0.20, hot=1),
        "warm": make_node("warm", 0.28),
        "busy": make_node("busy", 0.33),
    }
    hot = projected_load(loads["hot"], RELATIVE, NOW)
    assert hot == pytest.approx(0.30)
    # hot is 0.02 above warm, 0.03 below busy: 7 * 0.03 / 0.05 = 4.2 -> 4
    assert scores(extender(loads, RELATIVE), ["hot", "warm", "busy"]) == {"hot": 4, "warm": 10, "busy": 0}


def test_unmeasured_and_unknown_nodes_score_zero_and_stay_out_of_the_range() -> None:
    loads = {"a": make_node("a", 0.30), "b": make_node("b", 0.60), "bare": NodeState("bare")}
    assert scores(extender(loads, RELATIVE), ["a", "b", "bare", "ghost"]) == {
        "a": 10,
        "b": 0,
        "bare": 0,
        "ghost": 0,
    }


def test_scoring_is_a_validated_policy_field() -> None:
    base = "apiVersion: scheduler.policy.crane.io/v1alpha1\nkind: DynamicSchedulerPolicy\nspec:\n"
    assert parse_policy(base + "  syncPolicy: []\n").scoring == "relative"
    assert parse_policy(base + "  scoring: crane\n").scoring == "crane"
    assert parse_policy(base + "  scoring: crane\n").to_json()["scoring"] == "crane"
    # spec.topology sits beside it (the validator used to reject it as an unknown field)
    assert parse_policy(base + "  topology: {scoreWeight: 0.3}\n").topology.score_weight == 0.3
    with pytest.raises(PolicyError) as exc:
        parse_policy(base + "  scoring: fancy\n", "p.yaml")
    assert any(p == "spec.scoring" and "relative, crane" in r for p, r in exc.value.problems)


@pytest.mark.parametrize("encoded", [True, False])
def test_a_tie_at_the_top_is_held_where_kube_scheduler_goes(encoded: bool) -> None:
    """Equal scores are kube-scheduler's to break, by its request-based plugins: fewer pods win. The hold
    goes to the tied candidate with the fewest of Ballast's estimates, so the next pod sees this one where
    it will land (the first of the tied candidates had a pod already). The oracle (the definition, node
    by node) agrees."""
    loads = {"a": make_node("a", 0.30), "b": make_node("b", 0.35), "c": make_node("c", 0.50)}
    ext = extender(loads, MEAN)
    oracle = Oracle(loads, MEAN, NOW)
    for ledger in (ext.ledger, oracle.ledger):
        ledger.bound(None, "earlier", "a", NOW, size=(400, 0))  # a: 0.30 + 0.4 cores / 4 * cpu's half
    assert scores(ext, ["a", "b", "c"], encoded=encoded) == {"a": 10, "b": 10, "c": 0}
    assert oracle.prioritize(pod(0), ["a", "b", "c"]) == [
        {"Host": "a", "Score": 10},
        {"Host": "b", "Score": 10},
        {"Host": "c", "Score": 0},
    ]
    for ledger in (ext.ledger, oracle.ledger):
        held = ledger.known("u0")
        assert held is not None and held.node == "b"


# -- a burst, simulated ------------------------------------------------------------------------------


CPU_PER_POD = round(200 * 0.85) / CPU_MILLI
MEMORY_PER_POD = round((256 << 20) * 0.70) / MEMORY


def per_pod(policy) -> float:
    """What one pod(i) adds to a node's projected load: its cpu and memory estimates, each half the
    priority weight (1.0 of 2.0), and with the dominant-resource term D the cpu estimate once more, D
    times: on a node loaded alike on both resources cpu dominates from the first pod on (a pod adds more
    of it)."""
    d = policy.dominant_resource_weight
    return (CPU_PER_POD + MEMORY_PER_POD + d * max(CPU_PER_POD, MEMORY_PER_POD)) / (2 + d)


POD_CPU_MILLI, POD_MEMORY = 200, 256 << 20  # pod(i)'s requests


def request_plugins(pods: int) -> int:
    """kube-scheduler's own scores for a node already holding ``pods`` of the burst, with pod(i) added:
    NodeResourcesFit (LeastAllocated, cpu and memory weight 1) plus NodeResourcesBalancedAllocation, each
    0..100 at plugin weight 1, in Go's integer arithmetic. Both favour the node with fewer pods."""
    cpu = (pods + 1) * POD_CPU_MILLI
    mem = (pods + 1) * POD_MEMORY
    least = ((CPU_MILLI - cpu) * 100 // CPU_MILLI + (MEMORY - mem) * 100 // MEMORY) // 2
    balanced = int((1 - abs(min(1.0, cpu / CPU_MILLI) - min(1.0, mem / MEMORY)) / 2) * 100)
    return least + balanced


def simulate_burst(
    policy, pods: int, seed: int, weight: int | None = None, bind_lag: int = 0
) -> tuple[list[float], list[float], int]:
    """Greedy kube-scheduler in process: filter, prioritize, bind to a random top-scored node (as
    kube-scheduler's selectHost does among equal scores). With ``weight`` the top is by kube-scheduler's
    total, ``score * weight * 10 + request_plugins`` (counting its pods at once, as its cache assumes
    them); with ``bind_lag`` Ballast hears of each bind that many pods later (kube-scheduler binds
    asynchronously: meanwhile only prioritize's hold says where the pod went). Returns the nodes'
    projected load (``projected_load``: annotated + estimates) before and after, and how many nodes ended
    over the cpu limit."""
    rng = random.Random(seed)
    usage = [0.10 + 0.38 * i / 19 for i in range(20)]
    rng.shuffle(usage)
    loads = {f"n{i}": make_node(f"n{i}", u, policy=policy) for i, u in enumerate(usage)}
    names = list(loads)
    ext = extender(loads, policy)
    assert ext.ledger is not None
    assumed = dict.fromkeys(names, 0)
    binding: list[tuple[dict, int, str]] = []
    for i in range(pods):
        args = ExtenderArgs(pod(i), None, names)
        passing = ext.filter(args)["NodeNames"]
        got = scores(ext, passing, i) if len(passing) > 1 else {n: 10 for n in passing}
        if weight is not None:
            got = {n: s * weight * 10 + request_plugins(assumed[n]) for n, s in got.items()}
        top = max(got.values(), default=None)
        chosen = rng.choice([n for n in passing if got[n] == top])
        assumed[chosen] += 1
        binding.append((args.pod, i, chosen))
        while len(binding) > bind_lag:
            obj, j, node = binding.pop(0)
            ext.ledger.bound(pod_info(obj), f"u{j}", node, NOW)
    for obj, j, node in binding:
        ext.ledger.bound(pod_info(obj), f"u{j}", node, NOW)
    before = [projected_load(loads[n], policy, NOW) for n in names]
    after = [projected_load(loads[n], policy, NOW, ext.ledger.extra(loads[n], NOW)) for n in names]
    over = sum(
        usage[i] + ext.ledger.extra(loads[n], NOW).get("cpu_usage_avg_5m", 0.0) > LIMIT
        for i, n in enumerate(names)
    )
    return before, after, over


@pytest.mark.parametrize("policy", [RELATIVE, MEAN], ids=["shipped", "mean-only"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_burst_spreads_like_water_filling(seed: int, policy) -> None:
    before, after, over = simulate_burst(policy, 100, seed)
    ideal = water_fill(before, [per_pod(policy)] * 100)
    assert sum(after) == pytest.approx(sum(ideal))  # every pod placed, as in the ideal
    assert over == 0
    assert cv(after) <= 1.25 * cv(ideal), (cv(after), cv(ideal))


def test_crane_scoring_spreads_worse_than_the_default() -> None:
    """What the default fixes: crane's 0.1-wide score steps let a burst pile onto ties."""
    results = []
    for seed in (1, 2, 3):
        before, after, _ = simulate_burst(CRANE, 100, seed)
        results.append(cv(after) / cv(water_fill(before, [per_pod(CRANE)] * 100)))
    assert min(results) > 1.25, results


@pytest.mark.parametrize("policy", [RELATIVE, MEAN], ids=["shipped", "mean-only"])
@pytest.mark.parametrize("bind_lag", [0, 1, 2, 4])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_burst_spreads_like_water_under_kube_schedulers_total(seed: int, bind_lag: int, policy) -> None:
    """kube-scheduler adds its own request-based scores, which favour the node with fewer pods (the busier
    one in a burst), and binds asynchronously: the least loaded candidate must lead by enough that the
    scheduler follows it, so the hold prioritize puts there is where the pod went."""
    before, after, over = simulate_burst(policy, 100, seed, weight=3, bind_lag=bind_lag)
    ideal = water_fill(before, [per_pod(policy)] * 100)
    assert sum(after) == pytest.approx(sum(ideal))
    assert over == 0
    assert cv(after) <= 1.25 * cv(ideal), (cv(after), cv(ideal))


def test_water_fill_levels_the_lowest_first() -> None:
    assert water_fill([0.1, 0.5, 0.3], [0.1] * 4) == pytest.approx([0.4, 0.5, 0.4])
    assert water_fill([0.6, 0.62], [0.1], limit=0.65) == [0.6, 0.62]  # nothing fits: the pod stays pending
    assert cv([1.0, 1.0]) == 0.0 and cv([1.0, 3.0]) == pytest.approx(0.5)


def test_explain_and_nodes_rank_like_prioritize() -> None:
    loads = {n: make_node(n, u) for n, u in (("a", 0.30), ("b", 0.32), ("c", 0.36))}
    out = explain(extender(loads, RELATIVE), pod(0), ["a", "b", "c"], None)
    got = {v["name"]: (v["score"]["score"], v["score"]["craneScore"]) for v in out["nodes"]}
    assert got == {"a": (10, 7), "b": (5, 7), "c": (0, 6)}
    assert out["favoured"] == "a"
    crane = explain(extender(loads, CRANE), pod(0), ["a", "b", "c"], None)
    assert [v["score"]["score"] for v in crane["nodes"]] == [7, 7, 6]


def test_explain_and_nodes_show_each_resource_and_the_dominant_one() -> None:
    """/explain and /nodes show each resource's projected load (what is placed there, not this pod: the
    loads the dominant term ranks by) and which one dominates, whatever the weight of the term."""
    ann = {m: format_load(0.20 if m.startswith("cpu") else 0.50, NOW - 30) for m in RELATIVE.sync_periods}
    alloc = {"cpu": f"{CPU_MILLI}m", "memory": str(MEMORY)}
    body = {"metadata": {"name": "m", "annotations": ann}, "status": {"allocatable": alloc}}
    load = parse_node(body, RELATIVE, NOW)
    for policy in (RELATIVE, MEAN):
        ext = extender({"m": load}, policy)
        assert ext.ledger is not None
        ext.ledger.bound(None, "earlier", "m", NOW, size=(400, 0))  # cpu 0.2 + 0.1
        (view,) = explain(ext, pod(0), ["m"], None)["nodes"]
        score = view["score"]
        assert score["resources"] == pytest.approx({"cpu": 0.3, "memory": 0.5}, abs=1e-6)
        assert score["dominantResource"] == "memory"
        assert score["dominantResourceWeight"] == policy.dominant_resource_weight
        d = policy.dominant_resource_weight
        mean = (0.3 + CPU_PER_POD + 0.5 + MEMORY_PER_POD) / 2  # this pod counts in the mean
        assert score["projectedLoad"] == pytest.approx((2 * mean + d * 0.5) / (2 + d), abs=1e-6)


def test_turning_the_dominant_term_off_on_a_running_extender_ranks_by_the_mean_again() -> None:
    """An operator sets dominantResourceWeight to 0 (a policy reload): the board drops what it kept per
    pod estimate and prioritize ranks as the weighted mean alone says, and back."""

    def node(name: str, cpu: float, mem: float) -> NodeState:
        ann = {m: format_load(cpu if m.startswith("cpu") else mem, NOW - 30) for m in RELATIVE.sync_periods}
        alloc = {"cpu": f"{CPU_MILLI}m", "memory": str(MEMORY)}
        body = {"metadata": {"name": name, "annotations": ann}, "status": {"allocatable": alloc}}
        return parse_node(body, RELATIVE, NOW)

    # memory-full's mean is lower (0.30 against 0.33), its dominant load far higher (0.55 against 0.33)
    loads = {"memory-full": node("memory-full", 0.05, 0.55), "balanced": node("balanced", 0.33, 0.33)}
    ext = extender(loads, RELATIVE)
    names = ["memory-full", "balanced"]
    with_term = {"memory-full": 0, "balanced": 10}
    assert scores(ext, names, 0) == with_term
    ext.store.set(MEAN)
    assert scores(ext, names, 1) == {"memory-full": 10, "balanced": 0}
    ext.store.set(RELATIVE)
    assert scores(ext, names, 2) == with_term
