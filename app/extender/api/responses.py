"""Responses as orjson bytes: the extender answers with large node lists, so serialisation matters."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import Response


class JSONBytes(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error(status: int, field: str, reason: str) -> JSONBytes:
    return JSONBytes({"error": f"{field}: {reason}", "field": field, "reason": reason}, status_code=status)
