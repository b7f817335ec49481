"""Rendering the Helm chart (charts/ballast) and comparing its objects with the kustomization's.

Shared by ``tests/test_helm.py`` (render and lint, no cluster) and ``tests/cluster/test_helm_install.py``
(install, upgrade and uninstall against the loopback kube-apiserver).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from ballast.testing.binaries import MissingPiece
from ballast.testing.helm import helm_path, run_helm
from ballast.testing.parts import missing_part
from tests.deploy_rbac import ROOT

CHART = ROOT / "charts" / "ballast"
RELEASE = "ballast"
HELM_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
)
"""The labels the chart adds to every object beside the kustomization's."""
CHART_ONLY = {
    ("CustomResourceDefinition", "", "nodeloads.ballast.io"),
    ("CustomResourceDefinition", "", "noderesourcetopologies.topology.crane.io"),
    ("Secret", "ballast-system", "ballast-result-key"),
}
"""What the chart installs that the kustomize install applies or creates with kubectl beside it: the CRDs
(scheduler_config/crd-*.yaml) and the seal key's Secret."""


HELM_FLAGS = {"--namespace", "--create-namespace", "--reuse-values", "--take-ownership"}
"""Helm's flags that docs/install.md names (``tests/test_helm.py`` checks each against the real helm)."""


def require_helm() -> Path:
    """The helm binary; skip with how to get it (fail under ``CI=true``) when it is missing."""
    try:
        return helm_path()
    except MissingPiece as exc:
        missing_part(str(exc))


def key(doc: dict[str, Any]) -> tuple[str, str, str]:
    meta = doc["metadata"]
    return doc["kind"], meta.get("namespace") or "", meta["name"]


def write_values(home: Path, values: dict[str, Any] | None) -> list[str]:
    """``-f FILE`` arguments for ``values`` (none for ``None``), the file written under ``home``."""
    if values is None:
        return []
    home.mkdir(parents=True, exist_ok=True)
    path = home / f"values-{len(list(home.glob('values-*.yaml')))}.yaml"
    path.write_text(json.dumps(values))
    return ["-f", str(path)]


def template(home: Path, values: dict[str, Any] | None = None, *args: str) -> list[dict[str, Any]]:
    """``helm template`` with ``values``: the objects, in order."""
    done = run_helm(home, "template", RELEASE, str(CHART), *write_values(home, values), *args)
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def without_helm_labels(labels: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (labels or {}).items() if k not in HELM_LABELS}


def _cel(text: str) -> str:
    """A CEL expression with its whitespace collapsed: kustomize re-folds YAML's ``>-`` blocks (an extra
    line break before more-indented lines), which CEL does not see."""
    return re.sub(r"\s+", " ", text).strip()


def comparable(doc: dict[str, Any]) -> dict[str, Any]:
    """An object as the comparison sees it: without the chart's own labels, ConfigMap files parsed (YAML
    comments and key order aside), CEL expressions without layout."""
    doc = json.loads(json.dumps(doc))
    meta = doc["metadata"]
    meta["labels"] = without_helm_labels(meta.get("labels"))
    if not meta["labels"]:
        del meta["labels"]
    if doc["kind"] == "ConfigMap":
        doc["data"] = {k: yaml.safe_load(v) for k, v in doc["data"].items()}
    if doc["kind"] == "ValidatingAdmissionPolicy":
        spec = doc["spec"]
        for group in ("matchConditions", "variables", "validations"):
            for item in spec.get(group) or []:
                for field in ("expression", "messageExpression"):
                    if field in item:
                        item[field] = _cel(item[field])
    return doc
