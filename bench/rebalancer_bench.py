"""How much one rebalancer cycle costs at 5000 nodes and 100 000 pods, and how it grows.

Run: ``python -m bench.rebalancer_bench [--nodes 5000 --pods-per-node 20] [--quick]``.

Set-up: the production caches (``NodeCache``, ``PodCache``) filled the way the watches fill them (one
``replace`` with the listed objects), the shipped policy with a ``spec.rebalance`` (cpu high 0.80, low
0.45, ``consecutiveAbnormal: 1`` so the measured cycle acts), and the production ``Rebalancer`` with a
recording API double that answers every eviction and Event with success (no API server, so the
numbers are the rebalancer's own work; the pace between evictions is not slept). Nodes: 16 CPUs; 5 % hot
(0.85 to 0.99), 40 % cool (0.10 to 0.40), the rest normal; pods of 100m to 500m CPU (their requests fit
allocatable at 40 a node), each with its own ReplicaSet owner.

Rows: the list-and-parse cost a watch pays once at start and every resync (not per cycle), then one cycle
with the default limits (10 evictions) and one with ``perCycle: 1000`` (every hot node takes its two
victims), at growing sizes. API calls per cycle: the evictions and Events the double recorded; list and
watch calls made by a cycle: none, by construction (the cycle reads the caches; the counting double would
record any).
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

import yaml

from app.model.annotations import format_load
from app.model.policy import parse_policy
from app.rebalancer.cache import NodeCache, PodCache
from app.rebalancer.evictor import Evictor
from app.rebalancer.metrics import RebalancerMetrics
from app.rebalancer.run import Rebalancer
from tests.conftest import POLICY_FILE

NOW = time.time()


class CountingKube:
    """Answers every call with success and counts it by kind."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def _count(self, kind: str) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + 1

    def create(self, path: str, body: Any) -> dict[str, Any]:
        self._count("eviction" if path.endswith("/eviction") else "event")
        return {}

    def get(self, path: str, query: Any = None) -> dict[str, Any]:
        self._count("get")
        return {}

    def list_all(self, path: str, params: Any = None, page: int = 500) -> tuple[list, str]:
        self._count("list")
        return [], ""


def policy_text(per_cycle: int) -> str:
    doc = yaml.safe_load(POLICY_FILE.read_text())
    doc["spec"]["rebalance"] = {
        "thresholds": [{"name": "cpu_usage_avg_5m", "high": 0.80, "low": 0.45}],
        "consecutiveAbnormal": 1,
        "limits": {"perCycle": per_cycle, "perNamespace": per_cycle, "perNode": 2},
    }
    return yaml.safe_dump(doc)


def cluster(nodes: int, per_node: int, seed: int = 7) -> tuple[list[dict], list[dict]]:
    rnd = random.Random(seed)
    stamp = NOW - 30
    node_objs, pod_objs = [], []
    for i in range(nodes):
        r = rnd.random()
        load = (
            rnd.uniform(0.85, 0.99)
            if r < 0.05
            else rnd.uniform(0.10, 0.40)
            if r < 0.45
            else rnd.uniform(0.5, 0.75)
        )
        name = f"node-{i:05d}"
        node_objs.append({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                         "annotations": {"cpu_usage_avg_5m": format_load(load, stamp),
                                         "mem_usage_avg_5m": format_load(0.3, stamp)}},
            "spec": {},
            "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}},
        })  # fmt: skip
        for j in range(per_node):
            cpu = rnd.choice(("100m", "250m", "500m"))
            pod_objs.append({
                "metadata": {"name": f"p-{i}-{j}", "namespace": f"ns-{j % 20}", "uid": f"u-{i}-{j}",
                             "creationTimestamp": "2026-01-01T00:00:00Z",
                             "labels": {"pod-template-hash": "h"},
                             "ownerReferences": [{"kind": "ReplicaSet", "name": f"w-{i}-{j}-h",
                                                  "controller": True}]},
                "spec": {"nodeName": name, "priority": 0,
                         "containers": [{"name": "c",
                                         "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}]},
                "status": {"phase": "Running", "qosClass": "Burstable"},
            })  # fmt: skip
    return node_objs, pod_objs


def measure(nodes: int, per_node: int, per_cycle: int) -> dict[str, Any]:
    policy = parse_policy(policy_text(per_cycle))
    node_objs, pod_objs = cluster(nodes, per_node)
    nc, pc = NodeCache(lambda: policy), PodCache(lambda: policy)
    t0 = time.perf_counter()
    nc.replace(node_objs, "1")
    pc.replace(pod_objs, "1")
    parse = time.perf_counter() - t0
    del node_objs, pod_objs
    kube = CountingKube()
    r = Rebalancer(lambda: policy, nc, pc, Evictor(kube, dry_run=False), RebalancerMetrics(),  # type: ignore[arg-type]
                   sleep=lambda s: None)  # fmt: skip
    t0 = time.perf_counter()
    plan = r.cycle()
    cycle = time.perf_counter() - t0
    assert plan is not None
    calls = dict(kube.calls)
    # a second cycle at once: the nodes acted on wait for a newer measurement, the next hot ones act
    t0 = time.perf_counter()
    r.cycle()
    second = time.perf_counter() - t0
    outcomes = plan.outcomes()
    return {
        "nodes": nodes,
        "pods": nodes * per_node,
        "perCycle": per_cycle,
        "parse_s": parse,
        "cycle_s": cycle,
        "second_s": second,
        "hot": plan.states.get("hot", 0),
        "cool": len(plan.cool),
        "evicted": outcomes.get("evict", 0),
        "api_calls": sum(v for k, v in calls.items() if k in ("eviction", "event")),
        "list_calls": kube.calls.get("list", 0) + kube.calls.get("get", 0),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods-per-node", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="only the full size, default limits")
    args = ap.parse_args(argv)
    n, k = args.nodes, args.pods_per_node
    sizes = [(n, k, 10)] if args.quick else [
        (n // 5, k, 10), (n // 2, k, 10), (n, k // 2, 10), (n, k, 10), (n, k * 2, 10), (n, k, 1000)
    ]  # fmt: skip
    print("| nodes | pods | perCycle | list+parse (once per resync) | cycle | next cycle | hot | cool | "
          "evictions | API calls in the cycle | list/get calls in the cycle |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for nodes, per_node, per_cycle in sizes:
        m = measure(nodes, per_node, per_cycle)
        cells = [m["nodes"], m["pods"], m["perCycle"], f"{m['parse_s']:.2f} s",
                 f"{m['cycle_s'] * 1000:.0f} ms", f"{m['second_s'] * 1000:.0f} ms", m["hot"], m["cool"],
                 m["evicted"], m["api_calls"], m["list_calls"]]  # fmt: skip
        print("| " + " | ".join(map(str, cells)) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
