"""The community-NRT side of the verbs: filter out nodes whose zones cannot admit a pod under
single-numa-node, fold the zone score into prioritize, and at bind record the zones the pod takes.

Nodes with a crane NRT (``topology.crane.io``) are left to ``ballast.extender.numa.check``; this module
looks only at nodes with a v1alpha2 object and no crane one. The zone arithmetic is
``ballast.extender.numa.community`` (pure); the objects and the assumed record are
``ballast.extender.numa.community_view``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from cachetools import TTLCache

from ballast.extender.bind import BindError, Undo
from ballast.extender.numa.community import (
    CommunityFit,
    CommunityTopology,
    Demand,
    community_demand,
    community_fit,
    community_score,
)
from ballast.extender.numa.community_assumed import Assumed
from ballast.extender.numa.community_view import CommunityView
from ballast.extender.numa.crane import combine
from ballast.extender.wire import BindingArgs
from ballast.kube.async_client import AsyncKube
from ballast.model.podinfo import PodRecord
from ballast.model.policy_store import PolicyStore

MISSING = object()


class CommunityCheck:
    def __init__(
        self,
        store: PolicyStore,
        view: CommunityView,
        crane: Callable[[str], object | None],
        rejected: Callable[[int], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``crane(node)`` is the node's crane NRT or ``None``; ``rejected(count)`` counts nodes filter
        rejects (the ``numa`` rejection metric, shared with the crane path)."""
        self.store = store
        self.view = view
        self.crane = crane
        self._rejected = rejected
        self._seen: TTLCache[str, Demand | None] = TTLCache(100_000, 900, timer=clock)
        """What filter learnt about each pod, for bind (which only gets names)."""

    def seen(self, uid: str) -> Demand | object | None:
        return self._seen.get(uid, MISSING)

    def demand(self, pod: PodRecord) -> Demand | None:
        """What the pod needs aligned; ``None`` without reading it while no node's object filters."""
        info = pod.info
        if info.daemonset or not self.view.any_filtering():
            return None
        d = community_demand(pod.obj, pod.detail)
        if info.uid:
            self._seen[info.uid] = d
        return d

    def fit_target(self, node: str) -> CommunityTopology | None:
        """The node's v1alpha2 object when it filters and the node has no crane NRT (which wins)."""
        topo = self.view.topology(node)
        if topo is None or not topo.filters or self.crane(node) is not None:
            return None
        return topo

    def fit(self, demand: Demand, node: str, score: bool = True) -> CommunityFit | None:
        """The fit on a node with a filtering v1alpha2 object and no crane NRT; ``None`` otherwise."""
        topo = self.fit_target(node)
        return None if topo is None else community_fit(topo, demand, self.view.taken(node), score=score)

    def filter(self, demand: Demand, passing: list[str], failed: dict) -> set[str]:
        """Reject passing nodes whose zones cannot admit ``demand``; the reasons go into ``failed``, the
        rejected names come back."""
        out = set()
        topologies, crane, view = self.view.topologies, self.crane, self.view
        by_shape: dict[tuple[Any, ...], CommunityFit] = {}
        for name in passing:  # ``fit`` inlined: this loop runs once per node of every request
            topo = topologies.get(name)
            if topo is None or not topo.filters or crane(name) is not None:
                continue
            if view.record.any_on(name):
                f = community_fit(topo, demand, view.taken(name), score=False)
            else:  # nothing assumed: the answer depends on the shape alone
                f = by_shape.get(topo.shape)  # type: ignore[assignment]
                if f is None:
                    f = by_shape[topo.shape] = community_fit(topo, demand, score=False)
            if not f.ok:
                failed[name] = f.reason
                out.add(name)
        if out:
            self._rejected(len(out))
        return out

    def scores(self, demand: Demand, hosts: list[str], scores: list[int]) -> bool:
        """Fold the zone score into ``scores`` (one per host, in place); True when any score changed."""
        weight = self.store.current.topology.score_weight
        changed = False
        by_shape: dict[tuple[Any, ...], int] = {}
        for i, node in enumerate(hosts):
            topo = self.fit_target(node)
            if topo is None:
                continue
            if self.view.record.any_on(node):
                score = community_score(community_fit(topo, demand, self.view.taken(node)))
            else:  # nothing assumed: the score depends on the shape alone
                score = by_shape.get(topo.shape, -1)
                if score < 0:
                    score = by_shape[topo.shape] = community_score(community_fit(topo, demand))
            scores[i] = combine(scores[i], score, weight)
            changed = True
        return changed

    def explain(self, node: str, demand: Demand | None = None) -> dict[str, Any] | None:
        """What ``/nodes`` and ``/explain`` show of the node's v1alpha2 object: policy, scope, each zone's
        published and assumed amounts, why an object is unusable, and for ``demand`` the fit and score.
        ``None`` when the node has no v1alpha2 object at all."""
        view = self.view
        bad = view.malformed.get(node)
        if bad is not None:
            return {"nrt": "malformed", "reason": bad.reason, "note": "no information: NUMA checks pass"}
        topo = view.topology(node)
        if topo is None:
            return None
        taken = view.taken(node)
        out: dict[str, Any] = {
            "nrt": "v1alpha2",
            "resourceVersion": topo.resource_version,
            "topologyManagerPolicy": topo.policy,
            "topologyManagerScope": topo.scope,
            "fingerprint": topo.fingerprint,
            "zones": [
                {
                    "name": z.name,
                    "available": dict(z.available),
                    "allocatable": dict(z.allocatable),
                    "assumed": taken.get(z.name, {}),
                }
                for z in topo.zones
            ],
            "assumedPods": [f"{e.namespace}/{e.name}" for e in view.assumed_on(node)],
        }
        if self.crane(node) is not None:
            out["note"] = "the node also has a crane NRT, which is the one checked"
        elif not topo.filters:
            out["note"] = f"policy {topo.policy}: the kubelet admits pods whatever the zones hold; all pass"
        elif demand is not None:
            f = community_fit(topo, demand, taken)
            out["pod"] = {
                "fits": f.ok,
                "reason": f.reason,
                "choice": [{"zone": z, "resources": dict(w)} for z, w in f.placements],
                "numaScore": community_score(f),
            }
        return out


class CommunityPreBind:
    """The bind step: choose the zones again under the view's lock, refuse the bind when they no longer
    fit (a pod bound since filter took them), and record them as assumed until the object counts them."""

    def __init__(self, kube: AsyncKube, check: CommunityCheck) -> None:
        self.kube = kube
        self.check = check

    async def __call__(self, args: BindingArgs) -> Undo | None:
        view = self.check.view
        if self.check.fit_target(args.node) is None:
            return None
        demand = self.check.seen(args.pod_uid)
        if demand is MISSING:
            path = f"/api/v1/namespaces/{args.pod_namespace}/pods/{args.pod_name}"
            demand = community_demand(await self.kube.get(path))  # not seen in filter (e.g. after a restart)
        if not isinstance(demand, Demand):
            return None
        uid = args.pod_uid or f"{args.pod_namespace}/{args.pod_name}"
        with view.lock:
            topo = self.check.fit_target(args.node)
            if topo is None:
                return None
            f = community_fit(topo, demand, view.taken(args.node))
            if not f.ok:
                raise BindError(f"NUMA zones of {args.node} changed since filter: {f.reason}")
            if f.placements:
                view.assume(
                    Assumed(uid, args.pod_namespace, args.pod_name, args.node, f.placements, view.clock())
                )

        async def undo() -> None:
            view.forget(uid)

        return undo
