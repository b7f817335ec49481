"""Prometheus metrics of the agent's CPU manager, on a registry the agent owns (tests build many)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["CPUManagerMetrics"]

RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class CPUManagerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.pinning_requests = Counter(
            "ballast_agent_cpuset_updates",
            "Cpuset updates sent to the runtime (one per container whose cpuset changed).",
            ["runtime"],
            registry=r,
        )
        self.pinning_errors = Counter(
            "ballast_agent_cpuset_update_errors",
            "Cpuset updates that failed after retries, by reason; retried on the next reconcile.",
            ["runtime", "reason"],
            registry=r,
        )
        self.runtime_retries = Counter(
            "ballast_agent_runtime_call_retries",
            "Runtime calls retried after a transient failure, by method and gRPC code.",
            ["method", "code"],
            registry=r,
        )
        self.exclusive_cpus = Gauge(
            "ballast_agent_exclusive_cpus",
            "CPUs assigned to containers (exclusive and immovable pods).",
            registry=r,
        )
        self.shared_pool_cpus = Gauge(
            "ballast_agent_shared_pool_cpus",
            "CPUs in the shared pool that unpinned containers run on (reserved CPUs included).",
            registry=r,
        )
        self.pinned_pods = Gauge(
            "ballast_agent_pinned_pods",
            "Pods with CPUs assigned, by policy (exclusive, immovable).",
            ["policy"],
            registry=r,
        )
        self.reconcile_duration = Histogram(
            "ballast_agent_reconcile_duration_seconds",
            "Time of one reconcile pass (allocation, release and cpuset updates).",
            buckets=RECONCILE_BUCKETS,
            registry=r,
        )
        self.allocations = Counter(
            "ballast_agent_cpu_allocations",
            "Pods given CPUs, by policy (exclusive, immovable).",
            ["policy"],
            registry=r,
        )
        self.allocation_errors = Counter(
            "ballast_agent_cpu_allocation_errors",
            "Pods whose CPUs could not be found, by reason; retried when CPUs are freed.",
            ["reason"],
            registry=r,
        )
        self.topology_results_ignored = Counter(
            "ballast_agent_topology_results_ignored",
            "Pod topology-result annotations treated as absent, by reason "
            "(untrusted-scheduler, malformed, unknown-numa, cpu-mismatch).",
            ["reason"],
            registry=r,
        )
        self.state_recoveries = Counter(
            "ballast_agent_state_recoveries",
            "CPU state checkpoints rejected at start-up (moved aside and rebuilt), by kind "
            "(unreadable, corrupt, policy, invalid).",
            ["kind"],
            registry=r,
        )
        self.state_write_errors = Counter(
            "ballast_agent_state_write_errors",
            "Failed saves of the CPU state checkpoint (retried on the next reconcile).",
            registry=r,
        )
