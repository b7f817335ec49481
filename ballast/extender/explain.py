"""What ``/nodes`` and ``/explain`` show: every input of a node's verdict and score, read-only.

Views only read the extender's state (the cache, the ledger, the policy); they never hold, remember or
parse into shared state, so asking why a pod went somewhere cannot change where the next one goes. The
verdicts themselves come from the same functions the verbs use (``check_node``, ``score_node``,
``projected_load``, the NUMA fit), and ``tests/extender/test_explain.py`` checks they agree with filter and
prioritize over the captured requests.
"""

from __future__ import annotations

from typing import Any

from ballast.contract.annotations import HOT_VALUE_KEY, HOT_VALUE_VALID_SECONDS
from ballast.extender.extender import Extender
from ballast.extender.numa.community import community_demand
from ballast.extender.numa.crane import NumaRequest, combine, numa_request, numa_score
from ballast.model.load import (
    NO_POD,
    check_node,
    dominant_of,
    projected_load,
    relative_scores,
    resource_loads,
    score_node,
)
from ballast.model.nodestate import NodeState
from ballast.model.podinfo import PodDemand, pod_info
from ballast.model.policy import Policy
from ballast.model.thresholds import THRESHOLDS_ANNOTATION

PLAIN_POD = PodDemand("", "", "", False, 0, 0, 0, 0)
"""What /nodes judges with: a pod that requests nothing (so it is estimated at the policy defaults)."""

PROJECTED_DIGITS = 6
"""``projectedLoad`` as shown: loads are annotated with 5 decimals, estimates add finer amounts; more
digits would show only float noise (``1.2825000000029103``)."""


def _metric_views(
    load: NodeState, policy: Policy, now: float, extra: dict[str, float]
) -> list[dict[str, Any]]:
    out = []
    for metric in policy.sync_periods:
        sample = load.samples.get(metric)
        valid = policy.valid_for(metric)
        view: dict[str, Any] = {"metric": metric, "resource": policy.resource_of(metric)}
        if sample is None and metric in load.bad:
            view.update(state="bad", value=None, fresh=False, reason=load.bad[metric])
        elif sample is None:
            view.update(state="missing", value=None, fresh=False)
        else:
            counts = sample.is_fresh(now, valid)
            view.update(
                state="fresh" if counts else "stale",
                value=sample.value,
                ageSeconds=round(sample.age(now), 3),
                fresh=counts,
                expiresInSeconds=round(sample.expires_at(valid) - now, 3),
            )
        if metric in extra:
            view["estimatedExtra"] = round(extra[metric], 5)
        out.append(view)
    return out


def explain_node(ext: Extender, load: NodeState, pod: PodDemand, now: float) -> dict[str, Any]:
    """Everything that went into one node's verdict and score for ``pod``: the body of /nodes and /explain."""
    policy = ext.store.current
    incoming = ext.incoming(pod, now)
    filter_extra = ext.extra(load, now, incoming)
    score_extra = ext.extra(load, now, None, skip=pod.uid)
    prod = policy.is_prod(pod.priority)
    rejection = None if pod.daemonset else check_node(load, policy, now, filter_extra, prod)
    score = score_node(load, policy, now, score_extra, explain=True)
    resources = resource_loads(load, policy, now, score_extra)
    hot = load.hot
    estimates = ext.ledger.counted(load, now)
    return {
        "name": load.name,
        "resourceVersion": load.resource_version,
        "allocatable": {"cpuMilli": load.allocatable_cpu_milli, "memoryBytes": load.allocatable_memory_bytes},
        "metrics": _metric_views(load, policy, now, filter_extra),
        "hotValue": (
            {"value": None, "fresh": False, "bad": load.bad[HOT_VALUE_KEY]}
            if HOT_VALUE_KEY in load.bad
            else None
        )
        if hot is None
        else {
            "value": hot.value,
            "ageSeconds": round(now - hot.timestamp, 3),
            "fresh": hot.is_fresh(now, HOT_VALUE_VALID_SECONDS),
        },
        "estimation": {
            "pods": [e.to_json(now) for e in estimates if e.uid != pod.uid],
            "incoming": incoming.to_json(now) if incoming is not None else None,
        },
        "filter": {"passes": rejection is None, "reason": None if rejection is None else rejection.reason}
        | ({"note": "DaemonSet pods always pass"} if pod.daemonset else {}),
        "score": score.to_json()
        | {
            "scoring": policy.scoring,
            "projectedLoad": projected_load(
                load,
                policy,
                now,
                score_extra,
                NO_POD if pod.daemonset or incoming is None else (incoming.cpu_milli, incoming.memory_bytes),
            ),
            "resources": {r: round(v, PROJECTED_DIGITS) for r, v in resources.items()},
            "dominantResource": dominant_of(resources),
            "dominantResourceWeight": policy.dominant_resource_weight,
        },
        "numa": numa_view(ext, load.name),
        "limits": _limits_view(load, policy) | {"podClass": "prod" if prod else "batch"},
    } | _community(ext, load.name, None)


