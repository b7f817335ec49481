"""The verb router: ``POST`` to a verb's exact path answered straight from the ASGI scope, everything else
passed on to FastAPI.

kube-scheduler calls the verbs on its critical path, once per pod per verb. Through FastAPI every call also
passes its middleware stack, the router's matching, the endpoint's dependency solving and a response
wrapper, which cost several times what the echo extender's whole request does (measured in-process: ~200 us
of a 250 us filter); and FastAPI (0.165) asks OpenTelemetry on every request whether a tracer, meter or
logger provider is set (reading the environment), which with Starlette's entry was a twentieth of a pod's
instructions. Nothing of that applies to the verbs: they validate nothing, turn every failure into an
answer themselves (``answer`` never raises), and return a plain response. So FastAPI's native telemetry,
when an operator configures one, sees every route but the four verbs; Ballast's own metrics count and time
those.

Anything else (other methods, other paths, a trailing slash, a mounted root path, the lifespan) goes to
``fallback``, the FastAPI app, whose routes for the verbs answer with the same ``Verb`` objects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ballast.extender.api.answer import after, answer
from ballast.extender.api.state import Services
from ballast.extender.api.verbs import Verb


class VerbRouter:
    def __init__(
        self, svc: Services, verbs: Mapping[str, Verb], fallback: Callable[..., Awaitable[None]]
    ) -> None:
        """``verbs`` by path (``ballast.extender.api.verbs.verbs_for``)."""
        self.svc = svc
        self.verbs = verbs
        self.fallback = fallback

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        verb = (
            self.verbs.get(scope["path"])
            if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path")
            else None
        )
        if verb is None:
            await self.fallback(scope, receive, send)
            return
        response, answered = await answer(self.svc, scope, receive, verb)
        try:
            await response(scope, receive, send)
        finally:
            after(verb, answered)
