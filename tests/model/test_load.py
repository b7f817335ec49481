"""Filter and score against crane-scheduler's Dynamic plugin formulas, with Ballast's documented changes."""

from __future__ import annotations

import dataclasses

import pytest

from ballast.contract.annotations import format_hot_value, format_load
from ballast.model.load import (
    check_node,
    dominant_of,
    project,
    projected_load,
    resource_loads,
    score_node,
    to_extender_score,
)
from ballast.model.nodestate import parse_node
from ballast.model.policy import Policy

NOW = 1_800_000_000.0
METRICS = (
    "cpu_usage_avg_5m",
    "cpu_usage_max_avg_1h",
    "cpu_usage_max_avg_1d",
    "mem_usage_avg_5m",
    "mem_usage_max_avg_1h",
    "mem_usage_max_avg_1d",
)


def node(values: dict[str, float | tuple[float, float]], hot: tuple[int, float] | None = None) -> dict:
    """Node with annotations; a value is a ratio (measured 60 s ago) or (ratio, age seconds)."""
    ann = {}
    for k, v in values.items():
        ratio, age = v if isinstance(v, tuple) else (v, 60.0)
        ann[k] = format_load(ratio, NOW - age)
    if hot is not None:
        ann["node_hot_value"] = format_hot_value(hot[0], NOW - hot[1])
    return {
        "metadata": {"name": "n1", "annotations": ann},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}},
    }


ALL = dict(zip(METRICS, (0.3, 0.4, 0.5, 0.2, 0.3, 0.4), strict=True))


@pytest.fixture
def policy(policy: Policy) -> Policy:
    """The bundled policy as crane reads it: crane has no dominant-resource term (the tables at the end
    of this module hold it)."""
    return dataclasses.replace(policy, dominant_resource_weight=0.0)


def crane_raw(values: dict[str, float], policy: Policy) -> int:
    """crane's formula, transcribed: missing metrics add 0 but keep their weight."""
    total = sum((1 - values[p.name]) * p.weight * 100 for p in policy.priorities if p.name in values)
    return int(total / sum(p.weight for p in policy.priorities))


@pytest.mark.parametrize(
    ("values", "hot", "raw", "final", "score"),
    [
        (ALL, None, 62, 62, 6),  # (0.14+0.18+0.25+0.16+0.21+0.30)*100 / 2.0
        (ALL, (2, 60), 62, 42, 4),  # hot value 2 -> -20
        (ALL, (7, 60), 62, 0, 0),  # clamped at 0
        (ALL, (2, 301), 62, 62, 6),  # hot value older than 5 minutes is ignored
        ({k: 0.25 for k in METRICS}, None, 75, 75, 8),  # 7.5 rounds half up
        ({k: 0.0 for k in METRICS}, None, 100, 100, 10),
        ({k: 1.0 for k in METRICS}, None, 0, 0, 0),
        ({}, None, 0, 0, 0),  # no information at all: scores 0
    ],
)
def test_score_table(policy: Policy, values, hot, raw, final, score) -> None:
    s = score_node(parse_node(node(values, hot), policy, NOW), policy, NOW)
    assert (s.raw, s.final, s.score) == (raw, final, score)
    if len(values) == len(METRICS):
        assert s.raw == crane_raw(values, policy)  # identical to crane when every metric is known


def test_missing_metric_left_out_of_both_sums(policy: Policy) -> None:
    values = {k: v for k, v in ALL.items() if not k.endswith("_1d")}
    s = score_node(parse_node(node(values), policy, NOW), policy, NOW)
    # (0.14 + 0.18 + 0.16 + 0.21) * 100 / (0.2 + 0.3 + 0.2 + 0.3) = 69; crane: 69 / 2.0 = 34
    assert s.raw == 69 and s.score == 7
    assert crane_raw(values, policy) == 34


