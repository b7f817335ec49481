"""The extender's app factory: ``create_app`` builds a complete service from its parts, so tests build
one with fakes in a line and the CLI builds the real one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter

from app import __version__, wire
from app.api import debug, health, verbs
from app.api.state import Services
from app.bind import Binder
from app.cache import ClusterCache
from app.estimation import Ledger
from app.extender import Extender
from app.kube import Kube
from app.metrics import ExtenderMetrics
from app.numa_bind import NumaPreBind
from app.policy import Policy
from app.policy_store import PolicyStore
from common.exclusive import DEFAULT_SCHEDULERS

log = logging.getLogger("ballast.extender")

_DOC_MODELS: dict[str, Any] = {
    "ExtenderArgs": wire.ExtenderArgsModel,
    "ExtenderFilterResult": wire.ExtenderFilterResult,
    "HostPriorityList": list[wire.HostPriority],
    "ExtenderBindingArgs": wire.ExtenderBindingArgs,
    "ExtenderBindingResult": wire.ExtenderBindingResult,
    "ExtenderPreemptionArgs": wire.ExtenderPreemptionArgs,
    "ExtenderPreemptionResult": wire.ExtenderPreemptionResult,
    "ErrorBody": wire.ErrorBody,
}


def _openapi(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """Describe the wire models in components, since routes read raw bytes for speed."""

    def build() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, model in _DOC_MODELS.items():
            js = TypeAdapter(model).json_schema(ref_template="#/components/schemas/{model}")
            comps.update(js.pop("$defs", {}))
            js["title"] = name
            comps[name] = js
        app.openapi_schema = schema
        return schema

    return build


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
    background: list[Callable[[], Any]] | None = None,
    clock: Callable[[], float] = time.time,
    scheduler_names: Iterable[str] = DEFAULT_SCHEDULERS,
    result_key: bytes | None = None,
) -> FastAPI:
    """Build the extender app.

    Without ``kube`` it serves whole-node requests and keeps tentative estimates (holds) of the pods it
    scores. With ``kube`` (cluster access) it also watches nodes and pods, serves names-only requests
    from that cache, and binds.
    """
    metrics = metrics or ExtenderMetrics()
    store = PolicyStore(policy, policy_path, metrics)
    ledger = Ledger(policy, clock)
    cache = binder = None
    if kube is not None:
        cache = ClusterCache(
            kube,
            store,
            ledger,
            resync_seconds=resync_seconds,
            clock=clock,
            on_bad=metrics.count_bad,
            allowed_schedulers=scheduler_names,
            result_key=result_key,
        )
    extender = Extender(store, metrics, source=cache, ledger=ledger, clock=clock)
    if kube is not None:
        binder = Binder(
            kube, ledger, clock, pre_bind=[NumaPreBind(kube, cache, store, extender.numa_seen, result_key)]
        )
    svc = Services(store=store, metrics=metrics, extender=extender, cache=cache, binder=binder)
    if cache is not None:
        svc.readiness.append(cache.readiness)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tasks: list[asyncio.Task[Any]] = []
        loop = asyncio.get_running_loop()
        if store.path is not None:
            with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
                # Only possible in the main thread (the real server); tests call reload() directly.
                loop.add_signal_handler(signal.SIGHUP, lambda: store.reload("SIGHUP"))
            if policy_poll_seconds > 0:
                tasks.append(asyncio.create_task(_watch_policy(store, policy_poll_seconds)))
        if cache is not None:
            cache.start()
        for start in background or []:
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
            if cache is not None:
                await asyncio.to_thread(cache.stop)

    app = FastAPI(
        title="Ballast scheduler extender",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
    )
    app.state.services = svc
    app.include_router(verbs.router)
    app.include_router(debug.router)
    app.include_router(health.router)
    app.openapi = _openapi(app)  # type: ignore[method-assign]
    return app


async def _watch_policy(store: PolicyStore, every: float) -> None:
    while True:
        await asyncio.sleep(every)
        try:
            await asyncio.to_thread(store.reload_if_changed)
        except Exception:  # never let the watcher die silently
            log.exception("policy file watcher failed; will retry")
