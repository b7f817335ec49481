"""Run mode: the leader-elected loop against a real Prometheus and the fake API server.

Short periods (a 2s policy, 1s hot-value refresh, a 2s lease) keep these tests to a few seconds each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ballast.annotator.run import run
from ballast.contract.annotations import HOT_VALUE_KEY, read_sample
from ballast.testing.annotator import add_node, annotations, bind_pod, node_patches, parse
from ballast.testing.fakekube import FakeKube
from ballast.testing.parts import ROOT, wait_for
from ballast.testing.prometheus import BackfillSeries, PrometheusServer, free_port

pytestmark = pytest.mark.integration

FAST_POLICY = """\
apiVersion: scheduler.policy.crane.io/v1alpha1
kind: DynamicSchedulerPolicy
spec:
  syncPolicy:
    - {name: cpu_usage_avg_5m, period: 2s}
    - {name: mem_usage_avg_5m, period: 2s}
  priority:
    - {name: cpu_usage_avg_5m, weight: 1}
  hotValue:
    - {timeRange: 1m, count: 2}
"""
LOAD = {"cpu_usage_avg_5m": 41.0, "mem_usage_avg_5m": 63.5}
NODES = {"n1": "10.3.0.1", "n2": "10.3.0.2"}


@pytest.fixture
def prom(tmp_path: Path) -> Iterator[PrometheusServer]:
    series = [
        BackfillSeries(metric, {"instance": f"{ip}:9100"}, value + i)
        for metric, value in LOAD.items()
        for i, ip in enumerate(NODES.values())
    ]
    with PrometheusServer(tmp_path / "prom", series) as server:
        yield server


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(FAST_POLICY)
    return path


def run_args(prom_url: str, kubeconfig: Path, policy: Path, *extra: str):
    return parse(
        "--policy",
        str(policy),
        "--prometheus-url",
        prom_url,
        "--kubeconfig",
        str(kubeconfig),
        "--prometheus-timeout",
        "1s",
        "--prometheus-retries",
        "0",
        "--hot-value-interval",
        "1s",
        "--lease-namespace",
        "ballast-system",
        "--lease-duration",
        "2s",
        "--renew-deadline",
        "1500ms",
        "--retry-period",
        "250ms",
        *extra,
    )


class Replica:
    """``run(args)`` in a thread, stopped like SIGTERM would (the stop event)."""

    def __init__(self, args) -> None:
        self.stop = threading.Event()
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, args=(args,), daemon=True)

    def _run(self, args) -> None:
        self.code = run(args, stop=self.stop)

    def start(self) -> Replica:
        self.thread.start()
        return self

    def shutdown(self, timeout: float = 10) -> int | None:
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the annotator did not stop"
        return self.code


def lease(fake: FakeKube) -> dict:
    return fake.get("leases", "ballast-annotator", namespace="ballast-system") or {}


def holder(fake: FakeKube) -> str | None:
    return (lease(fake).get("spec") or {}).get("holderIdentity")


def load_written(fake: FakeKube, node: str) -> bool:
    got = annotations(fake, node)
    return all(m in got for m in LOAD)


def hot(fake: FakeKube, node: str) -> str | None:
    value = annotations(fake, node).get(HOT_VALUE_KEY)
    return value.split(",")[0] if value else None


def scrape(port: int, path: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5)


def metric_value(text: str, prefix: str) -> float:
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_run_mode_end_to_end(
    prom: PrometheusServer, fake_kube: FakeKube, kubeconfig: Path, policy_file: Path
) -> None:
    for name, ip in NODES.items():
        add_node(fake_kube, name, ip)
    port = free_port()
    args = run_args(prom.url, kubeconfig, policy_file, "--metrics-port", str(port), "--identity", "solo")
    replica = Replica(args).start()
    try:
        wait_for(lambda: all(load_written(fake_kube, n) for n in NODES), timeout=10.0)
        assert holder(fake_kube) == "solo"
        for node, ip in NODES.items():
            for metric in LOAD:
                expected = prom.scalar(f'{metric}{{instance="{ip}:9100"}} / 100')
                assert annotations(fake_kube, node)[metric].split(",")[0] == f"{expected:.5f}"

        assert scrape(port, "/healthz").status_code == 200
        wait_for(lambda: scrape(port, "/readyz").status_code == 200, timeout=10.0)
        text = scrape(port, "/metrics").text
        assert (
            metric_value(
                text, 'ballast_annotator_prometheus_queries_total{metric="cpu_usage_avg_5m",result="ok"}'
            )
            >= 1
        )
        assert metric_value(text, "ballast_annotator_leader ") == 1
        assert metric_value(text, 'ballast_annotator_node_patches_total{result="ok"}') >= 2
        assert "ballast_annotator_cycle_duration_seconds_bucket" in text
        assert (
            metric_value(text, 'ballast_annotator_last_success_timestamp_seconds{metric="cpu_usage_avg_5m"}')
            > 0
        )

        # Bindings seen through the pod watch: 4 in the last minute on n1 -> floor(4/2) = 2.
        now = time.time()
        for i in range(4):
            bind_pod(fake_kube, f"p{i}", "n1", now - 5)
        wait_for(lambda: hot(fake_kube, "n1") == "2", timeout=10.0)
        # Deleting them (graceful, then final) makes them stop counting: the fresh 2 becomes 0.
        for i in range(4):
            fake_kube.delete("pods", f"p{i}", namespace="default")
        wait_for(lambda: hot(fake_kube, "n1") == "0", timeout=10.0)
        assert hot(fake_kube, "n2") is None  # never had bindings: never written

        # Prometheus goes away mid-run: the load annotations stay exactly as they were.
        before = {n: annotations(fake_kube, n) for n in NODES}
        prom.stop()
        wait_for(
            lambda: (
                metric_value(
                    scrape(port, "/metrics").text, 'ballast_annotator_failures_total{kind="prometheus"}'
                )
                >= 4
            ),
            timeout=10.0,
        )
        for node in NODES:
            after = annotations(fake_kube, node)
            assert {m: after[m] for m in LOAD} == {m: before[node][m] for m in LOAD}
        text = scrape(port, "/metrics").text
        assert (
            metric_value(
                text, 'ballast_annotator_prometheus_queries_total{metric="cpu_usage_avg_5m",result="error"}'
            )
            >= 1
        )
    finally:
        assert replica.shutdown() == 0
    spec = lease(fake_kube)["spec"]
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1  # released on the way out


def test_two_replicas_one_writer(
    prom: PrometheusServer, fake_kube: FakeKube, kubeconfig: Path, policy_file: Path
) -> None:
    for name, ip in NODES.items():
        add_node(fake_kube, name, ip)
    common = ("--metrics-port", "0")
    a = Replica(run_args(prom.url, kubeconfig, policy_file, *common, "--identity", "replica-a")).start()
    b = None
    try:
        wait_for(lambda: holder(fake_kube) == "replica-a", timeout=10.0)
        b = Replica(run_args(prom.url, kubeconfig, policy_file, *common, "--identity", "replica-b")).start()
        wait_for(lambda: all(load_written(fake_kube, n) for n in NODES), timeout=10.0)
        # b keeps trying (lease reads) but never writes while a leads.
        wait_for(
            lambda: (
                len([r for r in fake_kube.requests if "replica-b" in r.headers.get("User-Agent", "")]) >= 4
            ),
            timeout=10.0,
        )
        time.sleep(1.0)
        writers = {
            r.headers.get("User-Agent", "").split("(")[-1].rstrip(")") for r in node_patches(fake_kube)
        }
        assert writers == {"replica-a"}
        assert holder(fake_kube) == "replica-a"

        # a steps down (SIGTERM path): it releases the lease and b takes over at once.
        assert a.shutdown() == 0
        wait_for(lambda: holder(fake_kube) == "replica-b", timeout=5)
        fake_kube.patch("nodes", "n2", {"metadata": {"annotations": {"cpu_usage_avg_5m": None}}})
        wait_for(lambda: load_written(fake_kube, "n2"), timeout=10.0)  # b repairs it
    finally:
        if b is not None:
            assert b.shutdown() == 0
        if a.thread.is_alive():
            a.shutdown()

    # In request order: every node patch by a comes before a's release, every patch by b after it.
    log = fake_kube.requests
    release = max(
        i
        for i, r in enumerate(log)
        if r.method == "PUT"
        and "replica-a" in r.headers.get("User-Agent", "")
        and (r.body.get("spec") or {}).get("holderIdentity") == ""
    )
    patches = [
        (i, r.headers.get("User-Agent", "")) for i, r in enumerate(log) if r in node_patches(fake_kube)
    ]
    assert all(i < release for i, ua in patches if "replica-a" in ua)
    assert all(i > release for i, ua in patches if "replica-b" in ua)
    assert any("replica-b" in ua for _, ua in patches)


def test_sigterm_steps_down_and_releases(
    prom: PrometheusServer, fake_kube: FakeKube, kubeconfig: Path, policy_file: Path
) -> None:
    add_node(fake_kube, "n1", NODES["n1"])
    argv = [
        sys.executable,
        "-m",
        "ballast.annotator",
        *[
            a
            for a in (
                "--policy",
                str(policy_file),
                "--prometheus-url",
                prom.url,
                "--kubeconfig",
                str(kubeconfig),
                "--lease-namespace",
                "ballast-system",
                "--identity",
                "proc",
                "--metrics-port",
                "0",
                "--lease-duration",
                "15s",
                "--log-level",
                "warning",
            )
        ],
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        try:
            wait_for(lambda: holder(fake_kube) == "proc" and load_written(fake_kube, "n1"), timeout=20)
        except AssertionError as e:
            raise AssertionError(
                (proc.poll(), proc.stderr.read().decode() if proc.poll() is not None else "")
            ) from e
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    spec = lease(fake_kube)["spec"]
    # Released: empty holder and a 1s lease, so the next replica does not wait out the 15s.
    assert spec["holderIdentity"] == "" and spec["leaseDurationSeconds"] == 1
    sample, _ = read_sample(annotations(fake_kube, "n1")["cpu_usage_avg_5m"], time.time())
    assert sample is not None


CPU_ONLY_POLICY = """\
apiVersion: scheduler.policy.crane.io/v1alpha1
kind: DynamicSchedulerPolicy
spec:
  syncPolicy:
    - {name: cpu_usage_avg_5m, period: 2s}