def test_stale_metric_left_out(policy: Policy) -> None:
    values = dict(ALL)
    values["cpu_usage_max_avg_1d"] = (0.0, 3 * 3600 + 301)  # older than period 3h + 5m
    values["mem_usage_max_avg_1d"] = (0.0, 3 * 3600 + 299)  # still fresh
    s = score_node(parse_node(node(values), policy, NOW), policy, NOW, explain=True)
    fresh = {t.metric: t.fresh for t in s.terms}
    assert fresh["cpu_usage_max_avg_1d"] is False and fresh["mem_usage_max_avg_1d"] is True
    # (0.14+0.18+0.16+0.21)*100 + 1.0*0.5*100 = 119 over weight 1.5 -> 79
    assert s.raw == 79


@pytest.mark.parametrize(
    ("values", "rejected_by"),
    [
        ({"cpu_usage_avg_5m": 0.66}, "cpu_usage_avg_5m"),
        ({"cpu_usage_avg_5m": 0.65}, None),  # strictly above the limit
        ({"cpu_usage_avg_5m": (0.99, 481)}, None),  # stale: period 3m + 5m = 480 s
        ({"cpu_usage_avg_5m": (0.99, 479)}, "cpu_usage_avg_5m"),
        ({"mem_usage_max_avg_1h": 0.76}, "mem_usage_max_avg_1h"),
        ({"cpu_usage_max_avg_1d": 0.99}, None),  # not a predicate in the default policy
        ({}, None),
    ],
)
def test_filter_table(policy: Policy, values, rejected_by) -> None:
    r = check_node(parse_node(node(values), policy, NOW), policy, NOW)
    assert (r.metric if r else None) == rejected_by


def test_rejection_reason_names_metric_value_limit_and_age(policy: Policy) -> None:
    r = check_node(parse_node(node({"cpu_usage_avg_5m": (0.83399, 72)}), policy, NOW), policy, NOW)
    assert r is not None
    assert r.reason == "load cpu_usage_avg_5m is 0.83399, above the limit 0.65 (measured 1m12s ago)"


def test_zero_limit_disables_predicate() -> None:
    from ballast.model.policy import parse_policy

    p = parse_policy(
        "spec:\n  syncPolicy: [{name: cpu_usage_avg_5m, period: 3m}]\n"
        "  predicate: [{name: cpu_usage_avg_5m, maxLimitPecent: 0}]\n"
    )
    assert check_node(parse_node(node({"cpu_usage_avg_5m": 0.99}), p, NOW), p, NOW) is None


def test_malformed_annotations_never_reject(policy: Policy) -> None:
    n = node({})
    n["metadata"]["annotations"] = {
        "cpu_usage_avg_5m": "NaN,2026-11-22T07:00:00Z",
        "mem_usage_avg_5m": "0.99",
        "cpu_usage_max_avg_1h": "0.99,not-a-time",
        "node_hot_value": "lots,now",
    }
    load = parse_node(n, policy, NOW)
    assert load.samples == {} and load.hot is None
    assert check_node(load, policy, NOW) is None
    assert score_node(load, policy, NOW).score == 0


def test_extra_estimated_usage_can_reject_and_lowers_score(policy: Policy) -> None:
    load = parse_node(node({"cpu_usage_avg_5m": 0.60, "mem_usage_avg_5m": 0.10}), policy, NOW)
    assert check_node(load, policy, NOW) is None
    r = check_node(load, policy, NOW, {"cpu_usage_avg_5m": 0.06})
    assert r is not None and r.metric == "cpu_usage_avg_5m" and "estimated" in r.reason
    assert score_node(load, policy, NOW, {"cpu_usage_avg_5m": 0.3}).raw < score_node(load, policy, NOW).raw


@pytest.mark.parametrize(("final", "score"), [(0, 0), (4, 0), (5, 1), (14, 1), (15, 2), (95, 10), (100, 10)])
def test_extender_score_rounding(final: int, score: int) -> None:
    assert to_extender_score(final) == score


# -- the dominant-resource term (spec.dominantResourceWeight) ------------------------------------------

