"""One watch on this node's pods, shared by whatever in the agent needs them (the CPU manager, the load
reporter): each node then costs the API server one pod watch, not one per user.

``NodePodWatch`` is the ``ballast.kube.client.Reflector`` handler; it keeps the pods of the last list and the
events since (the raw objects, a node's worth) and forwards both to its subscribers. A subscriber added
later is handed the current list first (``replace``), then the events, in order: the list and every event
are forwarded under one lock, so a subscriber never sees an event older than its list. The watch runs
while it has subscribers: it starts with the first and stops with the last (a CPU manager that stops on a
node without load reporting leaves no pod watch behind).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from ballast.kube.client import WATCH_STALL_SECONDS, Handler, Reflector

__all__ = ["NodePodWatch", "Subscription"]


class NodePodWatch:
    def __init__(
        self,
        kube: Any,
        node_name: str,
        *,
        resync_seconds: float = 300.0,
        stall_seconds: float = WATCH_STALL_SECONDS,
    ) -> None:
        self.kube = kube
        self.node_name = node_name
        self.resync_seconds = resync_seconds
        self.stall_seconds = stall_seconds
        """Silence after which the watch counts as stalled and is relisted (``--watch-stall-timeout``)."""
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, Any]] = {}
        self._synced = False
        self._subscribers: list[Handler] = []
        self.reflector: Any = None
        """The running watch (``None`` while nobody subscribes)."""

    def new_reflector(self) -> Any:
        return Reflector(
            self.kube,
            "/api/v1/pods",
            self,
            params={"fieldSelector": f"spec.nodeName={self.node_name}"},
            name=f"pods@{self.node_name}",
            resync_seconds=self.resync_seconds,
            stall_seconds=self.stall_seconds,
        )

    # ``ballast.kube.client.Reflector`` handler protocol
    def replace(self, objects: Iterable[dict[str, Any]], resource_version: str = "") -> None:
        # The Reflector hands a list over page by page, once through: read it whole before anything is
        # replaced (a page that fails leaves every subscriber's state as it was), then hand each a copy.
        listed = list(objects)
        with self._lock:
            self._objects = {_uid(o): o for o in listed if _uid(o)}
            self._synced = True
            for handler in self._subscribers:
                handler.replace(list(listed), resource_version)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        uid = _uid(obj)
        with self._lock:
            if uid:
                if event_type == "DELETED":
                    self._objects.pop(uid, None)
                else:
                    self._objects[uid] = obj
            for handler in self._subscribers:
                handler.apply(event_type, obj)

    def subscribe(self, handler: Handler) -> Subscription:
        """A subscription to start (hand it the list, then the events) and stop."""
        return Subscription(self, handler)

    def _add(self, handler: Handler) -> None:
        with self._lock:
            self._subscribers.append(handler)
            if self._synced:
                handler.replace(list(self._objects.values()), "")
            start = self.reflector is None
            if start:
                self.reflector = self.new_reflector()
        if start:
            self.reflector.start()

    def _remove(self, handler: Handler) -> None:
        with self._lock:
            self._subscribers = [h for h in self._subscribers if h is not handler]
            last = not self._subscribers
            reflector, self.reflector = (self.reflector, None) if last else (None, self.reflector)
            if last:
                self._synced = False  # a later subscriber waits for a fresh list
        if reflector is not None:
            reflector.stop()  # outside the lock: its thread may be forwarding an event

    def wait_synced(self, timeout: float | None = None) -> bool:
        reflector = self.reflector
        return reflector.wait_synced(timeout) if reflector is not None else False

    def stop(self) -> None:
        with self._lock:
            self._subscribers = []
            reflector, self.reflector = self.reflector, None
        if reflector is not None:
            reflector.stop()


class Subscription:
    """What a user of the shared watch holds: ``start``, ``wait_synced``, ``stop`` (as a Reflector's)."""

    def __init__(self, watch: NodePodWatch, handler: Handler) -> None:
        self.watch = watch
        self.handler = handler

    def start(self) -> None:
        self.watch._add(self.handler)

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self.watch.wait_synced(timeout)

    def stop(self) -> None:
        self.watch._remove(self.handler)


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")
