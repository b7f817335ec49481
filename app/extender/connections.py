"""Bounds on the extender's connections: how many, how long one may stay silent, how accept errors log.

uvicorn closes a connection idle *between* requests (``timeout_keep_alive``) and answers 503 past
``limit_concurrency``, but a connection that never sends its first byte is never timed out and never
counted against anything: 10 000 silent connections stayed open forever, and at the file-descriptor limit
asyncio's accept loop logged 735 231 ERROR tracebacks (329 MB) in 60 s. Here:

- ``bounded_protocol``: uvicorn's h11 protocol that closes a connection at once when
  ``max_connections`` are already open, and one that sends nothing within ``first_byte_timeout``;
- ``RateLimitedLoopErrors``: the event loop's exception handler, logging each kind of error (accept
  failures above all) at most once per interval, with how many were suppressed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

log = logging.getLogger("ballast.connections")

DEFAULT_MAX_CONNECTIONS = 1024
"""Open connections at most; kube-scheduler keeps a handful (one per concurrent call, kept alive)."""
DEFAULT_FIRST_BYTE_TIMEOUT = 10.0
"""Seconds a new connection may stay silent before its first request byte."""


def bounded_protocol(max_connections: int, first_byte_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's ``H11Protocol`` with a cap on open connections and a deadline for the first byte."""
    from uvicorn.protocols.http.h11_impl import H11Protocol  # the server's, imported when it is built

    class BoundedH11Protocol(H11Protocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.abort()  # connection_lost removes it from the shared set
                _CONNECTIONS_REFUSED.note(len(self.connections))
                return
            # The keep-alive timer uvicorn starts after a response, started at once: data_received
            # cancels it on the first byte, and its handler closes a connection still idle.
            self.timeout_keep_alive_task = self.loop.call_later(
                first_byte_timeout, self.timeout_keep_alive_handler
            )

    return BoundedH11Protocol


class _Refusals:
    """Connections refused over the cap, logged at most once per 10 s with their count."""

    def __init__(self) -> None:
        self.count = 0
        self.pending = 0
        self.logged_at = -10.0

    def note(self, open_now: int) -> None:
        self.count += 1
        self.pending += 1
        now = time.monotonic()
        if now - self.logged_at >= 10.0:
            log.warning(
                "%d connection(s) refused: %d open, the limit (--max-connections)", self.pending, open_now - 1
            )
            self.pending, self.logged_at = 0, now


_CONNECTIONS_REFUSED = _Refusals()


class RateLimitedLoopErrors:
    """An asyncio exception handler that logs each kind of error at most once per ``interval`` seconds.

    The kind is the handler context's message (``socket.accept() out of system resource``, ...); the
    first of a burst is logged with its traceback, the rest are counted into the next line."""

    def __init__(self, interval: float = 10.0) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        kind = str(context.get("message") or "event loop error")[:200]
        now = time.monotonic()
        if now - self._last.get(kind, -self.interval) < self.interval:
            self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
            return
        self._last[kind] = now
        suppressed = self._suppressed.pop(kind, 0)
        if len(self._last) > 1000:  # kinds are few; never let the table grow without bound
            self._last = {kind: now}
        exc = context.get("exception")
        note = f" ({suppressed} more like it in the last {self.interval:g}s not logged)" if suppressed else ""
        log.error("%s%s: %s", kind, note, exc if exc is not None else "", exc_info=exc)
