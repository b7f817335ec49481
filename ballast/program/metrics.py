"""One way to declare a program's Prometheus metrics: on a registry the program owns, named under its prefix.

Every program keeps its metrics on a ``CollectorRegistry`` of its own (tests build many programs in one
process, and the default registry would refuse a second one). ``MetricSet`` is that registry with the
program's prefix, so a declaration says only what differs (name, help, labels) and a series that must be on
``/metrics`` from the start (so ``rate()`` and alerts work from zero) is created with it (``zero``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["MetricSet"]

LabelValues = str | Sequence[str]


class MetricSet:
    def __init__(self, prefix: str, registry: CollectorRegistry | None = None) -> None:
        """``prefix`` without the trailing underscore, e.g. ``ballast_rebalancer``."""
        self.prefix = prefix
        self.registry = registry or CollectorRegistry()

    def _name(self, name: str) -> str:
        return f"{self.prefix}_{name}"

    def counter(self, name: str, doc: str, *labels: str, zero: Iterable[LabelValues] = ()) -> Counter:
        """``{prefix}_{name}_total``; ``zero``: label values (one string per label set of a one-label
        counter, else a sequence) whose series start at 0."""
        counter = Counter(self._name(name), doc, labels, registry=self.registry)
        for values in zero:
            counter.labels(*((values,) if isinstance(values, str) else values))
        return counter

    def gauge(self, name: str, doc: str, *labels: str) -> Gauge:
        return Gauge(self._name(name), doc, labels, registry=self.registry)

    def histogram(self, name: str, doc: str, *labels: str, buckets: Sequence[float]) -> Histogram:
        return Histogram(self._name(name), doc, labels, buckets=buckets, registry=self.registry)

    def leadership(self) -> tuple[Gauge, Counter]:
        """``{prefix}_leader`` and ``{prefix}_leadership_changes_total{event}``, what
        ``ballast.program.leader.elector_from_args`` keeps current in a program elected by a Lease."""
        leader = self.gauge(
            "leader", "1 while this replica leads (holds the Lease, or runs without leader election), else 0."
        )
        changes = self.counter(
            "leadership_changes",
            "Times this replica started or stopped leading, by event (acquired, lost, released).",
            "event",
        )
        return leader, changes
