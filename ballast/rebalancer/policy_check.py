"""Policy combinations that make the rebalancer and the extender work against each other (pure).

The rebalancer moves a pod off a node above ``high``; kube-scheduler with the Ballast extender places the
replacement. If the extender's filter lets a node through at or above the rebalancer's ``high`` (its
predicate limit for that metric is missing, disabled, or not below ``high``), the replacement can land on a
node the rebalancer will empty again: a loop that only the limits slow down. Such a policy still runs (the
rebalancer's own fit check keeps its targets below ``high``; other pods are placed by the extender), but it
is reported: in the log, on ``/readyz``'s text and in ``ballast_rebalancer_policy_warnings``.
"""

from __future__ import annotations

from ballast.model.policy import Policy
from ballast.model.rebalance_policy import RebalanceSettings

__all__ = ["policy_warnings"]


def policy_warnings(policy: Policy, settings: RebalanceSettings | None) -> tuple[str, ...]:
    """One sentence per rebalance metric (and node pool) whose filter limit would let the extender place
    pods on a node the rebalancer counts as hot."""
    if settings is None:
        return ()
    scopes = [("spec.predicate", policy.limits.predicate_plan)]
    scopes += [(f"node pool {name}", limits.predicate_plan) for name, limits in policy.pool_limits.items()]
    out: list[str] = []
    for t in settings.thresholds:
        if t.high is None:
            continue
        for scope, plan in scopes:
            limits = [limit for metric, limit, _valid, _resource in plan if metric == t.name]
            if not limits:
                out.append(
                    f"{t.name}: {scope} has no filter limit for it, so the extender places pods on nodes "
                    f"above the rebalancer's high {t.high:g}, which the rebalancer then empties again"
                )
            elif min(limits) >= t.high:
                out.append(
                    f"{t.name}: {scope} limit {min(limits):g} is not below the rebalancer's high "
                    f"{t.high:g}, so the extender places pods on nodes the rebalancer then empties again"
                )
    return tuple(out)
