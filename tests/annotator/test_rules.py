"""The recording rules: valid for promtool, right in meaning (promtool test rules), and the PrometheusRule
object carries exactly the same groups."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from ballast.contract.annotations import is_pressure_metric, pressure_metric
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


# The quantile rules on the same raw series. One CPU and 1024 bytes of memory, sampled every 15s; the
# rules record *_usage_active every 30s, so the 5-minute window at 10m holds the 11 samples of 5m, 5m30s,
# ..., 10m (both ends included). quantile_over_time(q, ...) sorts them (v0..v10) and interpolates at rank
# r = q * (11 - 1): v[floor(r)] * (1 - w) + v[floor(r) + 1] * w, w = r - floor(r).
# - CPU: idle grows 11.25s per 15s (25% busy), but 3.75s (75% busy) in the steps ending 9m15s..10m: the
#   window holds 9 x 25 (5m..9m) and 2 x 75 (9m30s, 10m), the last minute busy.
#   p50: r = 5, v5 = 25. p90: r = 9, v9 = 75. p95: r = 9.5, (75 + 75) / 2 = 75. p99: r = 9.9, 75.
# - Memory: 768 bytes available (25% used) up to 7m30s, 512 (50%) from 7m45s to 9m30s, 256 (75%) at 9m45s
#   and 10m, 768 again after: the window holds 6 x 25, 4 x 50 (8m..9m30s) and 1 x 75 (10m).
#   p50: r = 5, v5 = 25. p90: r = 9, v9 = 50. p95: r = 9.5, 0.5 * 50 + 0.5 * 75 = 62.5.
#   p99: r = 9.9, 0.1 * 50 + 0.9 * 75 = 72.5 exactly, 72.50000000000001 in float64 (0.99 * 10 rounds to
#   9.9000000000000004, so 75 weighs a hair over 0.9); promtool compares exactly.
# - At 16m the window (11m..16m) holds only 25s: the peaks have left every quantile.
# group_eval_order runs *_usage_active before the rules that read it at each step (promtool otherwise
# orders the groups at random, and the window at 10m would miss the sample of 10m in some runs).
QUANTILE_TESTS = """\
rule_files:
  - {rules}
evaluation_interval: 30s
group_eval_order:
  - ballast-node-usage-active
  - ballast-node-usage-5m
  - ballast-node-usage-quantiles-5m
  - ballast-node-usage-max
tests:
  - interval: 15s
    input_series:
      - series: 'node_cpu_seconds_total{{instance="10.0.0.1:9100", job="node", cpu="0", mode="idle"}}'
        values: '0+11.25x36 408.75+3.75x3 431.25+11.25x23'
      - series: 'node_memory_MemTotal_bytes{{instance="10.0.0.1:9100", job="node"}}'
        values: '1024+0x64'
      - series: 'node_memory_MemAvailable_bytes{{instance="10.0.0.1:9100", job="node"}}'
        values: '768+0x30 512+0x7 256+0x1 768+0x23'
    promql_expr_test:
      - expr: count_over_time(cpu_usage_active[5m])
        eval_time: 10m
        exp_samples:
          - labels: '{{instance="10.0.0.1:9100"}}'
            value: 11
      - expr: count_over_time(mem_usage_active[5m])
        eval_time: 10m
        exp_samples:
          - labels: '{{instance="10.0.0.1:9100", job="node"}}'
            value: 11
      - expr: cpu_usage_p50_5m
        eval_time: 10m
        exp_samples:
          - labels: 'cpu_usage_p50_5m{{instance="10.0.0.1:9100"}}'
            value: 25
      - expr: cpu_usage_p90_5m
        eval_time: 10m
        exp_samples:
          - labels: 'cpu_usage_p90_5m{{instance="10.0.0.1:9100"}}'
            value: 75
      - expr: cpu_usage_p95_5m
        eval_time: 10m
        exp_samples:
          - labels: 'cpu_usage_p95_5m{{instance="10.0.0.1:9100"}}'
            value: 75
      - expr: cpu_usage_p99_5m
        eval_time: 10m
        exp_samples:
          - labels: 'cpu_usage_p99_5m{{instance="10.0.0.1:9100"}}'
            value: 75
      - expr: mem_usage_p50_5m
        eval_time: 10m
        exp_samples:
          - labels: 'mem_usage_p50_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 25
      - expr: mem_usage_p90_5m
        eval_time: 10m
        exp_samples:
          - labels: 'mem_usage_p90_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 50
      - expr: mem_usage_p95_5m
        eval_time: 10m
        exp_samples:
          - labels: 'mem_usage_p95_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 62.5
      - expr: mem_usage_p99_5m
        eval_time: 10m
        exp_samples:
          - labels: 'mem_usage_p99_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 72.50000000000001
      - expr: cpu_usage_p50_5m
        eval_time: 16m
        exp_samples:
          - labels: 'cpu_usage_p50_5m{{instance="10.0.0.1:9100"}}'
            value: 25
      - expr: cpu_usage_p90_5m
        eval_time: 16m
        exp_samples:
          - labels: 'cpu_usage_p90_5m{{instance="10.0.0.1:9100"}}'
            value: 25
      - expr: cpu_usage_p95_5m
        eval_time: 16m
        exp_samples:
          - labels: 'cpu_usage_p95_5m{{instance="10.0.0.1:9100"}}'
            value: 25
      - expr: cpu_usage_p99_5m
        eval_time: 16m
        exp_samples:
          - labels: 'cpu_usage_p99_5m{{instance="10.0.0.1:9100"}}'
            value: 25
      - expr: mem_usage_p50_5m
        eval_time: 16m
        exp_samples:
          - labels: 'mem_usage_p50_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 25
      - expr: mem_usage_p90_5m
        eval_time: 16m
        exp_samples:
          - labels: 'mem_usage_p90_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 25
      - expr: mem_usage_p95_5m
        eval_time: 16m
        exp_samples:
          - labels: 'mem_usage_p95_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 25
      - expr: mem_usage_p99_5m
        eval_time: 16m
        exp_samples:
          - labels: 'mem_usage_p99_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 25
