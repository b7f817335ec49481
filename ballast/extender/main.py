"""The extender's app factory: ``create_app`` builds a complete service from its parts, so tests build
one with fakes in a line and the CLI builds the real one. The parts are made in the order they need each
other and handed whole to the app (``ballast.extender.app``): nothing is wired after construction.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from ballast import __version__
from ballast.contract.exclusive import DEFAULT_SCHEDULERS
from ballast.extender.api import debug, errors, health, openapi
from ballast.extender.api.access import DEFAULT_SLOW_SECONDS, SUMMARY_SECONDS, AccessLog
from ballast.extender.api.body import (
    DEFAULT_BODY_TIMEOUT_SECONDS,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_BODY_BYTES_IN_FLIGHT,
    BodyBudget,
)
from ballast.extender.api.state import Services
from ballast.extender.api.verbs import Verb, verbs_for
from ballast.extender.app import ExtenderApp
from ballast.extender.bind import Binder
from ballast.extender.cache import ClusterCache
from ballast.extender.connections import RateLimitedLoopErrors
from ballast.extender.extender import Extender
from ballast.extender.load_bind import LoadPreBind
from ballast.extender.metrics import ExtenderMetrics
from ballast.extender.numa.community_check import CommunityCheck, CommunityPreBind
from ballast.extender.numa.crane_bind import NumaPreBind
from ballast.kube.async_client import AsyncKube
from ballast.kube.client import WATCH_STALL_SECONDS, Kube
from ballast.model.ledger import Ledger
from ballast.model.policy import Policy
from ballast.model.policy_store import PolicyStore
from ballast.program.skeleton import PolicyReload

log = logging.getLogger("ballast.extender")

POLICY_TICK_SECONDS = 0.25
"""How often the policy watch looks for SIGHUP and a due poll (it reads the file only then)."""


DESCRIPTION = """
Ballast is a kube-scheduler extender that filters out overloaded nodes and favours lightly loaded ones,
from load annotations written by `ballast annotator` (or crane-scheduler's annotator) and its own
record of pods it just placed.

Try the verbs with the examples below, or with `curl` as in the README.
"""


def create_app(
    policy: Policy,
    *,
    policy_path: str | None = None,
    policy_poll_seconds: float = 2.0,
    metrics: ExtenderMetrics | None = None,
    kube: Kube | None = None,
    resync_seconds: float = 300.0,
    watch_stall_seconds: float = WATCH_STALL_SECONDS,
    background: list[Callable[[], Any]] | None = None,
    clock: Callable[[], float] = time.time,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    body_timeout: float = DEFAULT_BODY_TIMEOUT_SECONDS,
    max_body_bytes_in_flight: int = DEFAULT_MAX_BODY_BYTES_IN_FLIGHT,
    scheduler_names: Iterable[str] = DEFAULT_SCHEDULERS,
    result_key: bytes | None = None,
    access_log: bool = False,
    slow_request: float = DEFAULT_SLOW_SECONDS,
    access_summary_seconds: float = SUMMARY_SECONDS,
    nrt_assume_ttl: float = 120.0,
) -> ExtenderApp:
    """Build the extender app.

    Without ``kube`` it serves whole-node requests and keeps tentative estimates (holds) of the pods it
    scores. With ``kube`` (cluster access) it also watches nodes and pods, serves names-only requests
    from that cache, and binds. The access log (``ballast.access``) has failed requests, requests slower
    than ``slow_request`` seconds and a summary every ``access_summary_seconds``; ``access_log`` adds one
    INFO line per request.
    """
    metrics = metrics or ExtenderMetrics()
    store = PolicyStore(policy, policy_path, metrics)
    metrics.know(policy)
    store.on_change(metrics.know)
    ledger = Ledger(policy, clock)
    cache = binder = None
    if kube is not None:
        cache = ClusterCache(
            kube,
            store,
            ledger,
            resync_seconds=resync_seconds,
            stall_seconds=watch_stall_seconds,
            clock=clock,
            on_bad=metrics.count_bad,
            allowed_schedulers=scheduler_names,
            result_key=result_key,
            on_malformed_nrt=lambda _bad: metrics.nrt_malformed.inc(),
            community_assume_ttl=nrt_assume_ttl,
        )
    community = None
    if cache is not None:
        community = CommunityCheck(
            store, cache.community, cache.topology, metrics.rejected.labels("numa").inc, clock
        )
    extender = Extender(store, metrics, source=cache, ledger=ledger, clock=clock, community=community)
    if kube is not None:
        # The bind verb's API calls (the pod read, the NUMA result patch, the Binding) are awaited on the
        # event loop over the lean transport (``ballast.kube.async_client``, ``ballast.kube.lean``), share one
        # deadline per verb and make one attempt each. Everything else (watches, lists) keeps the official
        # client, and so do the bind's calls where the lean transport cannot serve (a proxy), in a thread.
        bind_kube = AsyncKube.lean(kube)
        load_check = LoadPreBind(
            bind_kube,
            ledger,
            store,
            cache.node,
            clock,
            lambda metric: metrics.binds_refused.labels(metric).inc(),
            lambda metric: metrics.shadow_binds_would_refuse.labels(metric).inc(),
            cache.bound_node,
        )
        numa = NumaPreBind(bind_kube, cache, store, extender.numa.seen, result_key)
        assert community is not None
        binder = Binder(
            bind_kube,
            ledger,
            clock,
            pre_bind=[load_check, numa, CommunityPreBind(bind_kube, community)],
            bound_node=cache.bound_node,
        )
    svc = Services(
        store=store,
        metrics=metrics,
        extender=extender,
        cache=cache,
        binder=binder,
        readiness=[cache.readiness] if cache is not None else [],
        max_body_bytes=max_body_bytes,
        body_timeout=body_timeout,
        body_budget=BodyBudget(max_body_bytes_in_flight),
    )
    if cache is not None:
        metrics.watches.reflectors = lambda: cache.reflectors  # the metrics may be the caller's, made before

    access = AccessLog(every_request=access_log, slow=slow_request)
    verbs = verbs_for(svc)
    lifespan = _lifespan(store, cache, background or [], policy_poll_seconds, access, access_summary_seconds)
    return ExtenderApp(svc, verbs, _api(svc, verbs, lifespan, clock), access)


def _lifespan(
    store: PolicyStore,
    cache: ClusterCache | None,
    background: list[Callable[[], Any]],
    policy_poll_seconds: float,
    access: AccessLog,
    access_summary_seconds: float,
) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """What runs while the app serves: the access log's summaries, the policy file's watch (and SIGHUP),
    the cache's watches and the ``background`` tasks; stopped in turn at shutdown."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tasks: list[asyncio.Task[Any]] = [asyncio.create_task(access.run_summaries(access_summary_seconds))]
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(RateLimitedLoopErrors())
        if store.path is not None:
            reload = PolicyReload(store, policy_poll_seconds, threading.Event())
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                # Only possible in the main thread (the real server); tests call reload() directly.
                loop.add_signal_handler(signal.SIGHUP, reload.hangup.set)
            tasks.append(asyncio.create_task(_watch_policy(reload)))
        if cache is not None:
            cache.start(loop)
        for start in background:
            result = start()
            if asyncio.iscoroutine(result):
                tasks.append(asyncio.create_task(result))
        try:
            yield
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            access.summarise()
            if cache is not None:
                await asyncio.to_thread(cache.stop)

    return lifespan


def _api(
    svc: Services,
    verbs: Mapping[str, Verb],
    lifespan: Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]],
    clock: Callable[[], float],
) -> FastAPI:
    """FastAPI, for everything but the verbs' fast answers: the verbs' routes (the OpenAPI page, a mounted
    root path), the debugging and operations routes, one error shape, the document."""
    # FastAPIOffline serves Swagger UI from files in its package, not from a CDN: the docs page works on a
    # cluster without internet access. No ReDoc: its bundle still loads its logo from a CDN.
    api = FastAPIOffline(
        redoc_url=None,
        title="Ballast scheduler extender",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        redirect_slashes=False,
    )
    api.state.services = svc
    api.include_router(openapi.verb_routes(svc, verbs))
    api.include_router(debug.router)
    api.include_router(health.router)
    errors.install(api)
    api.openapi = openapi.openapi(api, clock)  # type: ignore[method-assign]  # FastAPI's documented hook
    return api


async def _watch_policy(reload: PolicyReload) -> None:
    """The policy file read again on SIGHUP or when it changed (``--policy-poll``), in a worker thread: the
    event loop serves the verbs meanwhile."""
    while True:
        await asyncio.sleep(POLICY_TICK_SECONDS)
        if reload.due():
            await asyncio.to_thread(reload.check)
