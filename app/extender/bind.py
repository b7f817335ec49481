"""The ``bind`` verb: create the pod's Binding, after any pre-bind steps (the NUMA topology result).

kube-scheduler does not bind when an extender's bind succeeds, so Ballast must create the Binding itself
(``POST /api/v1/namespaces/{ns}/pods/{name}/binding``). Pre-bind steps run first and each may return an
undo, run when a later step or the Binding fails, so a failed bind leaves nothing behind. Every API error
comes back in ``Error`` with the API server's message; nothing here raises to the HTTP layer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from app.extender.wire import BindingArgs
from app.model.ledger import Ledger
from common.kube import ApiError, Kube

log = logging.getLogger("ballast.bind")

Undo = Callable[[], None]


class PreBind(Protocol):
    def __call__(self, args: BindingArgs) -> Undo | None: ...


class BindError(Exception):
    """A pre-bind step refused; the message goes to kube-scheduler as the bind error."""


class Binder:
    def __init__(
        self,
        kube: Kube,
        ledger: Ledger,
        clock: Callable[[], float] = time.time,
        pre_bind: list[PreBind] | None = None,
    ) -> None:
        self.kube = kube
        self.ledger = ledger
        self.clock = clock
        self.pre_bind = pre_bind or []

    def bind(self, args: BindingArgs) -> str:
        """Bind and return ``""``, or return the error for ``ExtenderBindingResult.Error``."""
        who = f"pod {args.pod_namespace}/{args.pod_name} to node {args.node}"
        undos: list[Undo] = []
        try:
            for step in self.pre_bind:
                undo = step(args)
                if undo is not None:
                    undos.append(undo)
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": args.pod_name, "namespace": args.pod_namespace}
                | ({"uid": args.pod_uid} if args.pod_uid else {}),
                "target": {"apiVersion": "v1", "kind": "Node", "name": args.node},
            }
            self.kube.create(f"/api/v1/namespaces/{args.pod_namespace}/pods/{args.pod_name}/binding", body)
        except (ApiError, BindError) as exc:
            for undo in reversed(undos):
                try:
                    undo()
                except Exception:
                    log.exception("bind %s: undoing a pre-bind step failed", who)
            if args.pod_uid:
                self.ledger.drop_tentative(args.pod_uid)
            message = f"binding {who} failed: {exc}"
            log.warning("%s", message)
            return message
        if args.pod_uid:
            # The estimate moves from the tentative hold to the node really chosen, at bind time.
            self.ledger.bound(
                None, args.pod_uid, args.node, self.clock(), f"{args.pod_namespace}/{args.pod_name}"
            )
        log.info("bound %s", who)
        return ""
