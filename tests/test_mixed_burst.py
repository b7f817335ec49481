"""Placement quality on mixed node sizes and pod shapes (``bench.mixed_burst``), in process.

Ballast's verbs place the burst (filter, prioritize, the top score, the load pre-bind check); the bench's
own arithmetic, which shares nothing with Ballast's scoring, computes the online greedy it is held to.
Deterministic: the layout, the arrival order and the tie-breaks are seeded. How fast it runs is the
bench's business, not this module's.
"""

from __future__ import annotations

import dataclasses

import pytest

from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE
from bench.mixed_burst import Node, ballast, burst, greedy, koordinator_form, offline_ideal, outcome, scenario

SHIPPED = load_policy(POLICY_FILE)
MEAN = dataclasses.replace(SHIPPED, dominant_resource_weight=0.0)


def test_the_shipped_policy_balances_the_dominant_resource_within_a_tenth_of_the_greedy() -> None:
    """The goal, and the design choice: the dominant term on the nodes' standing loads ends at least as
    even as koordinator's form of it (the pod counted in the term) at the same weight."""
    nodes, pods = scenario(), burst()
    ref = outcome(nodes, greedy(nodes, pods), pods)
    got = outcome(nodes, ballast(SHIPPED, nodes, pods), pods)
    assert (got.over, got.pending) == (0, 0)
    assert got.cv <= 1.1 * ref.cv, (got.cv, ref.cv)
    koordinator = outcome(nodes, koordinator_form(nodes, pods, SHIPPED.dominant_resource_weight), pods)
    assert got.cv <= koordinator.cv, (got.cv, koordinator.cv)


def test_the_weighted_mean_alone_falls_behind_the_greedy() -> None:
    """What the term fixes: without it (weight 0, crane's ranking) the same burst ends less even."""
    nodes, pods = scenario(), burst()
    ref = outcome(nodes, greedy(nodes, pods), pods)
    got = outcome(nodes, ballast(MEAN, nodes, pods), pods)
    assert got.over == 0
    assert got.cv > 1.2 * ref.cv, (got.cv, ref.cv)


def test_the_scenario_is_the_one_described() -> None:
    nodes, pods = scenario(), burst()
    assert sorted(n.cpu_milli // 1000 for n in nodes) == sorted([4, 8, 16, 32, 64] * 4)
    assert all(n.memory_bytes == n.cpu_milli // 1000 * (4 << 30) for n in nodes)
    assert min(n.cpu for n in nodes) == 0.05 and max(n.cpu for n in nodes) == 0.6
    assert min(n.memory for n in nodes) == 0.2 and max(n.memory for n in nodes) == 0.5
    assert sorted(set(pods)) == [(100, 128 << 20), (500, 512 << 20), (2000, 2 << 30), (4000, 12 << 30)]
    assert [
        pods.count(p) for p in [(100, 128 << 20), (500, 512 << 20), (2000, 2 << 30), (4000, 12 << 30)]
    ] == [
        40,
        40,
        30,
        10,
    ]
    assert pods != sorted(pods)  # arriving mixed


GIB = 1 << 30
SMALL = Node("small", 4000, 16 * GIB, 0.10, 0.60)  # memory near the 0.65 limit, cpu idle: mean 0.35
BIG = Node("big", 16000, 64 * GIB, 0.62, 0.20)  # the other way round, bigger: mean 0.41


@pytest.mark.parametrize(
    ("pod", "chosen"),
    [
        ((100, 0), "small"),  # dominant after: 0.60 (memory) on small, 0.6253 (cpu) on big
        ((0, GIB), "big"),  # 0.64375 on small, 0.62 on big (the mean alone would say small)
        ((0, 2 * GIB), "big"),  # memory 0.6875 on small: over the limit
        ((64000, 0), None),  # fits nowhere: pending
    ],
)
def test_the_reference_greedy_takes_the_lowest_dominant_load_after_the_pod(pod, chosen) -> None:
    assert greedy([SMALL, BIG], [pod]) == [chosen]


def test_the_offline_ideal_places_the_largest_pod_first_and_reports_in_arrival_order() -> None:
    """The 1Gi pod is the larger share of the cluster (1/80 of its memory against 1/200 of its cpu): it
    goes first, to big; then the 100m pod to small. Reported in arrival order."""
    pods = [(100, 0), (0, GIB)]
    assert offline_ideal([SMALL, BIG], pods) == ["small", "big"]
    assert offline_ideal([SMALL, BIG], pods[::-1]) == ["big", "small"]
