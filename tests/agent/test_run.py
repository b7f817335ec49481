"""``ballast agent`` run mode: the whole loop against the fake API server (``ballast.agent.run.run``)."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from ballast.agent.cli import COMMAND
from ballast.agent.nrt.crane import CPU_MANAGER_DISABLED_ATTRIBUTE
from ballast.agent.run import NODE_NAME_MISSING, published_probe, run
from ballast.contract.topology_result import AWARENESS_KEY
from ballast.kube.client import MERGE_PATCH
from ballast.program.health import HealthServer
from ballast.testing.fakekube import FakeKube, make_node
from ballast.testing.parts import wait_for
from tests.agent.sysfs_fixtures import TWO_SOCKETS_HT, write_sysfs

NODE = "worker-1"
NRT_PATH = f"/apis/topology.crane.io/v1alpha1/noderesourcetopologies/{NODE}"
ROOT = Path(__file__).resolve().parents[2]


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ballast")
    COMMAND.register(p.add_subparsers(dest="command", required=True))
    return p.parse_args(["agent", *argv])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Agent:
    """``run(args)`` in a thread, stopped through its ``stop`` event."""

    def __init__(self, args: argparse.Namespace, **kwargs: Any) -> None:
        self.stop = threading.Event()
        self.rc: list[int] = []
        self.thread = threading.Thread(
            target=lambda: self.rc.append(run(args, stop=self.stop, **kwargs)), daemon=True
        )
        self.thread.start()

    def shutdown(self) -> int:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive(), "the agent did not stop"
        return self.rc[0]


@pytest.fixture
def node_env(fake_kube: FakeKube, kubeconfig: Path, tmp_path: Path) -> dict[str, Path]:
    fake_kube.add(make_node(NODE))
    kubelet = tmp_path / "kubelet.yaml"
    kubelet.write_text("kubeReserved: {cpu: '1'}\n")
    return {
        "kubeconfig": kubeconfig,
        "sysfs": write_sysfs(tmp_path / "sys", TWO_SOCKETS_HT),
        "kubelet": kubelet,
    }


def agent_args(env: dict[str, Path], *extra: str, node: str | None = NODE) -> argparse.Namespace:
    argv = [
        "--kubeconfig",
        str(env["kubeconfig"]),
        "--sysfs",
        str(env["sysfs"]),
        "--metrics-port",
        "0",
        *extra,
    ]
    if node is not None:
        argv = ["--node-name", node, *argv]
    if "--kubelet-configz" not in extra:
        argv += ["--kubelet-config", str(env["kubelet"])]
    return parse(argv)


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for a in started:
        if a.thread.is_alive():
            a.shutdown()


def nrt(fake: FakeKube) -> dict | None:
    return fake.get("noderesourcetopologies", NODE)


# --- the loop -----------------------------------------------------------------------------------------


def test_label_change_republishes_within_a_second(
    fake_kube: FakeKube, node_env: dict[str, Path], agents: list[Agent]
) -> None:
    agent = Agent(agent_args(node_env, "--resync", "1m", "--cpu-manager", "off"))
    agents.append(agent)
    wait_for(lambda: nrt(fake_kube), what="the NRT")
    assert [r.path for r in fake_kube.find_requests("POST")] == [
        "/apis/topology.crane.io/v1alpha1/noderesourcetopologies"
    ]
    assert fake_kube.wait_for_watches(1, "nodes")
    watch = fake_kube.find_requests("GET", "^/api/v1/nodes$", watch=True)[0]
    assert watch.query["fieldSelector"] == f"metadata.name={NODE}"

    fake_kube.clear_requests()
    started = time.monotonic()
    fake_kube.patch("nodes", NODE, {"metadata": {"labels": {AWARENESS_KEY: "false"}}})
    wait_for(lambda: fake_kube.find_requests("PATCH", NRT_PATH), timeout=1.0, what="the merge patch")
    assert time.monotonic() - started < 1.0
    patch = fake_kube.find_requests("PATCH", NRT_PATH)
    assert [(p.content_type, p.body) for p in patch] == [
        (MERGE_PATCH, {"craneManagerPolicy": {"topologyManagerPolicy": "None"}})
    ]
    assert nrt(fake_kube)["craneManagerPolicy"]["topologyManagerPolicy"] == "None"  # type: ignore[index]
    # Labels that do not change the NRT: a read, no write.
    fake_kube.patch("nodes", NODE, {"metadata": {"labels": {"team": "a"}}})
    wait_for(lambda: len(fake_kube.find_requests("GET", f"{NRT_PATH}$")) >= 2, timeout=1.0, what="a re-read")
    assert agent.shutdown() == 0
    assert [r.method for r in fake_kube.requests if r.method not in ("GET",)] == ["PATCH"]
    assert fake_kube.wait_for_watches(0, exactly=True), "the node watch was not closed"


def test_kubelet_static_rule_through_the_loop(
    fake_kube: FakeKube,
    node_env: dict[str, Path],
    agents: list[Agent],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from ballast.agent.cpumanager.runtime import MemoryRuntime

    node_env["kubelet"].write_text("cpuManagerPolicy: static\nkubeReserved: {cpu: '1'}\n")
    args = agent_args(node_env, "--resync", "50ms", "--cpu-state-file", str(tmp_path / "cpu_state"))
    with caplog.at_level("INFO"):
        agents.append(agent := Agent(args, runtime_factory=MemoryRuntime))
        wait_for(lambda: nrt(fake_kube), what="the NRT")
        wait_for(lambda: len(fake_kube.find_requests("GET", f"{NRT_PATH}$")) >= 5, what="several resyncs")
        stored = nrt(fake_kube)
        assert stored is not None and stored["craneManagerPolicy"]["cpuManagerPolicy"] == "None"
        assert "kubelet pins exclusive CPUs" in stored["attributes"][CPU_MANAGER_DISABLED_ATTRIBUTE]
        assert fake_kube.find_requests("GET", "^/api/v1/pods$") == []  # no CPU manager
        assert caplog.text.count("cpuManagerPolicy is static") == 1

        # The kubelet drops its static policy: the NRT says Static and the CPU manager starts.
        node_env["kubelet"].write_text("kubeReserved: {cpu: '1'}\n")
        wait_for(lambda: fake_kube.find_requests("GET", "^/api/v1/pods$", watch=True), what="the pod watch")
        assert nrt(fake_kube)["craneManagerPolicy"]["cpuManagerPolicy"] == "Static"  # type: ignore[index]
        pods = fake_kube.find_requests("GET", "^/api/v1/pods$")[0]
        assert pods.query["fieldSelector"] == f"spec.nodeName={NODE}"
        # logged when the start returns, just after the watch it opened: wait for it, do not race it
        wait_for(lambda: "CPU manager started (reserved CPUs: 0)" in caplog.text, what="the start logged")
        wait_for(lambda: (tmp_path / "cpu_state").exists(), what="the CPU manager's checkpoint")

        # And static again: the CPU manager stops and releases its watch.
        node_env["kubelet"].write_text("cpuManagerPolicy: static\n")
        wait_for(lambda: "stopping the CPU manager" in caplog.text, what="the CPU manager to stop")
        assert fake_kube.wait_for_watches(0, "pods", exactly=True)
        assert agent.shutdown() == 0


def test_api_errors_are_retried_on_the_next_resync(
    fake_kube: FakeKube, node_env: dict[str, Path], agents: list[Agent], caplog: pytest.LogCaptureFixture
) -> None:
    fake_kube.fail_next("GET", f"{NRT_PATH}$", 500, message="etcdserver: leader changed", count=3)
    port = free_port()
    args = agent_args(node_env, "--resync", "50ms", "--cpu-manager", "off", "--metrics-port", str(port))
    with caplog.at_level("ERROR", logger="ballast.agent.publisher"):
        agents.append(agent := Agent(args))
        wait_for(lambda: nrt(fake_kube), what="the NRT after the failures")
    assert [r.status for r in fake_kube.find_requests("GET", f"{NRT_PATH}$")][:4] == [500, 500, 500, 404]
    assert "etcdserver: leader changed" in caplog.text
    assert agent.thread.is_alive()
    status, body = wait_for(lambda: (r := http_get(f"http://127.0.0.1:{port}/readyz"))[0] == 200 and r)
    assert body == "ok\n"
    status, metrics = http_get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200
    assert 'ballast_agent_nrt_publishes_total{result="error"} 3.0' in metrics
    assert 'ballast_agent_nrt_publishes_total{result="created"} 1.0' in metrics
    assert "ballast_agent_nrt_last_success_timestamp_seconds" in metrics
    assert "ballast_agent_cpuset_updates_total" not in metrics  # no CPU manager with --cpu-manager=off
    assert http_get(f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")
    assert http_get(f"http://127.0.0.1:{port}/nope")[0] == 404
    assert agent.shutdown() == 0
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)


def test_configz_through_the_loop_is_read_once(
    fake_kube: FakeKube, node_env: dict[str, Path], agents: list[Agent]
) -> None:
    fake_kube.set_configz(NODE, {"kubeletconfig": {"systemReserved": {"cpu": "2", "memory": "2Gi"}}})
    agents.append(
        agent := Agent(agent_args(node_env, "--kubelet-configz", "--resync", "20ms", "--cpu-manager", "off"))
    )
    wait_for(lambda: nrt(fake_kube), what="the NRT")
    wait_for(lambda: len(fake_kube.find_requests("GET", f"{NRT_PATH}$")) >= 10, what="ten resyncs")
    assert agent.shutdown() == 0
    assert len(fake_kube.find_requests("GET", "/proxy/configz$")) == 1
    stored = nrt(fake_kube)
    assert stored is not None and stored["reserved"] == {"cpu": "2", "memory": "2Gi"}
    assert [z["resources"]["reservedCPUNums"] for z in stored["zones"]] == [2, 0]


def test_node_name_defaults_to_the_environment(
    fake_kube: FakeKube, node_env: dict[str, Path], agents: list[Agent], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NODE_NAME", NODE)
    agents.append(agent := Agent(agent_args(node_env, "--cpu-manager", "off", node=None)))
    wait_for(lambda: nrt(fake_kube), what="the NRT named after NODE_NAME")
    assert agent.shutdown() == 0


def test_without_a_node_name_exit_2_with_the_reason(
    fake_kube: FakeKube,
    node_env: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    assert COMMAND.start(agent_args(node_env, node=None)) == 2
    err = capsys.readouterr().err
    assert err.strip() == NODE_NAME_MISSING
    assert "--node-name is required" in err and "NODE_NAME" in err and "spec.nodeName" in err
    assert fake_kube.requests == []


def test_bad_topology_or_cluster_config_exit_before_any_request(
    fake_kube: FakeKube,
    node_env: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    args = agent_args(node_env)
    args.sysfs = tmp_path / "empty"
    assert run(args) == 1
    assert "topology discovery failed" in caplog.text
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    args = agent_args(node_env)
    args.kubeconfig = None
    assert run(args) == 2
    assert "no cluster configuration" in caplog.text
    assert fake_kube.requests == []


@pytest.mark.parametrize("unreadable", ["missing", "a-directory"])
def test_an_unreadable_result_key_stops_the_agent_before_any_request(
    fake_kube: FakeKube,
    node_env: dict[str, Path],
    tmp_path: Path,
    unreadable: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With --result-key-file given (as the shipped DaemonSet does), a key that cannot be read stops the
    agent: it never falls back to trusting results by schedulerName alone."""
    (tmp_path / "a-directory").mkdir()
    path = tmp_path / unreadable
    assert run(agent_args(node_env, "--result-key-file", str(path))) == 2
    assert f"cannot read the result key file {path}" in caplog.text
    assert "trusted by schedulerName alone" not in caplog.text
    assert fake_kube.requests == []


