"""Per-node verdicts precomputed when something changes, so names-mode requests stay O(dict lookups).

A node's filter verdict and score change only when (a) its Node object changes (watch event), (b) an
estimate on it changes (hold, bind, pod watch), (c) the policy changes, or (d) time makes a value or an
estimate expire. The board recomputes a node on (a)-(c) as they happen and on (d) via a heap of
expiry times, and keeps:

- ``scored[node]``: crane's prioritize score (0..10) with the node's current estimates, kept under crane's
  scoring only (relative scoring ranks by projected load and never reads it);
- ``projection[node]``: the node's projected load with its current estimates and how much a millicore and
  a byte of estimate add to it (``ballast.model.load.project``), for relative scoring, and
  ``loads_for(cpu, mem)``: every node's projected load with a pod of that size, kept for the few sizes asked
  about lately;
- ``room``: per node the spare capacity, in millicores and bytes, before the tightest fresh predicate of
  that resource would be crossed, counting estimates already on the node;
- ``blocked``: nodes already over a limit, whatever the pod;
- ``tight_cpu[i]`` / ``tight_memory[i]``: nodes whose room is below tier ``CPU_TIERS[i]`` /
  ``MEMORY_TIERS[i]``.

A pod whose estimate fits under tiers i (cpu) and j (memory) passes every node outside ``blocked``,
``tight_cpu[i]`` and ``tight_memory[j]`` at the cost of three set lookups; the others are judged from
precomputed per-predicate rooms (``judge``), and only float ties take the exact path (``ballast.model.load``).
The board is an optimisation only: ``check_node`` and ``score_node`` remain the definition, and the
tests compare the two.

Within one second, kube-scheduler asks about the same nodes for pod after pod, mostly of the same size.
``memo(cpu, mem, second)`` keeps the verdicts already worked out for one pod size in the current
second (a ``VerdictMemo``), so a repeated question about a tight or blocked node is a C-level dict
lookup rather than a judgement and a formatted reason. Recomputing a node drops it from every memo, and
a request records its verdicts only if no node changed while it ran (``record``), so a memo never
holds a verdict older than the node's standing one.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import filterfalse

from ballast.contract.annotations import HOT_VALUE_VALID_SECONDS, fresh
from ballast.model.estimation import Estimate
from ballast.model.ledger import Ledger
from ballast.model.load import (
    Projection,
    Rejection,
    check_node,
    priority_plan,
    project,
    score_node,
)
from ballast.model.nodestate import NodeState
from ballast.model.policy import Policy

log = logging.getLogger("ballast.verdicts")

CPU_TIERS = (100, 250, 500, 1000, 2000, 4000, 8000, 16000)
"""Millicores; a pod whose estimate is below a tier skips nodes with at least that much room."""
MEMORY_TIERS = tuple(mib << 20 for mib in (128, 256, 512, 1024, 2048, 4096, 8192, 16384))
_MARGIN = 1.0
"""Stay a little below a tier so float noise never decides (rooms are exact only to ~1e-9)."""


def tier(amount: int, tiers: tuple[int, ...]) -> int | None:
    """The first tier strictly above ``amount`` (with margin), or ``None`` when the pod is bigger than all."""
    for i, t in enumerate(tiers):
        if amount < t - _MARGIN:
            return i
    return None


def _reach(room: float, tiers: tuple[int, ...]) -> int:
    """How many of ``tiers`` (ascending) ``room`` reaches: the node is tight for tier ``i`` (its room is
    below it) exactly when ``i >= _reach(room, tiers)``. A NaN room reaches every tier, as ``room < t``
    holds for none."""
    return bisect_right(tiers, room)


_RESOURCE_INDEX = {"cpu": 0, "memory": 1}
UNSURE = object()
"""``judge`` could not tell within float precision; the caller takes the exact path."""


# Not frozen: made several times per pod on the scheduler's path, and a frozen dataclass sets each field
# through object.__setattr__ (1.4 us against 0.3 us for twelve fields). Nothing mutates one.
@dataclass(slots=True)
class Check:
    """One fresh predicate of a node, with the room left before it rejects (in resource units)."""

    metric: str
    resource: int
    """0 cpu, 1 memory, 2 neither (no estimate applies: only the measured value counts), 3 no fresh value
    under ``onMissing: reject`` (always rejects)."""
    room: float
    value: float
    units: int
    """Estimated amount already counted for this metric (millicores or bytes)."""
    limit: float
    timestamp: float
    allocatable: int


# Not frozen: made several times per pod on the scheduler's path, and a frozen dataclass sets each field
# through object.__setattr__ (1.4 us against 0.3 us for twelve fields). Nothing mutates one.
@dataclass(slots=True)
class Derived:
    load: NodeState
    until: float
    cpu_room: float
    memory_room: float
    blocked: bool
    score: int
    """crane's score (``score_node``) under crane's scoring; 0 under relative scoring, which never reads
    it."""
    checks: tuple[Check, ...] = ()
    projection: Projection = (None, 0.0, 0.0)
    """(projected load with the node's estimates, its growth per millicore, per byte)."""
    prod_checks: tuple[Check, ...] = ()
    """The checks against the node's prod limits (the same tuple when prod changes nothing here)."""
    units: dict[str, int] | None = None
    """The estimated amounts per metric everything above was worked out from (``Ledger.standing``)."""
    steady_until: float = math.inf
    """``until`` without the estimates' expiries: when a value or the hot value goes stale."""
    policy: Policy | None = None
    """The policy it was worked out under."""


def _checks(
    load: NodeState, plan, missing, units: dict[str, int], now: float, rooms: dict[str, float] | None
) -> tuple[tuple[Check, ...], float]:
    """The fresh predicates of ``plan`` as checks (then one always-rejecting check per ``missing``
    predicate without a fresh value), and the earliest expiry among them. ``rooms`` gets the tightest
    room per resource."""
    until = math.inf
    checks = []
    for name, limit, valid, resource in plan:
        sample = fresh(load.samples.get(name), valid, now)
        if sample is None:
            continue
        until = min(until, sample.expires_at(valid))
        alloc = load.allocatable_cpu_milli if resource == "cpu" else load.allocatable_memory_bytes
        index = _RESOURCE_INDEX.get(resource, 2) if alloc else 2
        counted = units.get(name, 0) if index < 2 else 0
        room = (limit - sample.value) * alloc - counted if index < 2 and alloc else math.inf
        if index < 2 and rooms is not None:
            rooms[resource] = min(rooms[resource], room)
        checks.append(Check(name, index, room, sample.value, counted, limit, sample.timestamp, alloc or 0))
    for name, valid in missing:
        if fresh(load.samples.get(name), valid, now) is None:
            checks.append(Check(name, 3, -math.inf, 0.0, 0, 0.0, now, 0))
    return tuple(checks), until


Standing = tuple[list[Estimate], dict[str, int]]
"""A node's live estimates and the amounts they count per metric (``Ledger.standing_units``)."""


def derive(
    load: NodeState,
    policy: Policy,
    ledger: Ledger,
    now: float,
    standing: Standing | None = None,
    previous: Derived | None = None,
) -> Derived:
    """The node's standing verdict and score at ``now``, and until when they hold. ``standing`` is the
    ledger's reading of the node at ``now`` when the caller already has it (``restand`` read it), and
    ``previous`` the node's verdict before its estimates changed: while it has not expired, only what
    the counted amounts enter is worked out again (``_shifted``)."""
    if standing is None:
        estimates, units, extra = ledger.standing(load, now)  # one read: the expiry below shares it
    else:
        estimates, units = standing
        extra = ledger.extra_of(load, units)
        if previous is not None and _current(previous, load, policy, now):
            return _shifted(previous, load, policy, ledger, now, estimates, units, extra)
    limits = load.limits or policy.limits
    blocked, score, projection = _by_amounts(load, policy, now, extra)
    rooms = {"cpu": math.inf, "memory": math.inf}
    checks, until = _checks(load, limits.predicate_plan, limits.missing_plan, units, now, rooms)
    prod_checks = checks
    if limits.prod_plan is not limits.predicate_plan or limits.prod_missing_plan is not limits.missing_plan:
        prod_checks, prod_until = _checks(load, limits.prod_plan, limits.prod_missing_plan, units, now, None)
        until = min(until, prod_until)
    for name, _weight, valid, _resource in priority_plan(load, policy):
        sample = fresh(load.samples.get(name), valid, now)
        if sample is not None:
            until = min(until, sample.expires_at(valid))
    hot = fresh(load.hot, HOT_VALUE_VALID_SECONDS, now)
    if hot is not None:
        until = min(until, hot.expires_at(HOT_VALUE_VALID_SECONDS))
    return Derived(
        load,
        min(until, estimates_until(estimates, policy, ledger)),
        rooms["cpu"],
        rooms["memory"],
        blocked,
        score,
        checks,
        projection,
        prod_checks,
        units,
        until,
        policy,
    )


def _by_amounts(
    load: NodeState, policy: Policy, now: float, extra: dict[str, float]
) -> tuple[bool, int, Projection]:
    """What the node's estimated amounts (``extra``) enter: whether its limits block, its score and its
    projected load. ``derive`` works them out with the rest; ``_shifted`` only these."""
    blocked = check_node(load, policy, now, extra) is not None
    score = score_node(load, policy, now, extra).score if policy.scoring == "crane" else 0
    return blocked, score, project(load, policy, now, extra)


def _shifted(
    d: Derived,
    load: NodeState,
    policy: Policy,
    ledger: Ledger,
    now: float,
    estimates: list[Estimate],
    units: dict[str, int],
    extra: dict[str, float],
) -> Derived:
    """``derive`` for a node whose estimates changed while its values, the policy and which of them are
    fresh did not (``d`` has not expired): the verdict, score and projected load follow the new amounts;
    the checks keep their values and limits and only their rooms move; when a value goes stale stays. A
    hold is this: it changes one node's amounts, and working the node out from scratch read every value's
    freshness again."""
    blocked, score, projection = _by_amounts(load, policy, now, extra)
    checks, cpu_room, memory_room = _recounted(d.checks, units)
    prod_checks = checks if d.prod_checks is d.checks else _recounted(d.prod_checks, units)[0]
    return Derived(
        load,
        min(d.steady_until, estimates_until(estimates, policy, ledger)),
        cpu_room,
        memory_room,
        blocked,
        score,
        checks,
        projection,
        prod_checks,
        units,
        d.steady_until,
        policy,
    )


def _recounted(checks: tuple[Check, ...], units: dict[str, int]) -> tuple[tuple[Check, ...], float, float]:
    """``checks`` with the amounts ``units`` counts per metric, and the tightest room per resource. A room
    is worked out as ``_checks`` does, from the same operands, so it is the same float."""
    out = []
    rooms = [math.inf, math.inf]
    for c in checks:
        if c.resource < 2:
            counted = units.get(c.metric, 0)
            if counted != c.units:
                room = (c.limit - c.value) * c.allocatable - counted
                c = Check(c.metric, c.resource, room, c.value, counted, c.limit, c.timestamp, c.allocatable)
            if c.room < rooms[c.resource]:
                rooms[c.resource] = c.room
        out.append(c)
    return tuple(out), rooms[0], rooms[1]


def estimates_until(estimates: Iterable[Estimate], policy: Policy, ledger: Ledger) -> float:
    """When the first of these estimates leaves the ledger (a hold after the tentative TTL, a placement
    after the shortest metric TTL, which is when it may stop counting)."""
    tentative_ttl, bound_ttl = policy.estimation.tentative_ttl, ledger.shortest_ttl
    return min((e.at + (tentative_ttl if e.tentative else bound_ttl) for e in estimates), default=math.inf)


def _current(d: Derived, load: NodeState, policy: Policy, now: float) -> bool:
    """Whether ``d`` was worked out from this Node and this policy, with its amounts, and has not expired:
    then only the node's estimates can have moved since."""
    return d.units is not None and d.load is load and d.policy is policy and now < d.until


def restand(
    d: Derived, load: NodeState, policy: Policy, ledger: Ledger, now: float
) -> Derived | Standing | None:
    """``d`` still standing after the node's estimates changed, when the change moves nothing it was worked
    out from, else ``None`` (recompute). Everything in a ``Derived`` follows from the Node's values, the
    policy, the estimated amounts counted per metric and, through freshness alone, the time (until
    ``d.until``); so when the node and the policy are the same objects, ``d`` has not expired and the
    counted amounts are equal, only ``until`` may move (the new estimates expire at other times).

    The common case is the bind of a pod on the node its hold was on: the hold becomes a placement of the
    same size, counted for the same metrics, and the node's verdicts, score and rooms do not change.

    When the amounts moved, the ledger's reading of the node is returned instead, for ``derive``: the
    usual case after a hold, where reading the node's estimates twice cost a third of the recomputation."""
    if not _current(d, load, policy, now):
        return None
    estimates, units = ledger.standing_units(load, now)
    if units != d.units:
        return estimates, units
    until = min(d.steady_until, estimates_until(estimates, policy, ledger))
    if until == d.until:
        return d
    # ``dataclasses.replace`` looks the fields up again on every call; this is the bind's common path.
    return Derived(
        d.load,
        until,
        d.cpu_room,
        d.memory_room,
        d.blocked,
        d.score,
        d.checks,
        d.projection,
        d.prod_checks,
        d.units,
        d.steady_until,
        d.policy,
    )


def judge(
    d: Derived, cpu_milli: int, memory_bytes: int, now: float, prod: bool = False
) -> Rejection | object | None:
    """``check_node`` for a pod of this size, from the precomputed checks: the same predicate order,
    the same verdict and reason; ``UNSURE`` when the margin is within float noise."""
    for c in d.prod_checks if prod else d.checks:
        if c.resource == 3:
            return Rejection(c.metric, 0.0, 0.0, 0.0, 0.0, missing=True)
        if c.resource == 2:
            if c.value > c.limit:
                return Rejection(c.metric, c.value, 0.0, c.limit, now - c.timestamp)
            continue
        amount = cpu_milli if c.resource == 0 else memory_bytes
        margin = c.room - amount
        noise = 1e-9 * c.allocatable
        if -noise <= margin <= noise:
            return UNSURE
        if margin < 0:
            return Rejection(
                c.metric, c.value, (c.units + amount) / c.allocatable, c.limit, now - c.timestamp
            )
    return None


@dataclass(slots=True)
class VerdictMemo:
    """Verdicts for one pod size in one second: ``failed[node] = (reason, metric)``, and passed nodes."""

    failed: dict[str, tuple[str, str]]
    passed: set[str]

    def forget(self, name: str) -> None:
        self.failed.pop(name, None)
        self.passed.discard(name)


_SIZES = 8
"""Pod sizes ``loads_for`` keeps a table for."""


def with_pod(projection: Projection, cpu_milli: int, memory_bytes: int) -> float | None:
    """A node's projected load (``projection``) with a pod of ``cpu_milli`` and ``memory_bytes`` added;
    ``None`` for a node without information."""
    load, per_milli, per_byte = projection
    return None if load is None else load + cpu_milli * per_milli + memory_bytes * per_byte


_MAX_MEMOS = 64
"""Distinct pod sizes remembered within one second; more (an unusual burst of sizes) starts over."""


class VerdictBoard:
    """Standing verdicts of every cached node; see the module docstring."""

    def __init__(
        self, lookup: Callable[[str], NodeState | None], policy: Callable[[], Policy], ledger: Ledger
    ):
        self._lookup = lookup
        self._policy = policy
        self.ledger = ledger
        self._lock = threading.Lock()
        self.derived: dict[str, Derived] = {}
        self.scored: dict[str, int] = {}
        """Per node crane's score, so that a prioritize answer under crane's scoring is one dict lookup per
        node."""
        self.projection: dict[str, Projection] = {}
        self.blocked: set[str] = set()
        self.tight_cpu: list[set[str]] = [set() for _ in CPU_TIERS]
        self.tight_memory: list[set[str]] = [set() for _ in MEMORY_TIERS]
        self._tiers_of: dict[str, tuple[int, int]] = {}
        """Per node how many cpu and memory tiers its rooms reach (``_reach``): the tight sets it is in."""
        self._heap: list[tuple[float, str]] = []
        self.next_until = math.inf
        self.generation = 0
        """Counts node recomputations; a request compares it before and after to know none happened."""
        self._memos: dict[tuple[int, int, int, bool], VerdictMemo] = {}
        self._memo_second = -1
        self._pending: set[str] = set()
        """Nodes changed by ``defer``, recomputed at the next ``settle`` or ``refresh``."""
        self._sized: dict[tuple[int, int], dict[str, float | None]] = {}
        """``loads_for``'s tables, by pod size, the oldest first."""

    def loads_for(self, cpu_milli: int, memory_bytes: int) -> dict[str, float | None]:
        """Every node's projected load with a pod of ``cpu_milli`` and ``memory_bytes`` added (``None``: no
        information), the same floats as ``load + cpu * per_milli + mem * per_byte`` from ``projection``.

        Pods come in a few sizes (a burst is one), and prioritize ranks every candidate by this sum: the
        table is built once per size and kept as nodes change (one multiply-add per kept size), so a
        request reads one dict per candidate instead of unpacking and summing. ``_SIZES`` tables at most;
        a new size past it replaces the oldest."""
        key = (cpu_milli, memory_bytes)
        table = self._sized.get(key)
        if table is None:
            with self._lock:
                table = {name: with_pod(p, cpu_milli, memory_bytes) for name, p in self.projection.items()}
                sized = self._sized
                while len(sized) >= _SIZES:
                    del sized[next(iter(sized))]
                sized[key] = table
        return table

    def memo(self, cpu_milli: int, memory_bytes: int, second: int, prod: bool = False) -> VerdictMemo:
        """The memo of verdicts for a pod of this size (and class) in this second (empty the first time)."""
        if second != self._memo_second or len(self._memos) >= _MAX_MEMOS:
            with self._lock:
                self._memos = {}
                self._memo_second = second
        key = (cpu_milli, memory_bytes, second, prod)
        memo = self._memos.get(key)
        if memo is None:
            memo = self._memos.setdefault(key, VerdictMemo({}, set()))
        return memo

    def record(
        self,
        memo: VerdictMemo,
        generation: int,
        failed: dict[str, tuple[str, str]],
        passed: set[str],
    ) -> None:
        """Remember verdicts worked out from the board as it was at ``generation``, if it still is."""
        with self._lock:
            if self.generation != generation:
                return
            memo.failed.update(failed)
            memo.passed.update(passed)

    def _set(self, name: str, now: float, estimates_only: bool = False) -> None:
        """Recompute one node (under the lock). The memos forget it and the generation moves only after
        the new standing verdict is in place, so a request that read the old one cannot record it.

        ``estimates_only``: only the node's estimates changed (the ledger says so); when that changes
        nothing the standing verdict was worked out from (``restand``), it stands, with its expiry moved,
        and nothing already worked out from it needs forgetting."""
        standing = None
        if estimates_only:
            if name not in self.derived:
                # Not a node of this board (the whole-node board in names mode hears every hold too):
                # nothing of it stands to change, and no memo holds a verdict about it.
                return
            kept = self._restand(name, now)
            if kept is True:
                return
            standing = kept or None
        self._derive(name, now, standing)
        self.generation += 1
        for memo in self._memos.values():
            memo.forget(name)

    def _restand(self, name: str, now: float) -> bool | Standing:
        """True when the node's verdict stands (``restand``); else the ledger's reading for ``_derive``
        if one was taken, or False."""
        d = self.derived.get(name)
        if d is None:
            return False
        load = self._lookup(name)
        if load is None:
            return False
        try:
            kept = restand(d, load, self._policy(), self.ledger, now)
        except Exception:
            return False  # the full recomputation decides (and logs)
        if kept is None:
            return False
        if isinstance(kept, tuple):
            return kept
        if kept is not d:
            self.derived[name] = kept
            if kept.until != math.inf:
                heapq.heappush(self._heap, (kept.until, name))
                self.next_until = self._heap[0][0]
        return True

    def _derive(self, name: str, now: float, standing: Standing | None = None) -> None:
        load = self._lookup(name)
        if load is None:
            self.derived.pop(name, None)
            self.scored.pop(name, None)
            self.projection.pop(name, None)
            for table in self._sized.values():
                table.pop(name, None)
            self.blocked.discard(name)
            self._tiers_of.pop(name, None)
            for sets in (self.tight_cpu, self.tight_memory):
                for members in sets:
                    members.discard(name)
            return
        try:
            previous = self.derived.get(name) if standing is not None else None
            d = derive(load, self._policy(), self.ledger, now, standing, previous)
        except Exception:
            # One node the arithmetic cannot take must not poison the board (or every request that reads
            # it): it stands as a node without information, like one whose annotations are missing.
            log.exception("verdict board: could not judge node %s; it counts as no information", name)
            d = derive(NodeState(name), self._policy(), self.ledger, now)
        self.derived[name] = d
        if d.policy is not None and d.policy.scoring == "crane":
            self.scored[name] = d.score
        projection = self.projection[name] = d.projection
        for (cpu, mem), table in self._sized.items():
            table[name] = with_pod(projection, cpu, mem)
        (self.blocked.add if d.blocked else self.blocked.discard)(name)
        reach = (_reach(d.cpu_room, CPU_TIERS), _reach(d.memory_room, MEMORY_TIERS))
        if self._tiers_of.get(name) != reach:  # a hold seldom moves a room across a tier
            self._tiers_of[name] = reach
            for k, sets in zip(reach, (self.tight_cpu, self.tight_memory), strict=True):
                for i, members in enumerate(sets):
                    (members.add if i >= k else members.discard)(name)
        if d.until != math.inf:
            heapq.heappush(self._heap, (d.until, name))
            self.next_until = self._heap[0][0]

    def defer(self, names: Iterable[str]) -> None:
        """Note these nodes' estimates as changed without recomputing them yet: the next ``settle`` or
        ``refresh`` (which every read of the board starts with) does. Meanwhile nothing already worked out
        about them is used: the memos forget them and the generation moves, as on a recomputation."""
        with self._lock:
            for name in names:
                self._pending.add(name)
                for memo in self._memos.values():
                    memo.forget(name)
            self.generation += 1

    def settle(self, now: float) -> None:
        """Recompute the nodes ``defer`` noted (only their estimates changed)."""
        if not self._pending:
            return
        with self._lock:
            pending, self._pending = self._pending, set()
            for name in pending:
                self._set(name, now, estimates_only=True)

    def update(self, names: Iterable[str], now: float, estimates_only: bool = False) -> None:
        """Recompute these nodes now (a watch event or, with ``estimates_only``, an estimate changed
        them)."""
        if estimates_only and not self.derived:
            return  # a board of no node yet (the whole-node board in names mode): nothing stands to change
        with self._lock:
            for name in names:
                self._set(name, now, estimates_only)

    def rebuild(self, names: Iterable[str], now: float) -> None:
        """Recompute everything (a relist or a policy change)."""
        with self._lock:
            self.generation += 1
            self._memos = {}
            self._pending.clear()
            self.derived.clear()
            self.scored.clear()
            self.projection.clear()
            self._sized.clear()
            self.blocked.clear()
            for members in (*self.tight_cpu, *self.tight_memory):
                members.clear()
            self._tiers_of.clear()
            self._heap.clear()
            self.next_until = math.inf
            for name in names:
                self._set(name, now)

    def refresh(self, now: float) -> None:
        """Recompute nodes noted by ``defer`` and those whose standing verdict expired by ``now``; cheap
        when there are none."""
        if self._pending:
            self.settle(now)
        if now < self.next_until:
            return
        with self._lock:
            due = set()
            while self._heap and self._heap[0][0] <= now:
                _, name = heapq.heappop(self._heap)
                d = self.derived.get(name)
                if d is not None and d.until <= now:
                    due.add(name)
            for name in due:
                self._set(name, now)
            self.next_until = self._heap[0][0] if self._heap else math.inf


def filter_names(
    board: VerdictBoard,
    names: list[str],
    cpu: int,
    mem: int,
    now: float,
    own: str | None,
    exact_check: Callable[[str], Rejection | None],
    prod: bool = False,
) -> tuple[list[str], dict[str, str], dict[str, int]]:
    """Names-mode filter from the board for a pod estimated at ``cpu`` millicores and ``mem`` bytes:
    non-tight nodes pass at the cost of a set lookup, tight ones are judged from precomputed rooms, and
    only ``own`` (the node holding the pod's own estimate), nodes the board lacks and float ties take
    ``exact_check`` (``check_node`` with the pod's estimate). Same verdicts and reasons as ``check_node``
    (tests compare). Returns the passing names in request order, the failed ones with their reasons,
    and how many each metric label rejected (``Rejection.label``). A ``prod`` pod is judged against the
    nodes' prod limits, every named node from its precomputed checks (the tiers hold batch rooms)."""
    board.refresh(now)
    cpu_tier, mem_tier = tier(cpu, CPU_TIERS), tier(mem, MEMORY_TIERS)
    small = cpu_tier is not None and mem_tier is not None and not prod
    blocked = board.blocked
    tight_cpu = board.tight_cpu[cpu_tier] if cpu_tier is not None else blocked
    tight_mem = board.tight_memory[mem_tier] if mem_tier is not None else blocked
    derived = board.derived
    special: set[str] = set()
    if own is not None:
        special.add(own)
    if len(names) > len(derived):
        special.update(n for n in names if n not in derived)
    # Nodes that need a look: over a limit, too tight for a pod this size, or special. One C-level
    # union; everything else passes through a comprehension at a set lookup per node.
    if small:
        look = blocked | tight_cpu | tight_mem | special if special else blocked | tight_cpu | tight_mem
        checked = look.intersection(names)
    else:
        checked = set(names)
    # Verdicts already worked out this second for a pod of this size (the watch thread may drop
    # entries meanwhile: read each once, and whatever is gone is worked out again).
    memo = board.memo(cpu, mem, round(now), prod)
    generation = board.generation
    entries = memo.failed
    known = entries.keys() & checked
    if special:
        known -= special
    hits = {name: e for name in known if (e := entries.get(name)) is not None}
    failed = {name: e[0] for name, e in hits.items()}
    # a plain dict: ``Counter(...)`` would run ``update`` and a Mapping ABC check on every filter
    rejected_by: dict[str, int] = {}
    for _reason, label in hits.values():
        rejected_by[label] = rejected_by.get(label, 0) + 1
    todo = checked - hits.keys()
    todo -= memo.passed - special if special else memo.passed
    new_failed: dict[str, tuple[str, str]] = {}
    new_passed: set[str] = set()
    for name in todo:
        d = derived.get(name)
        exact = d is None or name in special
        verdict = UNSURE if exact else judge(d, cpu, mem, now, prod)
        if verdict is UNSURE:
            verdict = exact_check(name)
        if verdict is None:
            if not exact:
                new_passed.add(name)
            continue
        assert isinstance(verdict, Rejection)
        failed[name] = verdict.reason
        rejected_by[verdict.label] = rejected_by.get(verdict.label, 0) + 1
        if not exact:
            new_failed[name] = (verdict.reason, verdict.label)
    if new_failed or new_passed:
        board.record(memo, generation, new_failed, new_passed)
    passing = list(filterfalse(failed.__contains__, names)) if failed else list(names)
    return passing, failed, rejected_by
