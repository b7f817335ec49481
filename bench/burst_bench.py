"""Does a burst spread like water? A burst of pods through the real kube-scheduler calling Ballast.

20 nodes (8 CPU, 32Gi) annotated with spread loads (0.10 to 0.48 on every policy metric), a burst of 100
pods (500m, 1Gi) created at once, kube-scheduler wired as ``scheduler-config-node-cache.yaml`` ships it
(names mode, filter + prioritize + bind), and again without the bind verb (kube-scheduler binds itself and
Ballast learns each placement from its pod watch, later: meanwhile only prioritize's hold says where the
pod went). Afterwards, per node, the projected load Ballast ranks by
(``ballast.model.load.projected_load``: annotated + the estimates of the pods bound there, with the policy's
dominant-resource term; the plain weighted mean is reported beside it) and whether
``cpu_usage_avg_5m`` plus estimates ends over its limit. Compared with ideal greedy water-filling (each pod
to the node with the least projected load after it, among nodes it keeps under the limit). Both scorings
are run, alternating: the default ``relative`` and ``crane``, each with and without bind.

    python -m bench.burst_bench [--rounds 3] [--policy scheduler_config/policy.yaml]

Goal: 0 nodes over the limit, coefficient of variation (CV) of projected load within 1.25x of ideal.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import sys
import tempfile
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import yaml

from ballast.contract.annotations import CPU_USAGE_AVG_5M
from ballast.model.estimation import estimate_usage
from ballast.model.podinfo import pod_info
from ballast.model.policy import load_policy
from ballast.testing.controlplane import ControlPlane, pod_body, wait_until
from bench.cluster_bench import POLICY, SCHEDULER, Api, create_nodes, drain, refresh_loads, scheduler_config
from bench.harness import ballast_cmd, free_port, serve
from bench.spread import cv

NODES = 20
PODS = 100
CPU_MILLI = 8000
MEMORY = 32 << 30
LIMIT_METRIC = CPU_USAGE_AVG_5M


def burst(prefix: str) -> list[dict]:
    return [
        pod_body(f"{prefix}-{i:03d}", scheduler_name=SCHEDULER, requests={"cpu": "500m", "memory": "1Gi"})
        for i in range(PODS)
    ]


@dataclasses.dataclass(frozen=True)
class Shape:
    """What one burst pod adds to a node: to ``cpu_usage_avg_5m``, to the projected load Ballast ranks by
    and to the plain weighted mean of the priority metrics."""

    cpu: float
    weighted: float
    limit: float
    mean: float

    @classmethod
    def of(cls, policy_path: Path) -> Shape:
        policy = load_policy(policy_path)
        cpu_m, mem_b = estimate_usage(pod_info(burst("x")[0]), policy.estimation)
        cpu, mem = cpu_m / CPU_MILLI, mem_b / MEMORY
        total = sum(w for _, w, _, _ in policy.priority_plan)
        weighted = sum(w * {"cpu": cpu, "memory": mem}.get(r, 0.0) for _, w, _, r in policy.priority_plan)
        # Every node starts alike on both resources, so the one a pod adds more of dominates from the
        # first pod on: the dominant-resource term D adds that share D times.
        d = policy.dominant_resource_weight
        limit = next(lim for name, lim, _, _ in policy.predicate_plan if name == LIMIT_METRIC)
        return cls(cpu, (weighted + d * max(cpu, mem)) / (total + d), limit, weighted / total)


def outcome(loads: list[float], counts: list[int], shape: Shape) -> tuple[int, float, float]:
    """Nodes over the limit, the CV of projected load and the CV of the plain weighted mean, for
    ``counts[i]`` burst pods on node i."""
    over = sum(u + k * shape.cpu > shape.limit + 1e-12 for u, k in zip(loads, counts, strict=True))
    projected = cv([u + k * shape.weighted for u, k in zip(loads, counts, strict=True)])
    return over, projected, cv([u + k * shape.mean for u, k in zip(loads, counts, strict=True)])


def ideal_counts(loads: list[float], pods: int, shape: Shape) -> list[int]:
    """Greedy water-filling: each pod to the node with the least projected load after it that stays
    under the limit (every metric starts at the node's load, so this is also the least loaded node)."""
    counts = [0] * len(loads)
    for _ in range(pods):
        fits = [i for i, u in enumerate(loads) if u + (counts[i] + 1) * shape.cpu <= shape.limit]
        if not fits:
            break
        best = min(fits, key=lambda i: loads[i] + counts[i] * shape.weighted)
        counts[best] += 1
    return counts


@contextlib.contextmanager
def ballast(cp: ControlPlane, policy: Path) -> Iterator[str]:
    port = free_port()
    argv = ballast_cmd(port, str(policy), "--kubeconfig", str(cp.kubeconfig), "--policy-poll", "0")
    with serve(argv, port) as url:

        def ready() -> bool:
            with urllib.request.urlopen(f"{url}/readyz", timeout=5) as resp:
                return resp.status == 200

        wait_until(ready, None, "ballast /readyz", 60)
        yield url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--policy", type=Path, default=POLICY, help="the policy file (its scoring is varied)")
    args = parser.parse_args(argv)
    policy = args.policy
    loads = [0.10 + 0.38 * i / (NODES - 1) for i in range(NODES)]
    shape = Shape.of(policy)
    ideal_over, ideal_cv, ideal_mean = outcome(loads, ideal_counts(loads, PODS, shape), shape)
    results: dict[tuple[str, bool], list[tuple[int, float, float]]] = {
        (scoring, bind): [] for bind in (True, False) for scoring in ("relative", "crane")
    }
    with tempfile.TemporaryDirectory() as tmp, ControlPlane() as cp:
        policies = {}
        for scoring in ("relative", "crane"):
            doc = yaml.safe_load(policy.read_text())
            doc["spec"]["scoring"] = scoring
            policies[scoring] = Path(tmp) / f"policy-{scoring}.yaml"
            policies[scoring].write_text(yaml.safe_dump(doc))
        api = Api(cp)
        metrics = load_policy(policy).sync_periods
        names = create_nodes(api, NODES, loads, metrics)
        for r in range(args.rounds):
            for scoring, bind in results:
                with ballast(cp, policies[scoring]) as url:
                    refresh_loads(api, names, loads, metrics)
                    config = scheduler_config(url, bind=bind)
                    _, placed, _ = drain(cp, api, config, burst(f"r{r}-{scoring}-{'b' if bind else 'w'}"))
                per_node = Counter(placed.values())
                over, spread, mean = outcome(loads, [per_node.get(n, 0) for n in names], shape)
                results[scoring, bind].append((over, spread, mean))
                label = f"{scoring}, {'bind' if bind else 'no bind'}"
                print(
                    f"  round {r + 1} {label:18s} nodes over limit {over}, CV {spread:.4f} (mean {mean:.4f})",
                    flush=True,
                )
    print(f"\nburst of {PODS} pods (500m, 1Gi) onto {NODES} nodes loaded 0.10-0.48, {args.rounds} rounds")
    print(f"dominantResourceWeight {load_policy(policy).dominant_resource_weight:g}")
    print(
        "| placement | nodes over limit (max) | CV of projected load median (range) | CV / ideal "
        "| CV of the weighted mean alone |"
    )
    print("|---|---:|---|---:|---:|")
    for (scoring, bind), rows in results.items():
        cvs = [c for _, c, _ in rows]
        how = "with bind" if bind else "no bind verb (pod watch)"
        over = max(o for o, _, _ in rows)
        print(
            f"| Ballast, scoring: {scoring}, {how} | {over} | {statistics.median(cvs):.4f} "
            f"({min(cvs):.4f}-{max(cvs):.4f}) | {statistics.median(cvs) / ideal_cv:.2f}x "
            f"({min(cvs) / ideal_cv:.2f}-{max(cvs) / ideal_cv:.2f}x) "
            f"| {statistics.median(m for _, _, m in rows):.4f} |"
        )
    print(f"| ideal greedy water-filling | {ideal_over} | {ideal_cv:.4f} | 1.00x | {ideal_mean:.4f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
