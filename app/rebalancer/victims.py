"""Which pods of a hot node may go, and in which order (pure).

May go: pods a controller recreates (``app.rebalancer.pods``), outside the excluded namespaces, without
local storage unless ``evictLocalStorage``. Order, re-evaluated after every pick because the excess
shrinks: lowest priority first, then QoS class (BestEffort, Burstable, Guaranteed), then the pod whose
estimated usage best matches what the node still has above ``high``, then the youngest. A node's projected
load is its measured value minus the estimates (``app.model.estimation``, the extender's rules) of the
pods already chosen this cycle; picking stops once every hot metric is projected below its ``high``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from app.model.nodestate import NodeLoad
from app.model.rebalance_policy import RebalanceSettings, Threshold
from app.rebalancer.classify import HotMetric
from app.rebalancer.pods import QOS_ORDER, PodFacts

__all__ = ["excess", "order_key", "relief", "settings_skip", "split"]


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


def relief(pod: PodFacts, load: NodeLoad, threshold: Threshold) -> float:
    """How much ``pod``'s estimate takes off ``threshold``'s metric on this node, as a ratio (0 when the
    metric's resource is unknown or the node's allocatable is)."""
    if threshold.resource == "cpu" and load.allocatable_cpu_milli:
        return pod.cpu_milli / load.allocatable_cpu_milli
    if threshold.resource == "memory" and load.allocatable_memory_bytes:
        return pod.memory_bytes / load.allocatable_memory_bytes
    return 0.0


def excess(projected: Mapping[str, float], hot: Iterable[HotMetric]) -> dict[str, float]:
    """Per hot metric still at or above its high: how far above (0 counts: ``high`` itself is not below)."""
    return {h.metric: projected[h.metric] - h.high for h in hot if projected[h.metric] >= h.high}


def order_key(
    pod: PodFacts, over: Mapping[str, float], load: NodeLoad, thresholds: Mapping[str, Threshold]
) -> tuple[int, int, float, float]:
    """Smaller goes first: priority, QoS class, mismatch between the pod's estimate and the excess, then
    the youngest (largest creation time) first."""
    mismatch = sum(abs(relief(pod, load, thresholds[m]) - e) for m, e in over.items())
    return (pod.priority, QOS_ORDER.get(pod.qos, 1), round(mismatch, 9), -pod.created)
