"""The Helm chart against the real kube-apiserver v1.36: install, upgrade, uninstall with the real Helm.

- ``helm install`` with default values: the API server admits every object the chart renders, and the
  accounts' rights are the audited ones (``tests/test_deploy_rbac.py`` proves the kustomization's RBAC is
  exactly what each program calls; here the API server's own authorizer, asked with SubjectAccessReviews,
  grants the chart's accounts each of those permissions, and the installed roles hold no more).
- ``helm upgrade`` with other values: the policy ConfigMap and the containers' arguments follow, the seal key
  stays.
- ``helm uninstall``: nothing of Ballast is left but the CRDs, which docs/install.md says stay.

kube-controller-manager runs for the test (the namespace controller finishes the namespace's deletion, the
garbage collector the ReplicaSets'). What earlier tests applied with kubectl (the namespace, the agent's
RBAC, the CRDs) is deleted first: Helm refuses to take over objects it did not create.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ballast.model.policy import parse_policy
from ballast.model.rebalance_policy import rebalance_settings
from ballast.testing.binaries import MissingPiece
from ballast.testing.controlplane import ControlPlane, wait_until
from ballast.testing.helm import run_helm
from ballast.testing.parts import missing_part
from tests.chart import CHART, CHART_ONLY, RELEASE, key, require_helm, template, write_values
from tests.deploy_rbac import ApiCall, grants_for
from tests.test_deploy import render

pytestmark = pytest.mark.integration

NAMESPACE = "ballast-system"
ACCOUNTS = ("ballast-scheduler", "ballast-agent", "ballast-rebalancer")
LABEL = "app.kubernetes.io/name=ballast"
KINDS = (
    "deployments,daemonsets,services,configmaps,secrets,serviceaccounts,roles,rolebindings,"
    "poddisruptionbudgets,networkpolicies,clusterroles,clusterrolebindings,validatingadmissionpolicies,"
    "validatingadmissionpolicybindings,replicasets,namespaces"
)
CRDS = sorted(name for kind, _, name in CHART_ONLY if kind == "CustomResourceDefinition")


@pytest.fixture
def helm_cluster(cluster: ControlPlane, tmp_path: Path) -> Iterator[tuple[ControlPlane, Path]]:
    """The control plane with kube-controller-manager and none of Ballast's objects; Helm's homes."""
    require_helm()
    try:
        cluster.start_controller_manager()
    except MissingPiece as exc:
        missing_part(str(exc))
    try:
        _remove_ballast(cluster)
        yield cluster, tmp_path / "helm"
    finally:
        run_helm(tmp_path / "helm", "uninstall", RELEASE, *_target(cluster), "--wait", check=False)
        _remove_ballast(cluster)
        cluster.stop_controller_manager()


def _target(cluster: ControlPlane) -> list[str]:
    return ["--kubeconfig", str(cluster.kubeconfig), "--namespace", "default"]


def _remove_ballast(cluster: ControlPlane) -> None:
    """Delete what a kustomize install (or an earlier test) made, and wait for the namespace to go."""
    manifest = yaml.safe_dump_all(render())
    cluster.kubectl(
        "delete", "-f", "-", "--ignore-not-found", "--wait=true", "--timeout=120s", input=manifest
    )
    cluster.kubectl("delete", "crd", *CRDS, "--ignore-not-found", "--wait=true", "--timeout=120s")
    # and whatever else of Ballast's an earlier test applied (optional components: the annotator's grants)
    cluster.kubectl("delete", KINDS, "-A", "-l", LABEL, "--ignore-not-found", "--wait=true", "--timeout=120s")
    wait_until(lambda: not _left(cluster), None, "Ballast's objects deleted", timeout=120)


def _left(cluster: ControlPlane) -> list[str]:
    names = cluster.kubectl("get", KINDS, "-A", "-l", LABEL, "-o", "name").split()
    return [n for n in names if n]


def _get(cluster: ControlPlane, kind: str, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json"))


def _allowed(cluster: ControlPlane, account: str, call: ApiCall) -> bool:
    """The API server's authorizer, asked for ``account`` (a SubjectAccessReview, the rights a token of
    that service account has)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{NAMESPACE}:{account}",
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{NAMESPACE}",
                "system:authenticated",
            ],
            "resourceAttributes": {
                "verb": call.verb,
                "group": call.group,
                "resource": call.resource,
                "subresource": call.subresource,
                "namespace": call.namespace,
                "name": call.name,
            },
        },
    }
    out = cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(review))
    return bool(json.loads(out)["status"].get("allowed"))


