"""``LoopReflector``: a ``Reflector`` whose watch stream is read on the event loop it is started from.

The extender serves every request from one event loop. A reflector in its own thread wakes at every event
of its collection and takes the GIL from the loop and gives it back; for the pod watch, which has events
at every step of every pod (created, bound, started), that thread and its hand-offs cost about as much as
the extender's own decisions under a kube-scheduler drain (``bench/cluster_bench.py``'s thread table).
Here the watch is read on the loop over the lean transport (``AsyncKube.watch``: asyncio streams, llhttp
undoing the chunked encoding), and each event goes to the handler there, between two requests.

Everything else is ``Reflector``'s, shared rather than copied: the resourceVersion and bookmarks, ``410``
-> relist, the stall bound (a watch silent that long is ``WatchStalled``, relisted), the backoff, stats
and ``problem``. Lists are rare (at the start, every resync, after a ``410`` or a stall) and paged; they
run in a worker thread through the official client, as ``Reflector`` runs them, so a relist of a large
collection never holds the loop.

Started outside a running event loop, or where the lean transport cannot serve the configuration (a
proxy), it is a plain ``Reflector`` in its own thread.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from common.kube import Handler, Kube, Reflector
from common.kube_async import AsyncKube


class LoopReflector(Reflector):
    def __init__(self, kube: Kube, path: str, handler: Handler, **kw: Any) -> None:
        super().__init__(kube, path, handler, **kw)
        self.lean = AsyncKube.lean(self.kube)
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def on_loop(self) -> bool:
        """Whether the watch is read on an event loop (else in a thread, as ``Reflector``)."""
        return self._task is not None

    def start(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or self.lean.transport is None:
            super().start()
            return
        self._loop = loop
        self._task = loop.create_task(self._run_on_loop(), name=f"reflector-{self.name}")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop from any thread: the loop's task is cancelled on its loop (a stream ends with it)."""
        self._stop.set()
        task, loop = self._task, self._loop
        if task is not None and loop is not None and not loop.is_closed():
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                task.cancel()
            else:
                loop.call_soon_threadsafe(task.cancel)
        super().stop(timeout)

    async def _run_on_loop(self) -> None:
        """``Reflector.run``, awaited: the same decisions (``_failure``) with the waits on the loop."""
        need_list = True
        backoff = self.backoff_initial
        last_list = 0.0
        while not self._stop.is_set():
            try:
                if need_list or time.monotonic() - last_list >= self.resync_seconds:
                    await asyncio.to_thread(self._relist)
                    need_list = False
                    last_list = time.monotonic()
                need_list = await self._watch_on_loop(last_list)
                backoff = self.backoff_initial
            except Exception as exc:
                if self._stop.is_set():
                    return
                need_list, backoff, pause = self._failure(exc, need_list, backoff)
                if pause:
                    await asyncio.sleep(pause)

    async def _watch_on_loop(self, last_list: float) -> bool:
        """Watch until the stream ends; return True when a relist is needed."""
        params, timeout = self._watch_params(last_list)
        await self.lean.watch(self.path, params, timeout, self._event, self.stall_seconds, self._opened)
        return False
