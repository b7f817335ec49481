"""Names-mode filter and prioritize in process: the verbs' own cost, without HTTP or a second process.

    python -m bench.inprocess_verbs [--size 5000] [--hot-fraction 0.1] [--calls 300] [--prod-priority N]
                                    [--shadow]

On a machine shared with other work, request-level numbers (``bench.names_bench``) swing by several times
between runs; the minimum time of many in-process calls moves far less, so it is what an A/B of two trees
compares. For an A/B, run the same command from each tree's root with ``PYTHONPATH=.`` (the script needs
only modules both trees have, unless ``--prod-priority`` or ``--shadow`` is given) and alternate the two a
few times. ``--prod-priority`` adds a prod limit (cpu_usage_avg_5m 0.5 for priority >= 1000) and gives the
pod that priority; ``--shadow`` runs in shadow mode.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

from ballast.contract.annotations import CPU_USAGE_AVG_5M
from ballast.extender.encode import ScoreAnswers
from ballast.extender.extender import Extender
from ballast.extender.metrics import ExtenderMetrics
from ballast.extender.wire import ExtenderArgs
from ballast.model.ledger import Ledger
from ballast.model.nodestate import parse_node
from ballast.model.policy import load_policy
from ballast.model.policy_store import PolicyStore
from ballast.testing.node_source import StaticSource
from bench.nodes import make_nodes, pod

POLICY = "scheduler_config/policy.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=5000)
    ap.add_argument("--hot-fraction", type=float, default=0.1)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--prod-priority", type=int, default=None)
    ap.add_argument("--shadow", action="store_true")
    args = ap.parse_args()
    now = time.time()
    policy = load_policy(POLICY)
    body = pod()
    if args.prod_priority is not None:
        from ballast.model.pools import LimitEntry, ProdSettings

        prod = ProdSettings(1000, (LimitEntry(CPU_USAGE_AVG_5M, 0.5),))
        policy = dataclasses.replace(policy, prod=prod)
        body = dict(body, spec=dict(body["spec"], priority=args.prod_priority))
    if args.shadow:
        policy = dataclasses.replace(policy, mode="shadow")
    nodes = make_nodes(args.size, now=now, hot_fraction=args.hot_fraction)
    loads = {n["metadata"]["name"]: parse_node(n, policy, now) for n in nodes}
    names = list(loads)
    ext = Extender(
        PolicyStore(policy), ExtenderMetrics(), StaticSource(loads), Ledger(policy, lambda: now), lambda: now
    )
    answers = ScoreAnswers(ext.board)  # prioritize's answer encoded as the HTTP layer does

    def run(verb: str, calls: int) -> list[float]:
        out = []
        for i in range(calls):
            p = dict(body, metadata=dict(body["metadata"], uid=f"u{i}", name=f"p{i}"))
            request = ExtenderArgs(p, None, names)
            start = time.perf_counter()
            if verb == "filter":
                ext.answering(ext.filter, request)
            else:
                answers(ext.answering(ext.prioritize, request))
            out.append(time.perf_counter() - start)
            ext.settle()
        return out

    for verb in ("filter", "prioritize"):
        run(verb, 30)
        xs = run(verb, args.calls)
        print(
            f"{args.size} nodes, hot {args.hot_fraction:g}, {verb}: "
            f"min {min(xs) * 1e6:.0f} us, median {statistics.median(xs) * 1e6:.0f} us"
        )


if __name__ == "__main__":
    main()
