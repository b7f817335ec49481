"""Flags, start-up refusals with clear messages, and --once options that need no real Prometheus."""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import pytest

from ballast.annotator.cli import COMMAND
from ballast.annotator.run import DEFAULT_NAMESPACE, lease_namespace, run
from ballast.contract.annotations import HOT_VALUE_KEY
from ballast.testing.annotator import FailingPrometheus, add_node, annotations, bind_pod, parse, stamp
from ballast.testing.fakekube import FakeKube, make_event, make_lease
from ballast.testing.parts import POLICY_FILE


def subparser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    return COMMAND.register(parser.add_subparsers())


def test_every_flag_has_help() -> None:
    p = subparser()
    flags = [a for a in p._actions if a.option_strings and a.dest != "help"]
    assert len(flags) >= 30
    for action in flags:
        assert action.help and len(action.help) > 10, action.option_strings


def test_defaults_are_cranes() -> None:
    args = parse("--policy", "p.yaml", "--prometheus-url", "http://prometheus:9090")
    assert (args.lease_duration, args.renew_deadline, args.retry_period) == (15.0, 10.0, 2.0)
    assert args.lease_name == "ballast-annotator" and args.metrics_port == 8090
    assert args.match_label == "instance" and args.query_template == "{metric}"
    assert args.leader_elect is None and not args.once and args.hot_value_interval == 60.0
    assert args.binding_source == "pods" and args.prometheus_timeout == 10.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--query-template", "cpu_usage"], "must contain {metric}"),
        (["--prometheus-timeout", "ten"], "invalid duration"),
        (["--prometheus-param", "novalue"], "expected NAME=VALUE"),
        (["--metrics-port", "70000"], "not a port number"),
        (["--binding-source", "gossip"], "invalid choice"),
    ],
)
def test_bad_flags_are_refused(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse("--policy", "p.yaml", "--prometheus-url", "http://p:9090", *argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_policy_exits_2_with_the_field(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("spec:\n  syncPolicy:\n    - {name: cpu_usage_avg_5m, period: soon}\n")
    assert run(parse("--policy", str(policy), "--prometheus-url", "http://127.0.0.1:1")) == 2
    assert "spec.syncPolicy[0].period" in caplog.text


def test_empty_policy_exits_2(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("spec: {}\n")
    assert run(parse("--policy", str(policy), "--prometheus-url", "http://127.0.0.1:1")) == 2
    assert "nothing to annotate" in caplog.text


def test_bad_prometheus_options_exit_2(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    args = parse(
        "--policy",
        str(POLICY_FILE),
        "--prometheus-url",
        "prometheus:9090",
        "--prometheus-password-file",
        str(tmp_path / "nope"),
    )
    assert run(args) == 2
    assert "expected http(s)://" in caplog.text and "needs --prometheus-username" in caplog.text


def test_inconsistent_lease_timing_exits_2(caplog: pytest.LogCaptureFixture) -> None:
    args = parse("--policy", str(POLICY_FILE), "--prometheus-url", "http://p:9090", "--renew-deadline", "20s")
    assert run(args) == 2
    assert "--lease-duration > --renew-deadline" in caplog.text


def test_no_cluster_config_exits_2(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert run(parse("--policy", str(POLICY_FILE), "--prometheus-url", "http://p:9090")) == 2
    assert "no cluster configuration" in caplog.text


def test_lease_namespace_resolution(tmp_path: Path) -> None:
    ns_file = tmp_path / "namespace"
    assert lease_namespace("flag", ns_file) == "flag"
    assert lease_namespace(None, ns_file) == DEFAULT_NAMESPACE == "ballast-system"
    ns_file.write_text("scheduling\n")
    assert lease_namespace(None, ns_file) == "scheduling"


def once_args(url: str, kubeconfig: Path, *extra: str) -> argparse.Namespace:
    return parse(
        "--policy",
        str(POLICY_FILE),
        "--prometheus-url",
        url,
        "--kubeconfig",
        str(kubeconfig),
        "--once",
        "--prometheus-retries",
        "0",
        "--lease-namespace",
        "ballast-system",
        *extra,
    )


def test_once_with_leader_election_waits_for_a_held_lease(
    fake_kube: FakeKube, kubeconfig: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake_kube.add(make_lease("ballast-annotator", namespace="ballast-system", holder="the-leader"))
    add_node(fake_kube, "n1", "10.0.0.1")
    bind_pod(fake_kube, "p1", "n1", time.time() - 5)
    extra = (
        "--leader-elect",
        "--lease-duration",
        "1s",
        "--renew-deadline",
        "800ms",
        "--retry-period",
        "200ms",
    )
    with FailingPrometheus() as prom:
        assert run(once_args(prom.url, kubeconfig, *extra)) == 1
    assert "held by the-leader" in caplog.text
    assert [r for r in fake_kube.requests if r.method == "PATCH"] == []


def test_once_with_leader_election_acquires_and_releases(fake_kube: FakeKube, kubeconfig: Path) -> None:
    add_node(fake_kube, "n1", "10.0.0.1")
    now = time.time()
    for i in range(2):
        bind_pod(fake_kube, f"p{i}", "n1", now - 5)
    with FailingPrometheus() as prom:
        code = run(once_args(prom.url, kubeconfig, "--leader-elect", "--identity", "cron"))
    assert code == 1  # the queries failed
    assert annotations(fake_kube, "n1")[HOT_VALUE_KEY].startswith("1,")  # floor(2/5) + floor(2/2)
    lease = fake_kube.get("leases", "ballast-annotator", namespace="ballast-system")
    assert lease is not None and lease["spec"]["holderIdentity"] == ""
    assert lease["spec"]["leaseTransitions"] == 0  # created by this run, then handed back


def test_once_node_selector(fake_kube: FakeKube, kubeconfig: Path) -> None:
    for name, pool in (("w1", "workers"), ("x1", "infra")):
        add_node(fake_kube, name, None)
        fake_kube.patch("nodes", name, {"metadata": {"labels": {"pool": pool}}})
        for i in range(2):
            bind_pod(fake_kube, f"{name}-p{i}", name, time.time() - 5)
    with FailingPrometheus() as prom:
        run(once_args(prom.url, kubeconfig, "--node-selector", "pool=workers"))
    assert HOT_VALUE_KEY in annotations(fake_kube, "w1")
    assert HOT_VALUE_KEY not in annotations(fake_kube, "x1")
    lists = [r for r in fake_kube.requests if r.method == "GET" and r.path == "/api/v1/nodes"]
    assert lists and all(r.query.get("labelSelector") == "pool=workers" for r in lists)


def test_once_bindings_from_scheduled_events(fake_kube: FakeKube, kubeconfig: Path) -> None:
    add_node(fake_kube, "n1", "10.0.0.1")
    now = time.time()
    for i in range(4):
        ev = make_event(f"web-{i}.17", message=f"Successfully assigned default/web-{i} to n1")
        ev["involvedObject"]["uid"] = f"uid-{i}"
        ev["firstTimestamp"] = ev["lastTimestamp"] = stamp(now - 10)
        fake_kube.add(ev)
    other = make_event("web-9.18", reason="Pulled", message="Successfully pulled image")
    fake_kube.add(other)
    with FailingPrometheus() as prom:
        run(once_args(prom.url, kubeconfig, "--binding-source", "events"))
    assert annotations(fake_kube, "n1")[HOT_VALUE_KEY].startswith("2,")  # floor(4/5) + floor(4/2)
    (events_list,) = [r for r in fake_kube.requests if r.path == "/api/v1/events"]
    assert events_list.query.get("fieldSelector") == "reason=Scheduled"


def test_httpx_request_logs_stay_quiet(fake_kube: FakeKube, kubeconfig: Path, caplog) -> None:
    add_node(fake_kube, "n1", "10.0.0.1")
    with FailingPrometheus() as prom, caplog.at_level(logging.INFO):
        run(once_args(prom.url, kubeconfig))
    assert not [r for r in caplog.records if r.name == "httpx" and r.levelno < logging.WARNING]
