"""crane's ``DynamicSchedulerPolicy``: model, validation and loading.

The file format is crane-scheduler's (``scheduler.policy.crane.io/v1alpha1``) so an existing policy file
works unchanged, including its ``maxLimitPecent`` spelling. Validation is strict where crane was silent:
every mistake is reported with its field path, because a policy that is quietly half-applied (crane
skipped predicates without a sync period) is worse than one that refuses to start.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from ballast.contract.annotations import EXTRA_ACTIVE_SECONDS, is_pressure_metric
from ballast.contract.durations import parse_duration
from ballast.contract.numbers import finite, shown
from ballast.contract.quantity import parse_quantity
from ballast.model.pools import (
    LIMIT_FIELDS,
    LimitEntry,
    NodeLimits,
    NodePool,
    ProdSettings,
    build_limits,
    parse_limits,
    parse_mode,
    parse_pools,
    parse_prod,
)

MAX_COUNT = 2**31 - 1
"""The largest whole number a count in the policy may hold (Kubernetes' int32 fields)."""
MAX_QUANTITY = 2**53 - 1
"""The largest default request in the policy (millicores, bytes): a JSON number is exact up to here."""

API_VERSION = "scheduler.policy.crane.io/v1alpha1"
KIND = "DynamicSchedulerPolicy"


class PolicyError(ValueError):
    """A policy that cannot be used; ``problems`` lists ``(field path, reason)`` pairs."""

    def __init__(self, source: str, problems: list[tuple[str, str]]) -> None:
        self.source = source
        self.problems = problems
        lines = "; ".join(f"{path}: {reason}" for path, reason in problems)
        super().__init__(f"invalid policy {source}: {lines}")


SCORINGS = ("relative", "crane")
"""Values of ``spec.scoring``; the first is the default."""


Predicate = LimitEntry
"""A ``spec.predicate`` entry: reject when a fresh value is above ``max_limit`` (0 disables it, crane's
rule); ``on_missing`` says what a node without a fresh value gets (``None``: pass)."""


@dataclass(frozen=True, slots=True)
class Priority:
    name: str
    weight: float


@dataclass(frozen=True, slots=True)
class HotValueWindow:
    time_range: float
    count: int


@dataclass(frozen=True, slots=True)
class Estimation:
    """How the extender estimates the load of pods it just placed (see ``ballast.model.estimation``)."""

    cpu_factor: float = 0.85
    memory_factor: float = 0.70
    default_cpu_milli: int = 250
    default_memory_bytes: int = 200 * 1024 * 1024
    ttl: float | None = None
    """How long an estimate counts at most; ``None`` means the metric's sync period + 5m."""
    tentative_ttl: float = 30.0
    """How long a tentative estimate (placed at prioritize, before bind) lives."""


@dataclass(frozen=True, slots=True)
class TopologySettings:
    """NUMA placement (``ballast.extender.numa.crane``): which resources must fit one zone, and the score's
    NUMA
    weight."""

    memory_aware: bool = False
    """``awareResources: [cpu, memory]``: an aware pod's memory must fit the zone too (crane: cpu only)."""
    score_weight: float = 0.5
    """A NUMA pod's score = (1 - w) * load score + w * NUMA score (1 zone = 10, 2 zones = 5, ...)."""


@dataclass(frozen=True, slots=True)
class Policy:
    sync_periods: Mapping[str, float]
    predicates: tuple[Predicate, ...]
    priorities: tuple[Priority, ...]
    hot_values: tuple[HotValueWindow, ...]
    legacy_zone: ZoneInfo | None = None
    estimation: Estimation = field(default_factory=Estimation)
    metric_resources: Mapping[str, str] = field(default_factory=dict)
    """Metric name -> ``cpu`` | ``memory``, for estimation; defaults by name prefix."""
    topology: TopologySettings = field(default_factory=TopologySettings)
    scoring: str = "relative"
    """``relative`` (rank the candidates by projected load after the pod: the least loaded 10, the others
    7 down to 0) or ``crane`` (crane's absolute ``(1 - u) * 100`` formula mapped to 0..10); see
    ``ballast.model.load``."""
    dominant_resource_weight: float = 0.0
    """``spec.dominantResourceWeight`` (koordinator's LoadAware argument of that name): the weight of a
    node's dominant resource, the one with the highest projected load, as one more term beside the
    priority weights (``ballast.model.load.projected_load``). 0 (the default, and crane's rule) leaves it
    out."""
    mode: str = "enforce"
    """``enforce`` or ``shadow`` (compute and record every verdict, answer as if the load rules were
    absent); see ``ballast.extender.shadow``."""
    node_pools: tuple[NodePool, ...] = ()
    prod: ProdSettings | None = None
    source: str = "<memory>"
    document: Mapping[str, Any] = field(default_factory=dict)
    predicate_plan: tuple[tuple[str, float, float, str], ...] = field(init=False, repr=False, compare=False)
    """(metric, limit, seconds valid, resource) per enabled predicate: what ``check_node`` loops over."""
    priority_plan: tuple[tuple[str, float, float, str], ...] = field(init=False, repr=False, compare=False)
    """(metric, weight, seconds valid, resource) per priority: what ``score_node`` loops over."""

    limits: NodeLimits = field(init=False, repr=False, compare=False)
    """The effective limits of a node in no pool and without a thresholds annotation."""
    pool_limits: Mapping[str, NodeLimits] = field(init=False, repr=False, compare=False)
    """Per pool name, the effective limits of a node in that pool without a thresholds annotation."""

    def __post_init__(self) -> None:
        # Precomputed once per policy so the per-node request path is plain tuple iteration.
        limits = self.limits_for(None, {})
        object.__setattr__(self, "limits", limits)
        object.__setattr__(self, "pool_limits", {p.name: self.limits_for(p, {}) for p in self.node_pools})
        object.__setattr__(self, "predicate_plan", limits.predicate_plan)
        object.__setattr__(self, "priority_plan", limits.priority_plan)

    def limits_for(self, pool: NodePool | None, overrides: Mapping[str, float]) -> NodeLimits:
        """Effective limits for a node in ``pool`` whose annotation overrides ``overrides``
        (``ballast.model.pools.build_limits``)."""
        return build_limits(
            self.predicates,
            tuple((p.name, p.weight) for p in self.priorities),
            self.prod,
            pool,
            overrides,
            self.valid_for,
            self.resource_of,
        )

    def is_prod(self, priority: int | None) -> bool:
        """Whether a pod of this ``spec.priority`` is judged against the prod limits."""
        prod = self.prod
        return prod is not None and priority is not None and priority >= prod.priority_threshold

    def valid_for(self, metric: str) -> float:
        """Seconds a value of ``metric`` stays usable after its timestamp."""
        return self.sync_periods[metric] + EXTRA_ACTIVE_SECONDS

    def resource_of(self, metric: str) -> str | None:
        """Which resource a metric measures: explicit mapping first, then crane's naming (cpu_*, mem_*).
        A pressure metric measures none (``memory_pressure_some_avg_5m`` is not memory in use): no pod's
        estimate is added to it or taken off it."""
        if is_pressure_metric(metric):
            return None
        explicit = self.metric_resources.get(metric)
        if explicit:
            return explicit
        if metric.startswith("cpu"):
            return "cpu"
        if metric.startswith("mem"):
            return "memory"
        return None

    @property
    def metrics(self) -> tuple[str, ...]:
        """Every metric the annotator must sync, in policy order."""
        return tuple(self.sync_periods)

    def to_json(self) -> dict[str, Any]:
        """The active policy as the ``/policy`` endpoint shows it: normalised values, not the raw file."""
        return {
            "source": self.source,
            "syncPolicy": [{"name": n, "periodSeconds": p} for n, p in self.sync_periods.items()],
            "predicate": [
                {"name": p.name, "maxLimitPercent": p.max_limit, "onMissing": p.on_missing or "pass"}
                for p in self.predicates
            ],
            "priority": [{"name": p.name, "weight": p.weight} for p in self.priorities],
            "hotValue": [{"timeRangeSeconds": h.time_range, "count": h.count} for h in self.hot_values],
            "legacyTimeZone": self.legacy_zone.key if self.legacy_zone else None,
            "estimation": {
                "cpuFactor": self.estimation.cpu_factor,
                "memoryFactor": self.estimation.memory_factor,
                "defaultCpuMilli": self.estimation.default_cpu_milli,
                "defaultMemoryBytes": self.estimation.default_memory_bytes,
                "ttlSeconds": self.estimation.ttl,
                "tentativeTTLSeconds": self.estimation.tentative_ttl,
            },
            "metricResources": {m: self.resource_of(m) for m in self.sync_periods},
            "scoring": self.scoring,
            "dominantResourceWeight": self.dominant_resource_weight,
            "mode": self.mode,
            "nodePools": [p.to_json() for p in self.node_pools],
            "prod": self.prod.to_json() if self.prod is not None else None,
            "topology": {
                "awareResources": ["cpu", "memory"] if self.topology.memory_aware else ["cpu"],
                "scoreWeight": self.topology.score_weight,
            },
        }


class _Checker:
    """Collects every problem in one pass so an operator fixes a file in one edit, not five restarts."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def fail(self, path: str, reason: str) -> None:
        self.problems.append((path, reason))

    def mapping(self, value: Any, path: str) -> Mapping[str, Any] | None:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(path, f"expected a mapping, got {type(value).__name__}")
            return None
        return value

    def sequence(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(path, f"expected a list, got {type(value).__name__}")
            return []
        return value

    def entries(self, value: Any, section: str, allowed: set[str]) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Each entry of a list section as ``(path, mapping)``; entries that are not mappings and fields
        not in ``allowed`` are reported."""
        for i, item in enumerate(self.sequence(value, section)):
            path = f"{section}[{i}]"
            if (entry := self.mapping(item, path)) is None:
                continue
            self.unknown(entry, allowed, path)
            yield path, entry

    def unknown(self, item: Mapping[str, Any], allowed: set[str], path: str) -> None:
        for key in item:
            if key not in allowed:
                self.fail(f"{path}.{key}", f"unknown field (allowed: {', '.join(sorted(allowed))})")

    def name(self, item: Mapping[str, Any], path: str) -> str | None:
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            self.fail(f"{path}.name", "required, a non-empty metric name")
            return None
        return name

    def number(self, value: Any, path: str, lo: float, hi: float) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(path, f"expected a number, got {shown(value)}")
            return None
        number = finite(value)  # 10**400 is an int no float holds: out of range, never OverflowError
        if number is None or not lo <= number <= hi:
            allowed = f"at least {lo:g}" if math.isinf(hi) else f"in [{lo:g}, {hi:g}]"
            self.fail(path, f"{shown(value)} is out of range: must be {allowed}")
            return None
        return number

    def duration(self, value: Any, path: str, positive: bool = True) -> float | None:
        try:
            seconds = parse_duration(value) if isinstance(value, str) else None
        except ValueError as exc:
            self.fail(path, str(exc))
            return None
        if seconds is None:
            self.fail(path, f"expected a duration string like '3m', got {shown(value)}")
            return None
        if positive and seconds <= 0:
            self.fail(path, "must be greater than zero")
            return None
        return seconds


# Each section of ``spec`` has its parser, with the fields it allows beside it. A parser records every
# problem on the checker and returns what it could build; ``build_policy`` refuses the file if any.

SYNC_POLICY_FIELDS = {"name", "period"}


def _sync_policy(c: _Checker, value: Any) -> dict[str, float]:
    periods: dict[str, float] = {}
    for path, item in c.entries(value, "spec.syncPolicy", SYNC_POLICY_FIELDS):
        name = c.name(item, path)
        period = c.duration(item.get("period"), f"{path}.period")
        if name is None or period is None:
            continue
        if name in periods:
            c.fail(f"{path}.name", f"metric {name!r} appears twice in syncPolicy")
        periods[name] = period
    return periods


PREDICATE_FIELDS = LIMIT_FIELDS


def _predicates(c: _Checker, value: Any, periods: Mapping[str, float]) -> list[Predicate]:
    return parse_limits(c, value, "spec.predicate", periods)


PRIORITY_FIELDS = {"name", "weight"}


def _priorities(c: _Checker, value: Any, periods: Mapping[str, float]) -> list[Priority]:
    priorities: list[Priority] = []
    for path, item in c.entries(value, "spec.priority", PRIORITY_FIELDS):
        name = c.name(item, path)
        weight = c.number(item.get("weight"), f"{path}.weight", 0.0, math.inf)
        _synced(c, name, periods, f"{path}.name")
        if name is not None and weight is not None:
            priorities.append(Priority(name, weight))
    return priorities


def _synced(c: _Checker, name: str | None, periods: Mapping[str, float], path: str) -> None:
    if name is not None and name not in periods:
        c.fail(path, f"metric {name!r} has no syncPolicy entry, so its freshness is unknown")


HOT_VALUE_FIELDS = {"timeRange", "count"}


def _hot_values(c: _Checker, value: Any) -> list[HotValueWindow]:
    hot: list[HotValueWindow] = []
    for path, item in c.entries(value, "spec.hotValue", HOT_VALUE_FIELDS):
        time_range = c.duration(item.get("timeRange"), f"{path}.timeRange")
        count = item.get("count")
        if isinstance(count, bool) or not isinstance(count, int) or not 0 < count <= MAX_COUNT:
            c.fail(f"{path}.count", f"expected a positive integer (at most {MAX_COUNT}), got {shown(count)}")
            continue
        if time_range is not None:
            hot.append(HotValueWindow(time_range, count))
    return hot


def _legacy_zone(c: _Checker, tz: Any) -> ZoneInfo | None:
    if tz is None:
        return None
    if not isinstance(tz, str) or not tz:
        c.fail("spec.legacyTimeZone", f"expected an IANA time zone name like 'Asia/Shanghai', got {tz!r}")
        return None
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        c.fail("spec.legacyTimeZone", f"unknown time zone {tz!r} (use an IANA name like 'Asia/Shanghai')")
        return None


ESTIMATION_FIELDS = {"cpuFactor", "memoryFactor", "defaultCpu", "defaultMemory", "ttl", "tentativeTTL"}


def _estimation(c: _Checker, value: Any) -> Estimation:
    est = c.mapping(value, "spec.estimation")
    if not est:
        return Estimation()
    c.unknown(est, ESTIMATION_FIELDS, "spec.estimation")
    kw: dict[str, Any] = {}
    for key, attr in (("cpuFactor", "cpu_factor"), ("memoryFactor", "memory_factor")):
        if key in est and (v := c.number(est[key], f"spec.estimation.{key}", 0.0, 10.0)) is not None:
            kw[attr] = v
    for key, attr, scale in (
        ("defaultCpu", "default_cpu_milli", 1000),
        ("defaultMemory", "default_memory_bytes", 1),
    ):
        if key in est:
            try:
                amount = math.ceil(parse_quantity(est[key]) * scale)
            except (ValueError, ArithmeticError) as exc:
                c.fail(f"spec.estimation.{key}", str(exc)[:200])
                continue
            if not 0 <= amount <= MAX_QUANTITY:
                c.fail(f"spec.estimation.{key}", f"{shown(est[key])} is out of range: must be in [0, 2^53)")
            else:
                kw[attr] = amount
    if "ttl" in est and (v := c.duration(est["ttl"], "spec.estimation.ttl")) is not None:
        kw["ttl"] = v
    if "tentativeTTL" in est and (v := c.duration(est["tentativeTTL"], "spec.estimation.tentativeTTL")):
        kw["tentative_ttl"] = v
    return Estimation(**kw)


def _metric_resources(c: _Checker, value: Any, periods: Mapping[str, float]) -> dict[str, str]:
    resources: dict[str, str] = {}
    for metric, res in (c.mapping(value, "spec.metricResources") or {}).items():
        if res not in ("cpu", "memory"):
            c.fail(f"spec.metricResources.{metric}", f"expected 'cpu' or 'memory', got {shown(res)}")
        elif metric not in periods:
            c.fail(f"spec.metricResources.{metric}", f"metric {shown(metric)} has no syncPolicy entry")
        elif is_pressure_metric(metric):
            c.fail(f"spec.metricResources.{metric}", "a pressure metric is a signal, not a resource's usage")
        else:
            resources[metric] = res
    return resources


TOPOLOGY_FIELDS = {"awareResources", "scoreWeight"}


def _topology(c: _Checker, value: Any) -> TopologySettings:
    topo = c.mapping(value, "spec.topology")
    if not topo:
        return TopologySettings()
    c.unknown(topo, TOPOLOGY_FIELDS, "spec.topology")
    kw: dict[str, Any] = {}
    if "awareResources" in topo:
        res = topo["awareResources"]
        if not isinstance(res, list) or "cpu" not in res or not set(res) <= {"cpu", "memory"}:
            c.fail("spec.topology.awareResources", f"expected [cpu] or [cpu, memory], got {shown(res)}")
        else:
            kw["memory_aware"] = "memory" in res
    if (
        "scoreWeight" in topo
        and (w := c.number(topo["scoreWeight"], "spec.topology.scoreWeight", 0, 1)) is not None
    ):
        kw["score_weight"] = w
    return TopologySettings(**kw)


def _scoring(c: _Checker, value: Any) -> str:
    scoring = "relative" if value is None else value
    if scoring not in SCORINGS:
        c.fail("spec.scoring", f"expected one of {', '.join(SCORINGS)}, got {shown(scoring)}")
    return scoring


MAX_DOMINANT_RESOURCE_WEIGHT = 100.0
"""koordinator's bound for ``dominantResourceWeight``: far above any useful value (the priority weights of
crane's policy sum to 2)."""


def _dominant_resource_weight(c: _Checker, value: Any) -> float:
    if value is None:
        return 0.0
    weight = c.number(value, "spec.dominantResourceWeight", 0.0, MAX_DOMINANT_RESOURCE_WEIGHT)
    return 0.0 if weight is None else weight


SPEC_FIELDS = {
    "syncPolicy",
    "predicate",
    "priority",
    "hotValue",
    "legacyTimeZone",
    "estimation",
    "metricResources",
    "topology",
    "scoring",
    "dominantResourceWeight",
    "mode",
    "nodePools",
    "prod",
    "rebalance",
}
"""Every section of ``spec``; each is read by its parser above (``tests/model/test_policy.py`` checks both
ways),
except ``rebalance``: accepted and kept in ``Policy.document`` for the rebalancer, which validates it
(``ballast.model.rebalance_policy``); the extender and the annotator ignore it."""


def build_policy(document: Any, source: str = "<memory>") -> Policy:
    """Validate a parsed policy document and build the immutable ``Policy``, or raise ``PolicyError``."""
    c = _Checker()
    if not isinstance(document, Mapping):
        raise PolicyError(source, [("(document)", "expected a YAML mapping with apiVersion, kind and spec")])
    api_version = document.get("apiVersion")
    if api_version is not None and api_version != API_VERSION:
        c.fail("apiVersion", f"expected {API_VERSION!r}, got {shown(api_version)}")
    kind = document.get("kind")
    if kind is not None and kind != KIND:
        c.fail("kind", f"expected {KIND!r}, got {shown(kind)}")
    c.unknown(document, {"apiVersion", "kind", "metadata", "spec"}, "(document)")
    spec = c.mapping(document.get("spec"), "spec")
    if spec is None:
        raise PolicyError(source, c.problems)
    c.unknown(spec, SPEC_FIELDS, "spec")
    periods = _sync_policy(c, spec.get("syncPolicy"))
    policy = dict(
        sync_periods=periods,
        predicates=tuple(_predicates(c, spec.get("predicate"), periods)),
        priorities=tuple(_priorities(c, spec.get("priority"), periods)),
        hot_values=tuple(_hot_values(c, spec.get("hotValue"))),
        legacy_zone=_legacy_zone(c, spec.get("legacyTimeZone")),
        estimation=_estimation(c, spec.get("estimation")),
        metric_resources=_metric_resources(c, spec.get("metricResources"), periods),
        topology=_topology(c, spec.get("topology")),
        scoring=_scoring(c, spec.get("scoring")),
        dominant_resource_weight=_dominant_resource_weight(c, spec.get("dominantResourceWeight")),
        mode=parse_mode(c, spec.get("mode")),
        node_pools=parse_pools(c, spec.get("nodePools"), periods),
        prod=parse_prod(c, spec.get("prod"), periods),
    )
    if c.problems:
        raise PolicyError(source, c.problems)
    return Policy(**policy, source=source, document=dict(document))


def parse_policy(text: str, source: str = "<memory>") -> Policy:
    """Parse and validate policy text. Any failure, even one the checks did not foresee (YAML nested
    deeper than the recursion limit, an integer too large for a float, a time zone name the OS cannot
    open), is a ``PolicyError``: callers refuse the policy one way instead of crashing or, on a reload,
    keeping a policy they report as loaded."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(document)"
        raise PolicyError(source, [(where, f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from exc
    except RecursionError as exc:
        raise PolicyError(source, [("(document)", "nested too deeply")]) from exc
    except Exception as exc:
        raise PolicyError(source, [("(document)", f"cannot load: {type(exc).__name__}: {exc}")]) from exc
    try:
        return build_policy(document, source)
    except PolicyError:
        raise
    except RecursionError as exc:
        raise PolicyError(source, [("(document)", "nested too deeply")]) from exc
    except Exception as exc:
        message = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        raise PolicyError(source, [("(document)", f"cannot be used: {message}")]) from exc


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file; every failure is a ``PolicyError`` naming the file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(str(p), [("(file)", f"cannot read: {exc.strerror or exc}")]) from exc
    except UnicodeDecodeError as exc:
        raise PolicyError(str(p), [("(file)", f"not UTF-8 text: {exc}")]) from exc
    return parse_policy(text, str(p))
