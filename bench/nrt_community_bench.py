"""What the community NRT (v1alpha2) adds to filter and prioritize, and what one watch event costs.

    python -m bench.nrt_community_bench [--sizes 100,1000,5000] [--repeat 50]

In process, no HTTP: the added work only (``CommunityCheck.filter`` and ``.scores`` over N nodes, each
with an nfd-topology-updater-shaped object of two zones), the parse of one object per watch event, and a
BestEffort pod (which must cost next to nothing: it is never checked). Prints a markdown table.

Nodes whose objects say the same (scope and every zone's amounts, nothing assumed) get one computation per
request; the "no two nodes alike" row is the worst case, where every node is computed.

Goals (judged on the best run: the machines this runs on are shared, and the median moves with the
neighbours' load): parsing stays on the event (a request never parses an object); over 1000 community
nodes a Guaranteed pod's filter under 5 ms (under 10 ms with no two nodes alike) and its prioritize under
20 ms; a BestEffort pod's filter under 0.1 ms whatever the node count.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from ballast.extender.numa.community import parse_community
from ballast.extender.numa.community_check import CommunityCheck
from ballast.extender.numa.community_view import CommunityView
from ballast.model.podinfo import read_pod
from ballast.model.policy import load_policy
from ballast.model.policy_store import PolicyStore
from ballast.testing.nrt_community import GI, guaranteed, nrt, pod, two_zones, zone

POLICY = "scheduler_config/policy.yaml"


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """(median, best) milliseconds of ``fn`` over ``repeat`` runs."""
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) * 1000)
    return statistics.median(runs), min(runs)


def objects(names: list[str], distinct: bool) -> list[dict[str, Any]]:
    """Two zones per node, 35 combinations of free CPUs; ``distinct``: every node's memory differs too, so
    no two nodes share a shape (the worst case: nothing is computed once for several nodes)."""
    out = []
    for i, n in enumerate(names):
        mem = (16, 15, 1 + i % 15) if not distinct else (16, 15, 15)
        obj = nrt(n, [zone(0, (8, 8, 2 + i % 7), mem), zone(1, (8, 8, 6 - i % 5))])
        if distinct:
            obj["zones"][0]["resources"][1]["available"] = str(GI + i)
        out.append(obj)
    return out


def _filter(check: CommunityCheck, p: dict, names: list[str]) -> set[str]:
    """Filter's community side for pod ``p``: its one record, its demand, the nodes it rejects."""
    demand = check.demand(read_pod.record(p))
    return check.filter(demand, names, {}) if demand is not None else set()


def _scores(check: CommunityCheck, p: dict, names: list[str]) -> list[int]:
    """Prioritize's community side for pod ``p``, over scores of 5."""
    scores = [5] * len(names)
    demand = check.demand(read_pod.record(p))
    if demand is not None:
        check.scores(demand, names, scores)
    return scores


def measure_size(store: PolicyStore, size: int, repeat: int) -> list[tuple[str, int, float, float, str]]:
    names = [f"n{i}" for i in range(size)]
    view = CommunityView(lambda _node: ())
    view.replace(objects(names, distinct=False), "1")
    check = CommunityCheck(store, view, lambda _n: None, lambda _c: None)
    distinct_view = CommunityView(lambda _node: ())
    distinct_view.replace(objects(names, distinct=True), "1")
    distinct = CommunityCheck(store, distinct_view, lambda _n: None, lambda _c: None)
    rows = []
    for label, p, goal in (
        ("filter, Guaranteed 4 CPUs", guaranteed("g", 4), "< 5 ms" if size == 1000 else ""),
        ("filter, BestEffort", pod("be"), "< 0.1 ms"),
    ):
        median, best = timed(lambda p=p: _filter(check, p, names), repeat)
        rows.append((label, size, median, best, goal))
    g = guaranteed("g", 4)
    median, best = timed(lambda: _filter(distinct, g, names), repeat)
    goal = "< 10 ms" if size == 1000 else ""
    rows.append(("filter, Guaranteed 4 CPUs, no two nodes alike", size, median, best, goal))
    median, best = timed(lambda: _scores(check, g, names), repeat)
    rows.append(("prioritize, Guaranteed 4 CPUs", size, median, best, "< 20 ms" if size == 1000 else ""))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,5000")
    ap.add_argument("--repeat", type=int, default=50)
    args = ap.parse_args()
    store = PolicyStore(load_policy(POLICY), None, None)
    rows: list[tuple[str, int, float, float, str]] = []
    obj = two_zones("n", 2, 6)
    median, best = timed(lambda: [parse_community(obj) for _ in range(1000)], max(3, args.repeat // 10))
    rows.append(("parse one object (watch event)", 1, median / 1000, best / 1000, ""))
    for size in (int(s) for s in args.sizes.split(",")):
        rows += measure_size(store, size, args.repeat)
    print("| case | nodes | median ms | best ms | goal |")
    print("|---|---:|---:|---:|---|")
    for label, size, median, best, goal in rows:
        verdict = ""
        if goal:
            verdict = f"{goal} {'ok' if best < float(goal.split()[1]) else 'MISSED'}"
        print(f"| {label} | {size} | {median:.4f} | {best:.4f} | {verdict} |")


if __name__ == "__main__":
    main()
