"""Small builders for the objects Ballast tests create most, in the shape the API server stores them."""

from __future__ import annotations

from typing import Any


def make_node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    ready: bool = True,
) -> dict[str, Any]:
    """A Ready node with capacity == allocatable, labelled like a kubelet labels itself."""
    resources = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", **(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"}
            ],
            "addresses": [{"type": "Hostname", "address": name}],
        },
    }


def make_pod(
    name: str,
    *,
    namespace: str = "default",
    node_name: str | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    limits: bool = False,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str | None = None,
    scheduler_name: str | None = None,
) -> dict[str, Any]:
    """A one-container pod; `limits=True` sets limits equal to requests (Guaranteed when cpu and memory are
    set)."""
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = dict(requests)
        if limits:
            resources["limits"] = dict(requests)
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}]
    }
    if node_name:
        spec["nodeName"] = node_name
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels or {}),
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
    }
    if phase:
        pod["status"] = {"phase": phase}
    return pod


def make_nrt(
    node: str,
    *,
    zones: list[dict[str, Any]] | None = None,
    cpu_manager_policy: str = "Static",
    topology_manager_policy: str = "SingleNUMANodePodLevel",
) -> dict[str, Any]:
    """A crane `NodeResourceTopology` named after its node."""
    return {
        "apiVersion": "topology.crane.io/v1alpha1",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "craneManagerPolicy": {
            "cpuManagerPolicy": cpu_manager_policy,
            "topologyManagerPolicy": topology_manager_policy,
        },
        "zones": zones
        if zones is not None
        else [
            {
                "name": "node0",
                "type": "Node",
                "resources": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}},
            }
        ],
    }


def make_lease(
    name: str, *, namespace: str = "default", holder: str | None = None, duration: int = 15
) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": duration}
    if holder:
        spec["holderIdentity"] = holder
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def make_event(
    name: str,
    *,
    namespace: str = "default",
    involved: dict[str, Any] | None = None,
    reason: str = "Scheduled",
    event_type: str = "Normal",
    message: str = "",
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": involved or {"kind": "Pod", "namespace": namespace, "name": name.split(".")[0]},
        "reason": reason,
        "type": event_type,
        "message": message,
        "source": {"component": "ballast"},
    }
