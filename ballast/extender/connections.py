"""Bounds on the extender's connections: how many, how long one may stay silent, how accept errors log.

uvicorn closes a connection idle *between* requests (``timeout_keep_alive``) and answers 503 past
``limit_concurrency``, but a connection that never sends its first byte is never timed out and never
counted against anything: 10 000 silent connections stayed open forever, and at the file-descriptor limit
asyncio's accept loop logged 735 231 ERROR tracebacks (329 MB) in 60 s. Here:

- ``bounded_protocol``: uvicorn's httptools protocol (llhttp, in C: about 0.4 ms less CPU per pod than its
  pure-Python h11 one under a kube-scheduler drain) that closes a connection at once when
  ``max_connections`` are already open, closes one whose request head (request line and headers) is not
  whole within ``first_byte_timeout`` of its opening or uvicorn's keep-alive timeout of its last answer,
  answers 400 to a head over ``MAX_HEAD_BYTES`` (llhttp itself takes headers of any size), and answers
  a client that sends whole requests and then shuts its side for writing before closing;
- ``RateLimitedLoopErrors``: the event loop's exception handler, logging each kind of error (accept
  failures above all) at most once per interval, with how many were suppressed.

Bodies have their own cap, deadline and budget across requests in ``ballast.extender.api.body``.
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
"""Seconds a new connection may take to send its first request's head (a silent one is closed then)."""
MAX_HEAD_BYTES = 16 * 1024
"""Bytes a request head may take: h11's default (what uvicorn's h11 server refuses past), far above the
few hundred bytes of kube-scheduler's heads."""


_HEAD_TOO_LARGE = f"Request line and headers over {MAX_HEAD_BYTES} bytes."


class _HeadTooLarge(Exception):
    """Raised from a parser callback: the head passed ``MAX_HEAD_BYTES``."""


def bounded_protocol(max_connections: int, first_byte_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's ``HttpToolsProtocol`` with a cap on open connections, a deadline for each request's head
    and a cap on its size.

    The head deadline is uvicorn's own keep-alive timer, armed at once on a new connection (for
    ``first_byte_timeout``) as uvicorn arms it after each answer, and cancelled when a head is whole
    instead of on the first byte: a client trickling its headers a byte at a time is closed like a
    silent one, with no timer per request beyond the one uvicorn already keeps."""
    import httptools
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # the server's, imported when built

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        head_open = True
        """Whether the parser is between requests or inside a head (so the bytes arriving are head)."""
        head_bytes = 0
        """Bytes received while the head is open (a head still arriving)."""
        header_bytes = 0
        """The head's parsed headers, in bytes (a head that came whole in one read)."""
        half_closed = False
        """Whether the client has shut its side for writing, waiting for its answers."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                transport.abort()  # connection_lost removes it from the shared set
                _CONNECTIONS_REFUSED.note(len(self.connections))
                return
            # The keep-alive timer uvicorn starts after a response, started at once: a head that is
            # whole cancels it, and its handler closes a connection that has sent none.
            self.timeout_keep_alive_task = self.loop.call_later(
                first_byte_timeout, self.timeout_keep_alive_handler
            )

        def _should_upgrade(self) -> bool:
            return False  # no WebSocket here: an upgrade request is answered as plain HTTP

        def data_received(self, data: bytes) -> None:
            # uvicorn's, less its cancelling of the keep-alive timer on any byte (on_headers_complete
            # does it), plus the head's size: llhttp parses a head of any size, and httptools and uvicorn
            # keep it all. Bytes that come while a head is open count here, since httptools holds a
            # header still arriving where on_header does not see it.
            if self.head_open:
                self.head_bytes += len(data)
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                pass  # the request was answered as plain HTTP (see _should_upgrade)
            except httptools.HttpParserError as exc:
                too_large = isinstance(exc.__context__, _HeadTooLarge)
                msg = _HEAD_TOO_LARGE if too_large else "Invalid HTTP request received."
                self.logger.warning(msg)
                self.send_400_response(msg)
                return
            if self.head_open and self.head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self.logger.warning(_HEAD_TOO_LARGE)
                self.send_400_response(_HEAD_TOO_LARGE)

        def on_header(self, name: bytes, value: bytes) -> None:
            self.header_bytes += len(name) + len(value) + 4  # a whole head that came in one read counts here
            if self.header_bytes > MAX_HEAD_BYTES:
                raise _HeadTooLarge  # httptools ends the parsing with an error naming it as the cause
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            if self.header_bytes + len(self.url) > MAX_HEAD_BYTES:
                raise _HeadTooLarge
            self.head_open, self.head_bytes, self.header_bytes = False, 0, 0
            self._unset_keepalive_if_required()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self.head_open = True  # what follows is the next request's head
            super().on_message_complete()

        def eof_received(self) -> bool | None:
            # A client that sent whole requests and then shut its side for writing still reads their
            # answers (uvicorn closes at once, and the answers are lost); one that stops inside a request
            # can never finish it, so the connection closes and the request sees the disconnect.
            cycle = self.cycle
            if cycle is None or cycle.more_body or (cycle.response_complete and not self.pipeline):
                return None
            self.half_closed = True
            return True  # keep the transport open for writing; on_response_complete closes it

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if self.half_closed and not self.pipeline and self.cycle.response_complete:
                self.transport.close()

    return BoundedHttpToolsProtocol


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
