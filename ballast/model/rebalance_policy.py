"""``spec.rebalance``: when a node counts as hot or cool, how long it must stay so, and the eviction limits.

The section lives in the one policy file every program reads. ``ballast.model.policy`` accepts it and keeps it
in the document without reading it (the extender and the annotator ignore it); the rebalancer builds its
``RebalanceSettings`` here, with the same field-path errors as the rest of the policy, so a typo in this
section stops the rebalancer (exit 2, or the last good policy kept on reload) and never the extender.

    spec:
      rebalance:
        thresholds:                  # per metric: 0 < low < high <= 1, the metric has a syncPolicy
          - {name: cpu_usage_avg_5m, high: 0.80, low: 0.45}
        consecutiveAbnormal: 5       # hot cycles (see ballast.rebalancer.classify) before a node is acted on
        consecutiveNormal: 3         # normal cycles in a row that reset the count
        excludedNamespaces: [kube-system]
        evictLocalStorage: false     # pods with emptyDir / hostPath volumes stay unless true
        limits: {perNode: 2, perNamespace: 5, perCycle: 10, perWorkload: 1, workloadWindow: 5m,
                 evictionsPerSecond: 2}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ballast.contract.durations import parse_duration
from ballast.contract.numbers import finite, shown
from ballast.model.policy import MAX_COUNT, Policy, PolicyError

__all__ = ["Limits", "RebalanceSettings", "Threshold", "rebalance_settings"]


@dataclass(frozen=True, slots=True)
class Threshold:
    name: str
    high: float | None
    """A fresh value above this makes the node hot; ``None``: this metric never makes a node hot."""
    low: float | None
    """Every metric with a ``low`` must be freshly below it for the node to be cool."""
    valid_for: float
    """Seconds a value stays usable after its timestamp (the extender's freshness rule)."""
    resource: str | None
    """``cpu`` | ``memory`` (what an evicted pod's estimate takes off), or ``None``."""


@dataclass(frozen=True, slots=True)
class Limits:
    per_node: int = 2
    """Evictions from one node in one cycle."""
    per_namespace: int = 5
    """Evictions from one namespace in one cycle."""
    per_cycle: int = 10
    """Evictions in one cycle, all nodes together."""
    per_workload: int = 1
    """Evictions of one workload (owner) within ``workload_window``."""
    workload_window: float = 300.0
    evictions_per_second: float = 2.0
    """Pace of eviction calls, so a cycle's evictions reach the API server (and the workloads) spread."""


@dataclass(frozen=True, slots=True)
class RebalanceSettings:
    thresholds: tuple[Threshold, ...]
    consecutive_abnormal: int = 5
    consecutive_normal: int = 3
    excluded_namespaces: frozenset[str] = frozenset({"kube-system"})
    evict_local_storage: bool = False
    limits: Limits = Limits()

    def to_json(self) -> dict[str, Any]:
        lim = self.limits
        return {
            "thresholds": [{"name": t.name, "high": t.high, "low": t.low} for t in self.thresholds],
            "consecutiveAbnormal": self.consecutive_abnormal,
            "consecutiveNormal": self.consecutive_normal,
            "excludedNamespaces": sorted(self.excluded_namespaces),
            "evictLocalStorage": self.evict_local_storage,
            "limits": {
                "perNode": lim.per_node,
                "perNamespace": lim.per_namespace,
                "perCycle": lim.per_cycle,
                "perWorkload": lim.per_workload,
                "workloadWindowSeconds": lim.workload_window,
                "evictionsPerSecond": lim.evictions_per_second,
            },
        }


REBALANCE_FIELDS = {
    "thresholds",
    "consecutiveAbnormal",
    "consecutiveNormal",
    "excludedNamespaces",
    "evictLocalStorage",
    "limits",
}
THRESHOLD_FIELDS = {"name", "high", "low"}
LIMIT_FIELDS = {"perNode", "perNamespace", "perCycle", "perWorkload", "workloadWindow", "evictionsPerSecond"}

_BASE = "spec.rebalance"


class _Problems(list):
    def fail(self, path: str, reason: str) -> None:
        self.append((path, reason))

    def unknown(self, item: Mapping[str, Any], allowed: set[str], path: str) -> None:
        for key in item:
            if key not in allowed:
                self.fail(f"{path}.{key}", f"unknown field (allowed: {', '.join(sorted(allowed))})")

    def ratio(self, value: Any, path: str) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(path, f"expected a number, got {shown(value)}")
            return None
        number = finite(value)  # high: 10**400 is out of range, not an OverflowError
        if number is None or not 0 < number <= 1:
            self.fail(path, f"{shown(value)} is out of range: must be in (0, 1]")
            return None
        return number

    def count(self, value: Any, path: str, default: int, minimum: int = 1) -> int:
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_COUNT:
            self.fail(
                path,
                f"expected a whole number of at least {minimum} (at most {MAX_COUNT}), got {shown(value)}",
            )
            return default
        return value


def _thresholds(p: _Problems, value: Any, policy: Policy) -> tuple[Threshold, ...]:
    path = f"{_BASE}.thresholds"
    if not isinstance(value, list) or not value:
        p.fail(path, "required: a non-empty list of {name, high, low}")
        return ()
    out: list[Threshold] = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        if not isinstance(item, Mapping):
            p.fail(where, f"expected a mapping, got {type(item).__name__}")
            continue
        p.unknown(item, THRESHOLD_FIELDS, where)
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            p.fail(f"{where}.name", "required, a non-empty metric name")
            continue
        if name in seen:
            p.fail(f"{where}.name", f"metric {name!r} appears twice in thresholds")
        seen.add(name)
        if name not in policy.sync_periods:
            p.fail(f"{where}.name", f"metric {name!r} has no syncPolicy entry, so its freshness is unknown")
            continue
        high = p.ratio(item.get("high"), f"{where}.high")
        low = p.ratio(item.get("low"), f"{where}.low")
        if item.get("high") is None and item.get("low") is None:
            p.fail(where, "set high, low or both")
            continue
        if high is not None and low is not None and not low < high:
            p.fail(f"{where}.low", f"{low:g} must be below high {high:g}")
            continue
        out.append(Threshold(name, high, low, policy.valid_for(name), policy.resource_of(name)))
    if out and not any(t.high is not None for t in out):
        p.fail(path, "no threshold has a high: no node could ever be hot")
    if out and not any(t.low is not None for t in out):
        p.fail(path, "no threshold has a low: no node could ever be cool")
    return tuple(out)


def _limits(p: _Problems, value: Any) -> Limits:
    path = f"{_BASE}.limits"
    if value is None:
        return Limits()
    if not isinstance(value, Mapping):
        p.fail(path, f"expected a mapping, got {type(value).__name__}")
        return Limits()
    p.unknown(value, LIMIT_FIELDS, path)
    d = Limits()
    window = d.workload_window
    if "workloadWindow" in value:
        raw = value["workloadWindow"]
        try:
            window = parse_duration(raw) if isinstance(raw, str) else -1.0
        except ValueError as exc:
            p.fail(f"{path}.workloadWindow", str(exc))
        else:
            if window < 0:
                p.fail(f"{path}.workloadWindow", f"expected a duration string like '5m', got {shown(raw)}")
                window = d.workload_window
    rate = value.get("evictionsPerSecond", d.evictions_per_second)
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= 1000:
        p.fail(f"{path}.evictionsPerSecond", f"expected a number in (0, 1000], got {shown(rate)}")
        rate = d.evictions_per_second
    return Limits(
        per_node=p.count(value.get("perNode"), f"{path}.perNode", d.per_node),
        per_namespace=p.count(value.get("perNamespace"), f"{path}.perNamespace", d.per_namespace),
        per_cycle=p.count(value.get("perCycle"), f"{path}.perCycle", d.per_cycle),
        per_workload=p.count(value.get("perWorkload"), f"{path}.perWorkload", d.per_workload),
        workload_window=window,
        evictions_per_second=float(rate),
    )


def rebalance_settings(policy: Policy) -> RebalanceSettings | None:
    """The policy's ``spec.rebalance``, validated; ``None`` when the section is absent (the rebalancer
    idles). Raises ``PolicyError`` naming every bad field."""
    spec = policy.document.get("spec") if isinstance(policy.document, Mapping) else None
    section = spec.get("rebalance") if isinstance(spec, Mapping) else None
    if section is None:
        return None
    p = _Problems()
    if not isinstance(section, Mapping):
        raise PolicyError(policy.source, [(_BASE, f"expected a mapping, got {type(section).__name__}")])
    p.unknown(section, REBALANCE_FIELDS, _BASE)
    thresholds = _thresholds(p, section.get("thresholds"), policy)
    abnormal = p.count(section.get("consecutiveAbnormal"), f"{_BASE}.consecutiveAbnormal", 5)
    normal = p.count(section.get("consecutiveNormal"), f"{_BASE}.consecutiveNormal", 3)
    excluded = section.get("excludedNamespaces", ["kube-system"])
    if not isinstance(excluded, list) or not all(isinstance(n, str) and n for n in excluded):
        p.fail(f"{_BASE}.excludedNamespaces", f"expected a list of namespace names, got {shown(excluded)}")
        excluded = ["kube-system"]
    local = section.get("evictLocalStorage", False)
    if not isinstance(local, bool):
        p.fail(f"{_BASE}.evictLocalStorage", f"expected true or false, got {shown(local)}")
        local = False
    limits = _limits(p, section.get("limits"))
    if p:
        raise PolicyError(policy.source, list(p))
    return RebalanceSettings(thresholds, abnormal, normal, frozenset(excluded), local, limits)
