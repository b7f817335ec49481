"""Why did my pod go there? Read-only views for people debugging with curl."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request

from ballast.extender.api.responses import JSONBytes, error
from ballast.extender.api.state import services
from ballast.extender.explain import PLAIN_POD, explain, explain_node, rank_views, round_projected
from ballast.extender.extender import Extender
from ballast.extender.remembered import REMEMBER_CAP, REMEMBER_SECONDS
from ballast.extender.wire import parse_extender_args
from ballast.model.bad_request import BadRequest
from ballast.model.nodestate import NodeState

log = logging.getLogger("ballast.api")

router = APIRouter(tags=["debugging"])


@router.get(
    "/nodes",
    summary="Every known node: metrics, hot value, estimated extra usage, verdict and score",
    description="Nodes come from the watch-driven cache, or without cluster access from recent whole-node "
    "requests: a node not sent again within `remembered.ttlSeconds` is forgotten, and at most "
    "`remembered.cap` are kept. The verdict and score are for a pod that requests nothing; under relative "
    "scoring the score ranks the nodes shown among themselves (craneScore keeps crane's absolute score).",
)
async def nodes(request: Request) -> JSONBytes:
    ext = services(request).extender
    now = ext.clock()
    names = ext.known_names()
    views = [_view(ext, load, now) for n in names if (load := ext.known_node(n)) is not None]
    rank_views(views, ext.store.current)
    head: dict[str, object] = {"source": "cache", "mode": ext.store.current.mode}
    if ext.source is None:
        head = {
            "mode": ext.store.current.mode,
            "source": "requests",
            "remembered": {
                "from": "whole-node requests",
                "ttlSeconds": REMEMBER_SECONDS,
                "cap": REMEMBER_CAP,
            },
        }
    return JSONBytes(head | {"count": len(views), "nodes": views})


def _view(ext: Extender, load: NodeState, now: float) -> dict[str, Any]:
    """One node's view; a node that cannot be explained is shown with the error, never a 500 for all."""
    try:
        return explain_node(ext, load, PLAIN_POD, now)
    except Exception as exc:
        log.exception("/nodes: could not explain node %s", load.name)
        return {"name": load.name, "error": f"{type(exc).__name__}: {exc}"}


@router.get(
    "/nodes/{name}",
    summary="One node, as in /nodes",
    responses={
        404: {
            "description": "Unknown node",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
        }
    },
)
async def node(request: Request, name: str) -> JSONBytes:
    ext = services(request).extender
    load = ext.known_node(name)
    if load is None:
        return error(
            404, "name", f"node {name!r} is not known to this extender (not in the cache or any request)"
        )
    view = explain_node(ext, load, PLAIN_POD, ext.clock())
    round_projected(view)
    return JSONBytes(view)


@router.post(
    "/explain",
    summary="Explain filter and score for a pod",
    description="Body shaped like ExtenderArgs: `Pod`, plus `NodeNames` or `Nodes`; with neither, every "
    "known node. Answers per node pass/fail with the reason and the score broken down by metric, hot "
    "value and estimated usage of recently placed pods.",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ExtenderArgs"}}},
        }
    },
)
async def explain_route(request: Request) -> JSONBytes:
    ext = services(request).extender
    try:
        args = parse_extender_args(await request.body(), require_nodes=False)
        return JSONBytes(explain(ext, args.pod, args.node_names, args.nodes))
    except BadRequest as exc:
        return error(400, exc.field, exc.reason)
