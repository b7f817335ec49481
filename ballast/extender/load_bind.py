"""The load pre-bind step: the last word on a node's limits, taken one bind at a time.

kube-scheduler binds asynchronously and picks among the nodes filter passed by its own totals (and breaks
ties at random), so in a burst several pods can pass filter for the same node before any of their binds
lands: each filter saw the others only as tentative holds, and those sit on the node *Ballast* favoured,
not necessarily the one the scheduler took. Every placement goes through ``bind``, though. Here, under one
lock, the pod's estimate is checked against the node's limits together with every pod already placed there
(holds are guesses and do not count), and recorded as placed before the Binding is created. A bind that
would push the node over a limit is refused: kube-scheduler puts the pod back in its queue and filters
again, now seeing the node as it is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ballast.extender.bind import BindError, Undo
from ballast.extender.wire import BindingArgs
from ballast.kube.async_client import AsyncKube
from ballast.model.bad_request import BadRequest
from ballast.model.estimation import Estimate, estimate_usage
from ballast.model.ledger import Ledger
from ballast.model.load import check_node
from ballast.model.nodestate import NodeState
from ballast.model.podinfo import pod_info
from ballast.model.policy_store import PolicyStore


class LoadPreBind:
    def __init__(
        self,
        kube: AsyncKube,
        ledger: Ledger,
        store: PolicyStore,
        lookup: Callable[[str], NodeState | None],
        clock: Callable[[], float],
        on_refused: Callable[[str], None] = lambda metric: None,
        on_shadow_refused: Callable[[str], None] = lambda metric: None,
        bound_node: Callable[[str], str | None] = lambda uid: None,
    ) -> None:
        self.kube = kube
        self.ledger = ledger
        self.store = store
        self.lookup = lookup
        """The node as the watch-driven cache knows it; ``None`` is no information (the bind goes ahead)."""
        self.clock = clock
        self.on_refused = on_refused
        """Told the metric that refused a bind (``ballast_extender_binds_refused_total``)."""
        self.on_shadow_refused = on_shadow_refused
        """Shadow mode: told the metric that would have refused it; the bind goes ahead."""
        self.bound_node = bound_node
        """The node the pod watch has seen the pod bound to (by UID), or ``None``."""
        self.lock = threading.Lock()

    async def _size(self, args: BindingArgs) -> tuple[int, int, int | None] | None:
        """The pod's estimated (cpu millicores, memory bytes) and priority; ``None`` for a DaemonSet pod
        (never limited).

        filter or prioritize normally left a hold that carries the size; a pod they did not see (the
        extender restarted in between) is read from the API once.
        """
        known = self.ledger.known(args.pod_uid) if args.pod_uid else None
        if known is not None:
            return known.cpu_milli, known.memory_bytes, known.priority
        obj = await self.kube.get(f"/api/v1/namespaces/{args.pod_namespace}/pods/{args.pod_name}")
        try:
            pod = pod_info(obj)
        except BadRequest:
            return None  # a pod object Ballast cannot size: no information, like filter
        if pod.daemonset:
            return None
        return (*estimate_usage(pod, self.store.current.estimation), pod.priority)

    async def __call__(self, args: BindingArgs) -> Undo | None:
        if not args.pod_uid:
            raise BindError("no pod UID to check the node's limits by")  # ``Binder`` looks it up first
        load = self.lookup(args.node)
        if load is None:
            return None
        size = await self._size(args)
        if size is None:
            return None
        name = f"{args.pod_namespace}/{args.pod_name}"
        with self.lock:
            policy = self.store.current
            now = self.clock()
            incoming = Estimate(args.pod_uid, name, "", size[0], size[1], now, tentative=True)
            extra = self.ledger.extra(load, now, incoming, bound_only=True)
            rejection = check_node(load, policy, now, extra, policy.is_prod(size[2]))
            if rejection is not None and policy.mode == "shadow":
                self.on_shadow_refused(rejection.label)
            elif rejection is not None:
                self.on_refused(rejection.label)
                raise BindError(
                    f"{args.node} has no room left for this pod by the time it is bound "
                    f"(pods placed since filter count): {rejection.reason}"
                )
            before = self.ledger.known(args.pod_uid)
            if before is not None and not before.tentative:
                return None  # placed already (a retried bind): that record is not this bind's to undo
            self.ledger.bound(None, args.pod_uid, args.node, now, name, size=size[:2])

        async def undo() -> None:
            # A Binding whose reply was lost may have landed: once the pod watch has seen the pod there, the
            # record is the pod's, no longer this bind's to take back. (The watch notes the pod before it
            # records it, so an event racing this undo either stops it here or records the pod after.)
            if self.bound_node(args.pod_uid) is None:
                self.ledger.forget(args.pod_uid)

        return undo
