"""Filter and score against crane-scheduler's Dynamic plugin formulas, with Ballast's documented changes."""

from __future__ import annotations

import pytest

from app.model.annotations import format_hot_value, format_load
from app.model.load import check_node, score_node, to_extender_score
from app.model.nodestate import parse_node
from app.model.policy import Policy

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
    from app.model.policy import parse_policy

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