# ALL's resources: cpu 0.3*0.2 + 0.4*0.3 + 0.5*0.5 = 0.43, memory 0.2*0.2 + 0.3*0.3 + 0.4*0.5 = 0.33 (the
# weights of each resource sum to 1.0); crane's scores of them 57 and 67, and 124 over both (weight 2.0).
CPU_HEAVY = ALL
MEMORY_HEAVY = {m: (v if m.startswith("cpu") else v + 0.3) for m, v in ALL.items()}  # memory 0.63


@pytest.mark.parametrize(
    ("values", "weight", "loads", "dominant", "projected", "raw"),
    [
        (CPU_HEAVY, 0.0, {"cpu": 0.43, "memory": 0.33}, "cpu", 0.76 / 2, 62),
        (CPU_HEAVY, 2.0, {"cpu": 0.43, "memory": 0.33}, "cpu", (0.76 + 2 * 0.43) / 4, 59),  # 238 / 4
        (CPU_HEAVY, 12.0, {"cpu": 0.43, "memory": 0.33}, "cpu", (0.76 + 12 * 0.43) / 14, 57),  # 808 / 14
        (MEMORY_HEAVY, 0.0, {"cpu": 0.43, "memory": 0.63}, "memory", 1.06 / 2, 47),
        (MEMORY_HEAVY, 12.0, {"cpu": 0.43, "memory": 0.63}, "memory", (1.06 + 12 * 0.63) / 14, 38),  # 538/14
        # only memory measured: memory is the dominant resource, whatever its load
        ({"mem_usage_avg_5m": 0.1}, 12.0, {"memory": 0.1}, "memory", 0.1, 90),
        # cpu and memory equal: cpu is named
        ({k: 0.25 for k in METRICS}, 12.0, {"cpu": 0.25, "memory": 0.25}, "cpu", 0.25, 75),
        ({}, 12.0, {}, None, None, 0),  # no information: no dominant resource, scores 0
    ],
)
def test_dominant_resource_table(policy: Policy, values, weight, loads, dominant, projected, raw) -> None:
    """koordinator's rule: (sum(w * x) + D * worst) / (sum(w) + D), on crane's scores and on loads."""
    p = dataclasses.replace(policy, dominant_resource_weight=weight)
    load = parse_node(node(values), p, NOW)
    got = resource_loads(load, p, NOW)
    assert got == pytest.approx(loads) and got.keys() == loads.keys()
    assert dominant_of(got) == dominant
    assert projected_load(load, p, NOW) == (None if projected is None else pytest.approx(projected))
    assert score_node(load, p, NOW).raw == raw


def test_dominant_resource_weight_zero_is_the_mean_alone(policy: Policy) -> None:
    """An operator turns the term off with 0: the projected load and the score are crane's again."""
    load = parse_node(node(MEMORY_HEAVY), policy, NOW)
    assert projected_load(load, policy, NOW) == pytest.approx(1.06 / 2)
    assert projected_load(load, policy, NOW, pod=(800, 0)) == pytest.approx((1.06 + 0.1) / 2)
    assert score_node(load, policy, NOW).raw == crane_raw(MEMORY_HEAVY, policy)


TWO_METRICS = (
    "spec:\n  syncPolicy: [{name: cpu_usage_avg_5m, period: 3m}, {name: mem_usage_avg_5m, period: 3m}]\n"
    "  priority: [{name: cpu_usage_avg_5m, weight: 1}, {name: mem_usage_avg_5m, weight: 1}]\n"
)


def after(load, p: Policy, cpu: int, mem: int) -> float:
    """The board's form: the standing load and its growth per millicore and byte."""
    base, per_milli, per_byte = project(load, p, NOW)
    return base + cpu * per_milli + mem * per_byte