def _installed_rbac(cluster: ControlPlane) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "clusterroles,clusterrolebindings,roles,rolebindings", "-A", "-l",
                          f"app.kubernetes.io/instance={RELEASE}", "-o", "json")  # fmt: skip
    return json.loads(out)["items"]


def _seal_key(cluster: ControlPlane) -> bytes:
    return base64.b64decode(_get(cluster, "secret", "ballast-result-key")["data"]["key"])


def _container(cluster: ControlPlane, kind: str, name: str, container: str) -> dict[str, Any]:
    spec = _get(cluster, kind, name)["spec"]["template"]["spec"]
    (found,) = [c for c in [*spec.get("initContainers", []), *spec["containers"]] if c["name"] == container]
    return found


def test_helm_installs_upgrades_and_uninstalls(helm_cluster: tuple[ControlPlane, Path]) -> None:
    cluster, home = helm_cluster
    target = _target(cluster)

    # -- install: every object admitted, as rendered
    run_helm(home, "install", RELEASE, str(CHART), *target)
    manifest = run_helm(home, "get", "manifest", RELEASE, *target).stdout
    rendered = [d for d in yaml.safe_load_all(manifest) if d]
    assert sorted(map(key, rendered)) == sorted(map(key, template(home)))
    for doc in rendered:
        kind, namespace, name = key(doc)
        live = json.loads(
            cluster.kubectl("get", kind, name, *(["-n", namespace] if namespace else []), "-o", "json")
        )
        assert live["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE, (kind, name)
    vap = json.loads(cluster.kubectl("get", "validatingadmissionpolicy", "ballast-agent-writes-only-its-node",
                                     "-o", "json"))  # fmt: skip
    assert vap["status"].get("typeChecking", {}).get("expressionWarnings") in (None, [])

    # -- the audited rights, by the API server's authorizer; the installed roles hold no more
    audited = render()
    installed = _installed_rbac(cluster)
    for account in ACCOUNTS:
        expected = grants_for(audited, NAMESPACE, account)
        got = grants_for(installed, NAMESPACE, account)
        assert set(got.grants) == set(expected.grants), account
        assert sorted(got.builtin) == sorted(expected.builtin), account
        for grant in expected.grants:
            for p in grant.permissions():
                resource, _, sub = p.resource.partition("/")
                call = ApiCall(p.verb, p.group, resource, sub, p.namespace, p.resource_name)
                assert _allowed(cluster, account, call), f"{account} may not {call}"
    for account, call in [
        ("ballast-rebalancer", ApiCall("get", "", "pods", "", "default", "web")),
        ("ballast-rebalancer", ApiCall("delete", "", "pods", "", "default", "web")),
        ("ballast-agent", ApiCall("delete", "", "nodes", "", "", "n1")),
        ("ballast-scheduler", ApiCall("patch", "", "nodes", "", "", "n1")),
        ("ballast-agent", ApiCall("get", "", "secrets", "", NAMESPACE, "ballast-result-key")),
    ]:
        assert not _allowed(cluster, account, call), f"{account} may {call}"
    key_before = _seal_key(cluster)
    assert len(key_before) >= 32

    # -- upgrade with other values: the ConfigMap and the arguments follow, the seal key stays
    policy = yaml.safe_load(yaml.safe_dump(yaml.safe_load((CHART / "values.yaml").read_text())["policy"]))
    policy["rebalance"] = {"thresholds": [{"name": "cpu_usage_avg_5m", "high": 0.8, "low": 0.4}]}
    values = {
        "policy": policy,
        "image": {"tag": "0.1.1"},
        "rebalancer": {"dryRun": False, "extraArgs": ["--interval", "2m"]},
        "agent": {"extraArgs": ["--resync", "30s"], "publishCommunityNRT": True, "kubeletConfigz": True},
        "annotator": {"enabled": True, "admissionPolicy": True, "bindingSource": "both"},
    }
    run_helm(home, "upgrade", RELEASE, str(CHART), *target, *write_values(home, values))
    text = _get(cluster, "configmap", "ballast-policy")["data"]["policy.yaml"]
    settings = rebalance_settings(parse_policy(text))
    assert settings is not None and settings.thresholds[0].high == 0.8
    rebalancer = _container(cluster, "deployment", "ballast-rebalancer", "rebalancer")
    assert rebalancer["args"] == ["rebalancer", "--policy", "/etc/ballast/policy.yaml", "--interval", "2m"]
    assert rebalancer["image"] == "ballast:0.1.1"
    agent = _container(cluster, "daemonset", "ballast-agent", "agent")
    assert "--report-load" not in agent["args"]  # the annotator is the load source now
    assert agent["args"][-5:] == ["--publish", "crane,community", "--kubelet-configz", "--resync", "30s"]
    annotator = _container(cluster, "deployment", "ballast-annotator", "annotator")
    assert annotator["args"][-2:] == ["--binding-source", "both"]
    for kind, name in (("validatingadmissionpolicy", "ballast-annotator-writes-only-its-annotations"),
                       ("clusterrole", "ballast-annotator-events"),
                       ("clusterrole", "ballast-agent-community-nrt"),
                       ("clusterrole", "ballast-agent-kubelet-configz")):  # fmt: skip
        assert cluster.kubectl("get", kind, name, "-o", "name").strip(), f"{kind} {name} not admitted"
    assert _seal_key(cluster) == key_before
    # back to the defaults (without values Helm would reuse the last ones): still the same key
    run_helm(home, "upgrade", RELEASE, str(CHART), *target, "--reset-values")
    assert _seal_key(cluster) == key_before
    assert "--dry-run" in _container(cluster, "deployment", "ballast-rebalancer", "rebalancer")["args"]
    history = json.loads(run_helm(home, "history", RELEASE, *target, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2, 3]

    # -- uninstall: only the CRDs stay
    run_helm(home, "uninstall", RELEASE, *target, "--wait", "--timeout", "3m")
    wait_until(lambda: not _left(cluster), None, "the release's objects deleted", timeout=120)
    assert cluster.kubectl("get", "namespace", NAMESPACE, "--ignore-not-found", "-o", "name").strip() == ""
    for crd in CRDS:
        kept = json.loads(cluster.kubectl("get", "crd", crd, "-o", "json"))
        assert kept["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert (
        json.loads(run_helm(home, "list", "-A", "--kubeconfig", str(cluster.kubeconfig), "-o", "json").stdout)
        == []
    )


def test_a_kustomize_users_crds_are_taken_over(helm_cluster: tuple[ControlPlane, Path]) -> None:
    """The guide's way from kustomize to Helm: the CRDs applied with kubectl stay (with their objects), the
    chart adopts them with --take-ownership; a plain install refuses them."""
    cluster, home = helm_cluster
    target = _target(cluster)
    for crd in ("crd-nodeload.yaml", "crd-noderesourcetopology.yaml"):
        cluster.kubectl("apply", "-f", str(CHART.parents[1] / "scheduler_config" / crd))
    refused = run_helm(home, "install", RELEASE, str(CHART), *target, check=False)
    assert refused.returncode != 0 and "nodeloads.ballast.io" in refused.stderr
    run_helm(home, "install", RELEASE, str(CHART), *target, "--take-ownership")
    for crd in CRDS:
        adopted = json.loads(cluster.kubectl("get", "crd", crd, "-o", "json"))
        assert adopted["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
