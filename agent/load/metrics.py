"""Prometheus metrics of the agent's load reporting, on the agent's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.model.policy_store import policy_reload_metrics

__all__ = ["LoadMetrics"]

SAMPLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class LoadMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.samples = Counter(
            "ballast_agent_load_samples",
            "Load samples of the node and its pods by result (ok; error: /proc could not be read).",
            ["result"],
            registry=r,
        )
        self.sample_duration = Histogram(
            "ballast_agent_load_sample_duration_seconds",
            "Time one load sample takes (reading /proc and every pod cgroup).",
            buckets=SAMPLE_BUCKETS,
            registry=r,
        )
        self.pods_measured = Gauge(
            "ballast_agent_load_pods_measured",
            "Pods bound to this node whose cgroup the last sample read.",
            registry=r,
        )
        self.pods_skipped = Counter(
            "ballast_agent_load_pods_skipped",
            "Pod reads skipped because the pod cgroup was not there (not created yet, or already gone).",
            registry=r,
        )
        self.pod_cgroups_missing = Gauge(
            "ballast_agent_load_pod_cgroups_missing",
            "1 while pods are bound to this node but none of their cgroups can be found (the NodeLoad "
            "lists no pods: see the agent's log for where it looked), else 0.",
            registry=r,
        )
        self.writes = Counter(
            "ballast_agent_load_writes",
            "Load writes to the API server by object (node: the annotations, nodeload: the NodeLoad).",
            ["object"],
            registry=r,
        )
        self.write_errors = Counter(
            "ballast_agent_load_write_errors",
            "Failed load writes by object (node, nodeload, checkpoint); retried at the next report.",
            ["object"],
            registry=r,
        )
        self.checkpoint_rejected = Counter(
            "ballast_agent_load_checkpoint_rejected",
            "Load history checkpoints found corrupt at start-up (set aside; the history starts empty).",
            registry=r,
        )
        self.source_conflicts = Counter(
            "ballast_agent_load_source_conflicts",
            "Reports that left the node's load annotations alone because another source's fresh values "
            "were there (ballast.io/load-source names it).",
            registry=r,
        )
        self.last_report = Gauge(
            "ballast_agent_load_last_report_timestamp_seconds",
            "Unix time of the last NodeLoad status written.",
            registry=r,
        )
        # The policy file's reloads (``app.model.policy_store.PolicyStore`` counts into these).
        self.policy_reloads, self.policy_ok = policy_reload_metrics("ballast_agent", r)
        for result in ("ok", "error"):
            self.samples.labels(result)
        for obj in ("node", "nodeload"):
            self.writes.labels(obj)
        for obj in ("node", "nodeload", "checkpoint"):
            self.write_errors.labels(obj)
