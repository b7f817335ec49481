"""The agent's ValidatingAdmissionPolicy (default install) against the real kube-apiserver v1.36.

The agent's account gets a token the way the kubelet gets one for the agent's pod: the TokenRequest API,
bound to a pod that is bound to node A (a Binding; no kubelet runs here). kube-apiserver writes the pod's node
into the token, and the policy reads it back from the request's user info. With that token, node A's load
annotations and NodeLoad A may be written; node B, NodeLoad B, a label, a taint or another annotation on A
may not. The account is granted more than the shipped role on purpose: the policy must hold wherever RBAC is
wider than it should be.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ballast.agent.load.history import CRANE_METRICS
from ballast.contract.annotations import (
    CRANE_LOAD_METRICS,
    HOT_VALUE_KEY,
    PERCENTILE_METRIC_PATTERN,
    PRESSURE_METRIC_PATTERN,
)
from ballast.contract.nodeload import NODELOAD_PATH, new_object
from ballast.kube.client import MERGE_PATCH, ApiError, Kube, load_api_client
from ballast.model.load_source import LOAD_ANNOTATION_KEYS, LOAD_SOURCE_KEY, agent_source
from ballast.testing.controlplane import ControlPlane, create_nodes, node_body, spawn, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "scheduler_config" / "deploy"
VAP = DEPLOY / "agent-admission-policy.yaml"
NAMESPACE = "ballast-system"
ACCOUNT = "ballast-agent"
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"
STAMP = "2026-11-25T00:00:00Z"

# Wider than the shipped role, so that every refusal below is the admission policy's, not RBAC's.
OVERGRANT = f"""
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: test-agent-overgrant}}
rules:
  - apiGroups: [""]
    resources: ["nodes"]
    verbs: ["get", "list", "patch", "update"]
  - apiGroups: ["ballast.io"]
    resources: ["nodeloads", "nodeloads/status"]
    verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: test-agent-overgrant}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: test-agent-overgrant}}
subjects: [{{kind: ServiceAccount, name: {ACCOUNT}, namespace: {NAMESPACE}}}]
"""


def test_the_policy_admits_exactly_the_keys_the_code_writes() -> None:
    """The VAP's key list and ballast/model/load_source.py's cannot drift apart."""
    vap = next(d for d in yaml.safe_load_all(VAP.read_text()) if d["kind"] == "ValidatingAdmissionPolicy")
    allowed = next(v["expression"] for v in vap["spec"]["variables"] if v["name"] == "allowed")
    assert sorted(json.loads(allowed.replace("'", '"'))) == sorted(LOAD_ANNOTATION_KEYS)
    percentiles = next(v["expression"] for v in vap["spec"]["variables"] if v["name"] == "percentiles")
    assert percentiles == f"'{PERCENTILE_METRIC_PATTERN}'"
    pressure = next(v["expression"] for v in vap["spec"]["variables"] if v["name"] == "pressure")
    assert pressure == f"'{PRESSURE_METRIC_PATTERN}'"
    # ... and those are what the agent's code can write: its metrics, the hot value and its stamp
    assert set(LOAD_ANNOTATION_KEYS) == {*CRANE_METRICS, HOT_VALUE_KEY, LOAD_SOURCE_KEY}
    username = vap["spec"]["matchConditions"][0]["expression"]
    assert f"'system:serviceaccount:{NAMESPACE}:{ACCOUNT}'" in username
    sa = next(
        d
        for d in yaml.safe_load_all((DEPLOY / "agent-rbac.yaml").read_text())
        if d["kind"] == "ServiceAccount"
    )
    assert (sa["metadata"]["namespace"], sa["metadata"]["name"]) == (NAMESPACE, ACCOUNT)


def _agent_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "serviceAccountName": ACCOUNT,
            "containers": [{"name": "agent", "image": "ballast:0.1.0"}],
        },
    }


def _token_kubeconfig(cp: ControlPlane, path: Path, token: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "t", "cluster": {"server": cp.server_url,
                                                "certificate-authority": str(cp.pki / "ca.crt")}}],
        "users": [{"name": "agent", "user": {"token": token}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "agent"}}],
        "current-context": "t",
    }  # fmt: skip
    path.write_text(json.dumps(config))
    return path


def _request_token(admin: Kube, pod: dict[str, Any] | None) -> str:
    """A token for the agent's account from the TokenRequest API, bound to ``pod`` when given."""
    spec: dict[str, Any] = {"expirationSeconds": 600}
    if pod is not None:
        meta = pod["metadata"]
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
    out = admin.create(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{ACCOUNT}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
    )
    return out["status"]["token"]


