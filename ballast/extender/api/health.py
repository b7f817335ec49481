"""Health, readiness, metrics, the active policy and the version: what operators and probes read."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ballast import __version__
from ballast.extender.api.responses import JSONBytes
from ballast.extender.api.state import services

router = APIRouter(tags=["operations"])


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat()


@router.get("/healthz", summary="Liveness: the process serves requests")
async def healthz() -> JSONBytes:
    return JSONBytes({"status": "ok"})


@router.get(
    "/readyz",
    summary="Readiness: policy loaded, caches synced",
    description="503 with the reasons while the node cache has not synced, or while the last policy reload "
    "was refused (the service then still runs on its last good policy).",
)
async def readyz(request: Request) -> JSONBytes:
    svc = services(request)
    problems = [p for check in svc.readiness if (p := check()) is not None]
    store = svc.store
    policy = {
        "source": store.current.source,
        "generation": store.generation,
        "loadedAt": _iso(store.loaded_at),
    }
    if store.failure is not None:
        problems.append(f"policy reload refused, running on the last good policy: {store.failure.error}")
        policy["reloadError"] = store.failure.error
        policy["reloadFailedAt"] = _iso(store.failure.at)
    body = {"status": "ok" if not problems else "not ready", "problems": problems, "policy": policy}
    return JSONBytes(body, status_code=200 if not problems else 503)


@router.get(
    "/metrics", summary="Prometheus metrics (text exposition format)", response_class=PlainTextResponse
)
async def metrics(request: Request) -> PlainTextResponse:
    return PlainTextResponse(
        generate_latest(services(request).metrics.registry), media_type=CONTENT_TYPE_LATEST
    )


@router.get("/policy", summary="The active policy, normalised (durations in seconds)")
async def policy(request: Request) -> JSONBytes:
    store = services(request).store
    return JSONBytes(
        {"generation": store.generation, "loadedAt": _iso(store.loaded_at), **store.current.to_json()}
    )


@router.get("/version", summary="Ballast version, and the HTTP implementation and event loop serving it")
async def version(request: Request) -> JSONBytes:
    return JSONBytes(
        {"version": __version__, "component": "extender", "server": server_stack(request.receive)}
    )


_HTTP_MODULES = {
    "uvicorn.protocols.http.httptools_impl": "httptools",
    "uvicorn.protocols.http.h11_impl": "h11",
}


def server_stack(receive: Any) -> dict[str, str]:
    """What serves this request, seen from inside it rather than from the configuration: the HTTP
    implementation whose connection owns ``receive`` (uvicorn's ``httptools`` or ``h11``; another
    server's module name) and the running event loop's package (``uvloop`` or ``asyncio``)."""
    owner = getattr(receive, "__self__", None)
    module = type(owner).__module__ if owner is not None else "unknown"
    return {
        "http": _HTTP_MODULES.get(module, module),
        "loop": type(asyncio.get_running_loop()).__module__.partition(".")[0],
    }
