"""Community NodeResourceTopology objects (v1alpha2) shaped like nfd-topology-updater's, and pods."""

from __future__ import annotations

from typing import Any

GI = 1024**3


def zone(
    numa: int,
    cpu: tuple[int | str, int | str, int | str],
    memory_gi: tuple[int, int, int] | None = (16, 15, 15),
    devices: dict[str, tuple[Any, Any, Any]] | None = None,
) -> dict[str, Any]:
    """A NUMA zone: ``cpu`` and ``memory_gi`` are (capacity, allocatable, available)."""
    resources = [{"name": "cpu", "capacity": cpu[0], "allocatable": cpu[1], "available": cpu[2]}]
    if memory_gi is not None:
        c, a, v = memory_gi
        resources.append(
            {"name": "memory", "capacity": f"{c}Gi", "allocatable": f"{a}Gi", "available": f"{v}Gi"}
        )
    for name, (c, a, v) in (devices or {}).items():
        resources.append({"name": name, "capacity": c, "allocatable": a, "available": v})
    return {
        "name": f"node-{numa}",
        "type": "Node",
        "costs": [{"name": f"node-{n}", "value": 10 if n == numa else 20} for n in (0, 1)],
        "resources": resources,
    }


def nrt(
    node: str,
    zones: list[dict[str, Any]],
    policy: str | None = "single-numa-node",
    scope: str | None = "container",
    legacy: list[str] | None = None,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    attributes = []
    if policy is not None:
        attributes.append({"name": "topologyManagerPolicy", "value": policy})
    if scope is not None:
        attributes.append({"name": "topologyManagerScope", "value": scope})
    if fingerprint is not None:
        attributes.append({"name": "nodeTopologyPodsFingerprint", "value": fingerprint})
        attributes.append({"name": "nodeTopologyPodsFingerprintMethod", "value": "all"})
    obj: dict[str, Any] = {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "topologyPolicies": legacy if legacy is not None else [],
        "zones": zones,
    }
    if attributes:
        obj["attributes"] = attributes
    return obj


def two_zones(node: str, free0: int = 2, free1: int = 8, **kw: Any) -> dict[str, Any]:
    """Two zones of 8 allocatable CPUs (one nearly full by default)."""
    return nrt(node, [zone(0, (8, 8, free0)), zone(1, (8, 8, free1))], **kw)


def container(
    name: str,
    cpu: str | None = None,
    memory: str | None = None,
    limits: bool = True,
    more: dict[str, str] | None = None,
) -> dict[str, Any]:
    req: dict[str, str] = {}
    if cpu is not None:
        req["cpu"] = cpu
    if memory is not None:
        req["memory"] = memory
    req.update(more or {})
    resources = {"requests": dict(req), "limits": dict(req)} if limits else {"requests": dict(req)}
    return {"name": name, "image": "registry.k8s.io/pause:3.10", "resources": resources if req else {}}


def pod(
    name: str,
    *containers: dict[str, Any],
    init: list[dict[str, Any]] | None = None,
    uid: str | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers) or [container("app")]}
    if init:
        spec["initContainers"] = init
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"},
        "spec": spec,
    }


def guaranteed(name: str, cpus: int | str, memory: str = "1Gi", **kw: Any) -> dict[str, Any]:
    return pod(name, container("app", str(cpus), memory), **kw)
