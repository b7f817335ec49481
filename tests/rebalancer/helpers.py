"""Builders for rebalancer tests: a policy with ``spec.rebalance``, nodes and pods as the API sends them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import yaml

from ballast.model.policy import Policy, parse_policy
from ballast.model.rebalance_policy import LIMIT_FIELDS, RebalanceSettings, rebalance_settings
from ballast.rebalancer.fit import NodeFacts, node_facts
from ballast.rebalancer.pods import PodFacts, pod_facts

NOW = 1_800_000_000.0
CPU = "cpu_usage_avg_5m"
MEM = "mem_usage_avg_5m"

BASE: dict[str, Any] = {
    "apiVersion": "scheduler.policy.crane.io/v1alpha1",
    "kind": "DynamicSchedulerPolicy",
    "spec": {
        "syncPolicy": [{"name": CPU, "period": "3m"}, {"name": MEM, "period": "3m"}],
        "predicate": [{"name": CPU, "maxLimitPecent": 0.65}],
        "priority": [{"name": CPU, "weight": 1}],
        "rebalance": {
            "thresholds": [{"name": CPU, "high": 0.80, "low": 0.45}],
            "consecutiveAbnormal": 3,
            "consecutiveNormal": 2,
            "limits": {"perNode": 2, "perCycle": 10, "perWorkload": 5, "perNamespace": 10},
        },
    },
}


def policy(**rebalance: Any) -> tuple[Policy, RebalanceSettings]:
    doc = yaml.safe_load(yaml.safe_dump(BASE))
    limits = {k: rebalance.pop(k) for k in list(rebalance) if k in LIMIT_FIELDS}
    doc["spec"]["rebalance"].update(rebalance)
    doc["spec"]["rebalance"]["limits"].update(limits)
    p = parse_policy(yaml.safe_dump(doc))
    s = rebalance_settings(p)
    assert s is not None
    return p, s


def stamp(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(
    name: str,
    cpu: float | None,
    *,
    at: float = NOW - 30,
    alloc_cpu: str = "8",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    ann = {CPU: f"{cpu:.5f},{stamp(at)}"} if cpu is not None else {}
    spec: dict[str, Any] = {"taints": taints or []}
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "annotations": ann, "labels": labels or {}},
        "spec": spec,
        "status": {"allocatable": {"cpu": alloc_cpu, "memory": "32Gi", "pods": "110"}},
    }


def facts(nodes: list[dict[str, Any]], p: Policy) -> dict[str, NodeFacts]:
    return {n["metadata"]["name"]: node_facts(n, p, NOW) for n in nodes}


def pod(
    name: str,
    node_name: str,
    *,
    cpu: str = "1",
    namespace: str = "default",
    owner: str | None = "ReplicaSet",
    owner_name: str = "web-abc",
    priority: int = 0,
    created: float = NOW - 3600,
    annotations: dict[str, str] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    qos: str = "Burstable",
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict[str, str]] | None = None,
    **extra_meta: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "creationTimestamp": stamp(created),
        "annotations": annotations or {},
        "labels": {"pod-template-hash": "abc"},
        **extra_meta,
    }
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": owner_name, "controller": True}]
    spec: dict[str, Any] = {
        "nodeName": node_name,
        "priority": priority,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
    }
    if volumes:
        spec["volumes"] = volumes
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    return {"metadata": meta, "spec": spec, "status": {"phase": "Running", "qosClass": qos}}


def pfacts(p: Policy, *pods: dict[str, Any]) -> list[PodFacts]:
    return [pod_facts(x, p.estimation) for x in pods]