def _claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


@contextlib.contextmanager
def _agent_token_on_a(
    cluster: ControlPlane, tmp_path: Path, *, overgrant: bool
) -> Iterator[tuple[Path, Kube]]:
    """The agent's account with the shipped RBAC (and, with ``overgrant``, more), the NodeLoad CRD, the
    shipped admission policy, nodes A and B, the agent's pod bound to A: (a kubeconfig with the pod-bound
    token, the admin's client)."""
    cluster.kubectl("apply", "-f", str(DEPLOY / "namespace.yaml"))
    cluster.kubectl("apply", "-f", str(DEPLOY / "agent-rbac.yaml"))
    if overgrant:
        cluster.kubectl("apply", "-f", "-", input=OVERGRANT)
    cluster.kubectl("apply", "-f", str(ROOT / "scheduler_config" / "crd-nodeload.yaml"))
    cluster.kubectl("wait", "--for=condition=Established", "crd/nodeloads.ballast.io", "--timeout=60s")
    cluster.kubectl("apply", "-f", str(VAP))
    admin = Kube(cluster.api())
    pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
    try:
        create_nodes(cluster.core(), [node_body("node-a", annotations={"team": "a"}), node_body("node-b")])
        pod = admin.create(pods, _agent_pod("agent-a"))
        admin.create(
            f"{pods}/agent-a/binding",
            {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "agent-a"},
             "target": {"apiVersion": "v1", "kind": "Node", "name": "node-a"}},
        )  # fmt: skip
        pod = admin.get(f"{pods}/agent-a")
        assert pod["spec"]["nodeName"] == "node-a"
        token = _request_token(admin, pod)
        # kube-apiserver put the pod's node into the token (ServiceAccountTokenPodNodeInfo, on by default)
        assert _claims(token)["kubernetes.io"]["node"]["name"] == "node-a"
        yield _token_kubeconfig(cluster, tmp_path / "agent.kubeconfig", token), admin
    finally:
        cluster.kubectl("delete", "-f", str(VAP), "--ignore-not-found")
        if overgrant:
            cluster.kubectl("delete", "-f", "-", "--ignore-not-found", input=OVERGRANT)
        cluster.kubectl("delete", "nodeloads", "--all", "--ignore-not-found")
        cluster.kubectl("delete", "pods", "-n", NAMESPACE, "--all", "--grace-period=0", "--force")


@pytest.fixture
def agent_on_a(cluster: ControlPlane, tmp_path: Path) -> Iterator[tuple[Kube, Kube]]:
    """(the agent's client with a token bound to its pod on node-a, the admin's client), with RBAC wider
    than the shipped role."""
    with _agent_token_on_a(cluster, tmp_path, overgrant=True) as (kubeconfig, admin):
        agent = Kube(load_api_client(str(kubeconfig)))
        review = agent.create(
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        )
        assert review["status"]["userInfo"]["extra"][NODE_NAME_EXTRA] == ["node-a"]
        yield agent, admin


def _try(call: Any) -> str:
    """'' when the call succeeds, else the API server's answer."""
    try:
        call()
    except ApiError as exc:
        return f"{exc.code} {exc.reason}: {exc.message}"
    return ""


def _load(node: str) -> dict[str, Any]:
    notes = {"cpu_usage_avg_5m": f"0.35210,{STAMP}", "node_hot_value": f"2,{STAMP}"}
    return {"metadata": {"annotations": {**notes, LOAD_SOURCE_KEY: agent_source(node)}}}


def _dry_patch(kube: Kube, node: str) -> Any:
    """A dry run of the load patch: admission decides it, nothing is stored."""
    return lambda: kube.request(
        "PATCH", f"/api/v1/nodes/{node}", query={"dryRun": "All"}, body=_load(node), content_type=MERGE_PATCH
    )