def test_health_server_is_not_ready_before_the_first_publish() -> None:
    ready = threading.Event()
    server = HealthServer("127.0.0.1", 0, CollectorRegistry(), ready=published_probe(ready)).start()
    try:
        status, body = http_get(f"http://127.0.0.1:{server.port}/readyz")
        assert status == 503 and "not published yet" in body
        assert http_get(f"http://127.0.0.1:{server.port}/healthz")[0] == 200
        ready.set()
        assert http_get(f"http://127.0.0.1:{server.port}/readyz?verbose")[0] == 200
    finally:
        server.close()


def test_sigterm_shuts_the_process_down_cleanly(
    fake_kube: FakeKube, node_env: dict[str, Path], tmp_path: Path
) -> None:
    argv = [
        sys.executable,
        "-m",
        "ballast",
        "agent",
        "--node-name",
        NODE,
        "--kubeconfig",
        str(node_env["kubeconfig"]),
        "--sysfs",
        str(node_env["sysfs"]),
        "--kubelet-config",
        str(node_env["kubelet"]),
        "--metrics-port",
        "0",
        "--cpu-manager",
        "off",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "NODE_NAME")}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: nrt(fake_kube) or proc.poll() is not None, timeout=15, what="the NRT")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert fake_kube.wait_for_watches(1, "nodes")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "SIGTERM received; shutting down" in err and "agent stopped" in err
    assert fake_kube.wait_for_watches(0, exactly=True)


