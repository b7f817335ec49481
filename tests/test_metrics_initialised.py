"""Labelled counters are on /metrics at 0 for every label the program knows from the start, so a dashboard
or an alert (``increase(...[5m]) > 0``) sees them before their first event."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from ballast.annotator.metrics import AnnotatorMetrics
from ballast.extender.main import create_app
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE

POLICY = load_policy(POLICY_FILE)
PREDICATES = {p.name for p in POLICY.predicates}


def samples(text: str, name: str) -> dict[str, float]:
    """``{labels: value}`` of one metric family's samples in a scrape."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels, value = line[len(name) :].rsplit(" ", 1)
            out[labels] = float(value)
    return out


def test_the_extender_exports_its_labelled_counters_at_zero_from_the_start() -> None:
    with TestClient(create_app(POLICY)) as client:
        text = client.get("/metrics").text
    bad = samples(text, "ballast_extender_bad_annotations_total")
    assert bad == {f'{{metric="{m}"}}': 0.0 for m in [*POLICY.metrics, "node_hot_value"]}
    rejected = samples(text, "ballast_extender_nodes_rejected_total")
    assert rejected == {f'{{metric="{m}"}}': 0.0 for m in [*PREDICATES, "numa"]}
    refused = samples(text, "ballast_extender_binds_refused_total")
    assert refused == {f'{{metric="{m}"}}': 0.0 for m in PREDICATES}
    assert samples(text, "ballast_policy_reloads_total") == {'{result="ok"}': 0.0, '{result="error"}': 0.0}


def test_a_metric_a_reloaded_policy_adds_is_exported_at_zero(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY_FILE.read_text())
    app = create_app(load_policy(path), policy_path=path, policy_poll_seconds=0)
    with TestClient(app) as client:
        text = POLICY_FILE.read_text().replace("cpu_usage_avg_5m", "cpu_usage_avg_2m")
        path.write_text(text)
        assert app.state.services.store.reload("test")
        bad = samples(client.get("/metrics").text, "ballast_extender_bad_annotations_total")
    assert bad['{metric="cpu_usage_avg_2m"}'] == 0.0


def test_the_annotator_exports_its_policy_reloads_at_zero() -> None:
    registry = CollectorRegistry()
    AnnotatorMetrics(registry)
    assert registry.get_sample_value("ballast_annotator_policy_reloads_total", {"result": "ok"}) == 0
    assert registry.get_sample_value("ballast_annotator_policy_reloads_total", {"result": "error"}) == 0
