"""The shipped dashboard and alerts (``scheduler_config/monitoring/``), checked with the real promtool: the
rules load, every alert has a unit test that makes it fire (``tests/monitoring/alerts_test.yaml``), every
dashboard query parses, and every metric they read is one the programs export or the shipped recording
rules record (a renamed metric must not leave a panel silently empty)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from ballast.agent.cpumanager.metrics import CPUManagerMetrics
from ballast.agent.load.metrics import LoadMetrics
from ballast.agent.nrt.publisher import PublisherMetrics
from ballast.annotator.metrics import AnnotatorMetrics
from ballast.extender.metrics import ExtenderMetrics
from ballast.rebalancer.metrics import RebalancerMetrics
from ballast.testing.parts import ROOT
from ballast.testing.prometheus import require_promtool

MONITORING = ROOT / "scheduler_config" / "monitoring"
ALERTS = MONITORING / "alerts.yaml"
ALERTS_OBJECT = MONITORING / "alerts-prometheusrule.yaml"
DASHBOARD = MONITORING / "ballast-dashboard.json"
ALERT_TESTS = ROOT / "tests" / "monitoring" / "alerts_test.yaml"
RECORDING_RULES = ROOT / "scheduler_config" / "recording-rules.yaml"
GRAFANA_VARIABLES = {"$__rate_interval": "5m"}
"""Grafana fills these in; promtool needs a value."""


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require_promtool(), *args], capture_output=True, text=True, timeout=120)


def alert_rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"] if "alert" in r]


def dashboard_queries() -> list[tuple[str, str]]:
    """``(panel title, expr)`` for every query of every panel, rows' nested panels too."""

    def walk(panels: list[dict[str, Any]]) -> list[tuple[str, str]]:
        out = []
        for p in panels:
            out += [(p["title"], t["expr"]) for t in p.get("targets", [])]
            out += walk(p.get("panels", []))
        return out

    return walk(json.loads(DASHBOARD.read_text())["panels"])


def grafana_free(expr: str) -> str:
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unknown Grafana variable in {expr!r}"
    return expr


_NOT_METRICS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool"}
_NOT_METRICS |= {"offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers that are not functions, aggregations,
    keywords, label names (in matchers and by/on lists) or parts of numbers and durations."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        if e[m.end() :].lstrip().startswith("(") or m.group().lower() in _NOT_METRICS:
            continue
        names.add(m.group())
    return names


def test_metric_names_reads_promql_as_meant() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le, verb) (rate(a_seconds_bucket{verb="x",le!="1e3"}[5m]))) '
        "> 2.5e0 "
        "and on (instance) (time() - b_ts) > 60 or vector(0) unless sum(c_total) without (x)"
    )
    assert metric_names(expr) == {"a_seconds_bucket", "b_ts", "c_total"}


def exported() -> set[str]:
    """Every series name the programs' registries expose (a counter ``x`` as ``x_total``, a histogram as
    ``x_bucket``, ``x_sum`` and ``x_count``), and every series the shipped recording rules record."""
    agent = CollectorRegistry()
    CPUManagerMetrics(agent)
    PublisherMetrics(agent)
    LoadMetrics(agent)
    names: set[str] = set()
    for registry in (
        ExtenderMetrics().registry,
        AnnotatorMetrics().registry,
        RebalancerMetrics().registry,
        agent,
    ):
        for f in registry.collect():
            if f.type == "counter":
                names.add(f"{f.name}_total")
            elif f.type == "histogram":
                names |= {f"{f.name}_bucket", f"{f.name}_sum", f"{f.name}_count"}
            else:
                names.add(f.name)
    for group in yaml.safe_load(RECORDING_RULES.read_text())["groups"]:
        names |= {r["record"] for r in group["rules"] if "record" in r}
    return names


def test_every_metric_in_the_dashboard_and_the_alerts_exists() -> None:
    known = exported()
    used = {(f"panel {title!r}", n) for title, e in dashboard_queries() for n in metric_names(e)}
    used |= {(f"alert {r['alert']}", n) for r in alert_rules() for n in metric_names(r["expr"])}
    assert len({n for _, n in used}) >= 20  # the reader found the queries' metrics
    unknown = sorted((where, n) for where, n in used if n not in known)
    assert unknown == [], "read by the dashboard or alerts, exported by nothing"


def test_the_dashboard_covers_what_the_issue_asks() -> None:
    used = {n for _, e in dashboard_queries() for n in metric_names(e)}
    for wanted in (
        "ballast_extender_requests_total",
        "ballast_extender_request_duration_seconds_bucket",
        "ballast_extender_nodes_rejected_total",
        "ballast_extender_shadow_choices_total",
        "ballast_extender_shadow_would_reject_total",
        "ballast_annotator_last_success_timestamp_seconds",
        "cpu_usage_avg_5m",
        "ballast_agent_exclusive_cpus",
        "ballast_agent_cpuset_update_errors_total",
    ):
        assert wanted in used, wanted


def test_every_dashboard_query_parses(tmp_path: Path) -> None:
    queries = dashboard_queries()
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"dashboard:query_{i}", "expr": grafana_free(e)}
                    for i, (_, e) in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    out = promtool("check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(queries)} rules found" in out.stdout


def test_a_broken_query_is_caught(tmp_path: Path) -> None:
    """The check above can fail: promtool refuses a query that does not parse."""
    path = tmp_path / "bad.yaml"
    path.write_text(
        yaml.safe_dump({"groups": [{"name": "x", "rules": [{"record": "x:y", "expr": "sum(rate(a[5m])"}]}]})
    )
    assert promtool("check", "rules", str(path)).returncode != 0


@pytest.mark.parametrize("path", [ALERTS, ALERTS_OBJECT], ids=["rules-file", "PrometheusRule"])
def test_promtool_check_rules(path: Path, tmp_path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    groups = doc["spec"]["groups"] if doc.get("kind") == "PrometheusRule" else doc["groups"]
    plain = tmp_path / "rules.yaml"
    plain.write_text(yaml.safe_dump({"groups": groups}))
    out = promtool("check", "rules", str(plain))
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in out.stdout


def test_prometheus_rule_object_matches_the_rules_file() -> None:
    obj = yaml.safe_load(ALERTS_OBJECT.read_text())
    assert obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["kind"] == "PrometheusRule"
    assert obj["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]


def test_promtool_unit_tests_pass_and_make_every_alert_fire() -> None:
    out = promtool("test", "rules", str(ALERT_TESTS))
    assert out.returncode == 0, out.stdout + out.stderr
    tests = yaml.safe_load(ALERT_TESTS.read_text())
    fired = {
        case["alertname"]
        for t in tests["tests"]
        for case in t.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert fired == {r["alert"] for r in alert_rules()}
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
