"""Read a verb's request body with a size cap and a deadline.

Starlette's ``request.body()`` buffers whatever arrives, however large and however slowly: a 100 MB body
peaked near 1 GB of memory, and a client sending one byte now and then held its connection forever. Here
a declared ``Content-Length`` over the cap is refused before any byte is read, the streamed bytes are
counted so a body without (or lying about) its length is cut off as soon as it passes the cap, and the
whole body must arrive within ``deadline`` seconds.
"""

from __future__ import annotations

import asyncio

from fastapi import Request

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


async def read_body(request: Request, limit: int, deadline: float, budget: BodyBudget | None = None) -> bytes:
    """The whole body, or ``BodyTooLarge`` / ``BodyTimeout`` / ``BodyBudgetExceeded``
    (``ClientDisconnect`` passes through). With ``budget``, the body's bytes stay taken from it when
    this returns: the caller gives ``len(body)`` back once the request is answered."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit, int(declared))
    chunks: list[bytes] = []
    size = 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            if size + len(chunk) > limit:
                raise BodyTooLarge(limit)
            if budget is not None:
                budget.take(len(chunk))
            size += len(chunk)
            chunks.append(chunk)

    # asyncio.timeout, not wait_for: wait_for runs the read in a task of its own, which costs a task and
    # extra event loop turns on every request; a timeout scope cancels this task only when it fires.
    try:
        async with asyncio.timeout(deadline):
            await collect()
    except TimeoutError as exc:
        if budget is not None:
            budget.give(size)
        raise BodyTimeout(deadline) from exc
    except BaseException:
        if budget is not None:
            budget.give(size)
        raise
    return b"".join(chunks)
