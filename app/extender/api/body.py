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


async def read_body(request: Request, limit: int, deadline: float) -> bytes:
    """The whole body, or ``BodyTooLarge`` / ``BodyTimeout`` (``ClientDisconnect`` passes through)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit, int(declared))
    chunks: list[bytes] = []
    size = 0

    async def collect() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(limit)
            chunks.append(chunk)

    # asyncio.timeout, not wait_for: wait_for runs the read in a task of its own, which costs a task and
    # extra event loop turns on every request; a timeout scope cancels this task only when it fires.
    try:
        async with asyncio.timeout(deadline):
            await collect()
    except TimeoutError as exc:
        raise BodyTimeout(deadline) from exc
    return b"".join(chunks)
