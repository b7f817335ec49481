"""The extender verbs kube-scheduler calls, defined once: ``VERBS``, one entry per verb with its path, how
it runs (read the body, decide, encode) and how the OpenAPI page describes it. The verb router
(``ballast.extender.api.verb_router``) answers from this table, FastAPI's routes for the verbs and so the
OpenAPI page (``ballast.extender.api.openapi``) are made from it, and the access log names requests by it.
Decisions live in ``ballast.extender.extender``, the answers' bytes in ``ballast.extender.encode``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ballast.extender import encode
from ballast.extender.api.state import Services
from ballast.extender.wire import (
    Scores,
    filter_result,
    parse_binding_args,
    parse_extender_args,
    parse_object,
)


@dataclass(frozen=True, slots=True)
class Verb:
    """One verb as an app runs it, made from its ``VerbSpec`` for that app's services."""

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


@dataclass(frozen=True, slots=True)
class VerbSpec:
    """One verb as the table defines it."""

    path: str
    name: str
    """Its name in metrics and the access log."""
    build: Callable[[Services, str], Verb]
    """How it runs for an app's services (given its ``name``)."""
    operation: str
    """Its route's name, from which FastAPI makes the OpenAPI ``operationId``
    (``filter_nodes_filter_post``)."""
    args: str
    """The schema (in the OpenAPI components) of its request body."""
    result: str
    """The schema of its answer."""
    summary: str
    description: str


def _filter(svc: Services, name: str) -> Verb:
    ext = svc.extender
    return Verb(
        name,
        lambda body: ext.answering(ext.filter, parse_extender_args(body)),
        encode.dumps,
        lambda msg: filter_result(error=msg),
        after=ext.settle,
    )


def _prioritize(svc: Services, name: str) -> Verb:
    ext = svc.extender
    return Verb(
        name,
        lambda body: ext.answering(ext.prioritize, parse_extender_args(body)),
        encode.ScoreAnswers(ext.board, ext.source.node_listeners if ext.source is not None else None),
        lambda msg: Scores([], []),
        after=ext.settle,
    )


def _preempt(svc: Services, name: str) -> Verb:
    ext = svc.extender
    return Verb(
        name,
        lambda body: ext.preempt(parse_object(body, "ExtenderPreemptionArgs")),
        encode.dumps,
        lambda msg: {"NodeNameToMetaVictims": {}},
    )


def _bind(svc: Services, name: str) -> Verb:
    binder = svc.binder

    async def bind_(body: bytes) -> dict[str, str]:
        args = parse_binding_args(body)
        if binder is None:
            return {
                "Error": "this extender has no cluster access (start it with --kubeconfig or in a cluster); "
                "remove bindVerb from the scheduler config or give it access"
            }
        return {"Error": await binder.bind(args)}

    return Verb(name, bind_, encode.dumps, lambda msg: {"Error": msg}, awaited=True)


VERBS: tuple[VerbSpec, ...] = (
    VerbSpec(
        "/filter",
        "filter",
        _filter,
        operation="filter_nodes",
        args="ExtenderArgs",
        result="ExtenderFilterResult",
        summary="Filter nodes by real load",
        description=(
            "kube-scheduler's filter call. With `Nodes` (nodeCacheCapable: false) the passing Node "
            "objects come back unchanged in `Nodes`; with `NodeNames` (nodeCacheCapable: true) the passing "
            "names come back in `NodeNames`. Rejected nodes are in `FailedNodes` with a reason naming the "
            "metric, its value, the limit and the value's age."
        ),
    ),
    VerbSpec(
        "/prioritize",
        "prioritize",
        _prioritize,
        operation="prioritize_nodes",
        args="ExtenderArgs",
        result="HostPriorityList",
        summary="Score nodes 0..10 by real load",
        description=(
            'kube-scheduler\'s prioritize call: `[{"Host": name, "Score": 0..10}]`. By default '
            "(`scoring: relative`) the candidates are ranked by their projected load after this pod "
            "(weighted load of the priority metrics plus estimates plus hot value / 10): the least loaded "
            "scores 10 (alone unless tied), every other candidate 7 down to 0 for the most loaded, linear "
            "between; the pod's estimate is held on the best one until its bind. With `scoring: crane`, "
            "crane's weighted least-used formula minus the hot-value penalty, mapped from 0..100 to 0..10."
        ),
    ),
    VerbSpec(
        "/preempt",
        "preempt",
        _preempt,
        operation="preempt",
        args="ExtenderPreemptionArgs",
        result="ExtenderPreemptionResult",
        summary="Drop preemption candidates that would stay overloaded",
        description=(
            "kube-scheduler's preempt call. Candidate nodes whose load would still be over a limit after the "
            "victims leave are dropped (preempting there cannot help); the others come back with the same "
            "victims as `NodeNameToMetaVictims`. Accepts `NodeNameToVictims` (whole pods) or "
            "`NodeNameToMetaVictims` (UIDs)."
        ),
    ),
    VerbSpec(
        "/bind",
        "bind",
        _bind,
        operation="bind",
        args="ExtenderBindingArgs",
        result="ExtenderBindingResult",
        summary="Bind the pod (after writing its NUMA topology result)",
        description=(
            "kube-scheduler's bind call: Ballast creates the pod's Binding through the API. Errors from the "
            "API (409 conflict, 404 pod gone, timeouts) come back in `Error` with the API server's message. "
            "Needs cluster access (`--kubeconfig` or in-cluster)."
        ),
    ),
)
"""kube-scheduler's verbs, in the order the OpenAPI page lists them."""


def verbs_for(svc: Services) -> dict[str, Verb]:
    """Every verb of ``VERBS`` as it runs for ``svc``, by path: the verb router and FastAPI's routes share
    these (and so prioritize's encoded fragments)."""
    return {spec.path: spec.build(svc, spec.name) for spec in VERBS}
