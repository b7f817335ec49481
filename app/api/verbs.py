"""The extender verbs kube-scheduler calls. Routes only translate HTTP; decisions live in ``app.extender``.

Every failure becomes a clear answer: 400 with ``{"error", "field", "reason"}`` for a request Ballast
cannot read, and for an unexpected fault a logged traceback plus an answer kube-scheduler understands
(``Error`` for filter, an empty score list for prioritize), never a 500.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.requests import ClientDisconnect

from app.api.body import BodyTimeout, BodyTooLarge, read_body
from app.api.responses import JSONBytes, error
from app.api.state import services
from app.bad_request import BadRequest
from app.wire import filter_result, parse_binding_args, parse_extender_args, parse_object

log = logging.getLogger("ballast.api")
router = APIRouter(tags=["extender verbs"])


def _body_doc(schema: str) -> dict[str, Any]:
    """The request body; its examples are filled per request of the document (``app.main``)."""
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


async def _run(
    request: Request,
    verb: str,
    fn: Callable[[bytes], Any],
    on_fault: Callable[[str], Any],
    threaded: bool = False,
):
    """Answer one verb: read the body, decide (in a thread when ``fn`` does blocking I/O), count and time."""
    svc = services(request)
    start = time.perf_counter()
    code = "200"
    try:
        body = await read_body(request, svc.max_body_bytes, svc.body_timeout)
        if threaded:
            result = await asyncio.to_thread(fn, body)
        else:
            result = _without_cyclic_gc(fn, body)
        response = (
            Response(result, media_type="application/json")
            if isinstance(result, bytes)
            else JSONBytes(result)
        )
    except BadRequest as exc:
        code = "400"
        log.info("%s: bad request: %s", verb, exc)
        response = error(400, exc.field, exc.reason)
    except BodyTooLarge as exc:
        code = "413"
        log.info("%s: body refused: %s", verb, exc)
        response = error(413, "(body)", str(exc))
        response.headers["Connection"] = "close"
    except BodyTimeout as exc:
        code = "408"
        log.info("%s: %s", verb, exc)
        response = error(408, "(body)", str(exc))
        response.headers["Connection"] = "close"
    except ClientDisconnect:
        # The caller went away (a scheduler timeout, a restart): nothing is wrong here.
        code = "disconnect"
        log.info("%s: the client disconnected before sending the whole body", verb)
        response = Response(status_code=400)
    except Exception as exc:  # a bug must not become an HTTP 500 on the scheduler's critical path
        code = "500"  # counted as the fault it is, answered in the shape kube-scheduler understands
        log.exception("%s: internal error", verb)
        response = JSONBytes(on_fault(f"ballast internal error in {verb}: {type(exc).__name__}: {exc}"))
    svc.metrics.requests.labels(verb, code).inc()
    svc.metrics.latency.labels(verb).observe(time.perf_counter() - start)
    return response


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
    ext = services(request).extender
    return await _run(
        request,
        "filter",
        lambda body: ext.filter(parse_extender_args(body)),
        lambda msg: filter_result(error=msg),
    )


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
    ext = services(request).extender
    return await _run(
        request,
        "prioritize",
        lambda body: ext.prioritize(parse_extender_args(body), encoded=True),
        lambda msg: [],
    )


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
    ext = services(request).extender
    return await _run(
        request,
        "preempt",
        lambda body: ext.preempt(parse_object(body, "ExtenderPreemptionArgs")),
        lambda msg: {"NodeNameToMetaVictims": {}},
    )


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
    binder = services(request).binder

    def bind_(body: bytes) -> dict[str, str]:
        args = parse_binding_args(body)
        if binder is None:
            return {
                "Error": "this extender has no cluster access (start it with --kubeconfig or in a cluster); "
                "remove bindVerb from the scheduler config or give it access"
            }
        return {"Error": binder.bind(args)}

    return await _run(request, "bind", bind_, lambda msg: {"Error": msg}, threaded=True)
