"""Prometheus metrics of the agent's load reporting, on the agent's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from ballast.model.policy_store import policy_reload_metrics
from ballast.program.metrics import MetricSet

__all__ = ["LoadMetrics"]

SAMPLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class LoadMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        m = MetricSet("ballast_agent_load", registry)
        self.registry = m.registry
        self.samples = m.counter(
            "samples",
            "Load samples of the node and its pods by result (ok; error: /proc could not be read).",
            "result",
            zero=("ok", "error"),
        )
        self.sample_duration = m.histogram(
            "sample_duration_seconds",
            "Time one load sample takes (reading /proc and every pod cgroup).",
            buckets=SAMPLE_BUCKETS,
        )
        self.pods_measured = m.gauge(
            "pods_measured",
            "Pods bound to this node whose cgroup the last sample read.",
        )
        self.pods_skipped = m.counter(
            "pods_skipped",
            "Pod reads skipped because the pod cgroup was not there (not created yet, or already gone).",
        )
        self.pod_cgroups_missing = m.gauge(
            "pod_cgroups_missing",
            "1 while pods are bound to this node but none of their cgroups can be found (the NodeLoad "
            "lists no pods: see the agent's log for where it looked), else 0.",
        )
        self.writes = m.counter(
            "writes",
            "Load writes to the API server by object (node: the annotations, nodeload: the NodeLoad).",
            "object",
            zero=("node", "nodeload"),
        )
        self.write_errors = m.counter(
            "write_errors",
            "Failed load writes by object (node, nodeload, checkpoint); retried at the next report.",
            "object",
            zero=("node", "nodeload", "checkpoint"),
        )
        self.checkpoint_rejected = m.counter(
            "checkpoint_rejected",
            "Load history checkpoints found corrupt at start-up (set aside; the history starts empty).",
        )
        self.source_conflicts = m.counter(
            "source_conflicts",
            "Reports that left the node's load annotations alone because another source's fresh values "
            "were there (ballast.io/load-source names it).",
        )
        self.last_report = m.gauge(
            "last_report_timestamp_seconds",
            "Unix time of the last NodeLoad status written.",
        )
        # The policy file's reloads (``ballast.model.policy_store.PolicyStore`` counts into these).
        self.policy_reloads, self.policy_ok = policy_reload_metrics("ballast_agent", self.registry)
