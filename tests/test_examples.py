"""scheduler_config/examples/: each workload is what its comment and README say it is (the real API server
and kube-scheduler run them in tests/cluster/test_extender_e2e.py)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from ballast.contract.pod import parse_pod
from ballast.extender.numa.crane import numa_request
from ballast.model.policy import load_policy
from ballast.testing.parts import ROOT

EXAMPLES = ROOT / "scheduler_config" / "examples"
DEPLOY = ROOT / "scheduler_config" / "deploy"


def load(name: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    return doc


def ballast_scheduler_name() -> str:
    """The profile name of the scheduler the manifests install (its ConfigMap's configuration)."""
    (cm,) = [d for d in yaml.safe_load_all((DEPLOY / "scheduler-config.yaml").read_text()) if d]
    config = yaml.safe_load(next(iter(cm["data"].values())))
    (profile,) = config["profiles"]
    return profile["schedulerName"]


def pod_of(deployment: dict[str, Any]) -> dict[str, Any]:
    template = deployment["spec"]["template"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": template["metadata"], "spec": template["spec"]}


def test_the_deployment_is_scheduled_by_ballast_and_takes_no_exclusive_cpus() -> None:
    dep = load("deployment.yaml")
    assert dep["kind"] == "Deployment"
    assert dep["spec"]["template"]["spec"]["schedulerName"] == ballast_scheduler_name()
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert numa_request(pod_of(dep)) is None  # Burstable: shares the CPUs, no NUMA placement


def test_the_guaranteed_pod_needs_two_exclusive_cpus_in_one_zone() -> None:
    pod = load("guaranteed-pod.yaml")
    assert pod["spec"]["schedulerName"] == ballast_scheduler_name()
    info = parse_pod(pod)
    assert info.qos == "Guaranteed" and info.exclusive_cpus == 2
    req = numa_request(pod)
    assert req is not None and (req.cpus, req.aware, req.policy) == (2, True, "exclusive")


def test_images_are_pinned_and_the_readme_names_both_files() -> None:
    readme = (EXAMPLES / "README.md").read_text()
    for name in ("deployment.yaml", "guaranteed-pod.yaml"):
        doc = load(name)
        spec = doc["spec"]["template"]["spec"] if doc["kind"] == "Deployment" else doc["spec"]
        for c in spec["containers"]:
            assert re.search(r":[\w.-]+$", c["image"]) and not c["image"].endswith(":latest"), c["image"]
        assert f"kubectl apply -f scheduler_config/examples/{name}" in readme
        assert f"kubectl delete -f scheduler_config/examples/{name}" in readme
        assert doc["metadata"]["name"] in readme


def _entries(spec: dict[str, Any], section: str) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in spec[section]}


def test_the_peak_aware_policy_is_the_shipped_policy_plus_a_peak_and_a_pressure_term() -> None:
    """Everything crane's policy says stays as it says it; the example adds a percentile to the ranking and
    a pressure limit to the filter, and nothing else. The estimates of a placed pod go to the percentile
    (it is CPU in use) and never to the pressure metric."""
    shipped = yaml.safe_load((ROOT / "scheduler_config" / "policy.yaml").read_text())["spec"]
    peak = yaml.safe_load((EXAMPLES / "peak-aware-policy.yaml").read_text())["spec"]
    for section in ("syncPolicy", "predicate", "priority"):
        ours, theirs = _entries(peak, section), _entries(shipped, section)
        assert {name: ours[name] for name in theirs} == theirs, section
    assert set(_entries(peak, "syncPolicy")) - set(_entries(shipped, "syncPolicy")) == {
        "cpu_usage_p95_5m",
        "cpu_pressure_some_avg_5m",
    }
    assert set(_entries(peak, "predicate")) - set(_entries(shipped, "predicate")) == {
        "cpu_pressure_some_avg_5m"
    }
    assert set(_entries(peak, "priority")) - set(_entries(shipped, "priority")) == {"cpu_usage_p95_5m"}
    assert {k: v for k, v in peak.items() if k not in ("syncPolicy", "predicate", "priority")} == {
        k: v for k, v in shipped.items() if k not in ("syncPolicy", "predicate", "priority")
    }
    policy = load_policy(EXAMPLES / "peak-aware-policy.yaml")
    assert policy.resource_of("cpu_usage_p95_5m") == "cpu"
    assert policy.resource_of("cpu_pressure_some_avg_5m") is None


def test_the_configuration_page_gives_the_peak_aware_policy_as_helm_values() -> None:
    """The Helm values in docs/configuration.md are the example's spec, so an operator installing with Helm
    gets the policy the bench measured."""
    page = (ROOT / "docs" / "configuration.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", page, re.S)]
    (values,) = [b for b in blocks if isinstance(b, dict) and set(b) == {"policy"}]
    peak = yaml.safe_load((EXAMPLES / "peak-aware-policy.yaml").read_text())["spec"]
    assert values["policy"] == peak
