"""The recording rules: valid for promtool, right in meaning (promtool test rules), and the PrometheusRule
object carries exactly the same groups."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE, ROOT
from ballast.testing.prometheus import require_promtool

RULES = ROOT / "scheduler_config" / "recording-rules.yaml"
OBJECT = ROOT / "scheduler_config" / "recording-rules-prometheusrule.yaml"

# One CPU whose idle counter grows 3.75s per 15s (75% busy) for 10 minutes, then 7.5s per 15s (50%);
# memory 60% used throughout.
UNIT_TESTS = """\
rule_files:
  - {rules}
evaluation_interval: 30s
tests:
  - interval: 15s
    input_series:
      - series: 'node_cpu_seconds_total{{instance="10.0.0.1:9100", job="node", cpu="0", mode="idle"}}'
        values: '0+3.75x39 150+7.5x40'
      - series: 'node_cpu_seconds_total{{instance="10.0.0.1:9100", job="node", cpu="0", mode="user"}}'
        values: '0+11.25x80'
      - series: 'node_memory_MemTotal_bytes{{instance="10.0.0.1:9100", job="node"}}'
        values: '1000+0x80'
      - series: 'node_memory_MemAvailable_bytes{{instance="10.0.0.1:9100", job="node"}}'
        values: '400+0x80'
    promql_expr_test:
      - expr: cpu_usage_active
        eval_time: 5m
        exp_samples:
          - labels: 'cpu_usage_active{{instance="10.0.0.1:9100"}}'
            value: 75
      - expr: cpu_usage_avg_5m
        eval_time: 20m
        exp_samples:
          - labels: 'cpu_usage_avg_5m{{instance="10.0.0.1:9100"}}'
            value: 50
      - expr: cpu_usage_max_avg_1h
        eval_time: 20m
        exp_samples:
          - labels: 'cpu_usage_max_avg_1h{{instance="10.0.0.1:9100"}}'
            value: 75
      - expr: cpu_usage_max_avg_1d
        eval_time: 20m
        exp_samples:
          - labels: 'cpu_usage_max_avg_1d{{instance="10.0.0.1:9100"}}'
            value: 75
      - expr: mem_usage_avg_5m
        eval_time: 20m
        exp_samples:
          - labels: 'mem_usage_avg_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 60
      - expr: mem_usage_max_avg_1h
        eval_time: 20m
        exp_samples:
          - labels: 'mem_usage_max_avg_1h{{instance="10.0.0.1:9100", job="node"}}'
            value: 60
      - expr: mem_usage_max_avg_1d
        eval_time: 20m
        exp_samples:
          - labels: 'mem_usage_max_avg_1d{{instance="10.0.0.1:9100", job="node"}}'
            value: 60
"""


def test_promtool_check_rules() -> None:
    promtool = require_promtool()
    out = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 8 rules found" in out.stdout


def test_rules_compute_crane_percentages(tmp_path: Path) -> None:
    promtool = require_promtool()
    tests = tmp_path / "rules_test.yaml"
    tests.write_text(UNIT_TESTS.format(rules=RULES))
    out = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_prometheus_rule_object_matches_the_rules_file() -> None:
    plain = yaml.safe_load(RULES.read_text())
    obj = yaml.safe_load(OBJECT.read_text())
    assert obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["kind"] == "PrometheusRule"
    assert obj["metadata"]["name"]
    assert obj["spec"]["groups"] == plain["groups"]


def test_rules_record_every_metric_of_the_bundled_policy() -> None:
    plain = yaml.safe_load(RULES.read_text())
    recorded = {r["record"] for g in plain["groups"] for r in g["rules"]}
    assert set(load_policy(POLICY_FILE).metrics) <= recorded
