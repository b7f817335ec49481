"""crane's hot value and what a binding is: one rule for the annotator and the agent.

The hot value says "this node was just given many pods": for each ``hotValue`` window of the policy,
``floor(pods bound to the node within timeRange / count)``, summed (crane's formula). A pod counts from the
moment it was bound until it is deleted, terminating or finished. The annotator counts bindings over the
whole cluster (``ballast.annotator.bindings``); the agent counts the pods its own watch sees on its node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ballast.contract.pod import bound_at
from ballast.model.policy import HotValueWindow

__all__ = ["Binding", "binding_from_pod", "hot_value_of"]


@dataclass(frozen=True, slots=True)
class Binding:
    uid: str
    node: str
    when: float
    """Unix seconds when the pod was bound."""


def binding_from_pod(pod: Mapping[str, Any]) -> Binding | None:
    """The pod's binding, or ``None`` when it is unbound, going away or finished (it no longer counts).

    Dated by the one bind-time rule, ``ballast.contract.pod.bound_at``: the ``PodScheduled=True``
    condition's ``lastTransitionTime``, else (a pod created with ``spec.nodeName`` already set, no scheduler
    involved) its ``creationTimestamp``.
    """
    meta = pod.get("metadata") or {}
    uid = meta.get("uid")
    node = (pod.get("spec") or {}).get("nodeName")
    if not uid or not node or meta.get("deletionTimestamp"):
        return None
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return None
    when = bound_at(pod)
    if when is None:
        return None
    return Binding(str(uid), str(node), when)


def hot_value_of(count_since: Callable[[float], int], now: float, windows: Sequence[HotValueWindow]) -> int:
    """crane's formula: the sum over windows of ``floor(bindings at or after now - timeRange / count)``;
    ``count_since(t)`` counts the node's bindings at or after ``t``."""
    return sum(count_since(now - w.time_range) // w.count for w in windows)
