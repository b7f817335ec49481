"""Realistic Node objects for benchmarks, shaped like the ones a real kube-scheduler v1.36 sent.

The captured fixture nodes are the templates (labels, status, images, conditions); managedFields are
dropped so a node is about 4 KB, as in the issue's sizing. Load annotations are fresh and varied so the
extender really filters and scores.
"""

from __future__ import annotations

import copy
import json
import random
import time
from pathlib import Path
from typing import Any

from ballast.contract.annotations import CRANE_LOAD_METRICS, HOT_VALUE_KEY, format_hot_value, format_load

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_REQUEST = (
    ROOT / "tests" / "fixtures" / "kube-scheduler" / "full-nodes" / "01-filter-burstable-checkout-api.json"
)
"""A real whole-node filter request (kube-scheduler v1.36.2): its nodes and pod are the templates."""


def _templates() -> list[dict[str, Any]]:
    nodes = json.loads(SAMPLE_REQUEST.read_text())["Nodes"]["items"]
    for n in nodes:
        n["metadata"].pop("managedFields", None)
    return nodes


def make_nodes(
    count: int, seed: int = 7, now: float | None = None, hot_fraction: float = 0.1
) -> list[dict[str, Any]]:
    """``count`` nodes; ``hot_fraction`` of them run over the default limits (0.70-0.95), the rest at
    0.10-0.55. ``hot_fraction=1.0`` is the worst case for the extender: every node needs a verdict."""
    rng = random.Random(seed)
    now = now or time.time()
    templates = _templates()
    out = []
    for i in range(count):
        node = copy.deepcopy(templates[i % len(templates)])
        name = f"ip-10-{i // 65536 % 256}-{i // 256 % 256}-{i % 256}.us-west-2.compute.internal"
        meta = node["metadata"]
        meta["name"] = name
        meta["uid"] = f"00000000-0000-4000-8000-{i:012d}"
        meta["resourceVersion"] = str(1000 + i)
        meta["labels"]["kubernetes.io/hostname"] = name
        ann = meta.setdefault("annotations", {})
        hot = rng.random() < hot_fraction
        for m in CRANE_LOAD_METRICS:
            value = rng.uniform(0.70, 0.95) if hot else rng.uniform(0.10, 0.55)
            ann[m] = format_load(value, now - rng.uniform(0, 120))
        ann[HOT_VALUE_KEY] = format_hot_value(rng.choice((0, 0, 0, 1, 2)), now - 30)
        for addr in node["status"].get("addresses", []):
            if addr["type"] == "InternalIP":
                addr["address"] = f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}"
            elif addr["type"] == "Hostname":
                addr["address"] = name
        out.append(node)
    return out


def pod() -> dict[str, Any]:
    return json.loads(SAMPLE_REQUEST.read_text())["Pod"]
