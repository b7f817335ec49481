"""Hot, cool, normal, unknown; counting cycles; the wait for a newer measurement after an eviction."""

from __future__ import annotations

from ballast.model.nodestate import parse_node
from ballast.rebalancer.classify import Tracker, read_node
from tests.rebalancer.helpers import NOW, node, policy


def reading(cpu: float | None, at: float = NOW - 30):
    p, s = policy()
    return read_node(parse_node(node("n", cpu, at=at), p, NOW), s, NOW), s


def test_states_from_fresh_values() -> None:
    assert reading(0.81)[0].state == "hot"
    assert reading(0.80)[0].state == "normal"  # above high, not at it
    assert reading(0.45)[0].state == "normal"  # below low, not at it
    assert reading(0.44)[0].state == "cool"
    assert reading(0.91)[0].hot[0].metric == "cpu_usage_avg_5m"


def test_stale_or_missing_data_is_neither_hot_nor_cool() -> None:
    # valid for period 3m + 5m = 480 s
    assert reading(0.95, at=NOW - 481)[0].state == "unknown"
    assert reading(0.10, at=NOW - 481)[0].state == "unknown"
    assert reading(None)[0].state == "unknown"
    assert reading(0.95, at=NOW - 479)[0].state == "hot"


def test_a_metric_without_a_low_never_blocks_cool_but_a_missing_low_metric_does() -> None:
    p, s = policy(thresholds=[{"name": "cpu_usage_avg_5m", "high": 0.8, "low": 0.4},
                              {"name": "mem_usage_avg_5m", "high": 0.9}])  # fmt: skip
    load = parse_node(node("n", 0.1), p, NOW)  # no memory annotation at all
    assert read_node(load, s, NOW).state == "cool"
    p, s = policy(thresholds=[{"name": "cpu_usage_avg_5m", "high": 0.8, "low": 0.4},
                              {"name": "mem_usage_avg_5m", "high": 0.9, "low": 0.5}])  # fmt: skip
    assert read_node(parse_node(node("n", 0.1), p, NOW), s, NOW).state == "normal"


def test_counting_cycles() -> None:
    hot, s = reading(0.9)
    normal, _ = reading(0.6)
    unknown, _ = reading(None)
    t = Tracker()
    # consecutiveNormal is 2 in the helper policy
    assert [t.observe("n", r, s).abnormal for r in (hot, hot, normal, hot, unknown, hot)] == [
        1,
        2,
        2,
        3,
        3,
        4,
    ]
    assert t.observe("n", normal, s).abnormal == 4
    assert t.observe("n", normal, s).abnormal == 0  # two normal cycles in a row reset
    t.retain([])
    assert t.counts == {}


def test_after_an_eviction_the_node_waits_for_a_newer_measurement() -> None:
    t = Tracker()
    old, _ = reading(0.9, at=NOW - 60)
    new, _ = reading(0.9, at=NOW + 10)
    assert t.waiting_for_data("n", old) is None
    t.evicted("n", NOW - 5)
    assert t.waiting_for_data("n", old) == NOW - 5
    assert t.waiting_for_data("n", new) is None
