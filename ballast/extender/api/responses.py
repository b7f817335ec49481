"""Responses as orjson bytes: the extender answers with large node lists, so serialisation matters."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import Response


class JSONBytes(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class Answer(Response):
    """A verb's answer: JSON bytes with their two headers made directly. Starlette's ``Response.__init__``
    works out per response which headers to add (a length? a charset?), twice per pod on kube-scheduler's
    path."""

    media_type = "application/json"

    def __init__(self, body: bytes) -> None:
        self.status_code = 200
        self.background = None
        self.body = body
        self.raw_headers = [(b"content-length", b"%d" % len(body)), (b"content-type", b"application/json")]


def error(status: int, field: str, reason: str) -> JSONBytes:
    return JSONBytes({"error": f"{field}: {reason}", "field": field, "reason": reason}, status_code=status)
