"""Example bodies for the OpenAPI page: small, real-shaped, and valid against the bundled policy."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def _stamp(now: float) -> str:
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(name: str, cpu: str, mem: str, hot: str, now: float) -> dict[str, Any]:
    ts = _stamp(now)
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "annotations": {
                "cpu_usage_avg_5m": f"{cpu},{ts}",
                "cpu_usage_max_avg_1h": f"{cpu},{ts}",
                "mem_usage_avg_5m": f"{mem},{ts}",
                "mem_usage_max_avg_1h": f"{mem},{ts}",
                "node_hot_value": f"{hot},{ts}",
            },
        },
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}},
    }


POD: dict[str, Any] = {
    "metadata": {
        "name": "checkout-api-6qm8s",
        "namespace": "shop",
        "uid": "5d79de24-8452-478c-9f8a-f8c8e651ba5e",
    },
    "spec": {
        "containers": [
            {
                "name": "app",
                "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
            }
        ]
    },
}


def filter_example(now: float) -> dict[str, Any]:
    """Whole nodes whose annotations are dated ``now``, so they are fresh whenever the page is loaded."""
    return {
        "Pod": POD,
        "Nodes": {
            "metadata": {},
            "items": [
                _node("node-a", "0.30000", "0.40000", "0", now),
                _node("node-b", "0.83000", "0.86000", "4", now),
            ],
        },
        "NodeNames": None,
    }


def names_example() -> dict[str, Any]:
    return {"Pod": POD, "Nodes": None, "NodeNames": ["node-a", "node-b"]}


BIND = {
    "PodName": "checkout-api-6qm8s",
    "PodNamespace": "shop",
    "PodUID": POD["metadata"]["uid"],
    "Node": "node-a",
}

PREEMPT = {
    "Pod": POD,
    "NodeNameToVictims": None,
    "NodeNameToMetaVictims": {
        "node-a": {"Pods": [{"UID": "0b3c6f0e-1111-4d7a-9c55-3e0f0f0f0f0f"}], "NumPDBViolations": 0}
    },
}


def request_examples(now: float) -> dict[str, dict[str, Any]]:
    """The request-body examples of each POST path, built per call of the OpenAPI document: timestamps
    fixed at import would be stale (and every node fail) minutes after start."""
    verbs = {"whole nodes": filter_example(now), "names only": names_example()}
    return {
        "/filter": verbs,
        "/prioritize": verbs,
        "/explain": {"whole nodes": filter_example(now), "every known node": {"Pod": POD}},
        "/preempt": {"meta victims": PREEMPT},
        "/bind": {"bind": BIND},
    }
