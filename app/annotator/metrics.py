"""Prometheus metrics of the annotator, on a registry it owns (tests build many annotators)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from app.model.policy_store import policy_reload_metrics

__all__ = ["AnnotatorMetrics"]

CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
QUERY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class AnnotatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.cycle_duration = Histogram(
            "ballast_annotator_cycle_duration_seconds",
            "Time of one annotation cycle: queries, hot values, planning and patches.",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.cycles = Counter(
            "ballast_annotator_cycles",
            "Annotation cycles by result: ok, partial (some query or patch failed), failed (nothing synced).",
            ["result"],
            registry=r,
        )
        self.queries = Counter(
            "ballast_annotator_prometheus_queries",
            "Prometheus instant queries (one per policy metric per sync) by metric and result (ok, error).",
            ["metric", "result"],
            registry=r,
        )
        self.query_duration = Histogram(
            "ballast_annotator_prometheus_query_duration_seconds",
            "Time of one Prometheus query, retries included.",
            buckets=QUERY_BUCKETS,
            registry=r,
        )
        self.patches = Counter(
            "ballast_annotator_node_patches",
            "Node merge patches by result: ok, error, gone (node deleted), skipped (not leader any more).",
            ["result"],
            registry=r,
        )
        self.annotations_written = Counter(
            "ballast_annotator_annotations_written",
            "Annotations written by key (policy metric or node_hot_value).",
            ["key"],
            registry=r,
        )
        self.failures = Counter(
            "ballast_annotator_failures",
            "Failures by kind: prometheus (a query failed), patch (a node patch failed), cycle (a bug).",
            ["kind"],
            registry=r,
        )
        self.nodes_without_data = Gauge(
            "ballast_annotator_nodes_without_data",
            "Nodes with no usable value (missing, NaN or negative) in the last sync of a metric; their "
            "annotation was left alone.",
            ["metric"],
            registry=r,
        )
        self.refused_values = Counter(
            "ballast_annotator_refused_values",
            "Values that cannot be a load ratio (above 1000 %: a broken source), by metric; nothing is "
            "written for that node (the extender would refuse the annotation too).",
            ["metric"],
            registry=r,
        )
        self.malformed_samples = Counter(
            "ballast_annotator_malformed_samples",
            "Items of a Prometheus answer skipped because they were not a sample (not an object, no "
            "numeric value); the other samples of that answer are used.",
            ["metric"],
            registry=r,
        )
        self.unmatched_series = Gauge(
            "ballast_annotator_unmatched_series",
            "Series in the last answer for a metric that named no known node.",
            ["metric"],
            registry=r,
        )
        self.conflicts = Counter(
            "ballast_annotator_series_conflicts",
            "Nodes matched by several series of one metric (resolved to the highest value).",
            ["metric"],
            registry=r,
        )
        self.load_source_conflicts = Counter(
            "ballast_annotator_load_source_conflicts",
            "Nodes left alone in a cycle because another load source (ballast.io/load-source, e.g. the "
            "node's agent) has fresh values there; above zero for long means two sources are on.",
            registry=r,
        )
        self.last_success = Gauge(
            "ballast_annotator_last_success_timestamp_seconds",
            "Unix time of the last successful sync, by metric (and node_hot_value).",
            ["metric"],
            registry=r,
        )
        self.last_cycle_success = Gauge(
            "ballast_annotator_last_cycle_success_timestamp_seconds",
            "Unix time the last cycle without any failure started.",
            registry=r,
        )
        self.nodes = Gauge("ballast_annotator_nodes", "Nodes known to the annotator.", registry=r)
        self.bindings = Gauge(
            "ballast_annotator_binding_records",
            "Pod bindings inside the hot-value horizon held in memory.",
            registry=r,
        )
        self.leader = Gauge(
            "ballast_annotator_leader",
            "1 while this replica holds the Lease (or runs without leader election), else 0.",
            registry=r,
        )
        self.policy_reloads, self.policy_ok = policy_reload_metrics("ballast_annotator", r)
        self.lease_transitions = Counter(
            "ballast_annotator_leadership_changes",
            "Times this replica started or stopped leading, by event (acquired, lost, released).",
            ["event"],
            registry=r,
        )
