"""``ballast rebalancer`` wiring: configuration checks, then ``--once`` or the leader-elected loop.

Start-up refuses, with the field path or flag, before any API call: a bad policy or ``spec.rebalance``,
bad lease timing, an unusable kubeconfig (exit 2). A policy without ``spec.rebalance`` is not an error:
the rebalancer idles and says so in its log and on ``/readyz``.

Run mode: two watches (nodes, bound pods) keep ``cache``; a ``LeaderElector`` thread holds the Lease;
every ``--interval`` the leader runs a cycle (``Rebalancer.cycle``). A cycle never acts on partial data:
it is aborted, before any eviction, while a watch has not listed or is reconnecting after an error, and
the remaining evictions of a cycle stop at the first eviction call that fails for another reason than a
PodDisruptionBudget (429). A policy reload that fails (the file, or its ``spec.rebalance``) keeps the last
good policy and turns ``/readyz`` to 503 with the reason.

One leader at the moment of each eviction: the pace sleep comes first and is cut short by SIGTERM; then the
Lease is read back (``LeaderElector.confirm``: still ours, renew deadline not passed) immediately before
the eviction call, after the Event that remembers it. A replica that steps down, loses or cannot confirm
the Lease makes no further call. At the first cycle of each term (and at start) the leader rebuilds its
predecessor's promises (``ballast.rebalancer.promises``) before planning; a cycle that cannot read them is
aborted: a new leader never acts before it knows what was promised.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

import orjson

from ballast import __version__
from ballast.contract.annotations import format_timestamp
from ballast.contract.durations import format_duration
from ballast.contract.nodeload import NODELOAD_PATH
from ballast.kube.client import ApiError, Kube, KubeConfigError, Reflector
from ballast.model.policy import Policy, PolicyError, load_policy
from ballast.model.policy_store import PolicyStore
from ballast.model.rebalance_policy import RebalanceSettings, rebalance_settings
from ballast.program.leader import LeaderFlagsError, connect_elected, elect, elector_from_args
from ballast.program.skeleton import (
    HealthFailed,
    Heartbeat,
    PolicyReload,
    Signals,
    serve_health,
    watches_ready,
)
from ballast.rebalancer.cache import NodeCache, PodCache
from ballast.rebalancer.classify import Tracker
from ballast.rebalancer.evictor import COMPONENT, ERROR, EVICTED, NOT_ATTEMPTED, THROTTLED, UNKNOWN, Evictor
from ballast.rebalancer.limits import Limiter
from ballast.rebalancer.metrics import RebalancerMetrics
from ballast.rebalancer.nodeloads import NodeLoadCache
from ballast.rebalancer.plan import LIMITED, NO_FIT, Plan, plan_cycle
from ballast.rebalancer.policy_check import policy_warnings
from ballast.rebalancer.promises import SETTLE, Promise, from_events

__all__ = ["Rebalancer", "run"]

log = logging.getLogger("ballast.rebalancer")

IDLE = "the policy has no spec.rebalance: the rebalancer idles"
STUCK_CYCLES = 5
"""/healthz fails when the loop has not turned for this many intervals (at least 5 minutes)."""
EVENT_TTL = 3600.0
"""kube-apiserver's default ``--event-ttl``: how long the Events a new leader rebuilds its limits from
live."""


def settings_problem(policy: Policy) -> str | None:
    """The ``PolicyStore`` check: a reload whose ``spec.rebalance`` is bad is refused like a bad file."""
    try:
        rebalance_settings(policy)
    except PolicyError as exc:
        return "; ".join(f"{path}: {reason}" for path, reason in exc.problems)
    return None


class Rebalancer:
    """Runs cycles: plan from the caches, then evict (or pretend to) in the plan's order."""

    def __init__(
        self,
        policy: Callable[[], Policy],
        nodes: NodeCache,
        pods: PodCache,
        evictor: Evictor,
        metrics: RebalancerMetrics,
        *,
        blocked: Callable[[], str | None] = lambda: None,
        may_act: Callable[[], bool] = lambda: True,
        confirm: Callable[[], bool] | None = None,
        term: Callable[[], int] = lambda: 0,
        events: Callable[[], tuple[list[Any], float]] | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Any] = time.sleep,
        measured: NodeLoadCache | None = None,
        event_ttl: float = EVENT_TTL,
    ) -> None:
        self.policy = policy
        self.nodes = nodes
        self.pods = pods
        self.evictor = evictor
        self.metrics = metrics
        self.blocked = blocked
        self.may_act = may_act
        self.confirm = confirm or may_act
        """Checked immediately before each eviction call (``may_act`` plus the Lease read back)."""
        self.term = term
        self.events = events
        """This component's Events and the API server's clock (``Kube.get_dated``); ``None``: nothing to
        rebuild from (unit tests)."""
        self.event_ttl = event_ttl
        """How long the API server keeps Events (kube-apiserver's ``--event-ttl``): older evictions of an
        earlier leader are not in them."""
        self.clock = clock
        self.sleep = sleep
        self.measured = measured
        """The agents' NodeLoads: measured per-pod usage (``None``: every pod is estimated)."""
        self.warnings: tuple[str, ...] = ()
        """``policy_check.policy_warnings`` of the running policy."""
        self.promises: dict[str, Promise] = {}
        """Pod UID -> the eviction call that still counts (this replica's and its predecessors')."""
        self._term_seen: int | None = None
        self._next_call = float("-inf")
        """Monotonic time before which no eviction call is made (pace, Retry-After, a predecessor's pace)."""
        self.tracker = Tracker()
        self.limiter: Limiter | None = None
        self.last: Plan | None = None
        self.last_note = "no cycle yet"
        self._settings: tuple[Policy, RebalanceSettings | None] | None = None
        self._lock = threading.Lock()

    @property
    def dry(self) -> str:
        return "true" if self.evictor.dry_run else "false"

    def settings(self) -> RebalanceSettings | None:
        policy = self.policy()
        if self._settings is None or self._settings[0] is not policy:
            self._settings = (policy, rebalance_settings(policy))
            self.warnings = policy_warnings(policy, self._settings[1])
            self.metrics.policy_warnings.set(len(self.warnings))
            for warning in self.warnings:
                log.warning("policy %s: %s", policy.source, warning)
        return self._settings[1]

    def cycle(self) -> Plan | None:
        """One cycle; returns its plan, or ``None`` when it did not plan (idle or aborted)."""
        started = time.monotonic()
        try:
            return self._cycle()
        finally:
            self.metrics.cycle_duration.observe(time.monotonic() - started)

    def _cycle(self) -> Plan | None:
        settings = self.settings()
        if settings is None:
            self.metrics.cycles.labels("idle").inc()
            self.last_note = IDLE
            return None
        if (why := self.blocked()) is not None:
            self.metrics.cycles.labels("aborted").inc()
            self.last_note = f"cycle aborted before any eviction: {why}"
            log.warning("%s", self.last_note)
            return None
        if self.limiter is None:
            self.limiter = Limiter(settings.limits)
        if (why := self._keep_promises(settings)) is not None:
            self.metrics.cycles.labels("aborted").inc()
            self.last_note = f"cycle aborted before any eviction: {why}"
            log.warning("%s", self.last_note)
            return None
        now = self.clock()
        cache = self.measured
        plan = plan_cycle(
            self.nodes.snapshot(), self.pods.on, self.policy(), settings, self.tracker, self.limiter, now,
            measured=(lambda node: cache.fresh(node, now)) if cache is not None else None,
        )  # fmt: skip
        for state in ("hot", "cool", "normal", "unknown"):
            self.metrics.nodes.labels(state).set(plan.states.get(state, 0))
        outcomes = plan.outcomes()
        for outcome, result in ((NO_FIT, "no_fit"), (LIMITED, "limited")):
            if outcomes.get(outcome):
                self.metrics.evictions.labels(result, self.dry).inc(outcomes[outcome])
        aborted = self._execute(plan, settings)
        self.metrics.cycles.labels("aborted" if aborted else "ok").inc()
        self.last_note = aborted or (plan.idle and f"nothing to do: {plan.idle}") or "ok"
        with self._lock:
            self.last = plan
        if plan.evictions:
            done = sum(1 for c in plan.evictions if c.result == EVICTED)
            log.info(
                "cycle: %d hot, %d cool; %d of %d planned evictions %s",
                plan.states.get("hot", 0),
                len(plan.cool),
                done,
                len(plan.evictions),
                "(dry run)" if self.evictor.dry_run else "done",
            )
        return plan

    def _keep_promises(self, settings: RebalanceSettings) -> str | None:
        """Rebuild the predecessor's promises at a new term; release unknown outcomes whose pod is seen
        unchanged; forget what no limit counts any more. Returns why the cycle must not act, or None."""
        assert self.limiter is not None
        term = self.term()
        wall, mono = self.clock(), time.monotonic()
        if term != self._term_seen and self.events is not None:
            try:
                items, server_now = self.events()
            except Exception as exc:  # an API error, or a reply that is not a list
                return f"cannot read this component's Events to keep the previous leader's promises ({exc})"
            rebuilt = from_events(items, server_now, wall, dry_run=self.evictor.dry_run)
            pace = 1.0 / settings.limits.evictions_per_second
            for p in rebuilt:
                self._promise(p)
                self._next_call = max(self._next_call, mono + (p.at + pace - wall))
            if rebuilt:
                log.info("kept %d eviction(s) of earlier leaders in the limits and waits", len(rebuilt))
            window = settings.limits.workload_window
            if window > self.event_ttl:
                # An earlier leader's eviction older than the Events is unknown; it may still count in a
                # workload's window until window - event_ttl from now. Until then, nothing is evicted.
                until = wall + window - self.event_ttl
                self.limiter.history_unknown(
                    until,
                    f"workloadWindow {format_duration(window)} outlasts the Events "
                    f"({format_duration(self.event_ttl)}, --event-ttl) an earlier leader's evictions are "
                    f"known from; none before {format_timestamp(until)}",
                )
                log.info("new term: %s", self.limiter.unknown_why)
        self._term_seen = term
        window = settings.limits.workload_window
        for uid, p in list(self.promises.items()):
            settled = p.unknown and wall >= p.at + SETTLE
            if settled and any(q.uid == uid and not q.terminating for q in self.pods.on(p.node)):
                log.info("%s/%s seen unchanged after the eviction call of unknown outcome: not evicted",
                         p.namespace, p.name)  # fmt: skip
                self.limiter.forget(p.workload, uid)
                del self.promises[uid]
                continue
            if wall - p.at > max(window, SETTLE):
                del self.promises[uid]
        return None

    def _promise(self, p: Promise) -> None:
        assert self.limiter is not None
        old = self.promises.get(p.uid)
        if old is not None and old.at >= p.at:
            return
        self.promises[p.uid] = p
        self.limiter.remember(p.workload, p.uid, p.at)
        self.tracker.moving(p.workload, p.at)  # its replacement settles, under this leader or the next
        counts = self.tracker.counts.get(p.node)
        if counts is None or counts.evicted_at is None or counts.evicted_at < p.waits_past:
            self.tracker.evicted(p.node, p.waits_past)

    def _execute(self, plan: Plan, settings: RebalanceSettings) -> str | None:
        assert self.limiter is not None
        pace = 1.0 / settings.limits.evictions_per_second
        dry = self.evictor.dry_run

        def skip_rest(after: int, why: str) -> None:
            for c in plan.evictions[after:]:
                c.result = f"not attempted: {why}"

        for i, choice in enumerate(plan.evictions):
            if not dry:
                wait = self._next_call - time.monotonic()
                if wait > 0:
                    self.sleep(wait)  # SIGTERM cuts it short; leadership is checked after it
            if not self.may_act():
                skip_rest(i, "no longer the leader")
                return "lost the lease (or stepping down) during the cycle"
            out = self.evictor.evict(choice, confirm=self.confirm, still=self.may_act)
            if not dry:
                self._next_call = max(self._next_call, time.monotonic() + pace)
            choice.result = out.result
            if out.result == NOT_ATTEMPTED:
                skip_rest(i, "leadership not confirmed immediately before the eviction call")
                return (
                    "leadership not confirmed before an eviction call; nothing more is evicted in this cycle"
                )
            self.metrics.evictions.labels(out.result, self.dry).inc()
            if out.result in (EVICTED, UNKNOWN):
                now = self.clock()
                pod = choice.pod
                self._promise(Promise(pod.uid, pod.namespace, pod.name, pod.node, pod.workload, now, now,
                                      out.result == UNKNOWN))  # fmt: skip
            err = out.error
            if out.result == THROTTLED:
                self._next_call = max(self._next_call, time.monotonic() + out.retry_after)
                skip_rest(i + 1, "the API server throttles eviction calls")
                return f"eviction calls throttled by the API server (429): none before {out.retry_after:g}s"
            if out.result == UNKNOWN:
                skip_rest(i + 1, "an earlier eviction call's outcome is unknown")
                return (
                    f"eviction outcome unknown ({err}), counted as evicted; the rest of the cycle is skipped"
                )
            if out.result == ERROR and err is not None and err.code not in (404, 409):
                # 404 / 409: that pod is gone or replaced; anything else may be the API server itself
                skip_rest(i + 1, "an earlier eviction call failed")
                return f"eviction call failed ({err}); the rest of the cycle is skipped"
        return None

    def view(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """What ``/rebalance`` and ``--once --json`` show."""
        with self._lock:
            plan = self.last
        settings = None
        with contextlib.suppress(PolicyError):
            settings = self.settings()
        return {
            "dryRun": self.evictor.dry_run,
            **(extra or {}),
            "policy": self.policy().source,
            "settings": settings.to_json() if settings is not None else None,
            "note": self.last_note,
            "policyWarnings": list(self.warnings),
            "watched": {
                "nodes": len(self.nodes),
                "pods": len(self.pods),
                "nodeLoads": len(self.measured) if self.measured is not None else 0,
            },
            "lastCycle": plan.to_json() if plan is not None else None,
        }


def run(args: argparse.Namespace, *, stop: threading.Event | None = None, out: TextIO | None = None) -> int:
    """Run ``ballast rebalancer``; returns the exit code (see ``ballast.rebalancer.cli``)."""
    try:
        policy = load_policy(args.policy)
        settings = rebalance_settings(policy)
    except PolicyError as exc:
        log.error("%s", exc)
        return 2
    if settings is None:
        log.warning("%s (%s)", IDLE, args.policy)
    if args.json and not args.once:
        log.error("--json prints the cycle of --once; the running service shows it on /rebalance")
        return 2
    try:
        identity, kube = connect_elected(args, f"ballast-rebalancer/{__version__}")
    except (LeaderFlagsError, KubeConfigError) as exc:
        log.error("%s", exc)
        return 2
    try:
        if args.once:
            return _once(args, policy, kube, identity, out or sys.stdout)
        return _serve(args, policy, kube, identity, stop or threading.Event())
    finally:
        kube.close()


def _evictor(args: argparse.Namespace, kube: Kube, identity: str, metrics: RebalancerMetrics) -> Evictor:
    return Evictor(
        kube,
        dry_run=args.dry_run,
        identity=identity,
        on_call=lambda call, code: metrics.api_calls.labels(call, code).inc(),
    )


def _events(kube: Kube) -> Callable[[], tuple[list[Any], float]]:
    """This component's Events in every namespace, and the API server's clock (a consistent read, made
    once per term)."""

    def read() -> tuple[list[Any], float]:
        out, server_now = kube.get_dated("/api/v1/events", {"fieldSelector": f"source={COMPONENT}"})
        items = out.get("items")
        if not isinstance(items, list):
            raise ValueError("the Event list has no items")
        return items, server_now

    return read


def _text(view: dict[str, Any]) -> str:
    cycle = view.get("lastCycle") or {}
    lines = [f"rebalancer{' (dry run)' if view['dryRun'] else ''}: {view['note']}"]
    if cycle:
        lines.append("nodes: " + ", ".join(f"{n} {s}" for s, n in cycle["nodes"].items()))
        for node in cycle["watched"]:
            counts = f"abnormal {node['consecutiveAbnormal']}"
            lines.append(f"{node['node']}: {node['state']} {node['values']} {counts} - {node['status']}")
            for c in node["candidates"]:
                target = f" -> {c['target']}" if c.get("target") else ""
                lines.append(f"  {c['pod']}: {c['outcome']}{target} ({c['why']})")
    return "\n".join(lines) + "\n"


def _once(args: argparse.Namespace, policy: Policy, kube: Kube, identity: str, out: TextIO) -> int:
    """List nodes and bound pods, run one cycle, print it."""
    metrics = RebalancerMetrics()
    nodes, pods = NodeCache(lambda: policy), PodCache(lambda: policy)
    try:
        items, _ = kube.list_pages("/api/v1/nodes")
        nodes.replace(items, "")
        items, _ = kube.list_pages("/api/v1/pods", {"fieldSelector": "spec.nodeName!="})
        pods.replace(items, "")  # page by page: 100 000 pods never sit in memory at once
    except Exception as exc:
        log.error("cannot list from the Kubernetes API, nothing evicted: %s", exc)
        return 1
    measured = NodeLoadCache(args.load_report_interval)
    try:
        items, _ = kube.list_all(NODELOAD_PATH)
        measured.replace(items, "")
    except ApiError as exc:  # no CRD, or not allowed: every pod is estimated
        log.warning("cannot list NodeLoads (%s): every pod's usage is estimated from its requests", exc)
    elector = None
    if args.leader_elect and not args.dry_run:
        elector = elector_from_args(args, kube, identity, metrics.leader, metrics.lease_transitions)
        if not elector.wait_leading(args.lease_duration + 2 * args.retry_period):
            log.error(
                "lease %s/%s is held by %s; not evicting", elector.namespace, elector.name, elector.holder
            )
            return 1
    rebalancer = Rebalancer(
        lambda: policy,
        nodes,
        pods,
        _evictor(args, kube, identity, metrics),
        metrics,
        may_act=elector.is_leader if elector is not None else (lambda: True),
        measured=measured,
        confirm=elector.confirm if elector is not None else None,
        term=(lambda: elector.term) if elector is not None else (lambda: 0),
        events=_events(kube),
        event_ttl=args.event_ttl,
    )
    try:
        plan = rebalancer.cycle()
    finally:
        if elector is not None:
            elector.release()
    view = rebalancer.view()
    out.write(orjson.dumps(view, option=orjson.OPT_INDENT_2).decode() + "\n" if args.json else _text(view))
    failed = plan is not None and any(c.result in (ERROR, UNKNOWN) for c in plan.evictions)
    return 1 if failed else 0


def _serve(args: argparse.Namespace, policy: Policy, kube: Kube, identity: str, stop: threading.Event) -> int:
    metrics = RebalancerMetrics()
    store = PolicyStore(policy, args.policy, metrics, check=settings_problem)
    nodes, pods = NodeCache(lambda: store.current), PodCache(lambda: store.current)
    measured = NodeLoadCache(args.load_report_interval)

    def changed(new: Policy) -> None:
        nodes.reparse()
        pods.reestimate()

    store.on_change(changed)
    reflectors = [
        Reflector(kube, "/api/v1/nodes", nodes, name="nodes", resync_seconds=args.resync,
                  stall_seconds=args.watch_stall_timeout),
        Reflector(kube, "/api/v1/pods", pods, params={"fieldSelector": "spec.nodeName!="}, name="pods",
                  resync_seconds=args.resync, stall_seconds=args.watch_stall_timeout),
    ]  # fmt: skip
    # optional: without the CRD (or while its watch is down) every pod's usage is its estimate, and a
    # NodeLoad that stops being updated stops counting by its own time
    loads = Reflector(
        kube, NODELOAD_PATH, measured, name="nodeloads", resync_seconds=args.resync, optional=True
    )
    elector = elect(args, kube, identity, metrics, "rebalancer", log)

    def blocked() -> str | None:
        if not loads.synced.is_set():
            return "the nodeloads watch has not listed yet"
        for r in reflectors:
            # not listed, down, stalled, or silent past --watch-stall-timeout: no action on what it holds
            if (problem := r.problem()) is not None:
                return problem
        return None

    def may_act() -> bool:
        return not stop.is_set() and (elector is None or elector.is_leader())

    def confirm() -> bool:
        return not stop.is_set() and (elector is None or elector.confirm())

    rebalancer = Rebalancer(
        lambda: store.current, nodes, pods, _evictor(args, kube, identity, metrics), metrics,
        blocked=blocked, may_act=may_act, measured=measured, confirm=confirm,
        term=(lambda: elector.term) if elector is not None else (lambda: 0),
        events=_events(kube), sleep=stop.wait, event_ttl=args.event_ttl,
    )  # fmt: skip
    heartbeat = Heartbeat("rebalancing loop", lambda: max(STUCK_CYCLES * args.interval, 300.0))

    def ready() -> tuple[bool, str]:
        if (waiting := watches_ready((*reflectors, loads), store)) is not None:
            return waiting
        if rebalancer.settings() is None:
            return True, f"ok: {IDLE}"
        if rebalancer.warnings:
            return True, "ok; policy warnings: " + "; ".join(rebalancer.warnings)
        return True, "ok"

    def page() -> bytes:
        extra = {"leader": elector.is_leader() if elector is not None else True, "identity": identity}
        return orjson.dumps(rebalancer.view(extra), option=orjson.OPT_INDENT_2)

    try:
        server = serve_health(
            args, metrics.registry, name="rebalancer-health", ready=ready, healthy=heartbeat.healthy,
            pages={"/rebalance": page},
        )  # fmt: skip
    except HealthFailed:
        return 1
    hangup = threading.Event()
    try:
        with Signals(stop, hangup=hangup, logger=log):
            for r in (*reflectors, loads):
                r.start()
            if elector is not None:
                elector.start()
            current = rebalancer.settings()
            limits = (
                ", ".join(f"{t.name} high {t.high} low {t.low}" for t in current.thresholds)
                if current
                else IDLE
            )
            log.info(
                "ballast rebalancer %s: every %gs%s, as %s; %s",
                __version__,
                args.interval,
                " (dry run: no eviction is called)" if args.dry_run else "",
                identity,
                limits,
            )
            _loop(
                args,
                PolicyReload(store, args.policy_poll, hangup),
                rebalancer,
                stop,
                may_act,
                metrics,
                heartbeat,
            )
    finally:
        if elector is not None:
            elector.stop()
        for r in (*reflectors, loads):
            r.stop()
        if server is not None:
            server.close()
    log.info("rebalancer stopped")
    return 0


def _loop(
    args: argparse.Namespace,
    reload: PolicyReload,
    rebalancer: Rebalancer,
    stop: threading.Event,
    may_act: Callable[[], bool],
    metrics: RebalancerMetrics,
    heartbeat: Heartbeat,
) -> None:
    tick = 0.25
    next_cycle = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        heartbeat.beat()
        reload.check(now)
        if now >= next_cycle:
            next_cycle = now + args.interval
            if may_act():
                try:
                    rebalancer.cycle()
                except Exception:
                    metrics.cycles.labels("aborted").inc()
                    log.exception("cycle failed; nothing more is evicted in it")
            else:
                metrics.cycles.labels("standby").inc()
                rebalancer.last_note = "standby: another replica holds the lease"
        stop.wait(min(tick, max(0.0, next_cycle - time.monotonic())))
