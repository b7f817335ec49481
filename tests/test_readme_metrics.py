"""The README lists every metric the programs export, and names none they do not."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from agent.metrics import CPUManagerMetrics
from agent.publisher import PublisherMetrics
from app.annotator.metrics import AnnotatorMetrics
from app.extender.metrics import ExtenderMetrics
from app.rebalancer.metrics import RebalancerMetrics
from tests.conftest import ROOT


def exported(registry: CollectorRegistry) -> set[str]:
    """Metric names as a scrape shows them (a counter ``x`` is ``x_total``)."""
    return {f"{f.name}_total" if f.type == "counter" else f.name for f in registry.collect()}


def test_every_exported_metric_is_documented_and_every_documented_one_exists() -> None:
    agent = CollectorRegistry()
    CPUManagerMetrics(agent)
    PublisherMetrics(agent)
    registries = (
        ExtenderMetrics().registry,
        AnnotatorMetrics().registry,
        RebalancerMetrics().registry,
        agent,
    )
    assert all(exported(r) for r in registries)
    code = set().union(*map(exported, registries))
    documented = set(
        re.findall(
            r"\bballast_(?:extender|annotator|rebalancer|agent|policy)_[a-z0-9_]+",
            (ROOT / "README.md").read_text(),
        )
    )
    assert sorted(code - documented) == [], "exported but not in the README"
    assert sorted(documented - code) == [], "in the README but not exported"
