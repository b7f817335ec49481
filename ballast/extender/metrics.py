"""Prometheus metrics of the extender, on a registry owned by the app (tests build many apps)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ballast.contract.annotations import HOT_VALUE_KEY
from ballast.extender.shadow import EXCESS_BUCKETS
from ballast.model.nodestate import NodeState
from ballast.model.policy import Policy
from ballast.model.policy_store import policy_reload_metrics

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class ExtenderMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "ballast_extender_requests",
            "Extender requests by verb and HTTP status code.",
            ["verb", "code"],
            registry=r,
        )
        self.latency = Histogram(
            "ballast_extender_request_duration_seconds",
            "Time to answer an extender verb.",
            ["verb"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.nodes_seen = Counter(
            "ballast_extender_nodes",
            "Nodes evaluated by verb.",
            ["verb"],
            registry=r,
        )
        self.rejected = Counter(
            "ballast_extender_nodes_rejected",
            "Nodes rejected by filter, by the metric (or 'numa', or 'missing:<metric>' for a metric without "
            "a fresh value under onMissing: reject) that rejected them. Not counted in shadow mode.",
            ["metric"],
            registry=r,
        )
        self.names_only = Counter(
            "ballast_extender_names_only_requests",
            "Requests with only NodeNames answered without a node cache (every node passes).",
            registry=r,
        )
        self.unknown_nodes = Counter(
            "ballast_extender_unknown_nodes",
            "Node names the cache did not know (they pass, scored 0).",
            registry=r,
        )
        self.bad_annotations = Counter(
            "ballast_extender_bad_annotations",
            "Node annotations present but unusable (not a number, non-finite, out of range, stamped in the "
            "future), by metric; each is no information for that node and metric. A bad "
            "ballast.io/load-thresholds annotation counts under that name: the node keeps its pool or "
            "global limits.",
            ["metric"],
            registry=r,
        )
        self.annotations_ahead = Counter(
            "ballast_extender_annotations_ahead",
            "Load annotations stamped ahead of the extender's clock when they arrived (clock skew), by "
            "metric; estimates are ordered against the arrival time instead, so they keep counting.",
            ["metric"],
            registry=r,
        )
        self.binds_refused = Counter(
            "ballast_extender_binds_refused",
            "Binds refused because the node would go over a limit with the pods placed since filter, by "
            "metric; kube-scheduler retries those pods.",
            ["metric"],
            registry=r,
        )
        self.nrt_malformed = Counter(
            "ballast_extender_nrt_malformed",
            "Community NodeResourceTopology (v1alpha2) objects received unusable (no zones, a bad or "
            "negative quantity, an unknown policy); each is no information for its node, which passes.",
            registry=r,
        )
        self.shadow_mode = Gauge(
            "ballast_extender_shadow_mode",
            "1 while the policy's spec.mode is shadow (verdicts recorded, not applied), 0 in enforce mode.",
            registry=r,
        )
        self.shadow_would_reject = Counter(
            "ballast_extender_shadow_would_reject",
            "Shadow mode: nodes filter would have rejected, by metric label (as nodes_rejected counts them "
            "in enforce mode); they were passed.",
            ["metric"],
            registry=r,
        )
        self.shadow_choices = Counter(
            "ballast_extender_shadow_choices",
            "Shadow mode: pods seen bound after a prioritize, by whether the scheduler's node was one "
            "Ballast would have favoured (agreed=true|false).",
            ["agreed"],
            registry=r,
        )
        self.shadow_load_excess = Histogram(
            "ballast_extender_shadow_chosen_load_excess",
            "Shadow mode: how much higher the scheduler's node's projected load (ratio, with the pod) was "
            "than that of the node Ballast would have favoured; 0 when they agree.",
            buckets=EXCESS_BUCKETS,
            registry=r,
        )
        self.shadow_binds_would_refuse = Counter(
            "ballast_extender_shadow_binds_would_refuse",
            "Shadow mode: binds the load check would have refused, by metric label; they went ahead.",
            ["metric"],
            registry=r,
        )
        self.policy_reloads, self.policy_ok = policy_reload_metrics("ballast", r)
        self.watches = WatchCollector(lambda: ())
        """The cache's watches; ``create_app`` points it at the cache's reflectors."""
        r.register(self.watches)
        self._request_children: dict[tuple[str, str], tuple[Any, Any]] = {}

    def request_done(self, verb: str, code: str, seconds: float) -> None:
        """Count one answered request and its time, through children bound once per (verb, code):
        ``labels()`` takes a lock and builds a key every call, on the scheduler's critical path."""
        children = self._request_children.get((verb, code))
        if children is None:
            children = (self.requests.labels(verb, code), self.latency.labels(verb))
            self._request_children[(verb, code)] = children
        children[0].inc()
        children[1].observe(seconds)

    def know(self, policy: Policy) -> None:
        """Put the metric-labelled counters' labels ``policy`` can produce on /metrics at 0 (at start and
        after each reload), so dashboards and alerts see them before their first event. Labels of metrics
        a reload dropped stay, with their counts."""
        for metric in (*policy.metrics, HOT_VALUE_KEY):
            self.bad_annotations.labels(metric)
        for predicate in policy.predicates:
            self.rejected.labels(predicate.name)
            self.binds_refused.labels(predicate.name)
            self.shadow_would_reject.labels(predicate.name)
            self.shadow_binds_would_refuse.labels(predicate.name)
        self.rejected.labels("numa")
        for agreed in ("true", "false"):
            self.shadow_choices.labels(agreed)

    def count_bad(self, load: NodeState) -> None:
        """Count a parsed node's bad annotations (called once per parse, i.e. per node change)."""
        for metric in load.bad:
            self.bad_annotations.labels(metric).inc()
        for metric in load.ahead:
            self.annotations_ahead.labels(metric).inc()


class WatchCollector(Collector):
    """The cache's watches as metrics, read at scrape time: how old the newest event is, how long a watch
    has been unable to reach the API server, and its failures. A stale cache is visible before a verdict
    made from it surprises anyone."""

    def __init__(self, reflectors: Callable[[], Iterable[Any]]) -> None:
        self.reflectors = reflectors

    def collect(self) -> Iterator[Any]:
        now = time.monotonic()
        age = GaugeMetricFamily(
            "ballast_extender_watch_last_event_age_seconds",
            "Seconds since the watch's last list, event or bookmark, by resource (-1 before the first list).",
            labels=["resource"],
        )
        down = GaugeMetricFamily(
            "ballast_extender_watch_disconnected_seconds",
            "Seconds the watch has been failing to reach the API server, by resource (0 while connected).",
            labels=["resource"],
        )
        errors = CounterMetricFamily(
            "ballast_extender_watch_errors",
            "Failed lists and watches (each followed by a reconnect after a backoff), by resource.",
            labels=["resource"],
        )
        for r in self.reflectors():
            last = r.stats.last_event
            age.add_metric([r.name], -1.0 if last is None else now - last)
            down.add_metric([r.name], r.stats.disconnected_for(now))
            errors.add_metric([r.name], r.stats.errors)
        yield age
        yield down
        yield errors