"""


# The pressure rules over node-exporter's pressure counters (seconds stalled, cumulative), sampled every 15s.
# CPU waiting grows 6s per 15s (40 % of the time) up to 10m, then 0.75s per 15s (5 %). At 20m the 5-minute
# rate holds only the second slope: 5; the hour's maximum holds the 5-minute rates recorded every minute
# while the window was all first slope (5m..10m): 40. Memory: some 3s, full 1.5s per 15s (20, 10) all
# along; IO: some 0.375s per 15s (2.5), full never (0). (Slopes exact in binary: no rounding to expect.)
PRESSURE_TESTS = """\
rule_files:
  - {rules}
evaluation_interval: 30s
group_eval_order:
  - ballast-node-usage-active
  - ballast-node-usage-5m
  - ballast-node-usage-quantiles-5m
  - ballast-node-pressure-5m
  - ballast-node-pressure-max
  - ballast-node-usage-max
tests:
  - interval: 15s
    input_series:
      - series: 'node_pressure_cpu_waiting_seconds_total{{instance="10.0.0.1:9100", job="node"}}'
        values: '0+6x40 240.75+0.75x39'
      - series: 'node_pressure_memory_waiting_seconds_total{{instance="10.0.0.1:9100", job="node"}}'
        values: '0+3x80'
      - series: 'node_pressure_memory_stalled_seconds_total{{instance="10.0.0.1:9100", job="node"}}'
        values: '0+1.5x80'
      - series: 'node_pressure_io_waiting_seconds_total{{instance="10.0.0.1:9100", job="node"}}'
        values: '0+0.375x80'
      - series: 'node_pressure_io_stalled_seconds_total{{instance="10.0.0.1:9100", job="node"}}'
        values: '0+0x80'
    promql_expr_test:
      - expr: cpu_pressure_some_avg_5m
        eval_time: 20m
        exp_samples:
          - labels: 'cpu_pressure_some_avg_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 5
      - expr: cpu_pressure_some_max_avg_1h
        eval_time: 20m
        exp_samples:
          - labels: 'cpu_pressure_some_max_avg_1h{{instance="10.0.0.1:9100", job="node"}}'
            value: 40
      - expr: cpu_pressure_some_max_avg_1d
        eval_time: 20m
        exp_samples:
          - labels: 'cpu_pressure_some_max_avg_1d{{instance="10.0.0.1:9100", job="node"}}'
            value: 40
      - expr: memory_pressure_some_avg_5m
        eval_time: 20m
        exp_samples:
          - labels: 'memory_pressure_some_avg_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 20
      - expr: memory_pressure_full_avg_5m
        eval_time: 20m
        exp_samples:
          - labels: 'memory_pressure_full_avg_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 10
      - expr: memory_pressure_full_max_avg_1h
        eval_time: 20m
        exp_samples:
          - labels: 'memory_pressure_full_max_avg_1h{{instance="10.0.0.1:9100", job="node"}}'
            value: 10
      - expr: io_pressure_some_avg_5m
        eval_time: 20m
        exp_samples:
          - labels: 'io_pressure_some_avg_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 2.5
      - expr: io_pressure_full_avg_5m
        eval_time: 20m
        exp_samples:
          - labels: 'io_pressure_full_avg_5m{{instance="10.0.0.1:9100", job="node"}}'
            value: 0
