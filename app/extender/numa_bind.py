"""The NUMA pre-bind step: choose the zones, record them as assumed, write the topology result.

Runs inside ``bind`` before the Binding is created (extenders have no PreBind hook). The choice and the
assumption happen under one lock, so two concurrent binds to the same node never take the same free
CPUs; the API call happens outside it. If the Binding then fails, the returned undo removes the
annotation and the assumption again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from app.extender.bind import BindError, Undo
from app.extender.numa import fit, numa_request
from app.extender.wire import BindingArgs
from app.model.policy_store import PolicyStore
from common.kube import ApiError, Kube
from common.seal import SEAL_ANNOTATION, seal
from common.topology_annotations import TOPOLOGY_RESULT_ANNOTATION, render_topology_result


class NumaPreBind:
    def __init__(
        self,
        kube: Kube,
        cache: Any,
        store: PolicyStore,
        seen: Callable[[str], Any],
        result_key: bytes | None = None,
    ) -> None:
        self.kube = kube
        self.result_key = result_key
        """With a key, the result is sealed to the pod's UID and node (``common.seal``) for the agent."""
        self.cache = cache
        self.store = store
        self.seen = seen
        """Looks up what filter learnt about a pod: its NumaRequest, None (no NUMA need), or MISSING."""
        self.lock = threading.Lock()

    def __call__(self, args: BindingArgs) -> Undo | None:
        topo = self.cache.topology(args.node)
        if topo is None or not topo.static or not topo.zones:
            return None  # no NRT, or the kubelet manages CPUs there: nothing to write
        path = f"/api/v1/namespaces/{args.pod_namespace}/pods/{args.pod_name}"
        req = self.seen(args.pod_uid)
        if req is MISSING:
            req = numa_request(self.kube.get(path))  # not seen in filter (e.g. after a restart)
        if req is None:
            return None
        uid = args.pod_uid or f"{args.pod_namespace}/{args.pod_name}"
        with self.lock:
            f = fit(topo, self.cache.zone_usage(args.node), req, self.store.current.topology.memory_aware)
            if not f.ok:
                raise BindError(f"NUMA zones of {args.node} changed since filter: {f.reason}")
            self.cache.assume(uid, args.node, f.result)
        text = render_topology_result(f.result)
        annotations = {TOPOLOGY_RESULT_ANNOTATION: text}
        if self.result_key is not None:
            pod_uid = args.pod_uid or str((self.kube.get(path).get("metadata") or {}).get("uid") or "")
            annotations[SEAL_ANNOTATION] = seal(self.result_key, pod_uid, args.node, text)
        patch = {"metadata": {"annotations": annotations}}
        try:
            self.kube.merge_patch(path, patch)
        except ApiError:
            self.cache.forget_assumed(uid)
            raise

        def undo() -> None:
            self.cache.forget_assumed(uid)
            gone = {TOPOLOGY_RESULT_ANNOTATION: None, SEAL_ANNOTATION: None}
            self.kube.merge_patch(path, {"metadata": {"annotations": gone}})

        return undo


MISSING = object()
