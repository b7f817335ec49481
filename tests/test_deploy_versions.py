"""The pinned kube-scheduler image: set in one place, a default inside the skew policy; kubectl-only steps."""

from __future__ import annotations

import re

import yaml

from ballast.testing.binaries import KUBE_VERSION
from ballast.testing.parts import ROOT

DEPLOY = ROOT / "scheduler_config" / "deploy"
KUSTOMIZATION = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
SCHEDULER_IMAGE = "registry.k8s.io/kube-scheduler"


def minor(version: str) -> tuple[int, int]:
    m = re.fullmatch(r"v(\d+)\.(\d+)\.\d+", version)
    assert m, version
    return int(m[1]), int(m[2])


def test_the_kube_scheduler_tag_is_set_in_the_kustomization() -> None:
    entries = [e for e in KUSTOMIZATION["images"] if e["name"] == SCHEDULER_IMAGE]
    assert len(entries) == 1, "one images: entry sets the kube-scheduler tag"
    tag = entries[0]["newTag"]
    # The manifest names the same image, so the entry applies (kustomize matches by name) and a reader of
    # scheduler.yaml alone sees the default too.
    manifest = (DEPLOY / "scheduler.yaml").read_text()
    assert re.findall(r"image: (registry\.k8s\.io/kube-scheduler:\S+)", manifest) == [
        f"{SCHEDULER_IMAGE}:{tag}"
    ]


def test_the_default_kube_scheduler_is_the_tested_version_inside_the_skew_policy() -> None:
    tag = next(e["newTag"] for e in KUSTOMIZATION["images"] if e["name"] == SCHEDULER_IMAGE)
    assert tag == KUBE_VERSION, "the default is what the control-plane tests run"
    guide = (ROOT / "docs" / "install.md").read_text()
    # the install page names the default and the apiserver minors it supports: the same minor and the next one
    major, mnr = minor(tag)
    assert f"`{tag}`" in guide and f"clusters at {major}.{mnr} and {major}.{mnr + 1}" in guide
    assert mnr >= 29, "the extender runs as a native sidecar (Kubernetes 1.29+)"


def test_the_install_steps_need_only_kubectl() -> None:
    for path in (ROOT / "docs" / "install.md", ROOT / "README.md", DEPLOY / "kustomization.yaml"):
        assert "kustomize edit" not in path.read_text(), f"{path.name}: kubectl has no `kustomize edit`"