"""


def swap(path: Path, text: str) -> None:
    """Replace the file in one step, as the kubelet swaps a ConfigMap volume's files: a poll never reads a
    half-written file (which would count as a second refused reload)."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_a_changed_policy_file_is_taken_and_a_broken_one_refused(
    prom: PrometheusServer, fake_kube: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    for name, ip in NODES.items():
        add_node(fake_kube, name, ip)
    policy = tmp_path / "policy.yaml"
    policy.write_text(CPU_ONLY_POLICY)
    port = free_port()
    args = run_args(
        prom.url,
        kubeconfig,
        policy,
        "--metrics-port",
        str(port),
        "--identity",
        "solo",
        "--policy-poll",
        "200ms",
    )
    replica = Replica(args).start()
    try:
        wait_for(lambda: all("cpu_usage_avg_5m" in annotations(fake_kube, n) for n in NODES), timeout=10.0)
        assert not any("mem_usage_avg_5m" in annotations(fake_kube, n) for n in NODES)

        # A new metric in the file (as a ConfigMap update delivers it): the loop restarts with it.
        swap(policy, FAST_POLICY)
        wait_for(lambda: all(load_written(fake_kube, n) for n in NODES), timeout=20)
        wait_for(lambda: scrape(port, "/readyz").status_code == 200, timeout=10.0)
        text = scrape(port, "/metrics").text
        assert metric_value(text, 'ballast_annotator_policy_reloads_total{result="ok"}') == 1
        assert holder(fake_kube) == "solo"

        # A change only the extender uses (a predicate): taken without restarting the loop.
        acquired = 'ballast_annotator_leadership_changes_total{event="acquired"}'
        leaderships = metric_value(text, acquired)
        swap(policy, FAST_POLICY + "  predicate:\n    - {name: cpu_usage_avg_5m, maxLimitPecent: 0.5}\n")
        wait_for(
            lambda: (
                metric_value(
                    scrape(port, "/metrics").text, 'ballast_annotator_policy_reloads_total{result="ok"}'
                )
                == 2
            ),
            timeout=10.0,
        )
        time.sleep(1)
        assert metric_value(scrape(port, "/metrics").text, acquired) == leaderships

        # A broken file is refused: the annotator keeps running the last good policy and says so.
        swap(policy, "spec:\n  syncPolicy:\n    - {name: cpu_usage_avg_5m, period: -3s}\n")
        wait_for(lambda: scrape(port, "/readyz").status_code == 503, timeout=10.0)
        body = scrape(port, "/readyz").text
        assert "policy reload refused" in body and "period" in body
        text = scrape(port, "/metrics").text
        assert metric_value(text, 'ballast_annotator_policy_reloads_total{result="error"}') == 1
        assert metric_value(text, "ballast_annotator_policy_last_reload_ok ") == 0
        mem_queries = 'ballast_annotator_prometheus_queries_total{metric="mem_usage_avg_5m",result="ok"}'
        before = metric_value(text, mem_queries)
        wait_for(
            lambda: metric_value(scrape(port, "/metrics").text, mem_queries) > before,
            timeout=10.0,
            what="the last good policy (with mem_usage_avg_5m) to keep running",
        )
    finally:
        assert replica.shutdown() == 0
