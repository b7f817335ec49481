"""What the extender knows about one node, parsed once from the Node object.

Parsing happens when a node arrives (a watch event, or a new resourceVersion in a full-node request),
never per verdict: the request path only compares numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ballast.contract.annotations import HOT_VALUE_KEY, MAX_HOT_VALUE, MAX_LOAD_RATIO, LoadSample, read_sample
from ballast.contract.quantity import parse_bytes as memory_bytes
from ballast.contract.quantity import parse_cpu_milli as cpu_milli
from ballast.model.policy import Policy
from ballast.model.pools import NodeLimits
from ballast.model.thresholds import THRESHOLDS_ANNOTATION, node_limits


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node's load as the annotations on its Node object say it (with its allocatable and limits).
    Not the ``NodeLoad`` resource (``ballast.contract.nodeload``: the agent's measured per-pod usage)."""

    name: str
    samples: Mapping[str, LoadSample] = field(default_factory=dict)
    """Parsed load annotations for the policy's metrics; unreadable ones are simply absent."""
    hot: LoadSample | None = None
    allocatable_cpu_milli: int | None = None
    allocatable_memory_bytes: int | None = None
    resource_version: str | None = None
    bad: Mapping[str, str] = field(default_factory=dict)
    """Annotations present but unusable (metric, ``node_hot_value`` or ``ballast.io/load-thresholds`` ->
    why): no information (for the thresholds: the pool or global limits hold), shown in /nodes."""
    limits: NodeLimits | None = None
    """The node's effective limits (pool, annotation); ``None``: the policy's global ones."""

    @property
    def ahead(self) -> list[str]:
        """Metrics whose stamp was ahead of the extender's clock when the node arrived (counted)."""
        return [m for m, s in self.samples.items() if s.ordered_at is not None]


_MAX_QUANTITY = 2**53
"""Larger allocatable values are no information: no node has them, and JSON numbers end there."""


def _quantity(alloc: Mapping[str, object], key: str, parse) -> int | None:
    if key not in alloc:
        return None
    try:
        value = parse(alloc[key])
    except (ValueError, ArithmeticError):
        return None
    return value if 0 <= value < _MAX_QUANTITY else None


def _allocatable(node: Mapping[str, object]) -> tuple[int | None, int | None]:
    status = node.get("status")
    alloc = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(alloc, Mapping):
        return None, None
    return _quantity(alloc, "cpu", cpu_milli), _quantity(alloc, "memory", memory_bytes)


UNREADABLE = "(node)"
"""The ``bad`` key of a node that could not be read at all (``parse_node``'s last resort)."""


def parse_node(node: Mapping[str, object], policy: Policy, now: float) -> NodeState:
    """Build ``NodeState`` from a Node object (dict). Never raises, whatever the object holds.

    ``now`` is when the node arrived: a timestamp further ahead of it than the allowed clock skew is
    refused (it would stay fresh for as long as it is ahead). Each reader below is total on its own; a
    failure none of them foresaw still makes the node "no information" (no samples, its pool or global
    limits, the reason under ``bad["(node)"]``), never an exception out of a watch or a verb: one node's
    content must not stop the cache or a request that names other nodes.
    """
    try:
        return _parse_node(node, policy, now)
    except Exception as exc:
        return _unreadable(node, policy, exc)


def _unreadable(node: object, policy: Policy, exc: Exception) -> NodeState:
    meta = node.get("metadata") if isinstance(node, Mapping) else None
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    rv = meta.get("resourceVersion")
    labels = meta.get("labels")
    try:
        clean = {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}
        limits, _ = node_limits(policy, clean, {})
    except Exception:  # labels no selector can read: the global limits
        limits = None
    reason = " ".join(f"cannot be read: {type(exc).__name__}: {str(exc)[:160]}".split())
    return NodeState(
        name=name if isinstance(name, str) else "",
        resource_version=rv if isinstance(rv, str) else None,
        bad={UNREADABLE: reason},
        limits=limits,
    )


def _parse_node(node: Mapping[str, object], policy: Policy, now: float) -> NodeState:
    meta = node.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = meta.get("name")
    annotations = meta.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}
    zone = policy.legacy_zone
    samples: dict[str, LoadSample] = {}
    bad: dict[str, str] = {}
    for metric in policy.sync_periods:
        sample, reason = read_sample(annotations.get(metric), now, legacy_zone=zone, cap=MAX_LOAD_RATIO)
        if sample is not None:
            samples[metric] = sample
        elif reason is not None:
            bad[metric] = reason
    hot, reason = read_sample(annotations.get(HOT_VALUE_KEY), now, legacy_zone=zone, cap=MAX_HOT_VALUE)
    if reason is not None:
        bad[HOT_VALUE_KEY] = reason
    labels = meta.get("labels")
    labels = (
        {k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)}
        if isinstance(labels, Mapping)
        else {}
    )
    limits, reason = node_limits(policy, labels, annotations)
    if reason is not None:
        bad[THRESHOLDS_ANNOTATION] = reason
    cpu, mem = _allocatable(node)
    rv = meta.get("resourceVersion")
    return NodeState(
        name=name if isinstance(name, str) else "",
        samples=samples,
        hot=hot,
        allocatable_cpu_milli=cpu,
        allocatable_memory_bytes=mem,
        resource_version=rv if isinstance(rv, str) else None,
        bad=bad,
        limits=limits,
    )
