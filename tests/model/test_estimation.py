"""The estimate formula, pure: ``max(request, limit) * factor`` (defaults when unset) and what the
estimates on a node add per metric, ``(counted + incoming - minus) / allocatable``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ballast.contract.annotations import LoadSample
from ballast.model.estimation import (
    Estimate,
    counts,
    estimate_usage,
    extra,
    metric_plan,
    still_counted,
    units,
)
from ballast.model.nodestate import NodeState
from ballast.model.podinfo import PodDemand
from ballast.model.policy import Estimation, load_policy
from ballast.testing.parts import POLICY_FILE

POLICY = load_policy(POLICY_FILE)
NOW = 1_000_000.0
MiB = 2**20


def pod(cpu_req: int = 0, cpu_lim: int = 0, mem_req: int = 0, mem_lim: int = 0) -> PodDemand:
    return PodDemand("ns", "p", "uid", False, cpu_req, cpu_lim, mem_req, mem_lim)


@pytest.mark.parametrize(
    ("info", "expected"),
    [
        (pod(), (250, 200 * MiB)),  # neither set: the defaults
        (pod(cpu_req=1000), (850, 200 * MiB)),
        (pod(cpu_req=1000, cpu_lim=2000), (1700, 200 * MiB)),  # the larger of request and limit
        (pod(mem_req=100 * MiB, mem_lim=50 * MiB), (250, 70 * MiB)),
    ],
)
def test_estimate_usage(info: PodDemand, expected: tuple[int, int]) -> None:
    assert estimate_usage(info, Estimation()) == expected


def test_extra_counts_pods_placed_after_the_measurement_until_their_ttl() -> None:
    plan = metric_plan(POLICY)
    cpu_metrics = [m for m, r, _ in plan if r == "cpu"]
    assert cpu_metrics
    metric = cpu_metrics[0]
    ttl = next(t for m, _, t in plan if m == metric)
    load = NodeState("n", {metric: LoadSample(0.5, NOW - ttl - 10)}, allocatable_cpu_milli=4000)
    after = Estimate("a", "ns/a", "n", 1000, 0, NOW - 30)
    before = Estimate("b", "ns/b", "n", 1000, 0, NOW - ttl - 20)  # already in the measurement
    expired = Estimate("c", "ns/c", "n", 1000, 0, NOW - ttl - 1)  # after it, but past its TTL
    counted = units(load, plan, [after, before, expired], NOW)
    assert counted == {metric: 1000}
    assert units(load, plan, [after], NOW, skip="a") == {}
    incoming = Estimate("i", "ns/i", "", 500, 0, NOW, tentative=True)
    ratios = extra(load, plan, counted, incoming, minus={"cpu": 300})
    assert ratios == {metric: (1000 + 500 - 300) / 4000}
    assert extra(NodeState("bare"), plan, {}, incoming) == {}  # no sample, nothing to add to
    held = Estimate("h", "ns/h", "n", 1, 0, NOW - ttl - 20, tentative=True)
    assert still_counted(load, plan, [after, before, expired, held], NOW) == [after, held]


def test_a_pod_placed_in_the_second_of_the_measurement_counts() -> None:
    """Annotations and ``PodScheduled`` times are whole seconds: a pod bound at 10:00:00.4 after a
    measurement stamped 10:00:00 reads as bound at 10:00:00, and the measurement cannot include it."""
    plan = metric_plan(POLICY)
    metric = next(m for m, resource, _ in plan if resource == "cpu")
    stamped = NOW - 60
    load = NodeState("n", {metric: LoadSample(0.5, stamped)}, allocatable_cpu_milli=4000)
    same_second = Estimate("s", "ns/s", "n", 1000, 0, stamped)
    second_before = Estimate("b", "ns/b", "n", 1000, 0, stamped - 1)
    assert units(load, plan, [same_second, second_before], NOW) == {metric: 1000}
    assert still_counted(load, plan, [same_second, second_before], NOW) == [same_second]


@given(
    stamps=st.lists(st.sampled_from([0.0, -100.0, -400.0, -4000.0]), min_size=6, max_size=6),
    pods=st.lists(
        st.tuples(st.floats(-20000, 0), st.integers(0, 4000), st.integers(0, 1 << 30)), max_size=12
    ),
)
@settings(max_examples=300, deadline=None)
def test_units_equals_counting_each_estimate_for_each_metric(stamps, pods) -> None:
    """``units`` sums each measurement time once when it can; the definition is ``counts`` per estimate
    per metric. Measurement times shared between metrics, estimates older than some TTLs and younger than
    others: the two always agree."""
    plan = metric_plan(POLICY)
    samples = {m: LoadSample(0.5, NOW + stamps[i % len(stamps)]) for i, (m, _, _) in enumerate(plan)}
    load = NodeState("n", samples, allocatable_cpu_milli=4000, allocatable_memory_bytes=1 << 34)
    estimates = [Estimate(f"p{i}", "", "n", c, m, NOW + at) for i, (at, c, m) in enumerate(pods)]
    expected = {}
    for metric, resource, ttl in plan:
        total = sum(e.amount(resource) for e in estimates if counts(e, samples[metric].order_at, ttl, NOW))
        if total:
            expected[metric] = total
    assert units(load, plan, estimates, NOW) == expected
