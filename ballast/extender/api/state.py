"""What the routes need, passed in through ``app.state`` rather than imported globals."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from ballast.extender.api.body import DEFAULT_BODY_TIMEOUT_SECONDS, DEFAULT_MAX_BODY_BYTES, BodyBudget
from ballast.extender.extender import Extender
from ballast.extender.metrics import ExtenderMetrics
from ballast.model.policy_store import PolicyStore


@dataclass
class Services:
    store: PolicyStore
    metrics: ExtenderMetrics
    extender: Extender
    cache: Any = None
    """The watch-driven cluster cache, when the extender runs with cluster access."""
    binder: Any = None
    """Creates Bindings (``ballast.extender.bind``), when the extender runs with cluster access."""
    readiness: list[Callable[[], str | None]] = field(default_factory=list)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Larger request bodies are refused with 413 (``--max-body-bytes``)."""
    body_timeout: float = DEFAULT_BODY_TIMEOUT_SECONDS
    """A request body must arrive within this many seconds, else 408 (``--body-timeout``)."""
    body_budget: BodyBudget = field(default_factory=BodyBudget)
    """Request body bytes held at once across requests, else 503 (``--max-body-bytes-in-flight``)."""
    """Checks for /readyz: each returns ``None`` when ready, else why not."""


def services(request: Request) -> Services:
    return request.app.state.services
