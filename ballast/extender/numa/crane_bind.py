"""The NUMA pre-bind step: choose the zones, record them as assumed, write the topology result.

Runs inside ``bind`` before the Binding is created (extenders have no PreBind hook). The choice and the
assumption happen under one lock, so two concurrent binds to the same node never take the same free
CPUs; the API call happens outside it. If the Binding then fails, the returned undo removes the
annotation and the assumption again.

A result is never written onto a pod that already has a node: the pod is read first, and the patch
carries the resourceVersion read, so a bind that lands in between makes the patch fail (409) instead of
replacing the result the agent already acts on. The undo follows the same rule.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from ballast.contract.seal import SEAL_ANNOTATION, seal
from ballast.contract.topology_result import TOPOLOGY_RESULT_ANNOTATION, render_topology_result
from ballast.extender.bind import AlreadyBound, BindError, Undo
from ballast.extender.numa.crane import fit, numa_request
from ballast.extender.wire import BindingArgs
from ballast.kube.async_client import AsyncKube
from ballast.kube.client import ApiError
from ballast.model.policy_store import PolicyStore


class NumaPreBind:
    def __init__(
        self,
        kube: AsyncKube,
        cache: Any,
        store: PolicyStore,
        seen: Callable[[str], Any],
        result_key: bytes | None = None,
    ) -> None:
        self.kube = kube
        self.result_key = result_key
        """With a key, the result is sealed to the pod's UID and node (``ballast.contract.seal``) for the
        agent."""
        self.cache = cache
        self.store = store
        self.seen = seen
        """Looks up what filter learnt about a pod: its NumaRequest, None (no NUMA need), or MISSING."""
        self.lock = threading.Lock()

    async def _unbound(self, path: str) -> dict[str, Any]:
        """The pod as the API has it now; ``AlreadyBound`` when it has a node."""
        pod = await self.kube.get(path)
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            raise AlreadyBound(str(node))
        return pod

    async def __call__(self, args: BindingArgs) -> Undo | None:
        topo = self.cache.topology(args.node)
        if topo is None or not topo.static or not topo.zones:
            return None  # no NRT, or the kubelet manages CPUs there: nothing to write
        path = f"/api/v1/namespaces/{args.pod_namespace}/pods/{args.pod_name}"
        req = self.seen(args.pod_uid)
        pod: dict[str, Any] | None = None
        if req is MISSING:
            pod = await self._unbound(path)
            req = numa_request(pod)  # not seen in filter (e.g. after a restart)
        if req is None:
            return None
        uid = args.pod_uid or f"{args.pod_namespace}/{args.pod_name}"
        with self.lock:
            f = fit(topo, self.cache.zone_usage(args.node), req, self.store.current.topology.memory_aware)
            if not f.ok:
                raise BindError(f"NUMA zones of {args.node} changed since filter: {f.reason}")
            self.cache.assume(uid, args.node, f.result)
        try:
            await self._write(path, pod, args, f.result)
        except (ApiError, BindError):
            self.cache.forget_assumed(uid)
            raise

        async def undo() -> None:
            self.cache.forget_assumed(uid)
            gone = {TOPOLOGY_RESULT_ANNOTATION: None, SEAL_ANNOTATION: None}
            with contextlib.suppress(AlreadyBound):  # bound meanwhile: its result is no longer ours to take
                await self._patch_unbound(path, None, {"annotations": gone})

        return undo

    async def _write(self, path: str, pod: dict[str, Any] | None, args: BindingArgs, result: Any) -> None:
        text = render_topology_result(result)
        annotations = {TOPOLOGY_RESULT_ANNOTATION: text}
        if self.result_key is not None:
            pod_uid = args.pod_uid
            if not pod_uid:
                pod = pod or await self._unbound(path)
                pod_uid = str((pod.get("metadata") or {}).get("uid") or "")
            annotations[SEAL_ANNOTATION] = seal(self.result_key, pod_uid, args.node, text)
        await self._patch_unbound(path, pod, {"annotations": annotations})

    async def _patch_unbound(self, path: str, pod: dict[str, Any] | None, metadata: dict[str, Any]) -> None:
        """Merge-patch ``metadata`` onto the pod only while it has no node: the patch names the
        resourceVersion read, so a change in between (a Binding) fails it; then the pod is read again."""
        for _attempt in range(3):
            pod = pod or await self._unbound(path)
            rv = (pod.get("metadata") or {}).get("resourceVersion")
            try:
                await self.kube.merge_patch(path, {"metadata": {**metadata, "resourceVersion": rv}})
                return
            except ApiError as exc:
                if exc.code != 409:
                    raise
                pod = None  # changed since it was read: read it again (and stop if it is bound now)
        raise BindError("the pod kept changing while its topology result was written; try again")


MISSING = object()
