"""The optional ValidatingAdmissionPolicy against the real kube-apiserver v1.36: the annotator's account
may write Ballast's node annotations and nothing else on a node; other users are not affected."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml

from ballast.contract.annotations import HOT_VALUE_KEY
from ballast.kube.client import ApiError, Kube
from ballast.model.load_source import ANNOTATOR_SOURCE, LOAD_SOURCE_KEY
from ballast.model.policy import load_policy
from ballast.testing.controlplane import ControlPlane, create_nodes, node_body, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "scheduler_config" / "deploy"
VAP = DEPLOY / "optional" / "annotator-admission-policy.yaml"
ANNOTATOR = "system:serviceaccount:ballast-system:ballast-annotator"


def test_the_allowed_keys_are_the_shipped_policys_metrics() -> None:
    (config,) = [
        d for d in yaml.safe_load_all((DEPLOY / "policy.yaml").read_text()) if d["kind"] == "ConfigMap"
    ]
    text = next(iter(config["data"].values()))
    policy_file = ROOT / "scheduler_config" / "policy.yaml"
    assert yaml.safe_load(text) == yaml.safe_load(policy_file.read_text())
    policy = load_policy(policy_file)
    (vap, _) = yaml.safe_load_all(VAP.read_text())
    allowed = next(v["expression"] for v in vap["spec"]["variables"] if v["name"] == "allowed")
    expected = [*policy.sync_periods, HOT_VALUE_KEY, LOAD_SOURCE_KEY]
    assert sorted(json.loads(allowed.replace("'", '"'))) == sorted(expected)


def _patch(cp: ControlPlane, patch: dict, as_user: str | None = None) -> tuple[bool, str]:
    """A merge patch of the node, as the annotator sends it (impersonated), or as the admin."""
    api = cp.api()
    if as_user:
        api.set_default_header("Impersonate-User", as_user)
    try:
        Kube(api).merge_patch("/api/v1/nodes/guarded", patch)
    except ApiError as exc:
        return False, f"{exc.code} {exc.reason}: {exc.message}"
    return True, ""


def test_the_annotator_may_write_only_its_annotations(cluster: ControlPlane) -> None:
    cluster.kubectl("apply", "-f", str(DEPLOY / "namespace.yaml"))
    cluster.kubectl("apply", "-f", str(DEPLOY / "prometheus" / "annotator-rbac.yaml"))
    cluster.kubectl("apply", "-f", str(VAP))
    try:
        create_nodes(cluster.core(), [node_body("guarded", annotations={"team": "a"})])

        probes = itertools.count()

        def refused_a_new_label() -> bool:
            # A new value each time: a probe admitted before the policy is in force sets the label, and
            # the same label again would be no change, which the policy rightly lets through.
            ok, _ = _patch(cluster, {"metadata": {"labels": {"probe": str(next(probes))}}}, ANNOTATOR)
            return not ok

        # the policy takes effect within seconds of its creation
        wait_until(refused_a_new_label, None, "the policy in force")
        for bad in (
            {"spec": {"unschedulable": True}},
            {"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}},
            {"metadata": {"annotations": {"team": "b"}}},
            {"metadata": {"annotations": {"team": None}}},
            {"metadata": {"annotations": {"other": "1"}}},
        ):
            ok, why = _patch(cluster, bad, ANNOTATOR)
            assert not ok and ("Forbidden" in why or "forbidden" in why), (bad, why)
        ok, _ = _patch(
            cluster,
            {
                "metadata": {
                    "annotations": {
                        "cpu_usage_avg_5m": "0.10000,2026-11-25T00:00:00Z",
                        "node_hot_value": "1,2026-11-25T00:00:00Z",
                        LOAD_SOURCE_KEY: ANNOTATOR_SOURCE,
                    }
                }
            },
            ANNOTATOR,
        )
        assert ok, _
        assert _patch(cluster, {"metadata": {"annotations": {"cpu_usage_avg_5m": None}}}, ANNOTATOR)[0]
        # anyone else is not affected
        assert _patch(cluster, {"metadata": {"labels": {"x": "y"}}, "spec": {"unschedulable": True}})[0]
        node = json.loads(cluster.kubectl("get", "node", "guarded", "-o", "json"))
        assert node["metadata"]["annotations"]["team"] == "a"
        assert node["metadata"]["annotations"]["node_hot_value"].startswith("1,")
        assert node["spec"]["unschedulable"] is True and node["metadata"]["labels"]["x"] == "y"
    finally:
        cluster.kubectl("delete", "-f", str(VAP), "--ignore-not-found")
