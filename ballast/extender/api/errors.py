"""One error body everywhere: ``{"error", "field"?, "reason"?}``, the shape the verbs' 400s use.

Starlette's own answers (404 for an unknown path, 405 for a wrong method, 500 for a fault) would otherwise
be ``{"detail": ...}`` or plain text; a person or a scheduler reading an error sees one shape.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.routing import Match

from ballast.extender.api.responses import JSONBytes, error

log = logging.getLogger("ballast.api")


def install(app: FastAPI) -> None:
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _fault)


def _is_endpoint(request: Request, path: str) -> bool:
    """Whether some route answers ``path`` (with any method)."""
    scope = {**request.scope, "path": path}
    return any(route.matches(scope)[0] != Match.NONE for route in request.app.router.routes)


async def _http_error(request: Request, exc: HTTPException) -> JSONBytes:
    path = request.url.path
    if exc.status_code == 404:
        reason = f"no endpoint {path}"
        trimmed = path.rstrip("/")
        if trimmed != path and trimmed and _is_endpoint(request, trimmed):
            reason += f"; did you mean {trimmed} (without the trailing slash)?"
        else:
            reason += "; the endpoints are listed at /docs"
        response = error(404, "path", reason)
    elif exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        response = error(405, "method", f"{request.method} is not allowed on {path}; use {allowed}")
    else:
        response = JSONBytes(
            {"error": str(exc.detail), "reason": str(exc.detail)}, status_code=exc.status_code
        )
    for name, value in (exc.headers or {}).items():
        response.headers[name] = value
    return response


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONBytes:
    first = exc.errors()[0] if exc.errors() else {}
    field = ".".join(str(p) for p in first.get("loc", ())) or "body"
    return error(400, field, str(first.get("msg", "invalid request")))


async def _fault(request: Request, exc: Exception) -> JSONBytes:
    log.error("%s %s: internal error", request.method, request.url.path, exc_info=exc)
    reason = f"{type(exc).__name__}: {exc}"
    return JSONBytes({"error": f"internal error: {reason}", "reason": reason}, status_code=500)
