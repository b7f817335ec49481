"""The extender as served: a plain ASGI app composed of named parts, each handing on what it does not
answer.

    access log (``AccessLogged``)  ->  verb router (``VerbRouter``)  ->  FastAPI (``api``)

Every HTTP request is recorded by the access log; kube-scheduler's verbs are answered by the verb router
from the verb table (``ballast.extender.api.verbs``); everything else (probes, metrics, /nodes, /explain,
the docs, the lifespan) is FastAPI's. The parts are given whole to the constructor: nothing is wired
after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI

from ballast.extender.api.access import AccessLog, AccessLogged
from ballast.extender.api.state import Services
from ballast.extender.api.verb_router import VerbRouter
from ballast.extender.api.verbs import Verb


class ExtenderApp:
    def __init__(self, svc: Services, verbs: Mapping[str, Verb], api: FastAPI, access: AccessLog) -> None:
        """``verbs`` by path (``ballast.extender.api.verbs.verbs_for(svc)``), the ones ``api``'s routes
        for the verbs answer with too."""
        self.api = api
        """FastAPI, for everything but the verbs (its lifespan runs the watches and background tasks)."""
        self.access = access
        self.verb_router = VerbRouter(svc, verbs, fallback=api)
        self.state = api.state
        """FastAPI's state, so ``app.state.services`` reads the same on the whole app."""
        self._entry = AccessLogged(self.verb_router, access)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self._entry(scope, receive, send)

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI document, as ``/openapi.json`` serves it."""
        return self.api.openapi()
