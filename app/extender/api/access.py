"""One INFO line per request (method, path, status, milliseconds), in place of uvicorn's access log.

A plain ASGI middleware rather than ``@app.middleware("http")``: that one wraps every response in a
streaming layer, a cost on the scheduler's critical path. This only watches the status go by.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("ballast.access")


class AccessLog:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_)
        finally:
            ms = (time.perf_counter() - start) * 1000
            log.info("%s %s %d %.1fms", scope["method"], scope["path"], status, ms)
