"""API calls from a coroutine, for the extender's bind verb: ``AsyncKube``.

kube-scheduler waits on every bind, and the extender serves it from one event loop; a bind that blocked
the loop would hold every filter and prioritize behind its API calls, and a bind run in a worker thread
costs more CPU in the handing over than in its own work. So the bind verb awaits its calls: over the lean
transport (``ballast.kube.lean``) on the loop itself, or, where that transport cannot serve the
configuration (a proxy) or there is none (tests' stand-ins), through the official client in a worker
thread, with the same results and errors either way.

``deadline(seconds)`` bounds every call a task makes inside it by one shared deadline, as ``Kube.deadline``
does for a thread: a verb that makes several calls (bind: a GET, a patch, the Binding) answers within its
budget, however the time is spent; a call that would start after the deadline fails at once with
``ApiError(0, "Timeout")``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from ballast.kube.client import MERGE_PATCH, ApiError, Kube, call_budget, decode_reply
from ballast.kube.lean import LeanTransport, TransportError

_UNTIL: contextvars.ContextVar[float | None] = contextvars.ContextVar("ballast_api_deadline", default=None)


class AsyncKube:
    """JSON requests to the API server, awaited."""

    def __init__(self, kube: Kube, transport: LeanTransport | None = None) -> None:
        self.kube = kube
        """The official client: its timeout, and its calls when there is no transport."""
        self.transport = transport

    @classmethod
    def lean(cls, kube: Kube) -> AsyncKube:
        """Over the lean transport for ``kube``'s configuration, else through ``kube`` in a thread."""
        return cls(kube, LeanTransport.from_api_client(kube.api_client))

    @property
    def timeout(self) -> float:
        return self.kube.timeout

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Every call of this task inside the block shares ``seconds`` (nested blocks keep the earlier)."""
        outer = _UNTIL.get()
        until = time.monotonic() + seconds
        token = _UNTIL.set(until if outer is None else min(outer, until))
        try:
            yield
        finally:
            _UNTIL.reset(token)

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        """One call, one attempt; ``ApiError`` as ``Kube.request`` raises it (no answer: code 0)."""
        budget = call_budget(_UNTIL.get(), self.kube.timeout, method, path)
        if self.transport is None:
            return await asyncio.to_thread(self._threaded, budget, method, path, query, body, content_type)
        payload = None if body is None else orjson.dumps(body)
        try:
            status, reason, data, headers = await self.transport.request(
                method, path, payload, content_type, budget, query
            )
        except TransportError as exc:
            timed_out = isinstance(exc.__cause__, TimeoutError)
            raise ApiError(0, "Timeout" if timed_out else "Unavailable", str(exc)) from exc
        return decode_reply(method, path, status, reason, data, headers)

    def _threaded(
        self,
        budget: float,
        method: str,
        path: str,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str | None,
    ) -> dict[str, Any]:
        with self.kube.deadline(budget):
            return self.kube.request(method, path, query=query, body=body, content_type=content_type)

    async def get(self, path: str, query: Mapping[str, str] | None = None) -> dict[str, Any]:
        return await self.request("GET", path, query=query)

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, body=body)

    async def merge_patch(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", path, body=patch, content_type=MERGE_PATCH)
