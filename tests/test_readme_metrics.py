"""The configuration reference lists every metric the programs export, and no page of the documentation
(README.md, docs/, the examples) names one they do not."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from ballast.agent.cpumanager.metrics import CPUManagerMetrics
from ballast.agent.load.metrics import LoadMetrics
from ballast.agent.nrt.publisher import PublisherMetrics
from ballast.annotator.metrics import AnnotatorMetrics
from ballast.extender.metrics import ExtenderMetrics
from ballast.rebalancer.metrics import RebalancerMetrics
from ballast.testing.parts import ROOT


def exported(registry: CollectorRegistry) -> set[str]:
    """Metric names as a scrape shows them (a counter ``x`` is ``x_total``); a page may also name a
    histogram's ``_bucket``, ``_sum`` and ``_count`` series, as a query does."""
    return {f"{f.name}_total" if f.type == "counter" else f.name for f in registry.collect()}


def test_every_exported_metric_is_documented_and_every_documented_one_exists() -> None:
    agent = CollectorRegistry()
    CPUManagerMetrics(agent)
    PublisherMetrics(agent)
    LoadMetrics(agent)
    registries = (
        ExtenderMetrics().registry,
        AnnotatorMetrics().registry,
        RebalancerMetrics().registry,
        agent,
    )
    assert all(exported(r) for r in registries)
    code = set().union(*map(exported, registries))
    reference = (ROOT / "docs" / "configuration.md").read_text()
    documented = names_in(reference.split("\n## Metrics\n")[1].split("\n## ")[0])
    assert sorted(code - documented) == [], "exported but not in docs/configuration.md's Metrics"
    pages = [
        ROOT / "README.md",
        *sorted((ROOT / "docs").glob("*.md")),
        *(ROOT / "scheduler_config").rglob("*.md"),
    ]
    series = code | {
        f"{f.name}_{s}"
        for r in registries
        for f in r.collect()
        if f.type == "histogram"
        for s in ("bucket", "sum", "count")
    }
    for page in pages:
        named = names_in(page.read_text())
        assert sorted(named - series) == [], f"in {page.relative_to(ROOT)} but not exported"


def names_in(text: str) -> set[str]:
    return set(re.findall(r"\bballast_(?:extender|annotator|rebalancer|agent|policy)_[a-z0-9_]+", text))
