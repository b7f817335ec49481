"""Evictions through ``policy/v1`` (``pods/NAME/eviction``) and the Events that explain them.

The Eviction API is the polite way: the API server checks PodDisruptionBudgets and answers 429 when one
says "not now". That is counted (``pdb_blocked``), never forced (no delete), and the pod is simply a
candidate again in a later cycle. The eviction carries the pod's UID as a precondition, so a pod
recreated under the same name (a StatefulSet's) is never evicted by a decision made about its
predecessor. Every eviction, real or dry, leaves an Event on the pod naming the metric, its value, the
threshold and the target; an Event that cannot be written is logged and counted, and changes nothing else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from app.rebalancer.plan import Choice
from common.kube import ApiError, Kube, path_for

__all__ = ["EVICTED", "Evictor"]

log = logging.getLogger("ballast.rebalancer.evictor")

EVICTED, PDB_BLOCKED, ERROR = "evicted", "pdb_blocked", "error"
COMPONENT = "ballast-rebalancer"


def _micro(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


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

    def evict(self, choice: Choice) -> tuple[str, ApiError | None]:
        """Evict (or, dry, pretend to) and leave the Event; returns (result, the API error if any).
        The result is ``evicted`` (dry runs too: the metric's ``dry_run`` label tells them apart),
        ``pdb_blocked`` or ``error``."""
        pod = choice.pod
        if self.dry_run:
            self.event(choice, "RebalanceDryRun", f"dry run, would evict: {choice.message}", "Normal")
            return EVICTED, None
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
            if exc.code == 429:
                log.info("eviction of %s refused for now (PodDisruptionBudget): %s", pod.key, exc.message)
                self.event(
                    choice,
                    "RebalanceBlocked",
                    f"eviction refused by a PodDisruptionBudget, retried in a later cycle: {choice.message}",
                    "Warning",
                )
                return PDB_BLOCKED, exc
            log.warning("eviction of %s failed: %s", pod.key, exc)
            return ERROR, exc
        self.on_call("eviction", "201")
        log.info("evicted %s from %s: %s", pod.key, pod.node, choice.message)
        self.event(choice, "Rebalanced", f"evicted: {choice.message}", "Normal")
        return EVICTED, None

    def event(self, choice: Choice, reason: str, message: str, kind: str) -> None:
        pod = choice.pod
        now = _micro(self.clock())
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{pod.name}.", "namespace": pod.namespace},
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
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            self.kube.create(path_for("v1", "events", pod.namespace), body)
            self.on_call("event", "201")
        except ApiError as exc:
            self.on_call("event", str(exc.code))
            log.warning("could not record the %s Event on %s: %s", reason, pod.key, exc)
