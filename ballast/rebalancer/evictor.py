"""Evictions through ``policy/v1`` (``pods/NAME/eviction``) and the Events that explain and remember them.

The Eviction API is the polite way: the API server checks PodDisruptionBudgets and answers 429 when one
says "not now", naming the budget in a status cause (``details.causes[].reason: DisruptionBudget``). That
is counted (``pdb_blocked``), never forced (no delete), and the pod is simply a candidate again in a later
cycle. A 429 without that cause is the API server throttling (priority and fairness answers a plain-text
429 with ``Retry-After``): counted as ``throttled``, and no eviction call is made before ``Retry-After``.
The eviction carries the pod's UID as a precondition, so a pod recreated under the same name (a
StatefulSet's) is never evicted by a decision made about its predecessor.

An eviction call without a definite answer (no reply, a reset connection, a timeout, any 5xx) may have
been performed: its result is ``unknown``, and the caller counts it as an eviction for every limit and
wait (``ballast.rebalancer.promises`` says until when).

Every eviction call is remembered by an Event on its pod, written *before* the call (reason
``RebalanceEvicting``) and changed to the outcome after it (``Rebalanced``, ``RebalanceUnknown``,
``RebalanceBlocked``, ``RebalanceThrottled``, ``RebalanceFailed``, or ``RebalanceCancelled`` when
leadership ended between the Event and the call). Its annotation ``ballast.io/rebalance``
holds the node, the workload and the evicting replica's clock: a new leader rebuilds its predecessor's
promises from these Events (``ballast.rebalancer.promises``), and an Event still saying ``RebalanceEvicting``
(its writer died during the call) counts like an unknown outcome. An Event that cannot be written is
logged and counted (``ballast_rebalancer_api_calls_total{call="event"}``), and changes nothing else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ballast.contract.times import format_rfc3339
from ballast.kube.client import ApiError, Kube, path_for
from ballast.rebalancer.plan import PodDecision

__all__ = [
    "ANNOTATION",
    "ERROR",
    "EVICTED",
    "NOT_ATTEMPTED",
    "PDB_BLOCKED",
    "THROTTLED",
    "UNKNOWN",
    "Evicted",
    "Evictor",
    "classify_error",
]

log = logging.getLogger("ballast.rebalancer.evictor")

EVICTED, PDB_BLOCKED, THROTTLED, UNKNOWN, ERROR = "evicted", "pdb_blocked", "throttled", "unknown", "error"
NOT_ATTEMPTED = "not attempted"
COMPONENT = "ballast-rebalancer"
ANNOTATION = "ballast.io/rebalance"
"""On the Events this component writes: ``{"node", "workload", "at", "dryRun"}`` (JSON)."""
INTENT, DONE, UNKNOWN_REASON, DRY = "RebalanceEvicting", "Rebalanced", "RebalanceUnknown", "RebalanceDryRun"
CANCELLED = "RebalanceCancelled"
DEFAULT_RETRY_AFTER = 1.0
MAX_RETRY_AFTER = 600.0


@dataclass(frozen=True, slots=True)
class Evicted:
    """What one eviction did: ``result``, the API error if any, and for ``throttled`` the seconds the
    API server asked to wait."""

    result: str
    error: ApiError | None = None
    retry_after: float = 0.0


def _retry_after(exc: ApiError) -> float:
    """Seconds from ``Retry-After`` (or the Status's ``retryAfterSeconds``), within [1 s, 10 min]."""
    candidates: list[Any] = [exc.retry_after]
    details = exc.body.get("details") if isinstance(exc.body, dict) else None
    if isinstance(details, dict):
        candidates.append(details.get("retryAfterSeconds"))
    for value in candidates:
        try:
            seconds = float(value)
        except (TypeError, ValueError, OverflowError):
            continue
        if seconds == seconds:  # not NaN
            return min(max(seconds, DEFAULT_RETRY_AFTER), MAX_RETRY_AFTER)
    return DEFAULT_RETRY_AFTER


def _names_a_budget(exc: ApiError) -> bool:
    details = exc.body.get("details") if isinstance(exc.body, dict) else None
    causes = details.get("causes") if isinstance(details, dict) else None
    if not isinstance(causes, list):
        return False
    return any(isinstance(c, dict) and c.get("reason") == "DisruptionBudget" for c in causes)


def classify_error(exc: ApiError) -> Evicted:
    """A failed eviction call's result: ``pdb_blocked`` (429 naming a budget), ``throttled`` (another
    429), ``unknown`` (no answer, or a 5xx: the server may have done it), ``error`` (a definite refusal)."""
    if exc.code == 429:
        if _names_a_budget(exc):
            return Evicted(PDB_BLOCKED, exc)
        return Evicted(THROTTLED, exc, _retry_after(exc))
    if exc.code == 0 or exc.code >= 500:
        return Evicted(UNKNOWN, exc)
    return Evicted(ERROR, exc)


class Evictor:
    def __init__(
        self,
        kube: Kube,
        *,
        dry_run: bool,
        identity: str = COMPONENT,
        on_call: Callable[[str, str], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.dry_run = dry_run
        self.identity = identity
        self.on_call = on_call or (lambda call, code: None)
        self.clock = clock

    def evict(
        self,
        choice: PodDecision,
        confirm: Callable[[], bool] = lambda: True,
        still: Callable[[], bool] = lambda: True,
    ) -> Evicted:
        """Evict (or, dry, pretend to) and leave the Event. ``confirm`` (the Lease read back) runs before
        the Event that remembers the call, ``still`` (local: not stopping, renew deadline not passed) after
        it, immediately before the call: when either says no, no call is made (``not attempted``; an
        Event already written says ``RebalanceCancelled``). The result is ``evicted`` (dry runs too: the
        metric's ``dry_run`` label tells them apart), ``pdb_blocked``, ``throttled``, ``unknown``,
        ``error`` or ``not attempted``."""
        pod = choice.pod
        if self.dry_run:
            self.event(choice, DRY, f"dry run, would evict: {choice.message}", "Normal")
            return Evicted(EVICTED)
        if not confirm():
            return Evicted(NOT_ATTEMPTED)
        intent = self.event(
            choice, INTENT, f"evicting (outcome not recorded yet): {choice.message}", "Normal"
        )
        if not still():
            self.outcome(intent, choice, CANCELLED, "Normal",
                         f"not evicted: leadership ended before the call: {choice.message}")  # fmt: skip
            return Evicted(NOT_ATTEMPTED)
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {"preconditions": {"uid": pod.uid}},
        }
        path = path_for("v1", "pods", pod.namespace, pod.name) + "/eviction"
        try:
            self.kube.create(path, body)
        except ApiError as exc:
            self.on_call("eviction", str(exc.code))
            out = classify_error(exc)
            if out.result == PDB_BLOCKED:
                log.info("eviction of %s refused for now (PodDisruptionBudget): %s", pod.key, exc.message)
                self.outcome(intent, choice, "RebalanceBlocked", "Warning",
                             f"eviction refused by a PodDisruptionBudget, retried in a later cycle: "
                             f"{choice.message}")  # fmt: skip
            elif out.result == THROTTLED:
                log.warning("eviction of %s throttled by the API server (retry after %gs): %s",
                            pod.key, out.retry_after, exc.message)  # fmt: skip
                self.outcome(intent, choice, "RebalanceThrottled", "Warning",
                             f"eviction call throttled by the API server (429, retry after "
                             f"{out.retry_after:g}s), not evicted: {choice.message}")  # fmt: skip
            elif out.result == UNKNOWN:
                log.warning("eviction of %s: outcome unknown, counted as evicted: %s", pod.key, exc)
                self.outcome(intent, choice, UNKNOWN_REASON, "Warning",
                             f"eviction outcome unknown ({exc.code or 'no answer'}: {exc.reason}), counted "
                             f"as an eviction until the pod is seen unchanged: {choice.message}")  # fmt: skip
            else:
                log.warning("eviction of %s failed: %s", pod.key, exc)
                self.outcome(intent, choice, "RebalanceFailed", "Warning",
                             f"eviction refused ({exc.code} {exc.reason}), not evicted: "
                             f"{choice.message}")  # fmt: skip
            return out
        self.on_call("eviction", "201")
        log.info("evicted %s from %s: %s", pod.key, pod.node, choice.message)
        self.outcome(intent, choice, DONE, "Normal", f"evicted: {choice.message}")
        return Evicted(EVICTED)

    def _body(self, choice: PodDecision, reason: str, message: str, kind: str, now: float) -> dict[str, Any]:
        pod = choice.pod
        stamp = format_rfc3339(now)
        record = {"node": pod.node, "workload": pod.workload, "at": now, "dryRun": self.dry_run}
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{pod.name}.",
                "namespace": pod.namespace,
                "annotations": {ANNOTATION: orjson.dumps(record).decode()},
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.identity[:128],
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }

    def event(self, choice: PodDecision, reason: str, message: str, kind: str) -> str | None:
        """Write an Event on the pod; returns its path (``None`` when it could not be written)."""
        pod = choice.pod
        try:
            made = self.kube.create(
                path_for("v1", "events", pod.namespace),
                self._body(choice, reason, message, kind, self.clock()),
            )
            self.on_call("event", "201")
        except ApiError as exc:
            self.on_call("event", str(exc.code))
            log.warning("could not record the %s Event on %s: %s", reason, pod.key, exc)
            return None
        name = (made.get("metadata") or {}).get("name")
        return path_for("v1", "events", pod.namespace, name) if isinstance(name, str) and name else None

    def outcome(self, intent: str | None, choice: PodDecision, reason: str, kind: str, message: str) -> None:
        """Turn the ``RebalanceEvicting`` Event into the outcome (a new Event when there is none to turn)."""
        if intent is not None:
            patch = {"reason": reason, "type": kind, "message": message[:1024],
                     "lastTimestamp": format_rfc3339(self.clock())}  # fmt: skip
            try:
                self.kube.merge_patch(intent, patch)
                self.on_call("event", "200")
                return
            except ApiError as exc:
                self.on_call("event", str(exc.code))
                log.warning("could not record the outcome %s on %s: %s", reason, choice.pod.key, exc)
        self.event(choice, reason, message, kind)
