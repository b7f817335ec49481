"""The rebalancer's Prometheus metrics, in its own registry (served on ``--metrics-port``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from ballast.model.policy_store import policy_reload_metrics
from ballast.program.metrics import MetricSet

__all__ = ["RebalancerMetrics"]

CYCLE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class RebalancerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        m = MetricSet("ballast_rebalancer", registry)
        self.registry = m.registry
        self.evictions = m.counter(
            "evictions",
            "Victims by result: evicted, pdb_blocked (429 naming a PodDisruptionBudget: not now), throttled "
            "(429 without one: the API server's rate limit, no call before its Retry-After), unknown (no "
            "answer, a reset, a timeout or a 5xx: counted as evicted by every limit), no_fit (no cool node "
            "would take it), limited (a limit stopped it), error (a definite refusal); dry_run says whether "
            "the eviction call was made.",
            "result",
            "dry_run",
        )
        self.cycles = m.counter(
            "cycles",
            "Cycles by result: ok (planned, maybe evicted), idle (no spec.rebalance), aborted (a watch was "
            "down or an API call failed: nothing evicted on partial data), standby (not the leader).",
            "result",
        )
        self.cycle_duration = m.histogram(
            "cycle_duration_seconds",
            "Time of one cycle: planning and the eviction calls (paced by evictionsPerSecond).",
            buckets=CYCLE_BUCKETS,
        )
        self.nodes = m.gauge("nodes", "Nodes by state at the last cycle.", "state")
        self.api_calls = m.counter(
            "api_calls",
            "Calls the cycles made to the API server (eviction, event) by HTTP status; the watches are not "
            "counted here.",
            "call",
            "code",
        )
        self.leader, self.lease_transitions = m.leadership()
        self.policy_reloads, self.policy_ok = policy_reload_metrics("ballast_rebalancer", self.registry)
        self.policy_warnings = m.gauge(
            "policy_warnings",
            "Problems in the running policy that let the extender and the rebalancer work against each other "
            "(a rebalance metric whose filter limit is missing or not below its high); the log and /readyz "
            "name them.",
        )
