"""The extender's view of the cluster, kept current by watches: nodes, and pods bound to nodes.

Everything a request needs is parsed when an event arrives: annotations into samples, allocatable into
integers, pod resources into ``PodDemand``. A names-mode request then costs one dict lookup per node.
Pod events also feed the estimation ledger: a pod newly bound to a node (by Ballast or by anyone) is
recorded at its bind time (``ballast.contract.pod.bound_at``), and a deleted or finished pod leaves at once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from cachetools import TTLCache

from ballast.contract.exclusive import DEFAULT_SCHEDULERS
from ballast.contract.nrt import COMMUNITY_NRT_PATH, NRT_PATH
from ballast.contract.pod import KubeletPod, bound_at, parse_pod
from ballast.contract.seal import SEAL_ANNOTATION, verify
from ballast.contract.topology_result import TOPOLOGY_RESULT_ANNOTATION
from ballast.extender.numa.community import Malformed
from ballast.extender.numa.community_view import CommunityView
from ballast.extender.numa.crane import NodeTopology, ZoneUsage, exclusive_zones, parse_nrt
from ballast.kube.client import WATCH_STALL_SECONDS, Kube, Reflector
from ballast.model.bad_request import BadRequest
from ballast.model.ledger import Ledger
from ballast.model.nodestate import NodeState, parse_node
from ballast.model.podinfo import PodDemand, read_pod
from ballast.model.policy_store import PolicyStore

log = logging.getLogger("ballast.cache")

BOUND_PODS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
HELD_GRACE_SECONDS = 30.0
"""How long a pod the agent's NRT lists counts against its zone while the pod watch has not seen it: the
watch normally sees a binding long before the kubelet admits the pod and the agent lists it, so this only
covers a lagging or reconnecting watch; past it the listing is taken for a pod that no longer exists."""
"""The pods worth caching: bound and not finished (the same selector kube-scheduler's own cache uses)."""


# Not frozen: made several times per pod on the scheduler's path, and a frozen dataclass sets each field
# through object.__setattr__ (1.4 us against 0.3 us for twelve fields). Nothing mutates one.
@dataclass(slots=True)
class PodRecord:
    uid: str
    namespace: str
    name: str
    node: str
    info: PodDemand | None
    scheduled_at: float | None
    annotations: Mapping[str, str]
    scheduler: str
    spec: KubeletPod | None = None
    """The pod as the agent reads it (QoS, exclusive CPUs, topology result), for NUMA zone usage; kept only
    for pods with a topology result (``pod_record``)."""


def _mapping(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _slim_node(node: Mapping[str, Any]) -> dict[str, Any]:
    """Keep only what parsing needs, so a policy change can reparse without holding whole nodes. A field
    of the wrong type counts as absent (the API server would never send one, but a cache must not fail)."""
    meta = _mapping(node.get("metadata"))
    status = _mapping(node.get("status"))
    name = meta.get("name")
    return {
        "metadata": {
            "name": name if isinstance(name, str) else None,
            "resourceVersion": meta.get("resourceVersion"),
            "annotations": _mapping(meta.get("annotations")),
            "labels": _mapping(meta.get("labels")),
        },
        "status": {"allocatable": _mapping(status.get("allocatable"))},
    }


def pod_record(pod: Mapping[str, Any]) -> PodRecord | None:
    """The pod as the cache keeps it. The agent's reading of the pod (``spec``) is kept only for a pod with
    a topology result: zone usage counts no other pod, and reading the containers again for each of them
    would cost a third of every pod event."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    uid = meta.get("uid")
    if not uid:
        return None
    try:
        info: PodDemand | None = read_pod(pod)
    except BadRequest as exc:
        log.warning(
            "pod %s/%s has unreadable resources (%s); no estimate",
            meta.get("namespace"),
            meta.get("name"),
            exc,
        )
        info = None
    annotations = meta.get("annotations") or {}
    return PodRecord(
        uid=str(uid),
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        node=str(spec.get("nodeName") or ""),
        info=info,
        scheduled_at=bound_at(pod),
        annotations=dict(annotations),
        scheduler=str(spec.get("schedulerName") or ""),
        spec=parse_pod(pod) if TOPOLOGY_RESULT_ANNOTATION in annotations else None,
    )


def _each(what: str, objects: Iterable[Any], build: Callable[[Any], Any]) -> Iterator[Any]:
    """``build(obj)`` for every object of a list; one that raises is logged and left out, so a single bad
    object cannot fail a relist (which would retry forever and leave the cache empty)."""
    for obj in objects:
        try:
            yield build(obj)
        except Exception:
            meta = obj.get("metadata") if isinstance(obj, Mapping) else None
            name = meta.get("name") if isinstance(meta, Mapping) else None
            log.exception("%s: could not read %r from a list; left out", what, name)


class _Nodes:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache

    def replace(self, objects: list[dict[str, Any]], resource_version: str) -> None:
        policy = self.cache.store.current
        raw = {}
        loads = {}
        for slim, load in _each("nodes", objects, lambda obj: self._read(obj, policy)):
            name = slim["metadata"]["name"]
            if name:
                raw[name] = slim
                loads[name] = load
        with self.cache.lock:
            self.cache.raw_nodes = raw
            self.cache.nodes = loads
        for cb in self.cache.node_listeners:
            cb("REPLACE", None)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        name = _slim_node(obj)["metadata"]["name"]
        if not name:
            return
        if event_type == "DELETED":
            with self.cache.lock:
                self.cache.raw_nodes.pop(name, None)
                self.cache.nodes.pop(name, None)
        else:
            slim, load = self._read(obj, self.cache.store.current)
            with self.cache.lock:
                self.cache.raw_nodes[name] = slim
                self.cache.nodes[name] = load
        for cb in self.cache.node_listeners:
            cb(event_type, obj)

    def _read(self, obj: Mapping[str, Any], policy: Any) -> tuple[dict[str, Any], NodeState]:
        slim = _slim_node(obj)
        return slim, self.cache.parse(slim, policy)


class _Pods:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache

    def replace(self, objects: list[dict[str, Any]], resource_version: str) -> None:
        records = {r.uid: r for r in _each("pods", objects, pod_record) if r is not None}
        with self.cache.lock:
            gone = set(self.cache.pods) - set(records)
            old = self.cache.pods
            self.cache.pods = records
            by_node: dict[str, set[str]] = {}
            for r in records.values():
                by_node.setdefault(r.node, set()).add(r.uid)
            self.cache.pods_by_node = by_node
        with self.cache.lock:
            self.cache.usage.clear()
        for uid in gone:
            self.cache.pod_gone(uid)
        for r in records.values():
            if r.uid not in old:
                self.cache.pod_bound(r)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        if not meta.get("uid"):
            return
        phase = (obj.get("status") or {}).get("phase")
        finished = phase in ("Succeeded", "Failed") or bool(meta.get("deletionTimestamp"))
        node = str((obj.get("spec") or {}).get("nodeName") or "")
        gone = event_type == "DELETED" or finished or not node
        # A pod that leaves needs only its uid and node: reading its resources, containers and topology
        # result (``pod_record``) would cost as much as the rest of the event, once per deleted pod.
        uid = str(meta["uid"])
        record = None if gone else pod_record(obj)
        with self.cache.lock:
            old = self.cache.pods.get(uid)
            self.cache.usage.pop(node, None)
            if old is not None:
                self.cache.usage.pop(old.node, None)
                uids = self.cache.pods_by_node.get(old.node)
                if uids is not None:
                    uids.discard(uid)
            if record is None:
                self.cache.pods.pop(uid, None)
            else:
                self.cache.pods[uid] = record
                self.cache.pods_by_node.setdefault(node, set()).add(uid)
        if record is None:
            self.cache.pod_gone(uid)
        elif old is None or old.node != record.node:
            self.cache.community.pod_appeared(obj, record)
            self.cache.pod_bound(record)


class _Topologies:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache

    def replace(self, objects: list[dict[str, Any]], resource_version: str) -> None:
        topos = {t.node: t for t in _each("noderesourcetopologies", objects, parse_nrt) if t is not None}
        now = self.cache.clock()
        with self.cache.lock:
            before = self.cache.held_since
            self.cache.held_since = {n: _held_since(before.get(n, {}), t, now) for n, t in topos.items()}
            self.cache.topologies = topos
            self.cache.pinning = {name for name, t in topos.items() if _pins(t)}
            self.cache.usage.clear()
        for cb in self.cache.node_listeners:
            cb("REPLACE", None)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            return
        topo = None if event_type == "DELETED" else parse_nrt(obj)
        now = self.cache.clock()
        with self.cache.lock:
            if topo is None:
                self.cache.topologies.pop(name, None)
                self.cache.held_since.pop(name, None)
            else:
                self.cache.topologies[name] = topo
                self.cache.held_since[name] = _held_since(self.cache.held_since.get(name, {}), topo, now)
            if topo is not None and _pins(topo):
                self.cache.pinning.add(name)
            else:
                self.cache.pinning.discard(name)
            self.cache.usage.pop(name, None)


def _held_since(before: dict[str, float], topo: NodeTopology | None, now: float) -> dict[str, float]:
    """UID -> when a node's NRT was first seen listing it: kept from ``before`` for a UID listed all
    along, ``now`` for one that appears in this NRT. A lagging pod watch's grace starts there, not at the
    first filter that looks at the node (which may come minutes after the NRT arrived)."""
    if topo is None or not topo.held:
        return {}
    return {uid: before.get(uid, now) for pods in topo.held.values() for uid in pods}


def _stall(r: Reflector, now: float) -> str | None:
    """A stalled watch, or one silent past the stall bound (``Reflector.problem``), is reported at once;
    plain disconnections only after the shortest sync period (``ClusterCache.readiness``)."""
    if r.stalled:
        return f"{r.name}: {r.stalled}"
    silent = r.stats.silent_for(now)
    if not r.missing and not r.failing and silent > r.stall_seconds:
        return f"{r.name}: watch stalled, no event and no bookmark for {silent:.0f}s"
    return None


def _pins(topo: NodeTopology) -> bool:
    """Ballast pins CPUs on this node (the agent's static policy, with zones to choose from)."""
    return topo.static and bool(topo.zones)


class ClusterCache:
    """Watch-driven nodes and bound pods; implements the extender's ``NodeSource``."""

    def __init__(
        self,
        kube: Kube,
        store: PolicyStore,
        ledger: Ledger | None = None,
        *,
        resync_seconds: float = 300.0,
        stall_seconds: float = WATCH_STALL_SECONDS,
        clock: Callable[[], float] = time.time,
        assume_ttl: float = 300.0,
        on_bad: Callable[[NodeState], None] | None = None,
        allowed_schedulers: Iterable[str] = DEFAULT_SCHEDULERS,
        result_key: bytes | None = None,
        community_assume_ttl: float = 120.0,
        on_malformed_nrt: Callable[[Malformed], None] | None = None,
    ) -> None:
        self.result_key = result_key
        """With a key, only topology results whose seal verifies count against zones, as on the agent."""
        self.allowed_schedulers = frozenset(allowed_schedulers)
        """Schedulers whose pods' topology results count against zones (the agent's --scheduler-name)."""
        self.kube = kube
        self.on_bad = on_bad
        """Called with every parsed node that has bad annotations (the extender counts them)."""
        self.store = store
        self.ledger = ledger
        self.clock = clock
        self.lock = threading.Lock()
        self.nodes: dict[str, NodeState] = {}
        self.raw_nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, PodRecord] = {}
        self.pods_by_node: dict[str, set[str]] = {}
        self.topologies: dict[str, NodeTopology] = {}
        self.pinning: set[str] = set()
        """Nodes whose NRT says Ballast pins CPUs there (kept with ``topologies``)."""
        self.usage: dict[str, ZoneUsage] = {}
        """Per node, what pods' topology results take; dropped on pod/NRT events, rebuilt on demand."""
        self.usage_until: dict[str, float] = {}
        """Per node, when its cached usage expires: the earliest end of grace of a pod it counts only
        because the agent lists it (``HELD_GRACE_SECONDS``)."""
        self.held_since: dict[str, dict[str, float]] = {}
        """Per node, the pods its NRT lists (``ballast.io/exclusive-pods``): UID -> when the NRT watch first
        saw it listed, the start of its grace while the pod watch has not seen the pod."""
        self.gone: TTLCache[str, bool] = TTLCache(100_000, 3600, timer=clock)
        """Pods the pod watch saw deleted or finished: an agent still listing them holds nothing real."""
        self.assumed: TTLCache[str, tuple[str, tuple[tuple[str, int, int], ...]]] = TTLCache(
            100_000, assume_ttl, timer=clock
        )
        """Results written at bind, counted until the pod's annotation arrives through the watch."""
        self.node_listeners: list[Callable[[str, dict], None]] = []
        self.community = CommunityView(
            self.pods_on, assume_ttl=community_assume_ttl, clock=clock, on_malformed=on_malformed_nrt
        )
        """The community NRT objects (``topology.node.k8s.io/v1alpha2``) and what bind assumed on them."""
        self.bound_listeners: list[Callable[[str, str], None]] = []
        """Told ``(uid, node)`` when a pod is first seen bound to a node (shadow mode's agreement)."""
        self.reflectors = [
            Reflector(
                kube,
                "/api/v1/nodes",
                _Nodes(self),
                name="nodes",
                resync_seconds=resync_seconds,
                stall_seconds=stall_seconds,
            ),
            Reflector(
                kube,
                "/api/v1/pods",
                _Pods(self),
                params={"fieldSelector": BOUND_PODS},
                name="pods",
                resync_seconds=resync_seconds,
                stall_seconds=stall_seconds,
            ),
            Reflector(
                kube,
                NRT_PATH,
                _Topologies(self),
                name="noderesourcetopologies",
                resync_seconds=resync_seconds,
                stall_seconds=stall_seconds,
                optional=True,
            ),
            Reflector(
                kube,
                COMMUNITY_NRT_PATH,
                self.community,
                name="noderesourcetopologies.v1alpha2",
                resync_seconds=resync_seconds,
                stall_seconds=stall_seconds,
                optional=True,
            ),
        ]
        store.on_change(self._reparse)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Follow every collection; with ``loop`` (the extender's running event loop) the watches are
        read and applied on it, between the verbs, instead of in threads that fight it for the GIL at
        every event (lists stay in the reflectors' threads)."""
        for r in self.reflectors:
            r.loop = loop
            r.start()

    def stop(self) -> None:
        for r in self.reflectors:
            r.stop()

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(r.wait_synced(max(0.0, deadline - time.monotonic())) for r in self.reflectors)

    def stale_after(self) -> float:
        """Seconds a watch may be disconnected before the cache counts as stale: the policy's shortest
        sync period, after which the annotator has rewritten every load annotation at least once."""
        return min(self.store.current.sync_periods.values(), default=60.0)

    def readiness(self) -> str | None:
        waiting = [r.name for r in self.reflectors if not r.synced.is_set()]
        if waiting:
            return f"cluster cache has not completed its first list of: {', '.join(waiting)}"
        now, limit = time.monotonic(), self.stale_after()
        stalled = [p for r in self.reflectors if (p := _stall(r, now)) is not None]
        if stalled:
            return f"cluster cache may be stale, verdicts may use stale nodes or pods: {'; '.join(stalled)}"
        stale = [
            f"{r.name} ({r.stats.disconnected_for(now):.0f}s: {r.stats.last_error[:200]})"
            for r in self.reflectors
            if not r.optional and r.stats.disconnected_for(now) > limit
        ]
        if stale:
            return (
                f"cluster cache disconnected from the API server longer than {limit:.0f}s (the shortest "
                f"sync period), verdicts may use stale nodes or pods: {', '.join(stale)}"
            )
        return None

    # -- NodeSource ------------------------------------------------------------------------------

    def node(self, name: str) -> NodeState | None:
        return self.nodes.get(name)

    def node_names(self) -> Iterable[str]:
        return list(self.nodes)

    def pod(self, uid: str) -> PodDemand | None:
        r = self.pods.get(uid)
        return r.info if r is not None else None

    def bound_node(self, uid: str) -> str | None:
        """The node the pod watch has seen this pod bound to, or ``None``."""
        r = self.pods.get(uid)
        return r.node if r is not None and r.node else None

    def pods_on(self, node: str) -> list[PodRecord]:
        with self.lock:
            return [self.pods[u] for u in self.pods_by_node.get(node, ()) if u in self.pods]

    # -- NUMA ------------------------------------------------------------------------------------

    def topology(self, node: str) -> NodeTopology | None:
        return self.topologies.get(node)

    def pins_cpus(self) -> bool:
        return bool(self.pinning)

    def zone_usage(self, node: str) -> ZoneUsage:
        """Exclusive CPUs taken per zone, plus bind-time assumptions not yet visible there.

        When the node's NRT says what the agent pins (``NodeTopology.held``), that is the truth for every
        pod it lists that the pod watch shows bound to this node, whatever its topology result said or
        whether it had one. A listed pod the watch shows elsewhere, or saw go, counts nothing: an NRT
        published before the pod went still lists it. A listed pod the watch has not seen at all counts for
        ``HELD_GRACE_SECONDS`` from when the NRT watch first saw it listed (the pod watch may lag the agent),
        then not, however long after that the first filter looks at the node. A pod
        the NRT does not list yet counts by its trusted topology result, or by what bind assumed for it,
        until the NRT lists it.
        Without that, trusted topology results count (the agent's rule, ``ballast.contract.exclusive``). An
        assumption leaves once the pod is counted otherwise, when the pod goes, or after its TTL: a
        result the agent will not honour (an untrusted scheduler's) still takes CPUs the agent pins
        somewhere, so it is not dropped when its annotation arrives."""
        usage = self.usage.get(node)
        if usage is not None and node in self.usage_until and self.clock() >= self.usage_until[node]:
            usage = None
        if usage is None:
            usage = ZoneUsage()
            seen = set()
            topo = self.topologies.get(node)
            held = topo.held if topo is not None else None
            listed: set[str] = set()
            until = math.inf
            if held is not None:
                now = self.clock()
                since = self.held_since.setdefault(node, {})
                for zone, pods in held.items():
                    for uid, cpus in pods.items():
                        listed.add(uid)
                        r = self.pods.get(uid)
                        if r is None and uid not in self.gone:
                            first = since.setdefault(uid, now)
                            if now - first >= HELD_GRACE_SECONDS:
                                continue
                            until = min(until, first + HELD_GRACE_SECONDS)
                        elif r is None or r.node != node:
                            continue
                        usage.add(f"uid {uid} (pinned by the agent)", [(zone, cpus * 1000, 0)])
                seen |= listed
            for r in self.pods_on(node):
                if r.uid in listed or TOPOLOGY_RESULT_ANNOTATION not in r.annotations or r.spec is None:
                    continue
                sealed = None
                if self.result_key is not None:
                    text, mark = (
                        r.annotations.get(TOPOLOGY_RESULT_ANNOTATION),
                        r.annotations.get(SEAL_ANNOTATION),
                    )
                    sealed = verify(self.result_key, r.uid, r.node, text, mark)
                zones = exclusive_zones(r.spec, topo, self.allowed_schedulers, sealed)
                if zones is not None:
                    usage.add(f"{r.namespace}/{r.name}", zones)
                    seen.add(r.uid)  # its own result replaces what bind assumed
            with self.lock:
                self.usage[node] = usage
                if until < math.inf:
                    self.usage_until[node] = until
                else:
                    self.usage_until.pop(node, None)
            for uid in seen:
                self.assumed.pop(uid, None)
        assumed = [(uid, res) for uid, (n, res) in list(self.assumed.items()) if n == node]
        if not assumed:
            return usage
        merged = ZoneUsage(
            dict(usage.cpu_milli), dict(usage.memory_bytes), {k: list(v) for k, v in usage.pods.items()}
        )
        for uid, res in assumed:
            merged.add(f"uid {uid} (assumed at bind)", [(z, cpus * 1000, mem) for z, cpus, mem in res])
        return merged

    def assume(self, uid: str, node: str, result: tuple[tuple[str, int, int], ...]) -> None:
        self.assumed[uid] = (node, result)

    def forget_assumed(self, uid: str) -> None:
        self.assumed.pop(uid, None)

    # -- estimation feed -------------------------------------------------------------------------

    def pod_bound(self, record: PodRecord) -> None:
        self.community.pod_bound(record.node)
        for cb in self.bound_listeners:
            cb(record.uid, record.node)
        if self.ledger is None or record.info is None or record.info.daemonset:
            return
        at = record.scheduled_at if record.scheduled_at is not None else self.clock()
        self.ledger.bound(record.info, record.uid, record.node, at)

    def pod_gone(self, uid: str) -> None:
        self.gone[uid] = True
        self.assumed.pop(uid, None)
        self.community.forget(uid)
        if self.ledger is not None:
            self.ledger.forget(uid)

    def parse(self, slim: Mapping[str, Any], policy: Any) -> NodeState:
        """Parse a node as of now, reporting bad annotations."""
        load = parse_node(slim, policy, self.clock())
        if (load.bad or load.ahead) and self.on_bad is not None:
            self.on_bad(load)
        return load

    def _reparse(self, policy: Any) -> None:
        with self.lock:
            self.nodes = {name: self.parse(slim, policy) for name, slim in self.raw_nodes.items()}
        for cb in self.node_listeners:
            cb("REPLACE", None)
