"""The Helm chart's agent in a guest: ``helm install`` of ``charts/ballast`` with the agent only (the
scheduler and the rebalancer off: their images are not here) and the image built here; the agent's pod runs
on the cgroup v2 node with the chart's securityContext, mounts and token, and writes its node's NodeLoad.
The kustomize install the other tests use is removed first (Helm does not take over objects it did not
make) and comes back after."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ballast.contract.nodeload import NODELOAD_PATH, parse_status
from ballast.kube.client import Kube
from ballast.testing import guest_agent
from ballast.testing.controlplane import ControlPlane, wait_until
from ballast.testing.guest import Guest, GuestPool
from ballast.testing.helm import run_helm
from tests.chart import CHART, RELEASE, require_helm

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]


@pytest.fixture
def helm_home(tmp_path: Path) -> Iterator[Path]:
    require_helm()
    yield tmp_path / "helm"


def test_the_charts_agent_runs_in_a_guest(
    clean_pods: ControlPlane,
    guests: GuestPool,
    agent_image: Any,
    remove_agent: Callable[[], None],
    helm_home: Path,
) -> None:
    cp = clean_pods
    guest: Guest = guests.get("g1")
    guest.ensure_image(agent_image.archive, agent_image.ref, agent_image.digest)
    remove_agent()
    repository, tag = guest_agent.split_ref(agent_image.ref)
    kube = ["--kubeconfig", str(cp.kubeconfig), "--namespace", "default"]
    run_helm(helm_home, "install", RELEASE, str(CHART), *kube,
             "--set", "scheduler.enabled=false", "--set", "rebalancer.enabled=false",
             "--set", "crds.enabled=false",  # applied with kubectl by the other tests' install; they stay
             "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
             "--set", "image.pullPolicy=Never")  # fmt: skip
    try:
        pod = guest_agent.wait_agent_ready(cp, guest.name)
        daemonset = json.loads(cp.kubectl("get", "daemonset", "-n", guest_agent.NAMESPACE, "-o", "json"))[
            "items"
        ]
        started = pod.status.container_statuses[0].state.running.started_at.timestamp()
        wait_until(
            lambda: (
                (s := parse_status(Kube(cp.api()).get(f"{NODELOAD_PATH}/{guest.name}"))) is not None
                and s.update_time > started
            ),
            None,
            "a NodeLoad report from the chart's agent",
            300,
        )
    finally:
        run_helm(helm_home, "uninstall", RELEASE, *kube, "--wait", "--timeout", "5m", check=False)
        guest_agent.wait_for_namespace_gone(cp)
    assert [d["metadata"]["name"] for d in daemonset] == [guest_agent.DAEMONSET]
    labels = daemonset[0]["metadata"]["labels"]
    assert labels.get("app.kubernetes.io/managed-by") == "Helm", labels
    assert labels.get("app.kubernetes.io/instance") == RELEASE, labels
    container = pod.spec.containers[0]
    assert container.image == agent_image.ref
    assert container.security_context.read_only_root_filesystem is True
    assert pod.spec.service_account_name == "ballast-agent"
    assert started <= datetime.now(UTC).timestamp()
