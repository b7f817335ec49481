"""What the extender knows about one node, parsed once from the Node object.

Parsing happens when a node arrives (a watch event, or a new resourceVersion in a full-node request),
never per verdict: the request path only compares numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agent.quantity import parse_bytes as memory_bytes
from agent.quantity import parse_cpu_milli as cpu_milli
from app.annotations import HOT_VALUE_KEY, Sample, parse_sample
from app.policy import Policy


@dataclass(frozen=True, slots=True)
class NodeLoad:
    name: str
    samples: Mapping[str, Sample] = field(default_factory=dict)
    """Parsed load annotations for the policy's metrics; unreadable ones are simply absent."""
    hot: Sample | None = None
    allocatable_cpu_milli: int | None = None
    allocatable_memory_bytes: int | None = None
    resource_version: str | None = None


def _allocatable(node: Mapping[str, object]) -> tuple[int | None, int | None]:
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(alloc, Mapping):
        return None, None
    cpu = mem = None
    try:
        if "cpu" in alloc:
            cpu = cpu_milli(alloc["cpu"])
    except ValueError:
        cpu = None
    try:
        if "memory" in alloc:
            mem = memory_bytes(alloc["memory"])
    except ValueError:
        mem = None
    return cpu, mem


def parse_node(node: Mapping[str, object], policy: Policy) -> NodeLoad:
    """Build ``NodeLoad`` from a Node object (dict). Never raises on bad annotations or quantities."""
    meta = node.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    annotations = meta.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    zone = policy.legacy_zone
    samples: dict[str, Sample] = {}
    for metric in policy.sync_periods:
        raw = annotations.get(metric)
        if raw is not None and (sample := parse_sample(raw, zone)) is not None:
            samples[metric] = sample
    hot = parse_sample(annotations.get(HOT_VALUE_KEY), zone)
    cpu, mem = _allocatable(node)
    rv = meta.get("resourceVersion")
    return NodeLoad(
        name=str(name) if name is not None else "",
        samples=samples,
        hot=hot,
        allocatable_cpu_milli=cpu,
        allocatable_memory_bytes=mem,
        resource_version=rv if isinstance(rv, str) else None,
    )