def _status() -> dict[str, Any]:
    return {
        "status": {"updateTime": STAMP, "window": "5m", "node": {"cpu": "1", "memory": "1Gi"}, "pods": []}
    }


def test_the_agent_writes_only_its_own_node(agent_on_a: tuple[Kube, Kube]) -> None:
    agent, admin = agent_on_a

    def refused(why: str) -> bool:
        return why.startswith("403") and "ValidatingAdmissionPolicy" in why

    # the policy takes effect within seconds of its creation (probed by dry runs: nothing is stored)
    wait_until(
        lambda: refused(_try(_dry_patch(agent, "node-b"))), None, "the agent's admission policy in force"
    )
    # its own node: the load annotations, its NodeLoad (create, then the status)
    assert _try(lambda: agent.merge_patch("/api/v1/nodes/node-a", _load("node-a"))) == ""
    uid = admin.get("/api/v1/nodes/node-a")["metadata"]["uid"]
    assert _try(lambda: agent.create(NODELOAD_PATH, new_object("node-a", uid))) == ""
    assert _try(lambda: agent.merge_patch(f"{NODELOAD_PATH}/node-a/status", _status())) == ""
    assert _try(lambda: agent.merge_patch("/api/v1/nodes/node-a", {"metadata": {"annotations": {
        "cpu_usage_avg_5m": None}}})) == ""  # fmt: skip
    for percentile in ("cpu_usage_p95_5m", "mem_usage_p50_30m", "cpu_usage_p99_10m"):  # by their pattern
        assert _try(lambda k=percentile: agent.merge_patch("/api/v1/nodes/node-a", {"metadata": {
            "annotations": {k: f"0.91000,{STAMP}"}}})) == ""  # fmt: skip
    for pressure in (
        "cpu_pressure_some_avg_5m",
        "memory_pressure_full_max_avg_1h",
        "io_pressure_some_max_avg_1d",
    ):
        assert _try(lambda k=pressure: agent.merge_patch("/api/v1/nodes/node-a", {"metadata": {
            "annotations": {k: f"0.05000,{STAMP}"}}})) == ""  # fmt: skip
    # everything else is refused, each by the policy
    admin.create(NODELOAD_PATH, new_object("node-b", None))

    def on_a(patch: dict[str, Any]) -> Any:
        return lambda: agent.merge_patch("/api/v1/nodes/node-a", patch)

    for what, call in (
        ("node B's load", lambda: agent.merge_patch("/api/v1/nodes/node-b", _load("node-b"))),
        ("NodeLoad C created", lambda: agent.create(NODELOAD_PATH, new_object("node-c", None))),
        ("NodeLoad B's status", lambda: agent.merge_patch(f"{NODELOAD_PATH}/node-b/status", _status())),
        ("NodeLoad B deleted", lambda: agent.request("DELETE", f"{NODELOAD_PATH}/node-b")),
        ("a label on A", on_a({"metadata": {"labels": {"x": "y"}}})),
        ("a taint on A", on_a({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}})),
        ("unschedulable A", on_a({"spec": {"unschedulable": True}})),
        ("another annotation on A", on_a({"metadata": {"annotations": {"other": "1"}}})),
        ("a p49 on A", on_a({"metadata": {"annotations": {"cpu_usage_p49_5m": f"0.1,{STAMP}"}}})),
        ("a 15-minute p95 on A", on_a({"metadata": {"annotations": {"cpu_usage_p95_15m": f"0.1,{STAMP}"}}})),
        ("cpu full pressure on A",
         on_a({"metadata": {"annotations": {"cpu_pressure_full_avg_5m": f"0.1,{STAMP}"}}})),
        ("a 10-minute pressure on A",
         on_a({"metadata": {"annotations": {"io_pressure_full_avg_10m": f"0.1,{STAMP}"}}})),
        ("removing A's annotation", on_a({"metadata": {"annotations": {"team": None}}})),
        ("a finalizer on A", on_a({"metadata": {"finalizers": ["example.com/hold"]}})),
    ):  # fmt: skip
        why = _try(call)
        assert refused(why), (what, why)
    node_a = admin.get("/api/v1/nodes/node-a")
    notes = node_a["metadata"]["annotations"]
    assert notes["team"] == "a" and notes[LOAD_SOURCE_KEY] == "agent/node-a" and "other" not in notes
    assert "x" not in node_a["metadata"]["labels"] and not node_a["spec"].get("taints")
    assert "ballast.io/load-source" not in (
        admin.get("/api/v1/nodes/node-b")["metadata"].get("annotations") or {}
    )
    assert admin.get(f"{NODELOAD_PATH}/node-a")["status"]["updateTime"] == STAMP
    assert not admin.get(f"{NODELOAD_PATH}/node-b").get("status")


