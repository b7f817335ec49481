"""The access log: what an operator reads, not a line per request.

kube-scheduler calls the extender two or three times per pod; at 300 pods/s a line per request is about
900 lines a second in the scheduler's pod, costs CPU on the critical path and buries what matters. So by
default the log gets, on the ``ballast.access`` logger:

- a request that failed (status 4xx or 5xx), at WARNING;
- a request slower than ``slow`` seconds (``--slow-request``), at WARNING;
- once a minute, when there were requests, a summary at INFO: requests per verb with their p99, failed
  and slow ones.

Failed and slow lines are capped at ``LINES_PER_SECOND`` (a caller sending bad requests in a loop must
not flood the log); the summary counts every one and says how many were not logged.

``every_request`` (``--access-log``) adds the old line per request (method, path, status, milliseconds) at
INFO, for debugging. The metrics (``ballast_extender_requests_total``, the latency histogram) count every
request either way.

``AccessLog`` is the record (windows, lines, summaries), made first so the app's lifespan can run its
summaries; ``AccessLogged`` puts an ASGI app's requests into it. A plain ASGI middleware rather than
``@app.middleware("http")``: that one wraps every response in a streaming layer, a cost on the scheduler's
critical path. This only watches the status go by; its bookkeeping per request is a dict update and a list
append, on the event loop's thread (no lock).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from ballast.extender.api.verbs import VERBS

log = logging.getLogger("ballast.access")

DEFAULT_SLOW_SECONDS = 0.1
SUMMARY_SECONDS = 60.0
LINES_PER_SECOND = 20
NAMES = {spec.path: spec.name for spec in VERBS}
"""Paths summarised by name (the verbs'); every other path (probes, /metrics, /nodes, strays) is summed as
``other``."""


def p99(values: list[float]) -> float:
    """The 99th percentile (nearest rank) of a non-empty list."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)]


class Window:
    """One summary period's requests: durations per verb, failed and slow counts."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[float]] = {}
        self.failed = 0
        self.slow = 0
        self.unlogged = 0

    def __bool__(self) -> bool:
        return bool(self.seconds)

    def line(self, period: float) -> str:
        """``requests in the last 60s: filter 1200 (p99 4.1ms), bind 400 (p99 12.0ms); 1 failed, 0 slow``"""
        parts = [
            f"{verb} {len(values)} (p99 {p99(values) * 1000:.1f}ms)" for verb, values in self.seconds.items()
        ]
        unlogged = (
            f" ({self.unlogged} of them not logged: over {LINES_PER_SECOND} lines/s)" if self.unlogged else ""
        )
        return (
            f"requests in the last {period:.0f}s: {', '.join(parts)}; "
            f"{self.failed} failed, {self.slow} slower than the slow-request threshold{unlogged}"
        )


class AccessLog:
    def __init__(
        self,
        every_request: bool = False,
        slow: float = DEFAULT_SLOW_SECONDS,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.every_request = every_request
        self.slow = slow
        self.clock = clock
        self.window = Window()
        self.window_start = clock()
        self._second = 0
        self._lines = 0

    def summarise(self) -> None:
        """Log the current window's summary (when it saw any request) and start a new one."""
        now = self.clock()
        window, self.window = self.window, Window()
        period, self.window_start = now - self.window_start, now
        if window and log.isEnabledFor(logging.INFO):
            log.info("%s", window.line(period))

    async def run_summaries(self, every: float = SUMMARY_SECONDS) -> None:
        """The per-minute summary, for the app's lifespan."""
        while True:
            await asyncio.sleep(every)
            self.summarise()

    def record(self, scope: dict[str, Any], status: int, seconds: float) -> None:
        """One answered request: into the window, and a line when it failed or was slow."""
        path = scope["path"]
        window = self.window
        window.seconds.setdefault(NAMES.get(path, "other"), []).append(seconds)
        failed, slow = status >= 400, seconds > self.slow
        if failed or slow:
            window.failed += failed
            window.slow += slow
            second = int(self.clock())
            if second != self._second:
                self._second, self._lines = second, 0
            self._lines += 1
            if self._lines > LINES_PER_SECOND:
                window.unlogged += 1
                return
            why = "failed" if failed else f"slower than {self.slow * 1000:.0f}ms"
            log.warning("%s %s %d %.1fms (%s)", scope["method"], path, status, seconds * 1000, why)
        elif self.every_request:
            log.info("%s %s %d %.1fms", scope["method"], path, status, seconds * 1000)


class AccessLogged:
    """``app`` with every HTTP request it answers recorded in ``log``; anything else (the lifespan) passes."""

    def __init__(self, app: Callable[..., Awaitable[None]], log: AccessLog) -> None:
        self.app = app
        self.log = log

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        access = self.log
        start = access.clock()
        status = 500

        async def send_(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_)
        finally:
            access.record(scope, status, access.clock() - start)
