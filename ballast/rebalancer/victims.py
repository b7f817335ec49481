"""Which pods of a hot node may go, how much each takes off, and in which order (pure).

May go: pods a controller recreates (``ballast.rebalancer.pods``), outside the excluded namespaces, without
local storage unless ``evictLocalStorage``.

How much a pod takes off (``usage_of``): its *measured* usage when a fresh ``NodeLoad`` of its node lists
it (``ballast.rebalancer.nodeloads``), else its *estimated* usage from requests
(``ballast.model.estimation``, the
extender's rules), decided per pod. A node's projected load is its measured value minus the usage of the
pods already chosen this cycle; picking stops once every hot metric is projected below its ``high``.

Order, re-evaluated after every pick because the excess shrinks: lowest priority first, then QoS class
(BestEffort, Burstable, Guaranteed); within one priority and class, a pod that alone brings the node below
``high`` on every hot metric goes before one that does not (the smallest such pod, so the target gets no
more than needed), and otherwise the heaviest first; then the youngest. Within a priority and class this
takes the fewest pods that bring the node below ``high`` (for one hot metric, heaviest-first is the least
number of items whose sum exceeds the excess).

A target must have room for a victim under ``high`` with a margin (``margin``): its measured usage, or,
without a measurement, the larger of its request and its estimate, since the estimate (85 % of the
request by default) is what a pod is expected to use, not what it may use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ballast.model.nodestate import NodeState
from ballast.model.rebalance_policy import RebalanceSettings, Threshold
from ballast.rebalancer.classify import HotMetric
from ballast.rebalancer.pods import QOS_ORDER, PodFacts

__all__ = [
    "ESTIMATED",
    "MEASURED",
    "Usage",
    "excess",
    "margin",
    "order_key",
    "relief",
    "settings_skip",
    "split",
    "usage_of",
]

MEASURED, ESTIMATED = "measured", "estimated"


@dataclass(frozen=True, slots=True)
class Usage:
    """What a pod uses (or, for ``margin``, may use): millicores, bytes, and where the numbers come from."""

    cpu_milli: int
    memory_bytes: int
    source: str
    """``measured`` (a fresh NodeLoad lists the pod) or ``estimated`` (from its requests and limits)."""

    def amount(self, resource: str | None) -> int:
        return self.cpu_milli if resource == "cpu" else self.memory_bytes if resource == "memory" else 0

    def to_json(self) -> dict[str, object]:
        return {"source": self.source, "cpuMilli": self.cpu_milli, "memoryBytes": self.memory_bytes}


def usage_of(pod: PodFacts, measured: Mapping[str, tuple[int, int]]) -> Usage:
    """The pod's measured usage when its node's fresh NodeLoad lists it, else its estimate."""
    m = measured.get(pod.uid)
    if m is not None:
        return Usage(m[0], m[1], MEASURED)
    return Usage(pod.cpu_milli, pod.memory_bytes, ESTIMATED)


def margin(pod: PodFacts, usage: Usage) -> Usage:
    """What a target must hold below ``high`` for this victim: a measured usage as it is; an estimate
    raised to the pod's request (an estimate below the request is a guess that may fall short, and a
    short guess turns the target hot and sends the pod back)."""
    if usage.source == MEASURED:
        return usage
    return Usage(
        max(usage.cpu_milli, pod.cpu_request_milli),
        max(usage.memory_bytes, pod.memory_request_bytes),
        ESTIMATED,
    )


def settings_skip(pod: PodFacts, settings: RebalanceSettings) -> str | None:
    """Why a pod is not a candidate under the current settings, or ``None``."""
    if pod.skip is not None:
        return pod.skip
    if pod.namespace in settings.excluded_namespaces:
        return f"namespace {pod.namespace} is excluded"
    if pod.local_storage and not settings.evict_local_storage:
        return "local storage (emptyDir/hostPath) would be lost; evictLocalStorage is off"
    return None


def split(
    pods: Iterable[PodFacts], settings: RebalanceSettings
) -> tuple[list[PodFacts], list[tuple[PodFacts, str]]]:
    """(candidates, [(pod, why not)]) among a node's pods."""
    candidates: list[PodFacts] = []
    skipped: list[tuple[PodFacts, str]] = []
    for pod in pods:
        why = settings_skip(pod, settings)
        if why is None:
            candidates.append(pod)
        else:
            skipped.append((pod, why))
    return candidates, skipped


def relief(usage: Usage, load: NodeState, threshold: Threshold) -> float | None:
    """How much ``usage`` takes off ``threshold``'s metric on this node, as a ratio; ``None`` when it
    cannot be projected: the node's allocatable for the metric's resource cannot be read, or the metric
    measures no resource (a pressure metric: a stall share, not usage; moving a pod away takes off an
    amount no figure of the pod says). The plan then moves one victim a cycle and lets the next
    measurement say whether another is needed."""
    if threshold.resource == "cpu":
        alloc = load.allocatable_cpu_milli
    elif threshold.resource == "memory":
        alloc = load.allocatable_memory_bytes
    else:
        return None
    if not alloc:
        return None
    return usage.amount(threshold.resource) / alloc


def excess(projected: Mapping[str, float], hot: Iterable[HotMetric]) -> dict[str, float]:
    """Per hot metric still at or above its high: how far above (0 counts: ``high`` itself is not below)."""
    return {h.metric: projected[h.metric] - h.high for h in hot if projected[h.metric] >= h.high}


def order_key(
    pod: PodFacts,
    usage: Usage,
    over: Mapping[str, float],
    load: NodeState,
    thresholds: Mapping[str, Threshold],
) -> tuple[int, int, int, float, float]:
    """Smaller goes first: priority, QoS class, then a pod that alone brings every hot metric below
    ``high`` (the smallest such), else the heaviest, then the youngest (largest creation time)."""
    reliefs = [relief(usage, load, thresholds[m]) for m in over]
    enough = all(r is not None and r > over[m] for r, m in zip(reliefs, over, strict=True))
    size = sum(r for r in reliefs if r is not None)
    return (
        pod.priority,
        QOS_ORDER.get(pod.qos, 1),
        0 if enough else 1,
        round(size if enough else -size, 9),
        -pod.created,
    )
