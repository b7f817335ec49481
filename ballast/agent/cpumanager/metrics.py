"""Prometheus metrics of the agent's CPU manager, on a registry the agent owns (tests build many)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from ballast.program.metrics import MetricSet

__all__ = ["CPUManagerMetrics"]

RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class CPUManagerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        m = MetricSet("ballast_agent", registry)
        self.registry = m.registry
        self.pinning_requests = m.counter(
            "cpuset_updates",
            "Cpuset updates sent to the runtime (one per container whose cpuset changed).",
            "runtime",
        )
        self.pinning_errors = m.counter(
            "cpuset_update_errors",
            "Cpuset updates that failed after retries, by reason; retried on the next reconcile.",
            "runtime",
            "reason",
        )
        self.cpuset_repairs = m.counter(
            "cpuset_repairs",
            "Containers whose cgroup cpuset, read back on a reconcile, differed from what the agent had "
            "applied (changed behind its back, or an update that did not land), set again, by runtime.",
            "runtime",
        )
        self.pinning_mode = m.gauge(
            "pinning_mode",
            "1 for how the agent gives containers their cpusets: nri (at creation, through the runtime's "
            "NRI plugin socket) or cri (after creation, by reconcile); 0 for the other.",
            "mode",
        )
        self.nri_requests = m.histogram(
            "nri_request_duration_seconds",
            "Time the agent's NRI plugin took to answer the runtime, by method (the runtime waits 2s at "
            "most by default).",
            "method",
            buckets=RECONCILE_BUCKETS,
        )
        self.runtime_retries = m.counter(
            "runtime_call_retries",
            "Runtime calls retried after a transient failure, by method and gRPC code.",
            "method",
            "code",
        )
        self.exclusive_cpus = m.gauge(
            "exclusive_cpus",
            "CPUs assigned to containers (exclusive and immovable pods).",
        )
        self.shared_pool_cpus = m.gauge(
            "shared_pool_cpus",
            "CPUs in the shared pool that unpinned containers run on (reserved CPUs included).",
        )
        self.pinned_pods = m.gauge(
            "pinned_pods",
            "Pods with CPUs assigned, by policy (exclusive, immovable).",
            "policy",
        )
        self.reconcile_duration = m.histogram(
            "reconcile_duration_seconds",
            "Time of one reconcile pass (allocation, release and cpuset updates).",
            buckets=RECONCILE_BUCKETS,
        )
        self.allocations = m.counter(
            "cpu_allocations",
            "Pods given CPUs, by policy (exclusive, immovable).",
            "policy",
        )
        self.allocation_errors = m.counter(
            "cpu_allocation_errors",
            "Pods whose CPUs could not be found, by reason; retried when CPUs are freed.",
            "reason",
        )
        self.topology_results_ignored = m.counter(
            "topology_results_ignored",
            "Pod topology-result annotations treated as absent, by reason "
            "(untrusted-scheduler, malformed, unknown-numa, cpu-mismatch).",
            "reason",
        )
        self.state_recoveries = m.counter(
            "state_recoveries",
            "CPU state checkpoints rejected at start-up (moved aside and rebuilt), by kind "
            "(unreadable, corrupt, policy, invalid).",
            "kind",
        )
        self.state_write_errors = m.counter(
            "state_write_errors",
            "Failed saves of the CPU state checkpoint (retried on the next reconcile).",
        )
