"""The rebalancer's view of the cluster, kept by watches: nodes, and bound pods indexed by node.

Two ``ballast.kube.client.Reflector`` watches (nodes; pods with ``spec.nodeName!=``) list once, then follow
changes; a cycle reads this memory and makes no list call, so its cost does not depend on the API
server, and the API server does not see a list of 100 000 pods per cycle. Each object is parsed when it
arrives (``fit.node_facts``, ``pods.pod_facts``), never per cycle. Handlers run on the watch threads;
readers take a copy under the lock.

Memory: the reflector hands a list over page by page (``ballast.kube.client.Reflector``), and these handlers
keep
of each object only what a cycle needs: for a node the fields ``node_facts`` reads (to read it again when
the policy changes), for a pod its ``PodFacts``. A relist builds the new maps beside the old ones, and a
pod whose facts did not change keeps its old record, so a relist of unchanged pods costs one page of
objects and the new maps' slots, not a second copy of every pod.

Every object is read on its own: one that cannot be read is logged and counted (``unreadable``), and the
rest of the list or the watch goes on (``node_facts`` and ``pod_facts`` never raise; the guard here is for
what even they cannot take, such as an object that is not a mapping).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ballast.model.policy import Policy
from ballast.rebalancer.fit import NodeFacts, node_facts
from ballast.rebalancer.pods import PodFacts, pod_facts, reestimate

__all__ = ["NodeCache", "PodCache", "slim_node"]

log = logging.getLogger("ballast.rebalancer.cache")


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def slim_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a Node that ``node_facts`` reads; the rest (images, conditions, managedFields: most
    of a Node's bytes) is dropped when it arrives."""
    meta = _mapping(node.get("metadata"))
    spec = _mapping(node.get("spec"))
    status = _mapping(node.get("status"))
    return {
        "metadata": {
            "name": meta.get("name"),
            "resourceVersion": meta.get("resourceVersion"),
            "annotations": _mapping(meta.get("annotations")),
            "labels": _mapping(meta.get("labels")),
        },
        "spec": {"taints": spec.get("taints"), "unschedulable": spec.get("unschedulable")},
        "status": {"allocatable": _mapping(status.get("allocatable"))},
    }


def _name_of(obj: Any) -> str | None:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else None


class NodeCache:
    """Nodes as ``NodeFacts``, with the slim objects kept (``slim_node``) to read them again when the
    policy changes its metrics."""

    def __init__(self, policy: Callable[[], Policy], clock: Callable[[], float] = time.time) -> None:
        self._policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._raw: dict[str, dict[str, Any]] = {}
        self._facts: dict[str, NodeFacts] = {}
        self.unreadable = 0
        """Objects left out because they could not be read at all (logged)."""

    def _read(self, obj: Any, policy: Policy, now: float) -> tuple[str, dict[str, Any], NodeFacts] | None:
        try:
            name = _name_of(obj)
            if name is None:
                raise ValueError("no metadata.name")
            slim = slim_node(obj)
            return name, slim, node_facts(slim, policy, now)
        except Exception as exc:
            self.unreadable += 1
            log.warning("node %r cannot be read (%s); left out", _name_of(obj), exc)
            return None

    def replace(self, objects: Iterable[dict[str, Any]], resource_version: str) -> None:
        policy, now = self._policy(), self._clock()
        raw: dict[str, dict[str, Any]] = {}
        facts: dict[str, NodeFacts] = {}
        for obj in objects:
            if (read := self._read(obj, policy, now)) is not None:
                name, raw[name], facts[name] = read
        with self._lock:
            self._raw, self._facts = raw, facts

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type == "DELETED":
            name = _name_of(obj)
            with self._lock:
                self._raw.pop(name or "", None)
                self._facts.pop(name or "", None)
            return
        if (read := self._read(obj, self._policy(), self._clock())) is None:
            return
        name, slim, facts = read
        with self._lock:
            self._raw[name] = slim
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
        self.unreadable = 0
        """Objects left out because they could not be read at all (logged)."""

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

    def _read(self, obj: Any, policy: Policy) -> PodFacts | None:
        try:
            if not isinstance(obj, Mapping):
                raise ValueError(f"expected an object, got {type(obj).__name__}")
            return pod_facts(obj, policy.estimation)
        except Exception as exc:
            self.unreadable += 1
            log.warning("a pod cannot be read (%s); left out", exc)
            return None

    def replace(self, objects: Iterable[dict[str, Any]], resource_version: str) -> None:
        policy = self._policy()
        old = self._by_uid
        by_uid: dict[str, PodFacts] = {}
        by_node: dict[str, dict[str, PodFacts]] = {}
        for obj in objects:
            facts = self._read(obj, policy)
            if facts is None or not facts.uid or not facts.node:
                continue
            same = old.get(facts.uid)
            if same is not None and same == facts:
                facts = same  # one record per pod across relists: the new one is dropped at once
            by_uid[facts.uid] = facts
            by_node.setdefault(facts.node, {})[facts.uid] = facts
        with self._lock:
            self._by_uid, self._by_node = by_uid, by_node

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        facts = self._read(obj, self._policy())
        if facts is None or not facts.uid:
            return
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
