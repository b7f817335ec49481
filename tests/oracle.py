"""filter and prioritize by their definition, node by node: the oracle the extender's verdict boards are
checked against (``tests/model/test_verdicts.py``, ``tests/model/test_scoring.py``).

The extender answers names-mode and whole-node requests from precomputed verdicts
(``ballast.model.verdicts.VerdictBoard``); this computes the same answers the slow, obvious way, from the pure
functions of ``ballast.model.load`` and the ledger's estimates: every node checked with ``check_node`` (the
pod's
estimate added), scored with ``score_node`` or ranked by ``projected_load`` and ``relative_scores`` (the
pod's own hold skipped), a node Ballast does not know passes and scores 0. Like the extender it holds the
pod's estimate where kube-scheduler will most likely put it, in its own ledger, so a burst through the
oracle and one through the extender stay comparable pod after pod. No NUMA: the nodes it is given have no
NodeResourceTopology.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ballast.extender.extender import _FEW_TIED
from ballast.extender.wire import filter_result
from ballast.model.ledger import Ledger
from ballast.model.load import check_node, projected_load, relative_scores, score_node
from ballast.model.nodestate import NodeState
from ballast.model.podinfo import PodDemand, pod_info
from ballast.model.policy import Policy


class Oracle:
    def __init__(self, loads: Mapping[str, NodeState], policy: Policy, now: float) -> None:
        self.loads = loads
        """The nodes by name, read at every call (a test may change them between pods)."""
        self.policy = policy
        self.now = now
        self.ledger = Ledger(policy, lambda: now)

    def filter(self, pod_obj: dict[str, Any], names: list[str]) -> dict[str, Any]:
        """The names-mode filter answer: ``check_node`` with the pod's estimate on every known node."""
        pod = pod_info(pod_obj)
        if pod.daemonset:
            return filter_result(names=list(names), failed={})
        incoming = self.ledger.incoming(pod, self.now)
        passing: list[str] = []
        failed: dict[str, str] = {}
        for name in names:
            load = self.loads.get(name)
            rejection = None
            if load is not None:
                extra = self.ledger.extra(load, self.now, incoming)
                rejection = check_node(load, self.policy, self.now, extra, self.policy.is_prod(pod.priority))
            if rejection is None:
                passing.append(name)
            else:
                failed[name] = rejection.reason
        if len(passing) == 1:  # kube-scheduler skips prioritize: the hold goes to the only candidate
            self._hold(pod, passing, [0])
        return filter_result(names=passing, failed=failed)

    def prioritize(self, pod_obj: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
        """The prioritize answer: relative ranks of the projected loads after the pod, or crane's score."""
        pod = pod_info(pod_obj)
        now, policy = self.now, self.policy
        loads = [self.loads.get(name) for name in names]
        if policy.scoring == "relative":
            incoming = None if pod.daemonset else self.ledger.incoming(pod, now)
            after = [
                None
                if load is None
                else projected_load(
                    load,
                    policy,
                    now,
                    self.ledger.extra(load, now, skip=pod.uid),
                    (0, 0) if incoming is None else (incoming.cpu_milli, incoming.memory_bytes),
                )
                for load in loads
            ]
            scores = relative_scores(after)
        else:
            scores = [
                0
                if load is None
                else score_node(load, policy, now, self.ledger.extra(load, now, skip=pod.uid)).score
                for load in loads
            ]
        self._hold(pod, names, scores)
        return [{"Host": name, "Score": score} for name, score in zip(names, scores, strict=True)]

    def _hold(self, pod: PodDemand, names: list[str], scores: list[int]) -> None:
        """Hold the estimate on the best score; among a few tied, on the one with the fewest estimates of
        other pods (kube-scheduler's request-based plugins favour it), the first of those."""
        if not names or pod.daemonset:
            return
        tied = [i for i, score in enumerate(scores) if score == max(scores)]
        best = tied[0]
        if len(tied) <= _FEW_TIED:
            best = min(tied, key=lambda i: sum(e.uid != pod.uid for e in self.ledger.on_node(names[i])))
        self.ledger.hold(pod, names[best], self.now)