@pytest.mark.parametrize("pod", [(0, 3 << 30), (2000, 0), (500, 512 << 20)])
def test_a_node_short_of_one_resource_ranks_below_a_balanced_one(pod) -> None:
    """A node near its memory but idle on cpu looks less loaded on the mean (0.30 against 0.33) and took
    every pod; with the dominant term it ranks by its memory, whatever the pod's shape."""
    from ballast.model.policy import parse_policy

    plain = parse_policy(TWO_METRICS)
    dominant = parse_policy(TWO_METRICS + "  dominantResourceWeight: 12\n")
    nodes = {
        "memory-full": {"cpu_usage_avg_5m": 0.05, "mem_usage_avg_5m": 0.55},
        "balanced": {"cpu_usage_avg_5m": 0.33, "mem_usage_avg_5m": 0.33},
    }

    def ranked(p: Policy) -> list[str]:
        loads = {n: parse_node(node(v), p, NOW) for n, v in nodes.items()}
        return sorted(loads, key=lambda n: after(loads[n], p, *pod))

    assert ranked(plain) == ["memory-full", "balanced"]
    assert ranked(dominant) == ["balanced", "memory-full"]


def test_the_dominant_term_is_the_nodes_standing_load_and_the_pod_counts_in_the_mean() -> None:
    """(sum(w * (u + estimates + pod)) + D * max_r standing load_r) / (sum(w) + D): the estimates of pods
    already on the node count in both, this pod's in the mean only."""
    from ballast.model.policy import parse_policy

    p = parse_policy(TWO_METRICS + "  dominantResourceWeight: 2\n")
    load = parse_node(node({"cpu_usage_avg_5m": 0.2, "mem_usage_avg_5m": 0.4}), p, NOW)
    placed = {"cpu_usage_avg_5m": 0.1}  # the node's cpu 0.3 with a pod placed, memory 0.4 dominant
    this_pod = (4000, 0)  # +0.5 of the node's 8 cores: cpu 0.8 after it, in the mean only
    assert projected_load(load, p, NOW, placed) == pytest.approx((0.3 + 0.4 + 2 * 0.4) / 4)
    assert projected_load(load, p, NOW, placed, this_pod) == pytest.approx((0.8 + 0.4 + 2 * 0.4) / 4)
    more = {"cpu_usage_avg_5m": 0.3}  # now cpu 0.5 standing: it dominates
    assert projected_load(load, p, NOW, more, this_pod) == pytest.approx((1.0 + 0.4 + 2 * 0.5) / 4)
    assert resource_loads(load, p, NOW, more) == pytest.approx({"cpu": 0.5, "memory": 0.4})


@pytest.mark.parametrize("weight", [0.0, 1.0, 12.0, 100.0])
@pytest.mark.parametrize("pod", [(0, 0), (4000, 0), (0, 8 << 30), (250, 1 << 30), (8000, 32 << 30)])
@pytest.mark.parametrize(
    "values", [CPU_HEAVY, MEMORY_HEAVY, {"cpu_usage_avg_5m": 0.2}, {"mem_usage_avg_5m": 0.2}]
)
@pytest.mark.parametrize("placed", [{}, {"cpu_usage_avg_5m": 0.3, "mem_usage_max_avg_1d": 0.05}])
def test_project_is_projected_load_with_the_pod(policy: Policy, weight, pod, values, placed) -> None:
    """The board's form (``project``, then a multiply-add per pod) is the definition, whatever the pod."""
    p = dataclasses.replace(policy, dominant_resource_weight=weight)
    load = parse_node(node(values), p, NOW)
    base, per_milli, per_byte = project(load, p, NOW, placed)
    assert base + pod[0] * per_milli + pod[1] * per_byte == pytest.approx(
        projected_load(load, p, NOW, placed, pod), abs=1e-12
    )
    if weight == 0:  # without the term the pod's share may as well sit in the extra (what it used to be)
        extra = dict(placed)
        for m in METRICS:
            extra[m] = extra.get(m, 0.0) + (pod[0] / 8000 if m.startswith("cpu") else pod[1] / (32 << 30))
        assert projected_load(load, p, NOW, placed, pod) == pytest.approx(projected_load(load, p, NOW, extra))
