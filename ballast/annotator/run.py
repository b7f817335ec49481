"""``ballast annotator`` wiring: configuration checks, then ``--once`` or the leader-elected loop.

Start-up refuses, with a message saying what to fix, before touching any Node: a bad policy, bad flags
or an unusable kubeconfig (exit 2), and a Prometheus that is not reachable or not ready (exit 1; checked
with ``/-/ready`` or the build info, not with a query).

Run mode: watches on nodes (``--node-selector``) and on bound pods (or ``Scheduled`` events) keep the
annotator's view; a ``LeaderElector`` thread holds the Lease; the asyncio loop runs cycles on the policy's
schedule while this replica leads and the watches have listed. SIGTERM/SIGINT stop the loop, then the
Lease is released so the other replica takes over at once.

Policy changes (the file changed, or SIGHUP): a file that does not load is refused, the running policy
kept and ``/readyz`` says why. A new policy that changes the metrics, their periods or the hot-value
windows ends this generation of the loop (watches, Lease) and starts the next with it: rare enough that
a clean start beats rewiring each part; the Lease passes to the other replica meanwhile. The health
server and the metrics outlive generations.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ballast import __version__
from ballast.annotator.bindings import BindingRecords
from ballast.annotator.controller import Annotator, CycleReport, KubeNodeWriter, run_loop
from ballast.annotator.metrics import AnnotatorMetrics
from ballast.annotator.prometheus import PrometheusClient, PrometheusConfig, PrometheusError
from ballast.annotator.schedule import Schedule
from ballast.annotator.sources import EventBindings, NodeIndex, PodBindings
from ballast.contract.annotations import HOT_VALUE_KEY
from ballast.kube.client import Kube, KubeConfigError, Reflector
from ballast.model.policy import Policy, PolicyError, load_policy
from ballast.model.policy_store import PolicyStore
from ballast.program.leader import (
    DEFAULT_NAMESPACE,
    LeaderFlagsError,
    connect_elected,
    elect,
    elector_from_args,
    lease_namespace,
)
from ballast.program.skeleton import (
    HealthFailed,
    Heartbeat,
    PolicyReload,
    Signals,
    serve_health,
    watches_ready,
)

__all__ = ["DEFAULT_NAMESPACE", "lease_namespace", "prometheus_config", "run"]

log = logging.getLogger("ballast.annotator")

HORIZON_SLACK_SECONDS = 60.0
"""Bindings are kept this much longer than the longest hot-value window (late cycles, clock skew)."""
STUCK_LOOP_SECONDS = 300.0
"""/healthz fails when the main loop has not turned for this long."""
WATCH_TICK_SECONDS = 0.25
"""How often the policy watcher looks for SIGHUP, a stop request and a due poll."""


def prometheus_config(args: argparse.Namespace) -> PrometheusConfig:
    return PrometheusConfig(
        url=args.prometheus_url,
        timeout=args.prometheus_timeout,
        bearer_token_file=args.prometheus_bearer_token_file,
        username=args.prometheus_username,
        password_file=args.prometheus_password_file,
        ca_file=args.prometheus_ca_file,
        cert_file=args.prometheus_cert_file,
        key_file=args.prometheus_key_file,
        insecure_skip_verify=args.prometheus_insecure_skip_verify,
        params=dict(args.prometheus_param),
        headers=dict(args.prometheus_header),
        retries=args.prometheus_retries,
    )


def _records(policy: Policy, args: argparse.Namespace) -> BindingRecords | None:
    if not policy.hot_values:
        return None
    horizon = max(w.time_range for w in policy.hot_values) + HORIZON_SLACK_SECONDS
    return BindingRecords(horizon, args.max_bindings_per_node)


def _binding_sources(records: BindingRecords, source: str) -> list[tuple[str, dict[str, str], Any]]:
    """(path, list params, handler) per configured source."""
    out: list[tuple[str, dict[str, str], Any]] = []
    if source in ("pods", "both"):
        out.append(("/api/v1/pods", {"fieldSelector": "spec.nodeName!="}, PodBindings(records)))
    if source in ("events", "both"):
        out.append(("/api/v1/events", {"fieldSelector": "reason=Scheduled"}, EventBindings(records)))
    return out


def run(args: argparse.Namespace, *, stop: threading.Event | None = None) -> int:
    """Run ``ballast annotator``; returns the exit code (see ``ballast.annotator.cli``)."""
    if not log.isEnabledFor(logging.DEBUG):
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request: debug only
    try:
        policy = load_policy(args.policy)
    except PolicyError as exc:
        log.error("%s", exc)
        return 2
    if problem := _unusable(policy):
        log.error("policy %s %s", args.policy, problem)
        return 2
    config = prometheus_config(args)
    if problems := config.validate():
        for problem in problems:
            log.error("%s", problem)
        return 2
    try:
        identity, kube = connect_elected(args, f"ballast-annotator/{__version__}")
    except (LeaderFlagsError, KubeConfigError) as exc:
        log.error("%s", exc)
        return 2
    try:
        if args.once:
            return asyncio.run(_once(args, policy, config, kube, identity))
        return asyncio.run(_serve(args, policy, config, kube, identity, stop or threading.Event()))
    finally:
        kube.close()


def _unusable(policy: Policy) -> str | None:
    """Why the annotator cannot run on this policy, or None."""
    if not policy.metrics and not policy.hot_values:
        return "has no syncPolicy and no hotValue: nothing to annotate"
    return None


def _what_the_annotator_uses(policy: Policy) -> tuple[Any, ...]:
    """The parts of a policy the annotator runs on; a change elsewhere (predicates, priorities,
    estimation) concerns only the extender and needs no restart of the loop."""
    return (dict(policy.sync_periods), policy.hot_values)


async def _check_prometheus(client: PrometheusClient) -> bool:
    try:
        how = await client.check_ready()
    except PrometheusError as exc:
        log.error("cannot use Prometheus: %s", exc)
        return False
    log.info("Prometheus at %s is ready (%s)", client.url, how)
    return True


def _annotator(
    args: argparse.Namespace,
    policy: Policy,
    client: PrometheusClient,
    index: NodeIndex,
    kube: Kube,
    records: BindingRecords | None,
    metrics: AnnotatorMetrics,
    may_write: Any,
) -> Annotator:
    return Annotator(
        policy,
        client,
        index,
        KubeNodeWriter(kube),
        records,
        metrics=metrics,
        match_label=args.match_label,
        query_template=args.query_template,
        hot_interval=args.hot_value_interval,
        patch_concurrency=args.patch_concurrency,
        may_write=may_write,
    )


async def _once(
    args: argparse.Namespace, policy: Policy, config: PrometheusConfig, kube: Kube, identity: str
) -> int:
    """One full cycle: list nodes and bindings, sync every metric and the hot value, exit."""
    async with PrometheusClient(config) as client:
        if not await _check_prometheus(client):
            return 1
        metrics = AnnotatorMetrics()
        index = NodeIndex([*policy.metrics, HOT_VALUE_KEY])
        records = _records(policy, args)
        try:
            params = {"labelSelector": args.node_selector} if args.node_selector else {}
            nodes, _ = await asyncio.to_thread(kube.list_all, "/api/v1/nodes", params)
            index.replace(nodes)
            if records is not None:
                for path, list_params, handler in _binding_sources(records, args.binding_source):
                    items, _ = await asyncio.to_thread(kube.list_all, path, list_params)
                    handler.replace(items)
        except Exception as exc:
            log.error("cannot list from the Kubernetes API: %s", exc)
            return 1
        elector = None
        if args.leader_elect:
            elector = elector_from_args(args, kube, identity, metrics.leader, metrics.lease_transitions)
            wait = args.lease_duration + 2 * args.retry_period
            if not await asyncio.to_thread(elector.wait_leading, wait):
                log.error(
                    "lease %s/%s is held by %s; not annotating",
                    elector.namespace,
                    elector.name,
                    elector.holder or "another replica",
                )
                return 1
        annotator = _annotator(
            args,
            policy,
            client,
            index,
            kube,
            records,
            metrics,
            elector.is_leader if elector is not None else (lambda: True),
        )
        try:
            report: CycleReport = await annotator.cycle(policy.metrics)
        finally:
            annotator.close()
            if elector is not None:
                await asyncio.to_thread(elector.release)
        return 0 if report.ok else 1


async def _serve(
    args: argparse.Namespace,
    policy: Policy,
    config: PrometheusConfig,
    kube: Kube,
    identity: str,
    stop: threading.Event,
) -> int:
    client = PrometheusClient(config)
    metrics = AnnotatorMetrics()
    store = PolicyStore(policy, args.policy, metrics, check=_unusable)
    probes = Probes()
    server = None
    try:
        if not await _check_prometheus(client):
            return 1
        try:
            server = serve_health(
                args,
                metrics.registry,
                name="annotator-health",
                healthy=lambda: probes.healthy(),
                ready=lambda: probes.ready(),
            )
        except HealthFailed:
            return 1
        hangup = threading.Event()
        with Signals(stop, hangup=hangup, logger=log):
            reload = PolicyReload(store, args.policy_poll, hangup)
            while True:
                running = store.current
                code = await _serve_with(args, running, client, kube, identity, stop, metrics, reload, probes)
                if stop.is_set() or store.current is running:
                    return code
                probes.ready = lambda: (False, "restarting with a new policy")
                log.info(
                    "restarting the annotation loop with the new policy: %s",
                    ", ".join(f"{m} every {p:g}s" for m, p in store.current.sync_periods.items())
                    or "no metrics",
                )
    finally:
        if server is not None:
            server.close()
        await client.aclose()


@dataclass
class Probes:
    """What /healthz and /readyz answer; each generation of the loop installs its own checks, while the
    health server (and the metrics registry) outlive generations, so probes and scrapes never see a gap."""

    healthy: Callable[[], tuple[bool, str]] = lambda: (True, "ok")
    ready: Callable[[], tuple[bool, str]] = lambda: (False, "starting")


async def _watch_policy(
    reload: PolicyReload, running: Policy, stop: threading.Event, loop_stop: threading.Event
) -> None:
    """Stop this generation of the loop when asked to (``stop``) or when a policy arrives that changes
    what the annotator does (the store's policy then differs from ``running`` in what the annotator uses).
    A policy that changes only what the extender uses is taken without a restart; a refused one leaves
    everything as it is."""
    try:
        while not loop_stop.is_set() and not stop.is_set():
            if reload.check():
                if _what_the_annotator_uses(reload.store.current) != _what_the_annotator_uses(running):
                    break
                log.info("the policy change concerns only the extender: the annotator carries on")
            await asyncio.sleep(WATCH_TICK_SECONDS)
    finally:
        # Whatever ends the watcher ends this generation, so a stop request is never lost.
        loop_stop.set()


async def _serve_with(
    args: argparse.Namespace,
    policy: Policy,
    client: PrometheusClient,
    kube: Kube,
    identity: str,
    stop: threading.Event,
    metrics: AnnotatorMetrics,
    reload: PolicyReload,
    probes: Probes,
) -> int:
    """Run the loop on ``policy`` until ``stop`` or until a policy change needs a fresh start: the
    watches and the Lease end here and begin again with the new policy; ``probes`` get this
    generation's checks."""
    loop_stop = threading.Event()
    """Ends this generation: set on ``stop`` and on a policy change the annotator must act on."""
    index = NodeIndex([*policy.metrics, HOT_VALUE_KEY])
    records = _records(policy, args)
    params = {"labelSelector": args.node_selector} if args.node_selector else {}
    reflectors = [
        Reflector(
            kube,
            "/api/v1/nodes",
            index,
            params=params,
            name="nodes",
            resync_seconds=args.resync,
            stall_seconds=args.watch_stall_timeout,
        )
    ]
    if records is not None:
        for path, list_params, handler in _binding_sources(records, args.binding_source):
            name = path.rsplit("/", 1)[-1]
            reflectors.append(
                Reflector(
                    kube,
                    path,
                    handler,
                    params=list_params,
                    name=name,
                    resync_seconds=args.resync,
                    stall_seconds=args.watch_stall_timeout,
                )
            )
    elector = elect(args, kube, identity, metrics, "annotator", log)

    def synced() -> bool:
        return all(r.synced.is_set() for r in reflectors)

    def may_write() -> bool:
        return not stop.is_set() and not loop_stop.is_set() and (elector is None or elector.is_leader())

    heartbeat = Heartbeat("annotation loop", lambda: STUCK_LOOP_SECONDS)

    def ready() -> tuple[bool, str]:
        if (waiting := watches_ready(reflectors, reload.store)) is not None:
            return waiting
        stalled = [p for r in reflectors if (r.stalled or not r.failing) and (p := r.problem())]
        if stalled:
            return False, "; ".join(stalled)
        return True, "ok"

    probes.healthy, probes.ready = heartbeat.healthy, ready

    annotator = _annotator(args, policy, client, index, kube, records, metrics, may_write)
    schedule = Schedule(policy.sync_periods, args.hot_value_interval)
    watcher = asyncio.create_task(_watch_policy(reload, policy, stop, loop_stop))
    try:
        for r in reflectors:
            r.start()
        if elector is not None:
            elector.start()
        log.info(
            "ballast annotator %s: %d metrics (%s), hot value %s, as %s",
            __version__,
            len(policy.metrics),
            ", ".join(f"{m} every {p:g}s" for m, p in policy.sync_periods.items()),
            f"from {args.binding_source}" if records is not None else "off (no hotValue in the policy)",
            identity,
        )
        await run_loop(
            annotator,
            schedule,
            stop=loop_stop,
            is_leader=lambda: synced() and may_write(),
            heartbeat=heartbeat.beat,
        )
    finally:
        loop_stop.set()
        await watcher
        if elector is not None:
            await asyncio.to_thread(elector.stop)  # stops writing, then releases the Lease
        for r in reflectors:
            r.stop()
        annotator.close()
    log.info("annotator stopped" if stop.is_set() else "annotation loop stopped for the new policy")
    return 0
