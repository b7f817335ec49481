"""Answering one verb call: read the body, decide, encode, count and time; and the work after the answer.

Every failure becomes a clear answer: 400 with ``{"error", "field", "reason"}`` for a request Ballast
cannot read, and for an unexpected fault a logged traceback plus an answer kube-scheduler understands
(``Error`` for filter, an empty score list for prioritize), never a 500. The verb router
(``ballast.extender.api.verb_router``) and FastAPI's routes for the verbs (``ballast.extender.api.openapi``)
both answer through here.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from ballast.extender.api.body import BodyBudgetExceeded, BodyTimeout, BodyTooLarge, read_body
from ballast.extender.api.responses import Answer, error
from ballast.extender.api.state import Services
from ballast.extender.api.verbs import Verb
from ballast.model.bad_request import BadRequest

log = logging.getLogger("ballast.api")

RELEASE_AFTER_BYTES = 8 * 1024 * 1024
"""A request body this large (thousands of whole nodes) leaves memory to hand back once answered."""

_libc: ctypes.CDLL | None = None
with contextlib.suppress(OSError, TypeError):
    _libc = ctypes.CDLL(ctypes.util.find_library("c"))
_releasing = threading.Lock()


def release_memory() -> None:
    """Give freed heap memory back to the system (glibc's ``malloc_trim``; nothing elsewhere).

    A huge whole-node request is parsed into millions of small objects; freed, they stay in the process's
    heap (1.1 GB resident after one 33 MiB request of 10^6 nodes), which the kubelet counts against the
    container's memory limit. Runs in a worker thread after the answer is sent; ctypes releases the GIL.
    """
    if not _releasing.acquire(blocking=False):
        return  # one at a time; the running one releases what this one would
    try:
        gc.collect()
        trim = getattr(_libc, "malloc_trim", None)
        if trim is not None:
            trim(0)
    finally:
        _releasing.release()


def _without_cyclic_gc(fn: Callable[[bytes], Any], body: bytes) -> Any:
    """Run a verb with the cyclic garbage collector paused.

    A whole-node request is a tree of ~100 objects per node (500k at 5000 nodes). While it is alive, every
    young-generation collection triggered by the allocations promotes and re-traverses it: measured, the
    collector doubled the cost of parsing a 5000-node request (232 ms -> 123 ms without it). The tree is
    acyclic and freed by reference counting when the request ends; the collector resumes right after, and
    anything cyclic allocated meanwhile is collected then. Only synchronous verbs pause it (milliseconds).
    """
    if not gc.isenabled():
        return fn(body)
    gc.disable()
    try:
        return fn(body)
    finally:
        gc.enable()


def after(verb: Verb, answered_bytes: int) -> None:
    """Run the verb's work that waits for its answer; a fault there is logged, never a second answer.
    After a huge request (``answered_bytes``, as ``answer`` returns it), memory goes back to the system in
    a worker thread (``release_memory``)."""
    if answered_bytes >= RELEASE_AFTER_BYTES:
        asyncio.get_running_loop().run_in_executor(None, release_memory)
    if verb.after is not None:
        try:
            verb.after()
        except Exception:
            log.exception("%s: work after the answer failed", verb.name)


async def answer(svc: Services, scope: dict[str, Any], receive: Any, verb: Verb) -> tuple[Response, int]:
    """Answer one verb: read the body, decide (awaited when it calls the API), encode, count and time.
    Returns the response and the size of the body it answered (0 for anything but an answer), for
    ``after``. The body's bytes count against the bytes in flight until the answer is ready, however it
    ends."""
    held = [0]
    try:
        return await _answer(svc, scope, receive, verb, held)
    finally:
        svc.body_budget.give(held[0])


async def _answer(
    svc: Services, scope: dict[str, Any], receive: Any, verb: Verb, held: list[int]
) -> tuple[Response, int]:
    start = time.perf_counter()
    code = "200"
    name = verb.name
    answered = 0
    try:
        body = await read_body(scope, receive, svc.max_body_bytes, svc.body_timeout, svc.body_budget)
        held[0] = len(body)
        if verb.awaited:
            result = await verb.decide(body)
        else:
            result = _without_cyclic_gc(verb.decide, body)
        response: Response = Answer(verb.encode(result))
        answered = len(body)
    except BadRequest as exc:
        code = "400"
        log.info("%s: bad request: %s", name, exc)
        response = error(400, exc.field, exc.reason)
    except BodyTooLarge as exc:
        code = "413"
        log.info("%s: body refused: %s", name, exc)
        response = error(413, "(body)", str(exc))
        response.headers["Connection"] = "close"
    except BodyBudgetExceeded as exc:
        code = "503"
        log.info("%s: body refused: %s", name, exc)
        response = error(503, "(body)", str(exc))
        response.headers["Connection"] = "close"
        response.headers["Retry-After"] = "1"
    except BodyTimeout as exc:
        code = "408"
        log.info("%s: %s", name, exc)
        response = error(408, "(body)", str(exc))
        response.headers["Connection"] = "close"
    except ClientDisconnect:
        # The caller went away (a scheduler timeout, a restart): nothing is wrong here.
        code = "disconnect"
        log.info("%s: the client disconnected before sending the whole body", name)
        response = Response(status_code=400)
    except Exception as exc:  # a bug must not become an HTTP 500 on the scheduler's critical path
        code = "500"  # counted as the fault it is, answered in the shape kube-scheduler understands
        log.exception("%s: internal error", name)
        fault = verb.on_fault(f"ballast internal error in {name}: {type(exc).__name__}: {exc}")
        response = Answer(verb.encode(fault))
    svc.metrics.request_done(name, code, time.perf_counter() - start)
    return response, answered
