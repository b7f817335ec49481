"""The OpenAPI page's side of the verbs: FastAPI routes made from the verb table, and the document.

FastAPI describes only the routes it has, so each verb of ``ballast.extender.api.verbs.VERBS`` is also a
FastAPI route: what the page shows, and what answers the verb when the verb router passes it on (a
mounted root path). The routes answer with the same ``Verb`` objects as the router.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from pydantic import TypeAdapter

from ballast.extender import wire
from ballast.extender.api import examples
from ballast.extender.api.answer import after, answer
from ballast.extender.api.responses import JSONBytes
from ballast.extender.api.state import Services
from ballast.extender.api.verbs import VERBS, Verb, VerbSpec


def verb_routes(svc: Services, verbs: Mapping[str, Verb]) -> APIRouter:
    """A FastAPI route per verb of ``VERBS``, answering with ``verbs`` (by path)."""
    router = APIRouter(tags=["extender verbs"])
    for spec in VERBS:
        router.add_api_route(
            spec.path,
            _endpoint(svc, verbs[spec.path]),
            methods=["POST"],
            name=spec.operation,
            summary=spec.summary,
            description=spec.description,
            openapi_extra=_body_doc(spec),
            responses=_responses(spec),
            response_class=JSONBytes,
        )
    return router


def _endpoint(svc: Services, verb: Verb) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        response, answered = await answer(svc, request.scope, request.receive, verb)
        after(verb, answered)
        return response

    return endpoint


def _body_doc(spec: VerbSpec) -> dict[str, Any]:
    """The request body; its examples are filled per request of the document (``openapi``)."""
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{spec.args}"}}},
        }
    }


def _responses(spec: VerbSpec) -> dict[int | str, dict[str, Any]]:
    return {
        200: {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{spec.result}"}}}},
        400: {
            "description": "The body could not be used; names the field and the reason",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
        },
    }


_DOC_MODELS: dict[str, Any] = {
    "ExtenderArgs": wire.ExtenderArgsModel,
    "ExtenderFilterResult": wire.ExtenderFilterResult,
    "HostPriorityList": list[wire.HostPriority],
    "ExtenderBindingArgs": wire.ExtenderBindingArgs,
    "ExtenderBindingResult": wire.ExtenderBindingResult,
    "ExtenderPreemptionArgs": wire.ExtenderPreemptionArgs,
    "ExtenderPreemptionResult": wire.ExtenderPreemptionResult,
    "ErrorBody": wire.ErrorBody,
}


def openapi(app: FastAPI, clock: Callable[[], float]) -> Callable[[], dict[str, Any]]:
    """Describe the wire models in components, since routes read raw bytes for speed.

    The document is built once; each call returns a copy with request examples dated by ``clock``, so
    "Try it out" sends fresh load annotations however long the service has run.
    """

    def base() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        comps = schema.setdefault("components", {}).setdefault("schemas", {})
        for name, model in _DOC_MODELS.items():
            js = TypeAdapter(model).json_schema(ref_template="#/components/schemas/{model}")
            comps.update(js.pop("$defs", {}))
            js["title"] = name
            comps[name] = js
        for ops in schema["paths"].values():
            for op in ops.values():
                _tidy_responses(op.get("responses", {}))
        # No route validates parameters (bodies are parsed by hand into 400s): no 422 can happen.
        comps.pop("HTTPValidationError", None)
        comps.pop("ValidationError", None)
        app.openapi_schema = schema
        return schema

    def build() -> dict[str, Any]:
        schema = copy.deepcopy(base())
        for path, named in examples.request_examples(clock()).items():
            body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]
            body["examples"] = {k: {"summary": k, "value": v} for k, v in named.items()}
        return schema

    return build


def _tidy_responses(responses: dict[str, Any]) -> None:
    """Drop FastAPI's guesses that contradict the declared ones: the 422 of a path parameter that any
    string satisfies, and the ``"type": "string"`` it puts beside a ``$ref`` for a custom response class
    (Swagger UI then shows the model as "string")."""
    responses.pop("422", None)
    for answer_ in responses.values():
        for media in answer_.get("content", {}).values():
            schema = media.get("schema", {})
            if "$ref" in schema:
                media["schema"] = {"$ref": schema["$ref"]}
