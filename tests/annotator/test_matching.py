"""Series -> node matching: rule order, ports, IPv6, unusable values, deterministic conflicts."""

from __future__ import annotations

import math

import pytest

from ballast.annotator.matching import MatchRule, NodeAddresses, Series, host_of, match_series


def s(instance: str | None, value: float, **labels: str) -> Series:
    base = {"__name__": "cpu_usage_avg_5m", **labels}
    if instance is not None:
        base["instance"] = instance
    return Series(base, value)


NODES = [
    NodeAddresses("worker-1", ("10.0.0.1",)),
    NodeAddresses("worker-2", ("10.0.0.2",)),
    NodeAddresses("worker-3", ("10.0.0.3", "fd00::3")),
    NodeAddresses("worker-4", ()),
]


@pytest.mark.parametrize(
    ("text", "host"),
    [
        ("10.0.0.1:9100", "10.0.0.1"),
        ("10.0.0.1", None),
        ("worker-1:9100", "worker-1"),
        ("[fd00::3]:9100", "fd00::3"),
        ("fd00::3", None),
        ("[fd00::3]", None),
        ("10.0.0.1:", None),
        ("10.0.0.1:abc", None),
        (":9100", None),
    ],
)
def test_host_of(text: str, host: str | None) -> None:
    assert host_of(text) == host


def test_each_rule_matches_its_form() -> None:
    result = match_series(
        [s("10.0.0.1", 10), s("10.0.0.2:9100", 20), s("[fd00::3]:9100", 30), s("worker-4:9100", 40)], NODES
    )
    assert result.values == {"worker-1": 10, "worker-2": 20, "worker-3": 30, "worker-4": 40}
    assert result.rules == {
        "worker-1": MatchRule.IP,
        "worker-2": MatchRule.IP_PORT,
        "worker-3": MatchRule.IP_PORT,
        "worker-4": MatchRule.NAME_PORT,
    }
    assert result.unmatched == 0 and not result.conflicts


def test_ip_beats_ip_port_beats_name_beats_name_port() -> None:
    node = [NodeAddresses("worker-1", ("10.0.0.1",))]
    forms = [("10.0.0.1", 1), ("10.0.0.1:9100", 2), ("worker-1", 3), ("worker-1:9100", 4)]
    for i in range(len(forms)):
        present = forms[i:]
        result = match_series([s(text, v) for text, v in reversed(present)], node)
        assert result.values == {"worker-1": present[0][1]}, present
        assert result.rules["worker-1"] == MatchRule(i)
        assert not result.conflicts  # different rules are not a conflict


def test_exact_match_only_no_regex_or_prefix() -> None:
    # crane's instance=~"10.0.0.1" also matched 10.0.0.10 and 10x0x0x1; exact string equality does not.
    result = match_series([s("10.0.0.10", 50), s("10x0x0x1", 60), s("10.0.0.1.nip.io", 70)], NODES)
    assert result.values == {}
    assert result.unmatched == 3


def test_unusable_values_are_no_data_and_fall_through() -> None:
    result = match_series(
        [
            s("10.0.0.1", math.nan),
            s("worker-1", 42),  # a lower rule with a usable value still serves
            s("10.0.0.2", -5),
            s("10.0.0.3", math.inf),
        ],
        NODES,
    )
    assert result.values == {"worker-1": 42}
    assert result.rules["worker-1"] == MatchRule.NAME
    assert set(result.unusable) == {"worker-2", "worker-3"}
    assert result.unusable["worker-2"] == -5


def test_conflict_keeps_highest_then_smallest_labels_regardless_of_order() -> None:
    a = s("10.0.0.1:9100", 30, job="node-exporter")
    b = s("10.0.0.1:9101", 55, job="other")
    c = s("10.0.0.1:9102", 55, job="another")
    for order in ([a, b, c], [c, b, a], [b, a, c]):
        result = match_series(order, NODES)
        assert result.values == {"worker-1": 55}
        (conflict,) = result.conflicts
        assert conflict.node == "worker-1" and conflict.rule == MatchRule.IP_PORT
        # Equal values: the smallest sorted label set wins (instance ...:9101 < ...:9102).
        assert conflict.kept.labels["job"] == "other"
        assert [d.labels["job"] for d in conflict.dropped] == ["another", "node-exporter"]


def test_other_label_and_missing_label() -> None:
    series = [Series({"node": "worker-2"}, 12), Series({}, 99), s("10.0.0.1", 1)]
    result = match_series(series, NODES, label="node")
    assert result.values == {"worker-2": 12}
    assert result.unmatched == 2


def test_dual_stack_ipv6_exact() -> None:
    result = match_series([s("fd00::3", 7)], NODES)
    assert result.values == {"worker-3": 7}
    assert result.rules["worker-3"] == MatchRule.IP


def test_scales_linearly() -> None:
    nodes = [NodeAddresses(f"n{i}", (f"10.{i // 65536}.{i // 256 % 256}.{i % 256}",)) for i in range(5000)]
    series = [s(f"{n.internal_ips[0]}:9100", i % 100) for i, n in enumerate(nodes)]
    result = match_series(series, nodes)
    assert len(result.values) == 5000 and result.unmatched == 0
