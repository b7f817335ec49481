"""The extender verbs kube-scheduler calls. Routes only translate HTTP; decisions live in
``ballast.extender.extender``.

Every failure becomes a clear answer: 400 with ``{"error", "field", "reason"}`` for a request Ballast
cannot read, and for an unexpected fault a logged traceback plus an answer kube-scheduler understands
(``Error`` for filter, an empty score list for prioritize), never a 500.
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
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from ballast.extender import encode
from ballast.extender.api.body import BodyBudgetExceeded, BodyTimeout, BodyTooLarge, read_body
from ballast.extender.api.responses import Answer, JSONBytes, error
from ballast.extender.api.state import Services, services
from ballast.extender.wire import (
    Scores,
    filter_result,
    parse_binding_args,
    parse_extender_args,
    parse_object,
)
from ballast.model.bad_request import BadRequest

log = logging.getLogger("ballast.api")
router = APIRouter(tags=["extender verbs"])


def _body_doc(schema: str) -> dict[str, Any]:
    """The request body; its examples are filled per request of the document (``ballast.extender.main``)."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{schema}"}}},
        }
    }


def _responses(model: str) -> dict[int | str, dict[str, Any]]:
    return {
        200: {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{model}"}}}},
        400: {
            "description": "The body could not be used; names the field and the reason",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
        },
    }


def _verb(path: str, args: str, result: str, summary: str, description: str) -> Callable[[Any], Any]:
    """A verb's route: POST ``path`` taking the ``args`` schema and answering the ``result`` schema."""
    return router.post(
        path,
        summary=summary,
        description=description,
        openapi_extra=_body_doc(args),
        responses=_responses(result),
        response_class=JSONBytes,
    )


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


@dataclass(frozen=True, slots=True)
class Verb:
    """One verb as the routes and the fast path (``VerbFastPath``) both run it."""

    name: str
    decide: Callable[[bytes], Any]
    """The body in, the answer out as plain values."""
    encode: Callable[[Any], bytes]
    """The answer (or ``on_fault``'s) as the JSON bytes kube-scheduler reads (``ballast.extender.encode``)."""
    on_fault: Callable[[str], Any]
    """The answer kube-scheduler understands for an unexpected fault, given its message."""
    awaited: bool = False
    """``decide`` is a coroutine function (the bind verb: it awaits its API calls on the loop)."""
    after: Callable[[], None] | None = None
    """Work the answer need not wait for (``Extender.settle``): run once it is sent."""


async def _run(request: Request, verb: Verb) -> Response:
    response = await answer(services(request), request.scope, request.receive, verb)
    _after(verb, response)
    return response


def _after(verb: Verb, response: Response | None = None) -> None:
    """Run the verb's work that waits for its answer; a fault there is logged, never a second answer.
    After a huge request, memory goes back to the system in a worker thread (``release_memory``)."""
    if response is not None and getattr(response, "huge", False):
        asyncio.get_running_loop().run_in_executor(None, release_memory)
    if verb.after is not None:
        try:
            verb.after()
        except Exception:
            log.exception("%s: work after the answer failed", verb.name)


async def answer(svc: Services, scope: dict[str, Any], receive: Any, verb: Verb) -> Response:
    """Answer one verb: read the body, decide (awaited when it calls the API), count and time.
    The body's bytes count against the bytes in flight until the answer is ready, however it ends."""
    held = [0]
    try:
        return await _answer(svc, scope, receive, verb, held)
    finally:
        svc.body_budget.give(held[0])


async def _answer(
    svc: Services, scope: dict[str, Any], receive: Any, verb: Verb, held: list[int]
) -> Response:
    start = time.perf_counter()
    code = "200"
    name = verb.name
    try:
        body = await read_body(scope, receive, svc.max_body_bytes, svc.body_timeout, svc.body_budget)
        held[0] = len(body)
        if verb.awaited:
            result = await verb.decide(body)
        else:
            result = _without_cyclic_gc(verb.decide, body)
        response = Answer(verb.encode(result))
        if len(body) >= RELEASE_AFTER_BYTES:
            response.huge = True  # type: ignore[attr-defined]
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
    return response


def _filter_verb(svc: Services) -> Verb:
    ext = svc.extender
    return Verb(
        "filter",
        lambda body: ext.answering(ext.filter, parse_extender_args(body)),
        encode.dumps,
        lambda msg: filter_result(error=msg),
        after=ext.settle,
    )


def _prioritize_verb(svc: Services) -> Verb:
    ext = svc.extender
    return Verb(
        "prioritize",
        lambda body: ext.answering(ext.prioritize, parse_extender_args(body)),
        encode.ScoreAnswers(ext.board),
        lambda msg: Scores([], []),
        after=ext.settle,
    )


def _preempt_verb(svc: Services) -> Verb:
    ext = svc.extender
    return Verb(
        "preempt",
        lambda body: ext.preempt(parse_object(body, "ExtenderPreemptionArgs")),
        encode.dumps,
        lambda msg: {"NodeNameToMetaVictims": {}},
    )


def _bind_verb(svc: Services) -> Verb:
    binder = svc.binder

    async def bind_(body: bytes) -> dict[str, str]:
        args = parse_binding_args(body)
        if binder is None:
            return {
                "Error": "this extender has no cluster access (start it with --kubeconfig or in a cluster); "
                "remove bindVerb from the scheduler config or give it access"
            }
        return {"Error": await binder.bind(args)}

    return Verb("bind", bind_, encode.dumps, lambda msg: {"Error": msg}, awaited=True)


VERBS: dict[str, Callable[[Services], Verb]] = {
    "/filter": _filter_verb,
    "/prioritize": _prioritize_verb,
    "/preempt": _preempt_verb,
    "/bind": _bind_verb,
}
"""Each verb's path and how to build it; the routes below and ``VerbFastPath`` use the same builders."""


class VerbFastPath:
    """``POST`` to a verb's exact path, answered by ``answer`` straight from the ASGI scope.

    kube-scheduler calls these on its critical path, once per pod per verb. Through FastAPI every call also
    passes its middleware stack, the router's matching, the endpoint's dependency solving and a response
    wrapper, which cost several times what the echo extender's whole request does (measured in-process:
    ~200 us of a 250 us filter). Nothing there applies to these routes: they validate nothing, turn every
    failure into an answer themselves (``answer`` never raises), and return a plain response. So the same
    ``answer`` runs here with the same ``Verb``; anything else (other methods, other paths, a trailing
    slash, a mounted root path) goes to ``fallback``, the whole FastAPI app, whose routes stay the
    definition and carry the OpenAPI document.
    """

    def __init__(self, svc: Services, fallback: Callable[..., Awaitable[None]]) -> None:
        self.svc = svc
        self.fallback = fallback
        self.verbs = {path: make(svc) for path, make in VERBS.items()}

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        verb = (
            self.verbs.get(scope["path"])
            if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path")
            else None
        )
        if verb is None:
            await self.fallback(scope, receive, send)
            return
        response = await answer(self.svc, scope, receive, verb)
        try:
            await response(scope, receive, send)
        finally:
            _after(verb, response)


@_verb(
    "/filter",
    "ExtenderArgs",
    "ExtenderFilterResult",
    summary="Filter nodes by real load",
    description=(
        "kube-scheduler's filter call. With `Nodes` (nodeCacheCapable: false) the passing Node objects come "
        "back unchanged in `Nodes`; with `NodeNames` (nodeCacheCapable: true) the passing names come back in "
        "`NodeNames`. Rejected nodes are in `FailedNodes` with a reason naming the metric, its value, the "
        "limit and the value's age."
    ),
)
async def filter_nodes(request: Request):
    return await _run(request, _filter_verb(services(request)))


@_verb(
    "/prioritize",
    "ExtenderArgs",
    "HostPriorityList",
    summary="Score nodes 0..10 by real load",
    description=(
        'kube-scheduler\'s prioritize call: `[{"Host": name, "Score": 0..10}]`. By default '
        "(`scoring: relative`) the candidates are ranked by their projected load after this pod (weighted "
        "load of the priority metrics plus estimates plus hot value / 10): the least loaded scores 10 (alone "
        "unless tied), every other candidate 7 down to 0 for the most loaded, linear between; the pod's "
        "estimate is held on the best one until its bind. With `scoring: crane`, crane's weighted "
        "least-used formula minus the hot-value penalty, mapped from 0..100 to 0..10."
    ),
)
async def prioritize_nodes(request: Request):
    return await _run(request, _prioritize_verb(services(request)))


@_verb(
    "/preempt",
    "ExtenderPreemptionArgs",
    "ExtenderPreemptionResult",
    summary="Drop preemption candidates that would stay overloaded",
    description=(
        "kube-scheduler's preempt call. Candidate nodes whose load would still be over a limit after the "
        "victims leave are dropped (preempting there cannot help); the others come back with the same "
        "victims as `NodeNameToMetaVictims`. Accepts `NodeNameToVictims` (whole pods) or "
        "`NodeNameToMetaVictims` (UIDs)."
    ),
)
async def preempt(request: Request):
    return await _run(request, _preempt_verb(services(request)))


@_verb(
    "/bind",
    "ExtenderBindingArgs",
    "ExtenderBindingResult",
    summary="Bind the pod (after writing its NUMA topology result)",
    description=(
        "kube-scheduler's bind call: Ballast creates the pod's Binding through the API. Errors from the API "
        "(409 conflict, 404 pod gone, timeouts) come back in `Error` with the API server's message. Needs "
        "cluster access (`--kubeconfig` or in-cluster)."
    ),
)
async def bind(request: Request):
    return await _run(request, _bind_verb(services(request)))
