"""``ballast annotator --once`` against a real Prometheus (backfilled) and the fake Kubernetes API server.

The expected annotation values are what PromQL itself says (``<series> / 100``, queried in the test),
never numbers recomputed in Python.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ballast.annotator.run import run
from ballast.contract.annotations import HOT_VALUE_KEY, format_load, read_sample
from ballast.model.load_source import LOAD_SOURCE_KEY
from ballast.model.policy import load_policy
from ballast.testing.annotator import FailingPrometheus, add_node, annotations, bind_pod, node_patches, parse
from ballast.testing.fakekube import FakeKube
from ballast.testing.parts import POLICY_FILE, ROOT, wait_for
from ballast.testing.prometheus import BackfillSeries, CountingProxy, PrometheusServer

pytestmark = pytest.mark.integration

POLICY = load_policy(POLICY_FILE)
METRICS = POLICY.metrics
OLD = "0.77700," + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))
"""A fresh annotation that must survive when Prometheus has no usable value."""

# node name -> (InternalIP, {instance label: value offset or None for NaN / negative markers})
NODES: dict[str, tuple[str | None, list[tuple[str, float, dict[str, str]]]]] = {
    "node-ip": ("10.1.0.1", [("10.1.0.1", 12.345678, {})]),
    "node-port": ("10.1.0.2", [("10.1.0.2:9100", 33.333333, {})]),
    "worker-3": ("10.1.0.3", [("worker-3", 47.5, {})]),  # scraped by host name
    "node-nan": ("10.1.0.4", [("10.1.0.4:9100", float("nan"), {})]),
    "node-neg": ("10.1.0.5", [("10.1.0.5:9100", -3.0, {})]),
    "node-missing": ("10.1.0.6", []),
    "node-dup": ("10.1.0.7", [("10.1.0.7:9100", 30.0, {"job": "a"}), ("10.1.0.7:9101", 50.0, {"job": "b"})]),
    "worker-8": ("10.1.0.8", [("10.1.0.8:9100", 20.0, {}), ("worker-8", 90.0, {})]),  # IP beats name
    "node-hot": ("10.1.0.9", [("10.1.0.9:9100", 100.7, {})]),  # over 100 (irate jitter): as measured
}
EXPECTED_SELECTOR = {
    "node-ip": 'instance="10.1.0.1"',
    "node-port": 'instance="10.1.0.2:9100"',
    "worker-3": 'instance="worker-3"',
    "node-dup": 'instance="10.1.0.7:9101"',  # two exporters: the higher value is kept
    "worker-8": 'instance="10.1.0.8:9100"',
}


def dataset() -> list[BackfillSeries]:
    series = []
    for i, metric in enumerate(METRICS):
        for _node, (_ip, forms) in NODES.items():
            for instance, base, extra in forms:
                value = base if base != base or base < 0 else base + 1.111 * i  # NaN stays NaN
                series.append(BackfillSeries(metric, {"instance": instance, "job": "node", **extra}, value))
        # another cluster
        series.append(BackfillSeries(metric, {"instance": "10.9.9.9:9100", "job": "node"}, 5.0))
    return series


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    with PrometheusServer(tmp_path_factory.mktemp("prom"), dataset()) as server:
        yield server


def setup_cluster(fake: FakeKube) -> None:
    for name, (ip, _) in NODES.items():
        keep = {m: OLD for m in METRICS} if name in ("node-nan", "node-neg", "node-missing") else None
        add_node(fake, name, ip, keep)


def once(prom_url: str, kubeconfig: Path, *extra: str) -> int:
    return run(
        parse(
            "--policy",
            str(POLICY_FILE),
            "--prometheus-url",
            prom_url,
            "--kubeconfig",
            str(kubeconfig),
            "--once",
            "--prometheus-timeout",
            "3s",
            "--prometheus-retries",
            "1",
            *extra,
        )
    )


def test_once_writes_what_promql_returns(
    prom: PrometheusServer, fake_kube: FakeKube, kubeconfig: Path
) -> None:
    setup_cluster(fake_kube)
    with CountingProxy(prom.url) as proxy:  # a base URL with a path prefix, as behind an ingress
        assert once(proxy.url, kubeconfig) == 0
    # One instant query per policy metric for all nodes (crane: up to 3 per node and metric).
    assert proxy.queries() == len(METRICS)
    assert [p for p, _ in proxy.requests if p != "/api/v1/query"] == ["/-/ready"]

    for node, selector in EXPECTED_SELECTOR.items():
        got = annotations(fake_kube, node)
        for metric in METRICS:
            expected = prom.scalar(f"{metric}{{{selector}}} / 100")
            sample, _ = read_sample(got[metric], time.time())
            assert sample is not None, (node, metric, got[metric])
            assert got[metric].split(",")[0] == f"{expected:.5f}", (node, metric)
            assert got[metric].endswith("Z") and abs(sample.timestamp - time.time()) < 60
    for metric in METRICS:
        assert float(annotations(fake_kube, "node-hot")[metric].split(",")[0]) > 1.0  # as measured
        for node in ("node-nan", "node-neg", "node-missing"):  # no data: untouched, never "0"
            assert annotations(fake_kube, node)[metric] == OLD

    patches = node_patches(fake_kube)
    patched = sorted(r.path.rsplit("/", 1)[1] for r in patches)
    assert patched == sorted(EXPECTED_SELECTOR.keys() | {"node-hot"})  # one patch per node, no more
    assert {r.content_type for r in patches} == {"application/merge-patch+json"}
    assert all(set(r.body["metadata"]["annotations"]) == {*METRICS, LOAD_SOURCE_KEY} for r in patches)

    # A second run right away: same values, fresh stamps: no writes at all.
    fake_kube.clear_requests()
    assert once(prom.url, kubeconfig) == 0
    assert node_patches(fake_kube) == []


def test_once_hot_value_windows(prom: PrometheusServer, fake_kube: FakeKube, kubeconfig: Path) -> None:
    setup_cluster(fake_kube)
    now = time.time()
    for i in range(4):
        bind_pod(fake_kube, f"recent-{i}", "node-ip", now - 20)  # inside 1m and 5m
    for i in range(3):
        bind_pod(fake_kube, f"earlier-{i}", "node-ip", now - 200)  # inside 5m only
    bind_pod(fake_kube, "old", "node-ip", now - 400)  # outside every window
    bind_pod(fake_kube, "going", "node-ip", now - 10)
    fake_kube.delete("pods", "going", namespace="default")  # bound: graceful, now terminating
    bind_pod(fake_kube, "done", "node-ip", now - 10)
    fake_kube.patch(
        "pods", "done", {"status": {"phase": "Succeeded"}}, namespace="default", subresource="status"
    )
    bind_pod(fake_kube, "other", "node-port", now - 10)

    assert once(prom.url, kubeconfig) == 0
    # crane's formula with the policy's windows: floor(7 / 5) + floor(4 / 2) = 3 on node-ip
    assert annotations(fake_kube, "node-ip")[HOT_VALUE_KEY].split(",")[0] == "3"
    # one binding: floor(1/5) + floor(1/2) = 0; zero is not written where nothing was
    assert HOT_VALUE_KEY not in annotations(fake_kube, "node-port")


def test_prometheus_errors_leave_annotations_intact(
    fake_kube: FakeKube, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    written = {m: format_load(0.42, time.time() - 30) for m in METRICS}
    add_node(fake_kube, "n1", "10.2.0.1", written)
    with FailingPrometheus() as broken, caplog.at_level(logging.WARNING):
        assert once(broken.url, kubeconfig) == 1  # --once reports the failure
    assert annotations(fake_kube, "n1") == written
    assert node_patches(fake_kube) == []
    assert len(broken.queries) == 2 * len(METRICS)  # each query tried twice (--prometheus-retries 1)
    failures = [r for r in caplog.records if "failed, its annotations are left as they are" in r.getMessage()]
    assert len(failures) == len(METRICS)  # logged once per metric per cycle, with the query
    assert any(
        "'cpu_usage_avg_5m'" in r.getMessage() and "storage is on fire" in r.getMessage() for r in failures
    )


def test_unreachable_prometheus_at_start_exits_non_zero(
    fake_kube: FakeKube, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from ballast.testing.prometheus import free_port

    add_node(fake_kube, "n1", "10.2.0.1", {"cpu_usage_avg_5m": OLD})
    url = f"http://127.0.0.1:{free_port()}"
    assert once(url, kubeconfig) == 1
    assert f"cannot use Prometheus: Prometheus at {url}" in caplog.text
    assert "cannot connect" in caplog.text
    assert [r for r in fake_kube.requests if r.method != "GET"] == []  # nothing written, not even listed
    assert annotations(fake_kube, "n1") == {"cpu_usage_avg_5m": OLD}


QUANTILES = [f"{r}_usage_p{n}_5m" for r in ("cpu", "mem") for n in (50, 90, 95, 99)]
QUANTILE_POLICY = (
    "apiVersion: scheduler.policy.crane.io/v1alpha1\n"
    "kind: DynamicSchedulerPolicy\n"
    "spec:\n"
    "  syncPolicy:\n"
    + "".join(
        f"    - {{name: {m}, period: {'30s' if m == 'cpu_usage_p95_5m' else '3m'}}}\n" for m in QUANTILES
    )
    + "  predicate:\n"
    "    - {name: cpu_usage_p95_5m, maxLimitPecent: 0.9}\n"
    "  priority:\n"
    "    - {name: cpu_usage_p95_5m, weight: 1}\n"
)


def test_once_writes_the_quantile_names_the_shipped_rules_record(
    tmp_path: Path, fake_kube: FakeKube, kubeconfig: Path
) -> None:
    """A policy listing cpu_usage_p95_5m (period 30s) and the other quantile names: the shipped quantile
    rules, evaluated by a real Prometheus over backfilled *_usage_active series, give the values the
    annotator writes, like any crane name. The rules' group runs every 1s here instead of every 1m, so the
    first evaluation comes at once; the expressions are the shipped ones."""
    shipped = yaml.safe_load((ROOT / "scheduler_config" / "recording-rules.yaml").read_text())
    group = next(g for g in shipped["groups"] if g["name"] == "ballast-node-usage-quantiles-5m")
    assert sorted(r["record"] for r in group["rules"]) == sorted(QUANTILES)
    rules = tmp_path / "quantile-rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": [{**group, "interval": "1s"}]}))
    policy = tmp_path / "policy.yaml"
    policy.write_text(QUANTILE_POLICY)
    assert load_policy(policy).sync_periods["cpu_usage_p95_5m"] == 30

    # What crane's first rules group records: percentages per instance (memory keeps node-exporter's job).
    active = [
        BackfillSeries("cpu_usage_active", {"instance": "10.4.0.1:9100"}, 37.5),
        BackfillSeries("mem_usage_active", {"instance": "10.4.0.1:9100", "job": "node"}, 62.25),
    ]
    add_node(fake_kube, "node-q", "10.4.0.1")
    with PrometheusServer(tmp_path / "prom", active, rules=rules) as prom:
        wait_for(
            lambda: all(prom.query(m) for m in QUANTILES), timeout=20, what="the quantile rules to record"
        )
        args = parse(
            "--policy", str(policy), "--prometheus-url", prom.url, "--kubeconfig", str(kubeconfig), "--once"
        )
        assert run(args) == 0
        got = annotations(fake_kube, "node-q")
        for metric in QUANTILES:
            expected = prom.scalar(f'{metric}{{instance="10.4.0.1:9100"}} / 100')
            assert got[metric].split(",")[0] == f"{expected:.5f}", metric
            # A constant usage has every quantile equal to it.
            assert got[metric].split(",")[0] == ("0.37500" if metric.startswith("cpu") else "0.62250"), metric
            sample, _ = read_sample(got[metric], time.time())
            assert sample is not None and abs(sample.timestamp - time.time()) < 60
    assert set(got) == {*QUANTILES, LOAD_SOURCE_KEY}
