"""Logging set-up shared by every Ballast command: text for people, JSON lines for log pipelines."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import orjson

LEVELS = ("debug", "info", "warning", "error")


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The extender logs its own access line (ballast.extender.api.access); uvicorn's would double every call.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