def test_a_token_not_bound_to_a_node_may_write_nothing(
    cluster: ControlPlane, agent_on_a: tuple[Kube, Kube], tmp_path: Path
) -> None:
    _, admin = agent_on_a
    unbound = Kube(
        load_api_client(
            str(_token_kubeconfig(cluster, tmp_path / "u.kubeconfig", _request_token(admin, None)))
        )
    )
    wait_until(
        lambda: "no node name in its token" in _try(_dry_patch(unbound, "node-a")),
        None,
        "the agent's admission policy in force",
    )
    why = _try(lambda: unbound.create(NODELOAD_PATH, new_object("node-a", None)))
    assert why.startswith("403") and "no node name in its token" in why, why
    # others (the admin here) are not affected
    admin.merge_patch("/api/v1/nodes/node-a", {"metadata": {"labels": {"x": "y"}}})


def test_the_shipped_agent_reports_its_load_under_the_shipped_rbac_and_policy(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    """The DaemonSet's own arguments (--report-load, the shipped policy), the shipped ClusterRole and the
    admission policy, a pod-bound token: everything the real agent writes for its node is admitted, by the
    real RBAC authorizer and the policy alike (a key the policy did not list would stop its patch)."""
    ds = next(d for d in yaml.safe_load_all((DEPLOY / "agent.yaml").read_text()) if d)
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    args = list(container["args"])
    assert "--report-load" in args
    config_map = next(d for d in yaml.safe_load_all((DEPLOY / "policy.yaml").read_text()) if d)
    policy = tmp_path / "policy.yaml"
    policy.write_text(config_map["data"]["policy.yaml"])
    kubelet = tmp_path / "kubelet-config.yaml"
    kubelet.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
    key = tmp_path / "result-key"
    key.write_text(secrets.token_hex(32))
    for flag, value in (
        ("--policy", str(policy)), ("--cgroup-root", "/sys/fs/cgroup"), ("--sysfs", "/sys"),
        ("--result-key-file", str(key)),
    ):  # fmt: skip
        args[args.index(flag) + 1] = value
    cluster.kubectl("apply", "-f", str(ROOT / "scheduler_config" / "crd-noderesourcetopology.yaml"))
    with _agent_token_on_a(cluster, tmp_path, overgrant=False) as (kubeconfig, admin):
        argv = [sys.executable, "-m", "ballast", *args, "--node-name", "node-a",
                "--kubeconfig", str(kubeconfig), "--kubelet-config", str(kubelet), "--cpu-manager", "off",
                "--cpu-state-file", str(tmp_path / "state" / "cpu_manager_state"), "--metrics-port", "0",
                "--load-sample-interval", "1s", "--load-report-interval", "2s"]  # fmt: skip
        assert cluster.workdir
        agent = spawn("ballast-agent-node-a", argv, cluster.workdir, env=dict(os.environ))
        try:

            def reported() -> bool:
                notes = admin.get("/api/v1/nodes/node-a")["metadata"].get("annotations") or {}
                try:
                    status = admin.get(f"{NODELOAD_PATH}/node-a").get("status")
                except ApiError:
                    return False
                return bool(status) and {*CRANE_LOAD_METRICS, LOAD_SOURCE_KEY} <= notes.keys()

            wait_until(reported, agent, "the agent's load annotations and NodeLoad on node-a")
        finally:
            agent.stop()
        notes = admin.get("/api/v1/nodes/node-a")["metadata"]["annotations"]
        assert notes[LOAD_SOURCE_KEY] == "agent/node-a" and notes["team"] == "a"
        assert " 403 " not in agent.tail(400), agent.tail(40)
        assert not (admin.get("/api/v1/nodes/node-b")["metadata"].get("annotations") or {})
