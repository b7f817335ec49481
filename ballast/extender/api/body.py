"""Read a verb's request body with a size cap and a deadline.

Starlette's ``request.body()`` buffers whatever arrives, however large and however slowly: a 100 MB body
peaked near 1 GB of memory, and a client sending one byte now and then held its connection forever. Here
a declared ``Content-Length`` over the cap is refused before any byte is read, the streamed bytes are
counted so a body without (or lying about) its length is cut off as soon as it passes the cap, and the
whole body must arrive within ``deadline`` seconds.
"""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import ClientDisconnect

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
DEFAULT_BODY_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_BODY_BYTES_IN_FLIGHT = 128 * 1024 * 1024
"""Request body bytes held at once across all requests (two bodies of the largest size)."""


class BodyBudget:
    """Bytes of request bodies held at once, across requests, from the first chunk read until the
    request is answered. The per-request cap alone let 12 concurrent 60 MiB bodies take RSS to 785 MiB.
    Used from the event loop only (no lock needed)."""

    def __init__(self, limit: int = DEFAULT_MAX_BODY_BYTES_IN_FLIGHT) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> None:
        if self.held + size > self.limit:
            raise BodyBudgetExceeded(self.limit)
        self.held += size

    def give(self, size: int) -> None:
        self.held = max(0, self.held - size)


class BodyBudgetExceeded(Exception):
    """Other requests hold the bytes in flight allowed: answer 503 (kube-scheduler retries)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(
            f"request bodies in flight would pass {limit} bytes (--max-body-bytes-in-flight); try again"
        )


class BodyTooLarge(Exception):
    """The body is (or declares itself) larger than the cap: answer 413."""

    def __init__(self, limit: int, declared: int | None = None) -> None:
        self.limit = limit
        self.declared = declared
        size = f"{declared} bytes declared" if declared is not None else "more bytes sent"
        super().__init__(f"{size}; the limit is {limit} bytes (--max-body-bytes)")


class BodyTimeout(Exception):
    """The body did not arrive in time: answer 408 and close the connection."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"the request body did not arrive within {seconds:g}s")


class _Deadlines:
    """Body reads in flight on one event loop and when each must be done, behind one timer.

    ``asyncio.timeout`` around every read cost each request a timeout object, a timer and its cancelling
    (about a tenth of a verb's own CPU under a drain); here a read is a dict entry, and the one timer
    fires at the earliest deadline still pending, cancels every read past its own and re-arms for the
    next. A cancelled read learns from ``late`` that it was its deadline, not its caller, that ended it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.reads: dict[asyncio.Task, float] = {}
        self.late: set[asyncio.Task] = set()
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = math.inf

    def start(self, task: asyncio.Task, seconds: float) -> None:
        until = self.loop.time() + seconds
        self.reads[task] = until
        if until < self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer_at = until
            self.timer = self.loop.call_at(until, self._fire)

    def done(self, task: asyncio.Task) -> bool:
        """The read is over; whether its deadline had cancelled it."""
        self.reads.pop(task, None)
        if task in self.late:
            self.late.discard(task)
            return True
        return False

    def _fire(self) -> None:
        self.timer, self.timer_at = None, math.inf
        now = self.loop.time()
        for task, until in list(self.reads.items()):
            if until <= now:
                del self.reads[task]
                self.late.add(task)
                task.cancel()
        if self.reads:
            self.timer_at = min(self.reads.values())
            self.timer = self.loop.call_at(self.timer_at, self._fire)


_deadlines: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Deadlines] = weakref.WeakKeyDictionary()


def _deadlines_here() -> _Deadlines:
    """This loop's deadlines (a server runs one loop; tests start several, one after another)."""
    loop = asyncio.get_running_loop()
    found = _deadlines.get(loop)
    if found is None:
        found = _deadlines[loop] = _Deadlines(loop)
    return found


def _declared_length(scope: Mapping[str, Any]) -> int | None:
    for name, value in scope.get("headers") or ():
        if name == b"content-length":
            text = value.strip()
            return int(text) if text.isdigit() else None
    return None


async def read_body(
    scope: Mapping[str, Any],
    receive: Callable[[], Awaitable[Mapping[str, Any]]],
    limit: int,
    deadline: float,
    budget: BodyBudget | None = None,
) -> bytes:
    """The whole body of the ASGI request ``scope``, read from ``receive``, or ``BodyTooLarge`` /
    ``BodyTimeout`` / ``BodyBudgetExceeded``, or ``ClientDisconnect`` when the caller goes away. With
    ``budget``, the body's bytes stay taken from it when this returns: the caller gives ``len(body)``
    back once the request is answered.

    Straight from ASGI messages, not through Starlette's ``Request.stream()``: a verb's body nearly
    always comes whole in one message, and the request object, its header mapping and the stream's
    generator cost more than reading that message."""
    declared = _declared_length(scope)
    if declared is not None and declared > limit:
        raise BodyTooLarge(limit, declared)
    chunks: list[bytes] = []
    size = 0
    task = asyncio.current_task()
    assert task is not None
    deadlines = _deadlines_here()
    deadlines.start(task, deadline)
    try:
        while True:
            message = await receive()
            kind = message["type"]
            if kind == "http.disconnect":
                raise ClientDisconnect()
            if kind != "http.request":
                continue
            chunk = message.get("body", b"")
            if chunk:
                if size + len(chunk) > limit:
                    raise BodyTooLarge(limit)
                if budget is not None:
                    budget.take(len(chunk))
                size += len(chunk)
                chunks.append(chunk)
            if not message.get("more_body", False):
                break
    except asyncio.CancelledError as exc:
        if budget is not None:
            budget.give(size)
        # The deadline's own cancellation becomes the timeout; one from anywhere else stays what it is.
        if deadlines.done(task) and task.uncancel() == 0:
            raise BodyTimeout(deadline) from exc
        raise
    except BaseException:
        deadlines.done(task)
        if budget is not None:
            budget.give(size)
        raise
    deadlines.done(task)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
