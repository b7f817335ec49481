"""The agent's admission policy acting on a real pod's token: the ServiceAccount token the guest's kubelet
requested for the agent's pod (bound to that pod and its node) may write the agent's own Node and NodeLoad,
and is refused another node's, by ``ballast-agent-writes-only-its-node`` (scheduler_config/deploy/
agent-admission-policy.yaml). ``tests/cluster/test_agent_admission.py`` checks the policy's every rule with
tokens the test mints; this is the token a user's agent carries."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from ballast.contract.nodeload import API_VERSION, KIND, NODELOAD_PATH
from ballast.testing.controlplane import ControlPlane, create_nodes, node_body
from ballast.testing.guest import Guest, GuestPool

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

OTHER = "vap-other"


def call(
    cp: ControlPlane, token: str, method: str, path: str, body: Any, content_type: str
) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(cp.pki / "ca.crt"))
    request = urllib.request.Request(
        f"{cp.server_url}{path}",
        data=json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": content_type},
    )
    try:
        with urllib.request.urlopen(request, context=ctx, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def agent_token(guest: Guest, pod: Any) -> str:
    """The token the kubelet wrote into the agent's projected volume (read in the guest: nothing of a pod is
    reachable through the API server's node proxy)."""
    folder = f"/var/lib/kubelet/pods/{pod.metadata.uid}/volumes/kubernetes.io~projected"
    return guest.ssh(f"cat {folder}/kube-api-access-*/token").strip()


def test_the_agents_own_token_writes_only_its_own_node(
    clean_pods: ControlPlane, guests: GuestPool, install_agent: Callable[[Guest], Any]
) -> None:
    cp = clean_pods
    guest = guests.get("g1")
    pod = install_agent(guest)
    token = agent_token(guest, pod)
    core = cp.core()
    create_nodes(core, [node_body(OTHER)])
    try:
        annotation = {"metadata": {"annotations": {"cpu_usage_p95_5m": "0.10,2026-01-01T00:00:00Z"}}}
        own = call(
            cp, token, "PATCH", f"/api/v1/nodes/{guest.name}", annotation, "application/merge-patch+json"
        )
        other = call(cp, token, "PATCH", f"/api/v1/nodes/{OTHER}", annotation, "application/merge-patch+json")
        nodeload = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": OTHER}}
        other_load = call(cp, token, "POST", NODELOAD_PATH, nodeload, "application/json")
        label = {"metadata": {"labels": {"ballast-test": "x"}}}
        own_label = call(
            cp, token, "PATCH", f"/api/v1/nodes/{guest.name}", label, "application/merge-patch+json"
        )
    finally:
        core.delete_node(OTHER)
        core.patch_node(guest.name, {"metadata": {"annotations": {"cpu_usage_p95_5m": None}}})
    assert own[0] == 200, own
    assert other[0] == 403, other
    assert f"the agent on {guest.name} may not change nodes {OTHER}: only its own node" in other[1], other
    assert other_load[0] == 403, other_load
    assert "ballast-agent-writes-only-its-node" in other_load[1], other_load
    assert own_label[0] == 403 and "may not change node labels" in own_label[1], own_label
    assert "ballast-test" not in (core.read_node(guest.name).metadata.labels or {})