"""


def test_promtool_check_rules() -> None:
    promtool = require_promtool()
    out = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 31 rules found" in out.stdout


def test_rules_compute_crane_percentages(tmp_path: Path) -> None:
    promtool = require_promtool()
    tests = tmp_path / "rules_test.yaml"
    tests.write_text(UNIT_TESTS.format(rules=RULES))
    out = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_quantile_rules_interpolate_over_the_5m_window(tmp_path: Path) -> None:
    promtool = require_promtool()
    tests = tmp_path / "quantiles_test.yaml"
    tests.write_text(QUANTILE_TESTS.format(rules=RULES))
    out = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_pressure_rules_are_shares_of_wall_time_from_the_kernels_totals(tmp_path: Path) -> None:
    promtool = require_promtool()
    tests = tmp_path / "pressure_test.yaml"
    tests.write_text(PRESSURE_TESTS.format(rules=RULES))
    out = subprocess.run([promtool, "test", "rules", str(tests)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_pressure_rules_record_every_name_the_agent_measures_and_no_other() -> None:
    """The Prometheus path records the agent's pressure names (``PRESSURE_METRIC_PATTERN``): all of them,
    so a policy may name any with either load source, and each 5-minute rule is a rate of one counter."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    recorded = {r["record"]: r["expr"] for g in groups for r in g["rules"]}
    pressure = {name for name in recorded if is_pressure_metric(name)}
    assert all(pressure_metric(name) is not None for name in pressure)
    assert {n for n in pressure if n.endswith("_avg_5m") and "_max_" not in n} == {
        "cpu_pressure_some_avg_5m", "memory_pressure_some_avg_5m", "memory_pressure_full_avg_5m",
        "io_pressure_some_avg_5m", "io_pressure_full_avg_5m",
    }  # fmt: skip
    assert len(pressure) == 15  # five series, three windows
    for name in pressure:
        wanted = pressure_metric(name)
        assert wanted is not None
        base = f"{wanted.resource}_pressure_{wanted.kind}_avg_5m"
        counter = "waiting" if wanted.kind == "some" else "stalled"
        if name == base:
            assert (
                recorded[name] == f"100 * rate(node_pressure_{wanted.resource}_{counter}_seconds_total[5m])"
            )
        else:
            window = "1h" if wanted.window_minutes == 60 else "1d"
            assert recorded[name] == f"max_over_time({base}[{window}])"


def test_quantile_rules_read_what_the_avg_5m_rules_average() -> None:
    """cpu_usage_p<N>_5m / mem_usage_p<N>_5m: quantile_over_time of the very series and window the crane
    rule ``*_usage_avg_5m`` averages (so they carry its labels too), evaluated as often."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    where = {r["record"]: (g, r["expr"]) for g in groups for r in g["rules"]}
    for resource in ("cpu", "mem"):
        avg_group, avg = where[f"{resource}_usage_avg_5m"]
        assert avg.startswith("avg_over_time(") and avg.endswith(")")
        averaged = avg[len("avg_over_time(") : -1]
        assert averaged == f"{resource}_usage_active[5m]"
        for n, q in (("50", "0.5"), ("90", "0.9"), ("95", "0.95"), ("99", "0.99")):
            group, expr = where[f"{resource}_usage_p{n}_5m"]
            assert expr == f"quantile_over_time({q}, {averaged})"
            assert group["interval"] == avg_group["interval"]


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
