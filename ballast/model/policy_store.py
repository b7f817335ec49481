"""Holds the active policy and reloads it on SIGHUP or when the file changes.

A bad reload never replaces a good policy: the service keeps deciding with the last good one, logs
why the new file was refused, and reports the failure on ``/readyz`` and in a metric until a good
file arrives.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from ballast.model.policy import Policy, PolicyError, load_policy

log = logging.getLogger("ballast.policy")


@dataclass(frozen=True, slots=True)
class ReloadFailure:
    error: str
    at: float


class PolicyMetrics(Protocol):
    """What the store counts: the extender's and the annotator's metrics both have these."""

    policy_reloads: Any
    policy_ok: Any


def policy_reload_metrics(prefix: str, registry: CollectorRegistry) -> tuple[Counter, Gauge]:
    """``{prefix}_policy_reloads_total{result}`` and ``{prefix}_policy_last_reload_ok``, for a program that
    keeps its policy in a ``PolicyStore``."""
    reloads = Counter(
        f"{prefix}_policy_reloads",
        "Policy file reloads by result: ok (now in use) or error (refused, the running policy kept).",
        ["result"],
        registry=registry,
    )
    ok = Gauge(
        f"{prefix}_policy_last_reload_ok",
        "1 when the last policy load succeeded, 0 when it was refused.",
        registry=registry,
    )
    ok.set(1)
    for result in ("ok", "error"):
        reloads.labels(result)  # on /metrics at 0 from the start, for dashboards and alerts
    return reloads, ok


class PolicyStore:
    def __init__(
        self,
        policy: Policy,
        path: str | Path | None = None,
        metrics: PolicyMetrics | None = None,
        check: Callable[[Policy], str | None] | None = None,
    ):
        """``check`` refuses a policy that loads but that this program cannot use (it returns why)."""
        self._policy = policy
        self._check = check
        self.path = Path(path) if path else None
        self.generation = 1
        self.loaded_at = time.time()
        self.failure: ReloadFailure | None = None
        self._metrics = metrics
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._listeners: list = []

    @property
    def current(self) -> Policy:
        return self._policy

    def on_change(self, callback) -> None:
        """Call ``callback(policy)`` after every successful reload (caches reparse annotations)."""
        self._listeners.append(callback)

    def _file_stamp(self) -> tuple[int, int, int] | None:
        if self.path is None:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def set(self, policy: Policy) -> None:
        with self._lock:
            self._policy = policy
            self.generation += 1
            self.loaded_at = time.time()
            self.failure = None
        if self._metrics:
            self._metrics.policy_ok.set(1)
        for cb in self._listeners:
            cb(policy)

    def reload(self, reason: str = "requested") -> bool:
        """Load the file again; return True when a new policy is active."""
        if self.path is None:
            return False
        self._stamp = self._file_stamp()
        try:
            policy = load_policy(self.path)
            if self._check is not None and (problem := self._check(policy)):
                raise PolicyError(str(self.path), [("(policy)", problem)])
        except Exception as exc:
            with self._lock:
                self.failure = ReloadFailure(str(exc), time.time())
            log.error("policy reload (%s) refused, keeping the last good policy: %s", reason, exc)
            if self._metrics:
                self._metrics.policy_reloads.labels("error").inc()
                self._metrics.policy_ok.set(0)
            return False
        self.set(policy)
        log.info("policy reloaded (%s) from %s, generation %d", reason, self.path, self.generation)
        if self._metrics:
            self._metrics.policy_reloads.labels("ok").inc()
        return True

    def reload_if_changed(self) -> bool:
        stamp = self._file_stamp()
        if stamp is None or stamp == self._stamp:
            return False
        return self.reload("file changed")
