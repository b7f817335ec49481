"""``ballast.program.metrics.MetricSet``: the one shape every program declares its metrics in."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from ballast.program.metrics import MetricSet


def scrape(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_names_carry_the_prefix_and_live_on_the_programs_own_registry() -> None:
    m = MetricSet("ballast_test")
    m.counter("calls", "Calls by result.", "result").labels("ok").inc()
    m.gauge("nodes", "Nodes.").set(3)
    m.histogram("cycle_seconds", "Cycle time.", buckets=(0.1, 1.0)).observe(0.5)
    text = scrape(m.registry)
    assert 'ballast_test_calls_total{result="ok"} 1.0' in text
    assert "ballast_test_nodes 3.0" in text
    assert 'ballast_test_cycle_seconds_bucket{le="1.0"} 1.0' in text
    assert MetricSet("ballast_test").registry is not m.registry  # a second program in the same process


def test_zeroed_series_are_on_metrics_from_the_start() -> None:
    m = MetricSet("ballast_test")
    m.counter("writes", "Writes by object.", "object", zero=("node", "nodeload"))
    m.counter("reads", "Reads by source and result.", "source", "result", zero=[("file", "ok")])
    text = scrape(m.registry)
    assert 'ballast_test_writes_total{object="node"} 0.0' in text
    assert 'ballast_test_writes_total{object="nodeload"} 0.0' in text
    assert 'ballast_test_reads_total{result="ok",source="file"} 0.0' in text


def test_leadership_is_the_pair_the_elector_keeps_current() -> None:
    registry = CollectorRegistry()
    leader, changes = MetricSet("ballast_test", registry).leadership()
    leader.set(1)
    changes.labels("acquired").inc()
    text = scrape(registry)
    assert "ballast_test_leader 1.0" in text
    assert 'ballast_test_leadership_changes_total{event="acquired"} 1.0' in text
