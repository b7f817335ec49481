"""One node's effective limits: its pool (by labels) and its ``ballast.io/load-thresholds`` annotation.

Resolved when the node arrives through the watch (``ballast.model.nodestate.parse_node``), so a label or
annotation change reaches the verdict board as any node change does and requests stay lookups. A node in
no pool and without the annotation shares the policy's own limits object, and a node in a pool shares
the pool's: only an annotated node gets limits of its own.

A bad annotation (not a JSON object, an unknown metric, a limit that is not a number in [0, 1]) is
ignored for that node only: the node keeps its pool or global limits, the problem is counted and shown
in ``/nodes``. Refusing the node, or the whole policy, for one operator's typo on one node would be
worse than the limits it meant to change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ballast.contract.numbers import finite, shown
from ballast.model.policy import Policy
from ballast.model.pools import NodeLimits, pool_for

THRESHOLDS_ANNOTATION = "ballast.io/load-thresholds"
_MAX_TEXT = 4096
"""Longer annotation text is refused unread: a policy has a handful of metrics."""


def parse_thresholds(text: object, metrics: Mapping[str, float]) -> tuple[dict[str, float], str | None]:
    """The annotation's ``metric -> limit`` map, or ``({}, why)`` when it cannot be used as a whole.
    ``metrics`` are the policy's synced metrics (a limit on any other could never be checked)."""
    if not isinstance(text, str):
        return {}, "not a string"
    if len(text) > _MAX_TEXT:
        return {}, f"longer than {_MAX_TEXT} characters"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # ValueError: bad JSON, or an int of over 4300 digits
        return {}, f"not JSON: {str(exc)[:200]}"
    if not isinstance(value, dict):
        return {}, f"expected a JSON object of metric name to limit, got {type(value).__name__}"
    out: dict[str, float] = {}
    for metric, limit in value.items():
        if metric not in metrics:
            return {}, f"unknown metric {shown(metric)} (the policy syncs {', '.join(metrics) or 'none'})"
        number = finite(limit)  # an integer of 310 digits is no float: never math.isfinite(int)
        if number is None:
            return {}, f"{metric}: expected a number in [0, 1], got {shown(limit)}"
        if not 0 <= number <= 1:
            return {}, f"{metric}: {shown(limit)} is out of range: must be in [0, 1]"
        out[metric] = number
    return out, None


def node_limits(
    policy: Policy, labels: Mapping[str, str], annotations: Mapping[str, object]
) -> tuple[NodeLimits, str | None]:
    """The node's effective limits, and why its thresholds annotation was ignored (``None`` if it was not)."""
    pool = pool_for(policy.node_pools, labels) if policy.node_pools else None
    base = policy.limits if pool is None else policy.pool_limits[pool.name]
    if THRESHOLDS_ANNOTATION not in annotations:
        return base, None
    overrides, problem = parse_thresholds(annotations[THRESHOLDS_ANNOTATION], policy.sync_periods)
    if problem is not None or not overrides:
        return base, problem
    return policy.limits_for(pool, overrides), None