# --- command line -------------------------------------------------------------------------------------


def test_run_flags_and_defaults() -> None:
    from ballast.agent.cpumanager.state_checkpoint import DEFAULT_STATE_PATH
    from ballast.agent.cri.client import DEFAULT_ENDPOINT

    args = parse([])
    assert (args.kubelet_config, args.kubelet_configz, args.resync) == (
        Path("/var/lib/kubelet/config.yaml"),
        False,
        10.0,
    )
    assert (args.metrics_port, args.cpu_manager, args.default_cpu_policy) == (8091, "on", "exclusive")
    assert args.cpu_manager_reconcile_period == 5.0 and args.scheduler_names is None
    # Written out in the parser (so that it loads no gRPC); they must match the CPU manager's own defaults.
    assert (args.cpu_state_file, args.cri_endpoint) == (DEFAULT_STATE_PATH, DEFAULT_ENDPOINT)
    args = parse(
        ["--kubelet-configz", "--scheduler-name", "a", "--scheduler-name", "b", "--metrics-port", "0"]
    )
    assert (args.kubelet_configz, args.scheduler_names, args.metrics_port) == (True, ["a", "b"], 0)


@pytest.mark.parametrize(
    "argv",
    [
        ["--kubelet-config", "k.yaml", "--kubelet-configz"],
        ["--metrics-port", "70000"],
        ["--cpu-manager", "maybe"],
    ],
)
def test_bad_run_flags_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)


