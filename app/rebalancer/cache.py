"""The rebalancer's view of the cluster, kept by watches: nodes, and bound pods indexed by node.

Two ``common.kube.Reflector`` watches (nodes; pods with ``spec.nodeName!=``) list once, then follow
changes; a cycle reads this memory and makes no list call, so its cost does not depend on the API
server, and the API server does not see a list of 100 000 pods per cycle. Each object is parsed when it
arrives (``fit.node_facts``, ``pods.pod_facts``), never per cycle. Handlers run on the watch threads;
readers take a copy under the lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from app.model.policy import Policy
from app.rebalancer.fit import NodeFacts, node_facts
from app.rebalancer.pods import PodFacts, pod_facts, reestimate

__all__ = ["NodeCache", "PodCache"]


class NodeCache:
    """Nodes as ``NodeFacts``; the raw objects are kept (a few KB each) to re-read them when the policy
    changes its metrics."""

    def __init__(self, policy: Callable[[], Policy], clock: Callable[[], float] = time.time) -> None:
        self._policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._raw: dict[str, dict[str, Any]] = {}
        self._facts: dict[str, NodeFacts] = {}

    def replace(self, objects: list[dict[str, Any]], resource_version: str) -> None:
        policy, now = self._policy(), self._clock()
        raw = {o["metadata"]["name"]: o for o in objects}
        facts = {name: node_facts(o, policy, now) for name, o in raw.items()}
        with self._lock:
            self._raw, self._facts = raw, facts

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if event_type == "DELETED":
            with self._lock:
                self._raw.pop(name, None)
                self._facts.pop(name, None)
            return
        facts = node_facts(obj, self._policy(), self._clock())
        with self._lock:
            self._raw[name] = obj
            self._facts[name] = facts

    def reparse(self) -> None:
        """The policy changed: read every node again under it."""
        with self._lock:
            objects = list(self._raw.values())
        self.replace(objects, "")

    def snapshot(self) -> dict[str, NodeFacts]:
        with self._lock:
            return dict(self._facts)

    def __len__(self) -> int:
        return len(self._facts)


class PodCache:
    """Bound pods as ``PodFacts``, indexed by node (only the facts are kept, not the objects)."""

    def __init__(self, policy: Callable[[], Policy]) -> None:
        self._policy = policy
        self._lock = threading.Lock()
        self._by_uid: dict[str, PodFacts] = {}
        self._by_node: dict[str, dict[str, PodFacts]] = {}

    def _add(self, facts: PodFacts) -> None:
        old = self._by_uid.get(facts.uid)
        if old is not None and old.node != facts.node:
            self._drop(old.uid)
        self._by_uid[facts.uid] = facts
        self._by_node.setdefault(facts.node, {})[facts.uid] = facts

    def _drop(self, uid: str) -> None:
        old = self._by_uid.pop(uid, None)
        if old is not None:
            on = self._by_node.get(old.node)
            if on is not None:
                on.pop(uid, None)
                if not on:
                    del self._by_node[old.node]

    def replace(self, objects: list[dict[str, Any]], resource_version: str) -> None:
        est = self._policy().estimation
        facts = [pod_facts(o, est) for o in objects]
        with self._lock:
            self._by_uid, self._by_node = {}, {}
            for f in facts:
                if f.node:
                    self._add(f)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        facts = pod_facts(obj, self._policy().estimation)
        with self._lock:
            if event_type == "DELETED" or not facts.node:
                self._drop(facts.uid)
            else:
                self._add(facts)

    def reestimate(self) -> None:
        """The policy's estimation settings changed: every pod's estimate follows."""
        est = self._policy().estimation
        with self._lock:
            for f in list(self._by_uid.values()):
                self._add(reestimate(f, est))

    def on(self, node: str) -> list[PodFacts]:
        with self._lock:
            pods = self._by_node.get(node)
            return list(pods.values()) if pods else []

    def __len__(self) -> int:
        return len(self._by_uid)
