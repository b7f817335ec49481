"""The Helm chart (charts/ballast), rendered and linted by the real Helm (``ballast/testing/helm.py`` says
where
it comes from): with default values it renders the kustomization's objects, so the two installs cannot
drift apart; every value a user sets reaches the objects it names. Installing, upgrading and uninstalling
against the real kube-apiserver: ``tests/cluster/test_helm_install.py``."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from ballast import __version__, cli
from ballast.model.policy import parse_policy
from ballast.model.rebalance_policy import rebalance_settings
from ballast.testing.helm import run_helm
from tests.chart import (
    CHART,
    CHART_ONLY,
    HELM_FLAGS,
    HELM_LABELS,
    RELEASE,
    comparable,
    key,
    require_helm,
    template,
    write_values,
)
from tests.test_deploy import render, with_prometheus

SCHEDULER_CONFIG = CHART.parents[1] / "scheduler_config"
CRD_FILES = ("crd-nodeload.yaml", "crd-noderesourcetopology.yaml", "crd-noderesourcetopology-v1alpha2.yaml")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """Helm's cache, configuration and data homes for one test (``ballast.testing.helm.helm_env``)."""
    require_helm()
    return tmp_path / "helm"


def by_key(docs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    keyed = {key(d): d for d in docs}
    assert len(keyed) == len(docs), "an object is rendered twice"
    return keyed


def assert_same_objects(chart: list[dict[str, Any]], kustomized: list[dict[str, Any]]) -> None:
    """Object by object: kinds, names, namespaces and everything in them (container args, RBAC rules,
    admission expressions, ConfigMap contents, probes, volumes), the chart's own labels aside."""
    ours, theirs = by_key(chart), by_key(kustomized)
    assert set(ours) - set(theirs) == CHART_ONLY
    assert set(theirs) - set(ours) == set()
    for k in sorted(theirs):
        assert comparable(ours[k]) == comparable(theirs[k]), f"{k} differs from the kustomization's"


def obj(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def pod_spec(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return obj(docs, kind, name)["spec"]["template"]["spec"]


def container(docs: list[dict[str, Any]], kind: str, name: str, container_name: str) -> dict[str, Any]:
    spec = pod_spec(docs, kind, name)
    (found,) = [
        c for c in [*spec.get("initContainers", []), *spec["containers"]] if c["name"] == container_name
    ]
    return found


# ---------------------------------------------------------------------------------- the same objects


def test_default_values_render_the_kustomization(home: Path) -> None:
    assert_same_objects(template(home), render())


def test_the_annotator_renders_the_prometheus_component(home: Path, tmp_path: Path) -> None:
    """annotator.enabled: the component's objects, and the agents' load report off."""
    chart = template(home, {"annotator": {"enabled": True}})
    assert_same_objects(chart, render(with_prometheus(tmp_path)))
    assert "--report-load" not in container(chart, "DaemonSet", "ballast-agent", "agent")["args"]


def test_the_comparison_sees_a_drift(home: Path) -> None:
    """The comparison fails on one changed rule or argument, so it can catch a drift."""
    kustomized = render()
    role = obj(kustomized, "ClusterRole", "ballast-rebalancer")
    role["rules"][0]["verbs"].append("get")
    with pytest.raises(AssertionError, match=r"ClusterRole.*ballast-rebalancer"):
        assert_same_objects(template(home), kustomized)
    kustomized = render()
    container(kustomized, "Deployment", "ballast-rebalancer", "rebalancer")["args"].remove("--dry-run")
    with pytest.raises(AssertionError, match=r"Deployment.*ballast-rebalancer"):
        assert_same_objects(template(home), kustomized)


def test_every_object_carries_the_releases_labels(home: Path) -> None:
    for doc in template(home):
        labels = doc["metadata"].get("labels") or {}
        assert set(HELM_LABELS) <= set(labels), key(doc)
        assert labels["app.kubernetes.io/instance"] == "ballast"


def test_lint_strict(home: Path) -> None:
    for values in ({}, {"annotator": {"enabled": True}, "resultKey": {"existingSecret": "mine"}}):
        path = home.parent / "lint-values.yaml"
        path.write_text(yaml.safe_dump(values))
        done = run_helm(home, "lint", "--strict", str(CHART), "-f", str(path), check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "0 chart(s) failed" in done.stdout


def test_the_chart_version_is_the_packages() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__


# --------------------------------------------------------------------------------------------- CRDs


@pytest.mark.parametrize("name", CRD_FILES)
def test_the_charts_crds_are_the_repositorys(name: str) -> None:
    """files/ holds copies (Helm reads nothing outside the chart): byte for byte the CRDs users apply."""
    assert (CHART / "files" / name).read_bytes() == (SCHEDULER_CONFIG / name).read_bytes()


def test_crds_are_templates_kept_on_uninstall_behind_a_switch(home: Path) -> None:
    crds = [d for d in template(home) if d["kind"] == "CustomResourceDefinition"]
    sources = {n: yaml.safe_load((SCHEDULER_CONFIG / n).read_text()) for n in CRD_FILES}
    assert [d["metadata"]["name"] for d in crds] == [
        sources[n]["metadata"]["name"] for n in ("crd-nodeload.yaml", "crd-noderesourcetopology.yaml")
    ]
    for d in crds:
        (source,) = [s for s in sources.values() if s["metadata"]["name"] == d["metadata"]["name"]]
        assert d["spec"] == source["spec"]
        assert d["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    community = [
        d for d in template(home, {"crds": {"communityNRT": True}}) if d["kind"] == "CustomResourceDefinition"
    ]
    assert community[-1]["spec"] == sources["crd-noderesourcetopology-v1alpha2.yaml"]["spec"]
    assert not [
        d for d in template(home, {"crds": {"enabled": False}}) if d["kind"] == "CustomResourceDefinition"
    ]


# ------------------------------------------------------------------------------------------- values


def test_the_generated_seal_key_is_long_enough_and_an_existing_secret_replaces_it(home: Path) -> None:
    secret = obj(template(home), "Secret", "ballast-result-key")
    assert len(base64.b64decode(secret["data"]["key"])) >= 32
    docs = template(home, {"resultKey": {"existingSecret": "my-key"}})
    assert not [d for d in docs if d["kind"] == "Secret"]
    for kind, name in (("Deployment", "ballast-scheduler"), ("DaemonSet", "ballast-agent")):
        (vol,) = [v for v in pod_spec(docs, kind, name)["volumes"] if v["name"] == "result-key"]
        assert vol["secret"]["secretName"] == "my-key"


POLICY = {
    "syncPolicy": [{"name": "cpu_usage_avg_5m", "period": "3m"}],
    "predicate": [{"name": "cpu_usage_avg_5m", "maxLimitPecent": 0.6}],
    "priority": [{"name": "cpu_usage_avg_5m", "weight": 1}],
    "hotValue": [{"timeRange": "5m", "count": 5}],
    "rebalance": {"thresholds": [{"name": "cpu_usage_avg_5m", "high": 0.8, "low": 0.4}]},
}


def test_the_policy_value_is_the_configmaps_policy_and_ballast_accepts_it(home: Path) -> None:
    docs = template(home, {"policy": POLICY})
    text = obj(docs, "ConfigMap", "ballast-policy")["data"]["policy.yaml"]
    # Helm merges maps with the defaults (lists are replaced): the shipped dominantResourceWeight stays
    assert yaml.safe_load(text)["spec"] == {**POLICY, "dominantResourceWeight": 12}
    policy = parse_policy(text)
    settings = rebalance_settings(policy)
    assert settings is not None and settings.thresholds[0].high == 0.8
    assert policy.predicates[0].max_limit == 0.6


def test_image_namespace_and_kube_scheduler_values(home: Path) -> None:
    docs = template(home, {
        "image": {"repository": "registry.example.com/ballast", "tag": "9.9.9", "pullPolicy": "Always"},
        "namespace": {"name": "sched"},
        "scheduler": {"kubeScheduler": {"image": {"tag": "v1.35.4"}}},
    })  # fmt: skip
    for doc in docs:
        if doc["metadata"].get("namespace") not in (None, "kube-system"):
            assert doc["metadata"]["namespace"] == "sched", key(doc)
        for subject in doc.get("subjects") or []:
            assert subject["namespace"] == "sched"
    assert (
        obj(docs, "Namespace", "sched")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
        == "privileged"
    )
    for kind, name, c in (("Deployment", "ballast-scheduler", "extender"),
                          ("DaemonSet", "ballast-agent", "agent"),
                          ("Deployment", "ballast-rebalancer", "rebalancer")):  # fmt: skip
        found = container(docs, kind, name, c)
        assert (found["image"], found["imagePullPolicy"]) == ("registry.example.com/ballast:9.9.9", "Always")
    scheduler = container(docs, "Deployment", "ballast-scheduler", "kube-scheduler")
    assert scheduler["image"] == "registry.k8s.io/kube-scheduler:v1.35.4"
    config = yaml.safe_load(
        obj(docs, "ConfigMap", "ballast-scheduler-config")["data"]["scheduler-config.yaml"]
    )
    assert config["leaderElection"]["resourceNamespace"] == "sched"
    vap = obj(docs, "ValidatingAdmissionPolicy", "ballast-agent-writes-only-its-node")
    assert "'system:serviceaccount:sched:ballast-agent'" in vap["spec"]["matchConditions"][0]["expression"]
    assert not [d for d in template(home, {"namespace": {"create": False}}) if d["kind"] == "Namespace"]


@pytest.mark.parametrize(
    ("component", "kind", "name"),
    [("scheduler", "Deployment", "ballast-scheduler"), ("agent", "DaemonSet", "ballast-agent"),
     ("rebalancer", "Deployment", "ballast-rebalancer"), ("annotator", "Deployment", "ballast-annotator")],
)  # fmt: skip
def test_placement_per_component(home: Path, component: str, kind: str, name: str) -> None:
    placement = {
        "nodeSelector": {"pool": component},
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": component, "effect": "NoSchedule"}
        ],
        "priorityClassName": f"{component}-priority",
    }
    values: dict[str, Any] = {"annotator": {"enabled": True}}
    values[component] = {**values.get(component, {}), **placement}
    docs = template(home, values)
    spec = pod_spec(docs, kind, name)
    assert spec["nodeSelector"] == placement["nodeSelector"]
    assert spec["tolerations"] == placement["tolerations"]
    assert spec["priorityClassName"] == placement["priorityClassName"]
    others = [d for d in docs if d["kind"] in ("Deployment", "DaemonSet") and d["metadata"]["name"] != name]
    assert all(d["spec"]["template"]["spec"].get("nodeSelector") != placement["nodeSelector"] for d in others)


def test_resources_extra_args_and_dry_run(home: Path) -> None:
    small = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}
    docs = template(home, {
        "scheduler": {"extender": {"resources": small, "extraArgs": ["--api-timeout", "3"]},
                      "kubeScheduler": {"extraArgs": ["--kube-api-qps=100"], "verbosity": 4}},
        "agent": {"resources": small, "extraArgs": ["--resync", "30s"]},
        "rebalancer": {"resources": small, "dryRun": False, "extraArgs": ["--interval", "2m"]},
    })  # fmt: skip
    extender = container(docs, "Deployment", "ballast-scheduler", "extender")
    agent = container(docs, "DaemonSet", "ballast-agent", "agent")
    rebalancer = container(docs, "Deployment", "ballast-rebalancer", "rebalancer")
    for c in (extender, agent, rebalancer):
        assert c["resources"] == small
        cli.build_parser().parse_args(c["args"])  # exits on an unknown flag or a bad value
    assert extender["args"][-2:] == ["--api-timeout", "3"]
    assert agent["args"][-3:] == ["--report-load", "--resync", "30s"]
    assert rebalancer["args"] == ["rebalancer", "--policy", "/etc/ballast/policy.yaml", "--interval", "2m"]
    scheduler = container(docs, "Deployment", "ballast-scheduler", "kube-scheduler")
    assert scheduler["command"][-2:] == ["--v=4", "--kube-api-qps=100"]


@pytest.mark.parametrize("component", ["scheduler", "agent", "rebalancer"])
def test_each_component_can_be_left_out(home: Path, component: str) -> None:
    """Off: its workload, identity, Services and policies go; the rest stays as by default."""
    default = by_key(template(home))
    docs = by_key(template(home, {component: {"enabled": False}}))
    gone = set(default) - set(docs)
    assert not set(docs) - set(default)
    assert gone and all(
        (default[k]["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == component
        for k in gone
    ), sorted(gone)
    assert ("ServiceAccount", "ballast-system", f"ballast-{component}") in gone
    assert all(comparable(docs[k]) == comparable(default[k]) for k in docs if k[0] != "Secret")


# ------------------------------------------------------------------------------- the optional grants

OPTIONAL = CHART.parents[1] / "scheduler_config" / "deploy" / "optional"


@pytest.mark.parametrize(
    ("values", "file"),
    [
        ({"agent": {"publishCommunityNRT": True}}, "agent-community-nrt-rbac.yaml"),
        ({"agent": {"kubeletConfigz": True}}, "agent-kubelet-configz-rbac.yaml"),
        ({"annotator": {"enabled": True, "bindingSource": "events"}}, "annotator-events-rbac.yaml"),
        ({"annotator": {"enabled": True, "bindingSource": "both"}}, "annotator-events-rbac.yaml"),
        ({"annotator": {"enabled": True, "admissionPolicy": True}}, "annotator-admission-policy.yaml"),
    ],
)
def test_each_optional_grant_is_a_switch_rendering_the_optional_file(
    home: Path, values: dict[str, Any], file: str
) -> None:
    """What a kustomize user applies from scheduler_config/deploy/optional/ by hand is one value here: the
    same objects, and the flag that needs them; every container's command line is one Ballast accepts."""
    docs = template(home, values)
    base = by_key(template(home, {"annotator": {"enabled": True}} if "annotator" in values else None))
    added = {k: d for k, d in by_key(docs).items() if k not in base}
    expected = by_key(list(yaml.safe_load_all((OPTIONAL / file).read_text())))
    assert set(added) == set(expected)
    for k in expected:
        assert comparable(added[k]) == comparable(expected[k]), k
    for kind, name, c in (
        ("DaemonSet", "ballast-agent", "agent"),
        ("Deployment", "ballast-annotator", "annotator"),
    ):
        if any(d["kind"] == kind and d["metadata"]["name"] == name for d in docs):
            cli.build_parser().parse_args(container(docs, kind, name, c)["args"])


def test_the_switches_set_their_flags(home: Path) -> None:
    docs = template(home, {
        "agent": {"publishCommunityNRT": True, "kubeletConfigz": True},
        "annotator": {"enabled": True, "bindingSource": "both"},
    })  # fmt: skip
    agent = container(docs, "DaemonSet", "ballast-agent", "agent")
    args = cli.build_parser().parse_args(agent["args"])
    assert args.publish == {"crane", "community"}
    assert args.kubelet_configz
    assert "kubelet-config" not in {m["name"] for m in agent["volumeMounts"]}
    assert "kubelet-config" not in {
        v["name"] for v in pod_spec(docs, "DaemonSet", "ballast-agent")["volumes"]
    }
    annotator = container(docs, "Deployment", "ballast-annotator", "annotator")
    assert cli.build_parser().parse_args(annotator["args"]).binding_source == "both"


def test_the_annotators_admission_policy_allows_the_policys_metrics(home: Path) -> None:
    """The keys the annotator may write are the policy's syncPolicy names (what it writes), not a list to
    keep in step by hand."""
    docs = template(home, {"annotator": {"enabled": True, "admissionPolicy": True}, "policy": POLICY})
    vap = obj(docs, "ValidatingAdmissionPolicy", "ballast-annotator-writes-only-its-annotations")
    (allowed,) = [v["expression"] for v in vap["spec"]["variables"] if v["name"] == "allowed"]
    assert yaml.safe_load(allowed) == ["cpu_usage_avg_5m", "node_hot_value", "ballast.io/load-source"]


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"agent": {"reportload": False}}, "'reportload' not allowed"),  # a typo of reportLoad
        ({"rebalancer": {"dryRun": "false"}}, "/rebalancer/dryRun"),  # a string, which templates read as true
        ({"annotator": {"bindingSource": "event"}}, "/annotator/bindingSource"),
        ({"scheduler": {"replicas": 0}}, "/scheduler/replicas"),
    ],
)
def test_the_values_schema_refuses_typos_and_wrong_types(
    home: Path, values: dict[str, Any], where: str
) -> None:
    """values.schema.json: a value Helm would otherwise ignore or misread stops the install with its path."""
    done = run_helm(home, "template", RELEASE, str(CHART), *write_values(home, values), check=False)
    assert done.returncode != 0 and where in done.stderr, done.stderr


def test_the_helm_flags_the_guide_names_are_helms(home: Path) -> None:
    """tests/test_deploy.py lets docs/install.md name these; here the real helm has each of them."""
    flags = set()
    for command in ("install", "upgrade"):
        flags |= set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", run_helm(home, command, "--help").stdout))
    assert flags >= HELM_FLAGS, sorted(HELM_FLAGS - flags)