def _community(ext: Extender, node: str, demand: Any) -> dict[str, Any]:
    """The node's community NRT view, under ``numaCommunity``, when it has a v1alpha2 object."""
    check = ext.numa.community
    view = check.explain(node, demand) if check is not None else None
    return {} if view is None else {"numaCommunity": view}


def _limits_view(load: NodeState, policy: Policy) -> dict[str, Any]:
    """The node's effective limits and weights, each with where it came from (global, pool NAME, node,
    prod, pool NAME prod), and the thresholds annotation's problem when it was ignored."""
    view = (load.limits or policy.limits).to_json()
    bad = load.bad.get(THRESHOLDS_ANNOTATION)
    view["annotation"] = (
        {"name": THRESHOLDS_ANNOTATION, "ignored": True, "reason": bad}
        if bad is not None
        else {"name": THRESHOLDS_ANNOTATION, "ignored": False}
    )
    return view


def _fold_numa(view: dict[str, Any], pod_view: dict[str, Any] | None, weight: float) -> None:
    """Fold a NUMA verdict for the pod (crane's NRT or the community one) into a node's view as filter
    and prioritize fold it: a zone misfit fails the node, the NUMA score mixes into the load score."""
    if pod_view is None:
        return
    if not pod_view["fits"]:
        view["filter"] = {"passes": False, "reason": pod_view["reason"]}
    view["score"]["scoreWithNuma"] = combine(view["score"]["score"], pod_view["numaScore"], weight)


def rank_views(views: list[dict[str, Any]], policy: Policy) -> None:
    """Relative scoring in /nodes and /explain: rank the nodes shown among themselves, as prioritize ranks
    the names it is sent. Every ranked view keeps crane's absolute score as ``craneScore``. Then (under
    either scoring) ``projectedLoad`` is rounded for display: ranking used the exact values, as
    prioritize does."""
    if policy.scoring == "relative":
        _rank_relative(views, policy)
    for view in views:
        round_projected(view)


def round_projected(view: dict[str, Any]) -> None:
    score = view.get("score", {})
    if score.get("projectedLoad") is not None:
        score["projectedLoad"] = round(score["projectedLoad"], PROJECTED_DIGITS)


def _rank_relative(views: list[dict[str, Any]], policy: Policy) -> None:
    ranked = [v for v in views if "projectedLoad" in v.get("score", {})]
    scores = relative_scores([v["score"]["projectedLoad"] for v in ranked])
    for v, score in zip(ranked, scores, strict=True):
        v["score"]["craneScore"] = v["score"]["score"]
        v["score"]["score"] = score
        pod_numa = (v.get("numa") or {}).get("pod")
        if "scoreWithNuma" in v["score"] and pod_numa is not None:
            v["score"]["scoreWithNuma"] = combine(score, pod_numa["numaScore"], policy.topology.score_weight)


def _scored(view: dict[str, Any]) -> bool:
    """Whether prioritize had anything to score this node by: a node it does not know, or one without a
    fresh priority metric or a NUMA score, scores 0 for want of information and is favoured by nobody."""
    score = view["score"]
    return bool(view.get("known")) and (score.get("projectedLoad") is not None or "scoreWithNuma" in score)


