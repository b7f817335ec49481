"""The extender verbs as plain methods on parsed requests: no HTTP here, so tests and benchmarks call
them directly and the routes stay thin.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from app.load import check_node, score_node
from app.metrics import ExtenderMetrics
from app.nodestate import NodeLoad, parse_node
from app.podinfo import PodInfo, pod_info
from app.policy import Policy
from app.policy_store import PolicyStore
from app.wire import ExtenderArgs

log = logging.getLogger("ballast.extender")


class NodeSource(Protocol):
    """Where names-mode requests find nodes: the watch-driven cache (``app.cache``)."""

    def node(self, name: str) -> NodeLoad | None: ...


class Overlay(Protocol):
    """Estimated usage of pods placed after the last measurement (``app.estimation``)."""

    def extra(
        self, load: NodeLoad, policy: Policy, now: float, incoming: PodInfo | None
    ) -> Mapping[str, float]: ...

    def hold(self, pod: PodInfo, node: str, now: float) -> None: ...


class Extender:
    def __init__(
        self,
        store: PolicyStore,
        metrics: ExtenderMetrics,
        source: NodeSource | None = None,
        overlay: Overlay | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.source = source
        self.overlay = overlay
        self.clock = clock
        self._parsed: dict[str, NodeLoad] = {}
        """Whole-node mode: the last parse of each node by name, reused while its resourceVersion holds."""
        self._warned_names_only = False
        self._seen = {v: metrics.nodes_seen.labels(v) for v in ("filter", "prioritize")}
        store.on_change(lambda _p: self._parsed.clear())

    # -- node lookup --------------------------------------------------------------------------------

    def _from_object(self, node: dict[str, Any], policy: Policy) -> NodeLoad:
        """Parse a whole Node once per resourceVersion, so full-node requests do not re-parse."""
        meta = node["metadata"]
        rv = meta.get("resourceVersion")
        if not isinstance(rv, str) or not rv:
            return parse_node(node, policy)
        load = self._parsed.get(meta["name"])
        if load is None or load.resource_version != rv:
            load = parse_node(node, policy)
            if len(self._parsed) > 200_000:  # bound memory if names churn without end
                self._parsed.clear()
            self._parsed[load.name] = load
        return load

    def _from_name(self, name: str) -> NodeLoad | None:
        if self.source is None:
            return None
        load = self.source.node(name)
        if load is None:
            self.metrics.unknown_nodes.inc()
            log.info("node %s is not in the cache: no information, it passes and scores 0", name)
        return load

    def _names_only_without_cache(self) -> None:
        self.metrics.names_only.inc()
        if not self._warned_names_only:
            self._warned_names_only = True
            log.warning(
                "kube-scheduler sent only NodeNames (nodeCacheCapable: true) but this extender has no "
                "node cache (start it with --kubeconfig or in a cluster): every node passes unscored"
            )

    def _extra(self, load: NodeLoad, policy: Policy, now: float, pod: PodInfo | None) -> Mapping[str, float]:
        if self.overlay is None:
            return {}
        return self.overlay.extra(load, policy, now, pod)

    # -- verbs --------------------------------------------------------------------------------------

    def filter(self, args: ExtenderArgs) -> dict[str, Any]:
        policy = self.store.current
        now = self.clock()
        pod = pod_info(args.pod)
        failed: dict[str, str] = {}
        if args.nodes is not None:
            self._seen["filter"].inc(len(args.nodes))
            passing_nodes: list[dict[str, Any]] = []
            for node in args.nodes:
                if pod.daemonset:
                    passing_nodes.append(node)
                    continue
                load = self._from_object(node, policy)
                rejection = check_node(load, policy, now, self._extra(load, policy, now, pod))
                if rejection is None:
                    passing_nodes.append(node)
                else:
                    failed[load.name] = rejection.reason
                    self.metrics.rejected.labels(rejection.metric).inc()
            return {
                "Nodes": {"metadata": {}, "items": passing_nodes},
                "NodeNames": None,
                "FailedNodes": failed,
                "FailedAndUnresolvableNodes": {},
                "Error": "",
            }
        names = args.node_names or []
        self._seen["filter"].inc(len(names))
        if self.source is None:
            self._names_only_without_cache()
            passing = list(names)
        elif pod.daemonset:
            passing = list(names)
        else:
            passing = []
            for name in names:
                load = self._from_name(name)
                rejection = None
                if load is not None:
                    rejection = check_node(load, policy, now, self._extra(load, policy, now, pod))
                if rejection is None:
                    passing.append(name)
                else:
                    failed[name] = rejection.reason
                    self.metrics.rejected.labels(rejection.metric).inc()
        return {
            "Nodes": None,
            "NodeNames": passing,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": {},
            "Error": "",
        }

    def prioritize(self, args: ExtenderArgs) -> list[dict[str, Any]]:
        policy = self.store.current
        now = self.clock()
        pod = pod_info(args.pod)
        out: list[dict[str, Any]] = []
        best: tuple[int, str] | None = None
        if args.nodes is not None:
            self._seen["prioritize"].inc(len(args.nodes))
            loads: list[NodeLoad | None] = [self._from_object(n, policy) for n in args.nodes]
        else:
            names = args.node_names or []
            self._seen["prioritize"].inc(len(names))
            if self.source is None:
                self._names_only_without_cache()
                return [{"Host": name, "Score": 0} for name in names]
            loads = [self._from_name(n) or NodeLoad(n) for n in names]
        for load in loads:
            assert load is not None
            score = score_node(load, policy, now, self._extra(load, policy, now, None)).score
            out.append({"Host": load.name, "Score": score})
            if best is None or score > best[0]:
                best = (score, load.name)
        if self.overlay is not None and best is not None and not pod.daemonset:
            # kube-scheduler binds asynchronously: hold this pod's estimate on the node it will most
            # likely get, so the next pod's filter sees it before the bind arrives.
            self.overlay.hold(pod, best[1], now)
        return out
