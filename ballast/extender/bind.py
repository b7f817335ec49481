"""The ``bind`` verb: create the pod's Binding, after any pre-bind steps (the NUMA topology result).

kube-scheduler does not bind when an extender's bind succeeds, so Ballast must create the Binding itself
(``POST /api/v1/namespaces/{ns}/pods/{name}/binding``). Pre-bind steps run first and each may return an
undo, run when a later step or the Binding fails, so a failed bind leaves nothing behind. Every API error
comes back in ``Error`` with the API server's message; nothing here raises to the HTTP layer.

A pod that already has a node is never bound again, and nothing Ballast recorded for it changes:
kube-scheduler retries a bind that timed out, and that retry's 409 ("already assigned") once ran the undo
steps of the first, erasing its estimate and its topology result while the pod stayed where it was. So
binds of one pod run one at a time, a pod known to be bound (the ledger, the pod watch) is answered
without any step, and a 409 from the Binding is checked against where the pod really is: the same node
is success and keeps everything, another node is the API's error.

The whole verb shares one deadline (``AsyncKube.deadline``): kube-scheduler gives up after its
``httpTimeout`` and retries, so a bind that cannot finish in time must answer an error, not keep calling
the API.

Binds run on the extender's event loop and await their API calls (``ballast.kube.async_client``): the steps
between the calls are short and hold no thread lock across an ``await``, so filter and prioritize go on
while a bind waits for the API server.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Protocol

from ballast.extender.wire import BindingArgs
from ballast.kube.async_client import AsyncKube
from ballast.kube.client import ApiError
from ballast.model.ledger import Ledger

log = logging.getLogger("ballast.bind")

Undo = Callable[[], Awaitable[None]]


class PreBind(Protocol):
    async def __call__(self, args: BindingArgs) -> Undo | None: ...


class BindError(Exception):
    """A pre-bind step refused; the message goes to kube-scheduler as the bind error."""


class AlreadyBound(BindError):
    """The pod has a node already (found by a step or by the Binding's 409)."""

    def __init__(self, node: str, message: str = "") -> None:
        self.node = node
        super().__init__(message or f"409 Conflict: the pod is already assigned to node {node!r}")


class PodLocks:
    """One lock per pod being bound, so two binds of the same pod (a retry after a timeout) never
    interleave; entries live only while a bind of that pod runs. Binds run on one event loop, so the
    table needs no lock of its own."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)


class Binder:
    def __init__(
        self,
        kube: AsyncKube,
        ledger: Ledger,
        clock: Callable[[], float] = time.time,
        pre_bind: list[PreBind] | None = None,
        bound_node: Callable[[str], str | None] = lambda uid: None,
        deadline: float | None = None,
    ) -> None:
        self.kube = kube
        self.ledger = ledger
        self.clock = clock
        self.pre_bind = pre_bind or []
        self.bound_node = bound_node
        """The node the pod watch has seen the pod bound to (by UID), or ``None``."""
        self.deadline = deadline if deadline is not None else kube.timeout
        """Seconds the whole verb may take, every API call included (``--api-timeout``)."""
        self.locks = PodLocks()

    async def bind(self, args: BindingArgs) -> str:
        """Bind and return ``""``, or return the error for ``ExtenderBindingResult.Error``."""
        async with self.locks.hold(f"{args.pod_namespace}/{args.pod_name}"):
            with self.kube.deadline(self.deadline):
                return await self._bind(args)

    def _known_node(self, uid: str) -> str | None:
        """Where Ballast already knows the pod to be bound: its own placement record, or the pod watch."""
        if not uid:
            return None
        placed = self.ledger.known(uid)
        if placed is not None and not placed.tentative:
            return placed.node
        return self.bound_node(uid)

    def _pod_path(self, args: BindingArgs) -> str:
        return f"/api/v1/namespaces/{args.pod_namespace}/pods/{args.pod_name}"

    async def _bind(self, args: BindingArgs) -> str:
        who = f"pod {args.pod_namespace}/{args.pod_name} to node {args.node}"
        undos: list[Undo] = []
        try:
            if not args.pod_uid:
                # No UID, no key for the load check or the NUMA assumption: learn it from the API.
                pod = await self.kube.get(self._pod_path(args))
                meta = pod.get("metadata") or {}
                args = dataclasses.replace(args, pod_uid=str(meta.get("uid") or ""))
                node = str((pod.get("spec") or {}).get("nodeName") or "")
                if node:
                    raise AlreadyBound(node)
            known = self._known_node(args.pod_uid)
            if known:
                raise AlreadyBound(known)
            for step in self.pre_bind:
                undo = await step(args)
                if undo is not None:
                    undos.append(undo)
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": args.pod_name, "namespace": args.pod_namespace}
                | ({"uid": args.pod_uid} if args.pod_uid else {}),
                "target": {"apiVersion": "v1", "kind": "Node", "name": args.node},
            }
            try:
                await self.kube.create(f"{self._pod_path(args)}/binding", body)
            except ApiError as exc:
                # No answer, or an error, need not mean no Binding: the pod watch may already have seen
                # the pod bound (the reply was lost after the API server wrote it); then that is the answer.
                if node := self.bound_node(args.pod_uid):
                    raise AlreadyBound(node, str(exc)) from exc
                if exc.code == 409 and (node := await self._node_now(args)):
                    raise AlreadyBound(node, str(exc)) from exc
                raise
        except AlreadyBound as exc:
            if exc.node == args.node:
                # A retry of a bind that landed: what the first one recorded stands; so does this answer.
                log.info("bind %s: already bound there; nothing to do", who)
                return ""
            return await self._failed(who, args, undos, exc)
        except (ApiError, BindError) as exc:
            return await self._failed(who, args, undos, exc)
        if args.pod_uid:
            # The estimate moves from the tentative hold to the node really chosen, at bind time.
            self.ledger.bound(
                None, args.pod_uid, args.node, self.clock(), f"{args.pod_namespace}/{args.pod_name}"
            )
        # DEBUG, not INFO: one line per pod is hundreds a second in a burst; failures are WARNING lines,
        # and the access log's summary counts the binds.
        log.debug("bound %s", who)
        return ""

    async def _node_now(self, args: BindingArgs) -> str:
        """The pod's node as the API server has it now (after a 409), or ``""``."""
        try:
            pod = await self.kube.get(self._pod_path(args))
        except ApiError:
            return ""
        return str((pod.get("spec") or {}).get("nodeName") or "")

    async def _failed(self, who: str, args: BindingArgs, undos: list[Undo], exc: Exception) -> str:
        for undo in reversed(undos):
            try:
                await undo()
            except Exception:
                log.exception("bind %s: undoing a pre-bind step failed", who)
        if args.pod_uid and not isinstance(exc, AlreadyBound):
            self.ledger.drop_tentative(args.pod_uid)
        message = f"binding {who} failed: {exc}"
        log.warning("%s", message)
        return message