def test_every_api_call_names_the_agent_in_its_user_agent(
    fake_kube: FakeKube, node_env: dict[str, Path], agents: list[Agent]
) -> None:
    """Audit logs tell the agent's calls apart from any other client's (not ``OpenAPI-Generator/...``)."""
    agent = Agent(agent_args(node_env, "--resync", "1m", "--cpu-manager", "off"))
    agents.append(agent)
    wait_for(lambda: nrt(fake_kube), what="the NRT")
    agent.shutdown()
    agents_seen = {r.headers.get("User-Agent", "") for r in fake_kube.requests}
    assert agents_seen and all(ua.startswith("ballast-agent/") for ua in agents_seen), agents_seen


def test_the_nrt_publishes_what_the_cpu_manager_pins_per_zone(
    fake_kube: FakeKube, node_env: dict[str, Path], agents: list[Agent], tmp_path: Path
) -> None:
    """A Guaranteed pod of the default scheduler (no topology result) is pinned where the agent
    chooses; the NRT's zones say so (``ballast.io/exclusive-pods``), so the extender counts it."""
    from ballast.agent.cpumanager.runtime import MemoryRuntime
    from ballast.contract.topology_result import EXCLUSIVE_PODS_ATTRIBUTE, parse_zone_pods
    from ballast.testing.fakekube import make_pod

    args = agent_args(node_env, "--resync", "1m", "--cpu-state-file", str(tmp_path / "cpu_state"))
    agents.append(Agent(args, runtime_factory=MemoryRuntime))

    def held() -> dict[str, dict[str, int]] | None:
        stored = nrt(fake_kube)
        zones = (stored or {}).get("zones") or []
        out = {
            z["name"]: parse_zone_pods((z.get("attributes") or {}).get(EXCLUSIVE_PODS_ATTRIBUTE))
            for z in zones
        }
        return out if zones and all(v is not None for v in out.values()) else None

    wait_for(lambda: held() == {"node0": {}, "node1": {}}, what="zones saying nothing is pinned")
    pod = fake_kube.add(make_pod("db", node_name=NODE, cpu="2", memory="1Gi", limits=True, phase="Running"))
    uid = pod["metadata"]["uid"]
    wait_for(
        lambda: (h := held()) and sum(p.get(uid, 0) for p in h.values()) == 2,
        timeout=10,
        what="the pod's CPUs published",
    )
    fake_kube.delete("pods", "db", namespace="default")
    wait_for(lambda: held() == {"node0": {}, "node1": {}}, timeout=10, what="the CPUs released in the NRT")


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ((), "--report-load needs --policy FILE"),
        (("--policy", "{tmp}/no-such-policy.yaml"), "--policy {tmp}/no-such-policy.yaml"),
        (("--policy", "{tmp}/bad.yaml"), "spec.syncPolicy"),
        (("--policy", "{tmp}/good.yaml", "--proc-root", "{tmp}"), "--proc-root {tmp}"),
    ],
)
def test_report_load_flags_that_cannot_work_stop_the_agent_before_any_request(
    fake_kube: FakeKube,
    node_env: dict[str, Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    extra: tuple[str, ...],
    says: str,
) -> None:
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: scheduler.policy.crane.io/v1alpha1\nspec:\n  syncPolicy: 3\n"
    )
    (tmp_path / "good.yaml").write_text(
        "apiVersion: scheduler.policy.crane.io/v1alpha1\n"
        "spec:\n  syncPolicy: [{name: cpu_usage_avg_5m, period: 3m}]\n"
    )
    argv = [a.format(tmp=tmp_path) for a in ("--report-load", *extra)]
    assert run(agent_args(node_env, *argv)) == 2
    assert says.format(tmp=tmp_path) in caplog.text
    assert fake_kube.requests == []
