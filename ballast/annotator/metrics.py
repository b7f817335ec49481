"""Prometheus metrics of the annotator, on a registry it owns (tests build many annotators)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from ballast.model.policy_store import policy_reload_metrics
from ballast.program.metrics import MetricSet

__all__ = ["AnnotatorMetrics"]

CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
QUERY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class AnnotatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        m = MetricSet("ballast_annotator", registry)
        self.registry = m.registry
        self.cycle_duration = m.histogram(
            "cycle_duration_seconds",
            "Time of one annotation cycle: queries, hot values, planning and patches.",
            buckets=CYCLE_BUCKETS,
        )
        self.cycles = m.counter(
            "cycles",
            "Annotation cycles by result: ok, partial (some query or patch failed), failed (nothing synced).",
            "result",
        )
        self.queries = m.counter(
            "prometheus_queries",
            "Prometheus instant queries (one per policy metric per sync) by metric and result (ok, error).",
            "metric",
            "result",
        )
        self.query_duration = m.histogram(
            "prometheus_query_duration_seconds",
            "Time of one Prometheus query, retries included.",
            buckets=QUERY_BUCKETS,
        )
        self.patches = m.counter(
            "node_patches",
            "Node merge patches by result: ok, error, gone (node deleted), skipped (not leader any more).",
            "result",
        )
        self.annotations_written = m.counter(
            "annotations_written",
            "Annotations written by key (policy metric or node_hot_value).",
            "key",
        )
        self.failures = m.counter(
            "failures",
            "Failures by kind: prometheus (a query failed), patch (a node patch failed), cycle (a bug).",
            "kind",
        )
        self.nodes_without_data = m.gauge(
            "nodes_without_data",
            "Nodes with no usable value (missing, NaN or negative) in the last sync of a metric; their "
            "annotation was left alone.",
            "metric",
        )
        self.refused_values = m.counter(
            "refused_values",
            "Values that cannot be a load ratio (above 1000 %: a broken source), by metric; nothing is "
            "written for that node (the extender would refuse the annotation too).",
            "metric",
        )
        self.malformed_samples = m.counter(
            "malformed_samples",
            "Items of a Prometheus answer skipped because they were not a sample (not an object, no "
            "numeric value); the other samples of that answer are used.",
            "metric",
        )
        self.unmatched_series = m.gauge(
            "unmatched_series",
            "Series in the last answer for a metric that named no known node.",
            "metric",
        )
        self.conflicts = m.counter(
            "series_conflicts",
            "Nodes matched by several series of one metric (resolved to the highest value).",
            "metric",
        )
        self.load_source_conflicts = m.counter(
            "load_source_conflicts",
            "Nodes left alone in a cycle because another load source (ballast.io/load-source, e.g. the "
            "node's agent) has fresh values there; above zero for long means two sources are on.",
        )
        self.last_success = m.gauge(
            "last_success_timestamp_seconds",
            "Unix time of the last successful sync, by metric (and node_hot_value).",
            "metric",
        )
        self.last_cycle_success = m.gauge(
            "last_cycle_success_timestamp_seconds",
            "Unix time the last cycle without any failure started.",
        )
        self.nodes = m.gauge("nodes", "Nodes known to the annotator.")
        self.bindings = m.gauge(
            "binding_records",
            "Pod bindings inside the hot-value horizon held in memory.",
        )
        self.leader, self.lease_transitions = m.leadership()
        self.policy_reloads, self.policy_ok = policy_reload_metrics("ballast_annotator", self.registry)
