"""Rollout and per-node tuning in the policy: ``spec.mode``, ``spec.nodePools``, ``spec.prod`` and
``onMissing``, and how they resolve into one node's effective limits.

Resolution is metric by metric, never block by block. A node's limit for a metric comes from the first
of these that names the metric: its ``ballast.io/load-thresholds`` annotation, the first pool whose
selector matches the node, the global ``spec.predicate``. A pod at or above ``spec.prod.priorityThreshold``
is judged against prod limits: the pool's ``prod.predicate``, then the global ``spec.prod.predicate``, then
the node's batch limit from above. Koordinator's per-node annotation replaces the whole threshold block, so
an annotation that names only CPU silently switches the memory check off; here a setting only ever replaces
the one value it names, and every other check a node had stays in force.

Everything here is pure and computed when the policy loads (global and per-pool limits) or when a node
arrives through the watch (annotation overrides), so the request path reads precomputed plans.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ballast.contract.numbers import shown
from ballast.model.selector import LabelSelector, parse_selector

MODES = ("enforce", "shadow")
"""Values of ``spec.mode``; the first is the default."""
ON_MISSING = ("pass", "reject")
"""Values of ``onMissing``; the first is the default (crane's fail-open)."""
GLOBAL = "global"
NODE = "node"


@dataclass(frozen=True, slots=True)
class LimitEntry:
    """One predicate entry: a metric's limit and, when given, what a node without a fresh value gets."""

    name: str
    max_limit: float
    on_missing: str | None = None
    """``None``: inherited (from the setting below it, finally ``pass``)."""


@dataclass(frozen=True, slots=True)
class NodePool:
    name: str
    selector: LabelSelector
    predicates: tuple[LimitEntry, ...] = ()
    weights: tuple[tuple[str, float], ...] = ()
    prod_predicates: tuple[LimitEntry, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "nodeSelector": self.selector.to_json(),
            "predicate": [_entry_json(e) for e in self.predicates],
            "priority": [{"name": n, "weight": w} for n, w in self.weights],
            "prod": {"predicate": [_entry_json(e) for e in self.prod_predicates]},
        }


@dataclass(frozen=True, slots=True)
class ProdSettings:
    priority_threshold: int
    predicates: tuple[LimitEntry, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "priorityThreshold": self.priority_threshold,
            "predicate": [_entry_json(e) for e in self.predicates],
        }


def _entry_json(e: LimitEntry) -> dict[str, Any]:
    return {"name": e.name, "maxLimitPercent": e.max_limit, "onMissing": e.on_missing}


# -- effective limits ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Effective:
    """One metric's effective value on a node and where it came from (``global``, ``pool NAME``,
    ``node``, ``prod``, ``pool NAME prod``)."""

    value: float
    source: str
    on_missing: str = "pass"
    on_missing_source: str = GLOBAL


PredicatePlan = tuple[tuple[str, float, float, str], ...]
"""(metric, limit, seconds valid, resource) per enabled predicate."""
MissingPlan = tuple[tuple[str, float], ...]
"""(metric, seconds valid) per enabled predicate whose ``onMissing`` is ``reject``."""


@dataclass(frozen=True, slots=True)
class NodeLimits:
    """A node's effective predicates (batch and prod) and priority weights, with their sources, and the
    plans ``check_node``, ``score_node`` and the verdict board loop over."""

    pool: str | None
    predicates: Mapping[str, Effective]
    prod: Mapping[str, Effective]
    weights: Mapping[str, Effective]
    overrides: Mapping[str, float] = field(default_factory=dict)
    """The node annotation's limits (metric -> limit), as read."""
    predicate_plan: PredicatePlan = ()
    missing_plan: MissingPlan = ()
    prod_plan: PredicatePlan = ()
    prod_missing_plan: MissingPlan = ()
    priority_plan: PredicatePlan = ()

    def plans(self, prod: bool) -> tuple[PredicatePlan, MissingPlan]:
        return (self.prod_plan, self.prod_missing_plan) if prod else (self.predicate_plan, self.missing_plan)

    def to_json(self) -> dict[str, Any]:
        """What /nodes and /explain show: each value with its source."""

        def view(items: Mapping[str, Effective], key: str) -> list[dict[str, Any]]:
            out = []
            for name, e in items.items():
                v: dict[str, Any] = {"metric": name, key: e.value, "source": e.source}
                if key == "limit":
                    v |= {
                        "enabled": e.value != 0,
                        "onMissing": e.on_missing,
                        "onMissingSource": e.on_missing_source,
                    }
                out.append(v)
            return out

        return {
            "pool": self.pool,
            "predicate": view(self.predicates, "limit"),
            "prod": view(self.prod, "limit"),
            "priority": view(self.weights, "weight"),
        }


def _apply(base: dict[str, Effective], entries: Iterator[LimitEntry], source: str) -> None:
    """Override ``base`` metric by metric: a named metric gets the entry's limit (and its onMissing when
    given); every metric the entries do not name keeps what it had."""
    for e in entries:
        old = base.get(e.name)
        if e.on_missing is not None:
            missing, missing_source = e.on_missing, source
        elif old is not None:
            missing, missing_source = old.on_missing, old.on_missing_source
        else:
            missing, missing_source = ON_MISSING[0], GLOBAL
        base[e.name] = Effective(e.max_limit, source, missing, missing_source)


def build_limits(
    predicates: tuple[LimitEntry, ...],
    weights: tuple[tuple[str, float], ...],
    prod: ProdSettings | None,
    pool: NodePool | None,
    overrides: Mapping[str, float],
    valid_for: Callable[[str], float],
    resource_of: Callable[[str], str | None],
) -> NodeLimits:
    """Resolve the effective limits for a node in ``pool`` (or none) with annotation ``overrides``."""
    batch: dict[str, Effective] = {}
    _apply(batch, iter(predicates), GLOBAL)
    if pool is not None:
        _apply(batch, iter(pool.predicates), f"pool {pool.name}")
    _apply(batch, (LimitEntry(m, v) for m, v in overrides.items()), NODE)
    prod_limits = dict(batch)
    if prod is not None:
        _apply(prod_limits, iter(prod.predicates), "prod")
        if pool is not None:
            _apply(prod_limits, iter(pool.prod_predicates), f"pool {pool.name} prod")
    w: dict[str, Effective] = {n: Effective(v, GLOBAL) for n, v in weights}
    if pool is not None:
        for n, v in pool.weights:
            w[n] = Effective(v, f"pool {pool.name}")

    def plan(items: Mapping[str, Effective]) -> PredicatePlan:
        # Global entries keep crane's order and, while nothing overrides them, its duplicates (crane checks
        # every entry); an overridden metric is checked once, with its effective limit.
        out: list[tuple[str, float, float, str]] = []
        done: set[str] = set()
        for e in predicates:
            eff = items[e.name]
            if eff.source != GLOBAL:
                if e.name in done:
                    continue
                done.add(e.name)
            limit = e.max_limit if eff.source == GLOBAL else eff.value
            if limit != 0:
                out.append((e.name, limit, valid_for(e.name), resource_of(e.name) or ""))
        listed = {e.name for e in predicates}
        out.extend(
            (m, e.value, valid_for(m), resource_of(m) or "")
            for m, e in items.items()
            if m not in listed and e.value != 0
        )
        return tuple(out)

    def missing(items: Mapping[str, Effective]) -> MissingPlan:
        return tuple((m, valid_for(m)) for m, e in items.items() if e.value != 0 and e.on_missing == "reject")

    batch_plan, prod_plan = plan(batch), plan(prod_limits)
    batch_missing, prod_missing = missing(batch), missing(prod_limits)
    return NodeLimits(
        pool=pool.name if pool is not None else None,
        predicates=batch,
        prod=prod_limits,
        weights=w,
        overrides=dict(overrides),
        predicate_plan=batch_plan,
        missing_plan=batch_missing,
        # The same tuples when prod changes nothing, so a prod pod costs what a batch pod does.
        prod_plan=batch_plan if prod_plan == batch_plan else prod_plan,
        prod_missing_plan=batch_missing if prod_missing == batch_missing else prod_missing,
        priority_plan=_weight_plan(weights, w, valid_for, resource_of),
    )


def _weight_plan(
    weights: tuple[tuple[str, float], ...],
    effective: Mapping[str, Effective],
    valid_for: Callable[[str], float],
    resource_of: Callable[[str], str | None],
) -> PredicatePlan:
    """Priority terms: crane's list as written (duplicates too) where no pool overrides it, a pool's
    weight once per overridden metric, then the metrics only the pool weighs."""
    out: list[tuple[str, float, float, str]] = []
    done: set[str] = set()
    for name, weight in weights:
        eff = effective[name]
        if eff.source != GLOBAL:
            if name in done:
                continue
            done.add(name)
            weight = eff.value
        out.append((name, weight, valid_for(name), resource_of(name) or ""))
    listed = {n for n, _ in weights}
    out.extend(
        (m, e.value, valid_for(m), resource_of(m) or "") for m, e in effective.items() if m not in listed
    )
    return tuple(out)


def pool_for(pools: tuple[NodePool, ...], labels: Mapping[str, str]) -> NodePool | None:
    """The first pool whose selector matches ``labels``."""
    for p in pools:
        if p.selector.matches(labels):
            return p
    return None


# -- parsing (called by ``ballast.model.policy.build_policy`` with its checker) -------------------------


class Checker(Protocol):
    """The policy checker's methods these parsers use (``ballast.model.policy._Checker``)."""

    problems: list[tuple[str, str]]

    def fail(self, path: str, reason: str) -> None: ...

    def mapping(self, value: Any, path: str) -> Mapping[str, Any] | None: ...

    def entries(
        self, value: Any, section: str, allowed: set[str]
    ) -> Iterator[tuple[str, Mapping[str, Any]]]: ...

    def unknown(self, item: Mapping[str, Any], allowed: set[str], path: str) -> None: ...

    def name(self, item: Mapping[str, Any], path: str) -> str | None: ...

    def number(self, value: Any, path: str, lo: float, hi: float) -> float | None: ...


LIMIT_FIELDS = {"name", "maxLimitPecent", "maxLimitPercent", "onMissing"}


def parse_on_missing(c: Checker, item: Mapping[str, Any], path: str) -> str | None:
    if "onMissing" not in item:
        return None
    value = item["onMissing"]
    if value not in ON_MISSING:
        c.fail(f"{path}.onMissing", f"expected one of {', '.join(ON_MISSING)}, got {shown(value)}")
        return None
    return value


def parse_limits(c: Checker, value: Any, section: str, periods: Mapping[str, float]) -> list[LimitEntry]:
    """A predicate list (``spec.predicate``, a pool's, prod's): name, limit in [0, 1], optional onMissing."""
    out: list[LimitEntry] = []
    seen: set[str] = set()
    for path, item in c.entries(value, section, LIMIT_FIELDS):
        name = c.name(item, path)
        if "maxLimitPecent" in item and "maxLimitPercent" in item:
            c.fail(path, "set either maxLimitPecent (crane's spelling) or maxLimitPercent, not both")
            continue
        key = "maxLimitPercent" if "maxLimitPercent" in item else "maxLimitPecent"
        if key not in item:
            c.fail(
                f"{path}.maxLimitPecent", "required: the load ratio in [0, 1] above which a node is rejected"
            )
            continue
        limit = c.number(item[key], f"{path}.{key}", 0.0, 1.0)
        on_missing = parse_on_missing(c, item, path)
        if name is not None and name not in periods:
            c.fail(f"{path}.name", f"metric {name!r} has no syncPolicy entry, so its freshness is unknown")
            continue
        if name is not None and name in seen and section != "spec.predicate":
            c.fail(f"{path}.name", f"metric {name!r} appears twice in {section}")
            continue
        if name is not None and limit is not None:
            seen.add(name)
            out.append(LimitEntry(name, limit, on_missing))
    return out


def _weights(c: Checker, value: Any, section: str, periods: Mapping[str, float]) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    for path, item in c.entries(value, section, {"name", "weight"}):
        name = c.name(item, path)
        weight = c.number(item.get("weight"), f"{path}.weight", 0.0, float("inf"))
        if name is not None and name not in periods:
            c.fail(f"{path}.name", f"metric {name!r} has no syncPolicy entry, so its freshness is unknown")
            continue
        if name is not None and weight is not None:
            out.append((name, weight))
    return out


def parse_mode(c: Checker, value: Any) -> str:
    mode = MODES[0] if value is None else value
    if mode not in MODES:
        c.fail("spec.mode", f"expected one of {', '.join(MODES)}, got {shown(mode)}")
        return MODES[0]
    return mode


POOL_FIELDS = {"name", "nodeSelector", "predicate", "priority", "prod"}


def parse_pools(c: Checker, value: Any, periods: Mapping[str, float]) -> tuple[NodePool, ...]:
    pools: list[NodePool] = []
    names: set[str] = set()
    for path, item in c.entries(value, "spec.nodePools", POOL_FIELDS):
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            c.fail(f"{path}.name", "required, a non-empty pool name")
            name = None
        elif name in names:
            c.fail(f"{path}.name", f"pool {name!r} appears twice in nodePools")
        selector, problems = parse_selector(item.get("nodeSelector"), f"{path}.nodeSelector")
        for p in problems:
            c.fail(*p)
        predicates = parse_limits(c, item.get("predicate"), f"{path}.predicate", periods)
        weights = _weights(c, item.get("priority"), f"{path}.priority", periods)
        prod = c.mapping(item.get("prod"), f"{path}.prod") or {}
        c.unknown(prod, {"predicate"}, f"{path}.prod")
        prod_predicates = parse_limits(c, prod.get("predicate"), f"{path}.prod.predicate", periods)
        if name is not None and selector is not None:
            names.add(name)
            pools.append(NodePool(name, selector, tuple(predicates), tuple(weights), tuple(prod_predicates)))
    return tuple(pools)


def parse_prod(c: Checker, value: Any, periods: Mapping[str, float]) -> ProdSettings | None:
    if value is None:
        return None
    prod = c.mapping(value, "spec.prod")
    if prod is None:
        return None
    c.unknown(prod, {"priorityThreshold", "predicate"}, "spec.prod")
    threshold = prod.get("priorityThreshold")
    if isinstance(threshold, bool) or not isinstance(threshold, int) or not -(2**31) <= threshold < 2**31:
        c.fail(
            "spec.prod.priorityThreshold",
            f"required: an integer pod priority (pods at or above it are prod), got {shown(threshold)}",
        )
        threshold = None
    predicates = parse_limits(c, prod.get("predicate"), "spec.prod.predicate", periods)
    if threshold is None:
        return None
    return ProdSettings(threshold, tuple(predicates))
