"""The rebalancer's Prometheus metrics, in its own registry (served on ``--metrics-port``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.model.policy_store import policy_reload_metrics

__all__ = ["RebalancerMetrics"]


class RebalancerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.evictions = Counter(
            "ballast_rebalancer_evictions",
            "Victims by result: evicted, pdb_blocked (429 naming a PodDisruptionBudget: not now), throttled "
            "(429 without one: the API server's rate limit, no call before its Retry-After), unknown (no "
            "answer, a reset, a timeout or a 5xx: counted as evicted by every limit), no_fit (no cool node "
            "would take it), limited (a limit stopped it), error (a definite refusal); dry_run says whether "
            "the eviction call was made.",
            ["result", "dry_run"],
            registry=r,
        )
        self.cycles = Counter(
            "ballast_rebalancer_cycles",
            "Cycles by result: ok (planned, maybe evicted), idle (no spec.rebalance), aborted (a watch was "
            "down or an API call failed: nothing evicted on partial data), standby (not the leader).",
            ["result"],
            registry=r,
        )
        self.cycle_duration = Histogram(
            "ballast_rebalancer_cycle_duration_seconds",
            "Time of one cycle: planning and the eviction calls (paced by evictionsPerSecond).",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.nodes = Gauge(
            "ballast_rebalancer_nodes", "Nodes by state at the last cycle.", ["state"], registry=r
        )
        self.api_calls = Counter(
            "ballast_rebalancer_api_calls",
            "Calls the cycles made to the API server (eviction, event) by HTTP status; the watches are not "
            "counted here.",
            ["call", "code"],
            registry=r,
        )
        self.leader = Gauge("ballast_rebalancer_leader", "1 while this replica holds the Lease.", registry=r)
        self.lease_transitions = Counter(
            "ballast_rebalancer_leadership_changes",
            "Lease events: acquired, lost, released.",
            ["event"],
            registry=r,
        )
        self.policy_reloads, self.policy_ok = policy_reload_metrics("ballast_rebalancer", r)
        self.policy_warnings = Gauge(
            "ballast_rebalancer_policy_warnings",
            "Problems in the running policy that let the extender and the rebalancer work against each other "
            "(a rebalance metric whose filter limit is missing or not below its high); the log and /readyz "
            "name them.",
            registry=r,
        )
