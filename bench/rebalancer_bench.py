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

``--memory`` measures the peak RSS of the production watches listing nodes and pods page by page from an API
double (``bench.rebalancer_memory``: a fresh process, objects shaped like kube-apiserver's).

``--nodeloads`` measures memory with the agents' NodeLoads: every node has one, listing each of its pods
with a measured usage (100 000 pods over 5000 nodes: 5000 NodeLoads of 20 pods). Each configuration runs
in a fresh process (``--nodeloads-child``), without and with the NodeLoads, filling the caches as the
watches do (the listed objects all held, parsed, then dropped): peak RSS (``VmHWM``), retained RSS after
the lists are dropped (garbage collected, ``malloc_trim``), what the NodeLoad cache itself keeps
(``tracemalloc``), its list-and-parse time, and one cycle with every pod's usage measured.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from ballast.contract.annotations import CPU_USAGE_AVG_5M, MEM_USAGE_AVG_5M, format_load
from ballast.model.policy import parse_policy
from ballast.rebalancer.cache import NodeCache, PodCache
from ballast.rebalancer.evictor import Evictor
from ballast.rebalancer.metrics import RebalancerMetrics
from ballast.rebalancer.run import Rebalancer
from bench.rebalancer_cluster import CountingKube, policy_text

NOW = time.time()


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
                         "annotations": {CPU_USAGE_AVG_5M: format_load(load, stamp),
                                         MEM_USAGE_AVG_5M: format_load(0.3, stamp)}},
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


def nodeloads(nodes: int, per_node: int, seed: int = 11) -> list[dict[str, Any]]:
    """The agents' NodeLoads for ``cluster``'s pods: each node's lists every pod on it, 50m to 1 core."""
    from ballast.contract.nodeload import NodeLoadStatus, PodUsage, new_object, render_status

    rnd = random.Random(seed)
    out = []
    for i in range(nodes):
        pods = tuple(
            PodUsage(
                f"ns-{j % 20}",
                f"p-{i}-{j}",
                f"u-{i}-{j}",
                rnd.uniform(0.05, 1.0),
                rnd.randint(50, 400) * 2**20,
            )
            for j in range(per_node)
        )
        obj = new_object(f"node-{i:05d}", f"node-uid-{i}")
        obj["status"] = render_status(NodeLoadStatus(NOW - 20, 300.0, sum(p.cpu for p in pods), 2**33, pods))
        out.append(obj)
    return out


def _rss_mib(field: str = "VmRSS") -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def _release() -> None:
    import contextlib
    import ctypes
    import gc

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def measure_nodeloads(nodes: int, per_node: int, with_nodeloads: bool) -> dict[str, Any]:
    """In this (fresh) process: the caches filled as the watches fill them, with or without NodeLoads."""
    import tracemalloc

    from ballast.rebalancer.nodeloads import NodeLoadCache

    policy = parse_policy(policy_text(10))
    nc, pc, lc = NodeCache(lambda: policy), PodCache(lambda: policy), NodeLoadCache(60.0)
    node_objs, pod_objs = cluster(nodes, per_node)
    nc.replace(node_objs, "1")
    pc.replace(pod_objs, "1")
    del node_objs, pod_objs
    _release()
    kept_nodeloads = parse_nodeloads = 0.0
    if with_nodeloads:
        load_objs = nodeloads(nodes, per_node)
        t0 = time.perf_counter()
        lc.replace(load_objs, "1")
        parse_nodeloads = time.perf_counter() - t0
        del load_objs
        _release()
    retained, peak = _rss_mib(), _rss_mib("VmHWM")
    if with_nodeloads:  # what the cache keeps, exactly: a second one built under tracemalloc
        load_objs = nodeloads(nodes, per_node)
        tracemalloc.start()
        again = NodeLoadCache(60.0)
        again.replace(load_objs, "1")
        del load_objs
        _release()
        kept_nodeloads = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
        del again
        _release()
    kube = CountingKube()
    r = Rebalancer(lambda: policy, nc, pc, Evictor(kube, dry_run=False), RebalancerMetrics(),  # type: ignore[arg-type]
                   sleep=lambda s: None, clock=lambda: NOW,
                   measured=lc if with_nodeloads else None)  # fmt: skip
    t0 = time.perf_counter()
    plan = r.cycle()
    cycle = time.perf_counter() - t0
    assert plan is not None
    sources = [c.usage.source for c in plan.evictions if c.usage is not None]
    return {
        "nodes": nodes,
        "pods": nodes * per_node,
        "nodeloads": len(lc),
        "peak_mib": peak,
        "retained_mib": retained,
        "nodeload_cache_mib": kept_nodeloads,
        "nodeload_parse_s": parse_nodeloads,
        "cycle_s": cycle,
        "evicted": len(plan.evictions),
        "measured": sources.count("measured"),
    }


def nodeload_table(nodes: int, per_node: int) -> None:
    """Without and with NodeLoads, each in a fresh process."""
    import json
    import subprocess
    import sys

    print("| nodes | pods | NodeLoads | peak RSS | retained RSS | NodeLoad cache (tracemalloc) | NodeLoads "
          "list+parse | cycle | evictions (measured) |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for with_loads in (False, True):
        argv = [sys.executable, "-m", "bench.rebalancer_bench", "--nodes", str(nodes), "--pods-per-node",
                str(per_node), "--nodeloads-child", "1" if with_loads else "0"]  # fmt: skip
        m = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
        cells = [m["nodes"], m["pods"], m["nodeloads"], f"{m['peak_mib']:.0f} MiB",
                 f"{m['retained_mib']:.0f} MiB", f"{m['nodeload_cache_mib']:.1f} MiB",
                 f"{m['nodeload_parse_s']:.2f} s",
                 f"{m['cycle_s'] * 1000:.0f} ms", f"{m['evicted']} ({m['measured']})"]  # fmt: skip
        print("| " + " | ".join(map(str, cells)) + " |", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods-per-node", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="only the full size, default limits")
    ap.add_argument("--nodeloads", action="store_true", help="memory and cycle with and without NodeLoads")
    ap.add_argument("--nodeloads-child", choices=("0", "1"), help=argparse.SUPPRESS)
    ap.add_argument(
        "--memory",
        action="store_true",
        help="peak RSS of the watches listing in pages, a fresh process per row (bench.rebalancer_memory)",
    )
    args = ap.parse_args(argv)
    n, k = args.nodes, args.pods_per_node
    if args.memory:
        from bench import rebalancer_memory

        return rebalancer_memory.main(["--nodes", str(n), "--pods-per-node", str(k)])
    if args.nodeloads_child is not None:
        import json

        print(json.dumps(measure_nodeloads(n, k, args.nodeloads_child == "1")))
        return 0
    if args.nodeloads:
        nodeload_table(n, k)
        return 0
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
