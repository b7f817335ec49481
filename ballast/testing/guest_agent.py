"""Ballast's node agent installed in guest nodes as a user installs it: the shipped kustomize install's agent
pieces (``scheduler_config/deploy/``: namespace, agent RBAC, the agent's admission policy, the policy
ConfigMap, ``agent.yaml``), the CRDs and the seal key's Secret as ``docs/install.md`` applies them, or the
Helm chart's agent; from the image built here (``ballast.testing.agent_image``), imported into each guest's
containerd.

Only the image changes, through a kustomize overlay written into a temporary folder (``images:`` and
``imagePullPolicy: Never``: a guest pulls nothing), never by editing the manifests; so the DaemonSet's
securityContext, mounts, probes, arguments and service-account token are the shipped ones.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

from ballast.testing.controlplane import ControlPlane, wait_until
from ballast.testing.parts import ROOT

DEPLOY = ROOT / "scheduler_config" / "deploy"
AGENT_PIECES = (
    "namespace.yaml",
    "agent-rbac.yaml",
    "agent-admission-policy.yaml",
    "policy.yaml",
    "agent.yaml",
)
"""The kustomization's resources the agent needs (the scheduler, the rebalancer and the network policies
stay out: their images are not here, and no test of the agent needs them)."""
CRDS = (
    ROOT / "scheduler_config" / "crd-nodeload.yaml",
    ROOT / "scheduler_config" / "crd-noderesourcetopology.yaml",
)
NAMESPACE = "ballast-system"
DAEMONSET = "ballast-agent"
AGENT_SELECTOR = "app.kubernetes.io/name=ballast,app.kubernetes.io/component=agent"
SHIPPED_IMAGE = "ballast"
"""The image name the kustomization's ``images:`` entry and ``agent.yaml`` use."""


def split_ref(ref: str) -> tuple[str, str]:
    """``localhost/ballast:test`` -> (``localhost/ballast``, ``test``)."""
    name, sep, tag = ref.rpartition(":")
    if not sep or "/" in tag:
        raise ValueError(f"image reference without a tag: {ref!r}")
    return name, tag


def write_overlay(folder: Path, image_ref: str) -> Path:
    """A kustomization in ``folder`` with the shipped agent pieces as its resources and only the image
    replaced. The pieces live outside ``folder``, so it is rendered with kustomize's load restrictor off."""
    name, tag = split_ref(image_ref)
    folder.mkdir(parents=True, exist_ok=True)
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [str(DEPLOY / piece) for piece in AGENT_PIECES],
        "images": [{"name": SHIPPED_IMAGE, "newName": name, "newTag": tag}],
        "patches": [
            {
                "target": {"kind": "DaemonSet", "name": DAEMONSET},
                "patch": json.dumps(
                    [
                        {
                            "op": "replace",
                            "path": "/spec/template/spec/containers/0/imagePullPolicy",
                            "value": "Never",
                        }
                    ]
                ),
            }
        ],
    }
    (folder / "kustomization.yaml").write_text(json.dumps(overlay, indent=1))
    return folder


def render_agent(cp: ControlPlane, folder: Path, image_ref: str) -> str:
    """The overlay rendered by kubectl's kustomize: the manifests a user would apply, image replaced."""
    write_overlay(folder, image_ref)
    return cp.kubectl("kustomize", "--load-restrictor", "LoadRestrictionsNone", str(folder))


def install_agent(cp: ControlPlane, folder: Path, image_ref: str) -> None:
    """The install steps of ``scheduler_config/deploy/kustomization.yaml`` for the agent: the CRDs, the
    namespace, the seal key's Secret (a fresh random key), then the rendered overlay."""
    for crd in CRDS:
        cp.kubectl("apply", "-f", str(crd))
    for crd in ("nodeloads.ballast.io", "noderesourcetopologies.topology.crane.io"):
        cp.kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")
    cp.kubectl("apply", "-f", str(DEPLOY / "namespace.yaml"))
    if not cp.kubectl("get", "secret", "ballast-result-key", "-n", NAMESPACE, "--ignore-not-found"):
        cp.kubectl("-n", NAMESPACE, "create", "secret", "generic", "ballast-result-key",
                   f"--from-literal=key={secrets.token_hex(32)}")  # fmt: skip
    cp.kubectl("apply", "-f", "-", input=render_agent(cp, folder, image_ref))


def uninstall_agent(cp: ControlPlane, folder: Path, image_ref: str) -> None:
    """Delete what ``install_agent`` applied (the CRDs and NodeLoads stay, as docs/install.md says), and wait
    until the namespace, and so the agent's pods, are gone."""
    cp.kubectl(
        "delete", "--ignore-not-found", "--wait=false", "-f", "-", input=render_agent(cp, folder, image_ref)
    )
    wait_for_namespace_gone(cp)


def wait_for_namespace_gone(cp: ControlPlane, timeout: float = 300) -> None:
    """The agent's namespace gone for good (its pods ended by their kubelets), so it can be made again."""
    wait_until(
        lambda: not cp.kubectl("get", "namespace", NAMESPACE, "--ignore-not-found"),
        None,
        f"namespace {NAMESPACE} gone",
        timeout,
    )


def agent_pod(cp: ControlPlane, node: str) -> Any | None:
    """The agent's pod on ``node`` (kubernetes model), or None."""
    pods = cp.core().list_namespaced_pod(NAMESPACE, label_selector=AGENT_SELECTOR).items
    mine = [p for p in pods if p.spec.node_name == node and p.metadata.deletion_timestamp is None]
    return mine[0] if mine else None


def wait_agent_ready(cp: ControlPlane, node: str, timeout: float = 1200) -> Any:
    """Wait until the agent's pod on ``node`` is Running and ready (its /readyz answers); returns it."""

    def ready() -> bool:
        pod = agent_pod(cp, node)
        statuses = (pod.status.container_statuses or []) if pod else []
        return (
            bool(pod) and pod.status.phase == "Running" and bool(statuses) and all(s.ready for s in statuses)
        )

    try:
        wait_until(ready, None, f"the agent's pod on {node} ready", timeout)
    except RuntimeError as exc:
        pod = agent_pod(cp, node)
        raise RuntimeError(f"{exc}; pod: {pod.status if pod else None}") from None
    return agent_pod(cp, node)


def agent_log(guest: Any, pod: Any, lines: int = 200) -> str:
    """The agent container's log, read in the guest (``kubectl logs`` goes through the node proxy)."""
    folder = f"/var/log/pods/{pod.metadata.namespace}_{pod.metadata.name}_{pod.metadata.uid}/agent"
    try:
        return guest.ssh(f"tail -n {lines} $(ls -v {folder}/*.log | tail -1)", check=False)
    except subprocess.TimeoutExpired:
        return ""