def numa_view(ext: Extender, node: str, req: NumaRequest | None = None) -> dict[str, Any] | None:
    """The node's NUMA zones, what is taken and by which pods, and for ``req`` the fit and the choice."""
    if ext.source is None:
        return None
    topo = ext.source.topology(node)
    if topo is None:
        return {"nrt": False, "note": "no NodeResourceTopology: NUMA pods pass"}
    usage = ext.source.zone_usage(node)
    view: dict[str, Any] = {
        "nrt": True,
        "cpuManagerPolicy": "Static" if topo.static else "None",
        "topologyAware": topo.aware,
        "zones": [
            {
                "name": z.name,
                "allocatableCpuMilli": z.cpu_milli,
                "takenCpuMilli": usage.cpu_milli.get(z.name, 0),
                "freeCpuMilli": z.cpu_milli - usage.cpu_milli.get(z.name, 0),
                "allocatableMemoryBytes": z.memory_bytes,
                "takenMemoryBytes": usage.memory_bytes.get(z.name, 0),
                "takenBy": usage.pods.get(z.name, []),
            }
            for z in topo.zones
        ],
    }
    if not topo.static:
        view["note"] = "the kubelet manages CPUs on this node: NUMA pods pass"
    elif req is not None:
        f = ext.numa.fit(req, node)
        if f is not None:
            view["pod"] = {
                "cpus": req.cpus,
                "aware": req.is_aware(topo),
                "fits": f.ok,
                "reason": f.reason,
                "choice": [{"zone": z, "cpus": c, "memoryBytes": m} for z, c, m in f.result],
                "numaScore": numa_score(f),
            }
    return view


def explain(
    ext: Extender, pod_obj: dict[str, Any] | None, names: list[str] | None, nodes: list | None
) -> dict:
    """The /explain answer: per node pass/fail and score breakdown, and the node Ballast would favour."""
    now = ext.clock()
    policy = ext.store.current
    pod = pod_info(pod_obj) if pod_obj is not None else PLAIN_POD
    req = numa_request(pod_obj) if pod_obj is not None and not pod.daemonset else None
    demand = (
        community_demand(pod_obj)
        if pod_obj is not None and not pod.daemonset and ext.numa.community is not None
        else None
    )
    unknown_note = "not in the cache: no information, passes and scores 0"
    if nodes is not None:
        loads: list[tuple[str, NodeState | None]] = [
            (n["metadata"]["name"], ext.peek_object(n, policy)) for n in nodes
        ]
    elif ext.source is None and names is not None:
        # What filter and prioritize answer here: no cache, so no information about any named node (nodes
        # remembered from earlier whole-node requests may be stale, and filter does not use them either).
        loads = [(n, None) for n in names]
        unknown_note = "no node cache (names mode without cluster access): every node passes and scores 0"
    else:
        wanted = names if names is not None else ext.known_names()
        loads = [(n, ext.known_node(n)) for n in wanted]
    views = []
    best: tuple[int, str] | None = None
    for name, load in loads:
        if load is None:
            views.append(
                {
                    "name": name,
                    "known": False,
                    "filter": {"passes": True, "reason": None},
                    "score": {"score": 0},
                    "note": unknown_note,
                }
            )
            continue
        view = explain_node(ext, load, pod, now) | {"known": True}
        if demand is not None:
            view |= _community(ext, name, demand)
            _fold_numa(
                view, view.get("numaCommunity", {}).get("pod"), ext.store.current.topology.score_weight
            )
        if req is not None:
            view["numa"] = numa_view(ext, name, req)
            pod_numa = view["numa"].get("pod") if view["numa"] else None
            _fold_numa(view, pod_numa, ext.store.current.topology.score_weight)
        views.append(view)
    rank_views(views, policy)
    for view in views:
        final = view["score"].get("scoreWithNuma", view["score"]["score"])
        if view["filter"]["passes"] and _scored(view) and (best is None or final > best[0]):
            best = (final, view["name"])
    shadow = policy.mode == "shadow"
    return {
        "mode": policy.mode,
        "pod": pod.label or None,
        "nodes": views,
        "favoured": best[1] if best else None,
        "note": (
            "shadow mode: these are the verdicts Ballast records; it answers kube-scheduler with every node "
            "passing (NUMA fit aside) and the same score for all"
            if shadow
            else "kube-scheduler adds Ballast's score x weight x 10 to its own plugin scores, so it may pick "
            "another passing node"
        ),
    }
