"""A burst of mixed pods onto nodes of mixed sizes: does Ballast balance each node's dominant resource?

Ballast in process (``Extender.filter``, ``Extender.prioritize`` and the load pre-bind step, on one
ledger), each pod bound to the top-scored node as kube-scheduler picks it (ties at random, seeded), and
two references this module computes with its own arithmetic, sharing nothing with Ballast's scoring:

- **online greedy**: each pod, in arrival order, to the node whose dominant load after it is lowest,
  among the nodes it keeps at or under every limit;
- **offline ideal**: the same greedy over the pods sorted largest first (it knows the whole burst).

The scenario: 20 nodes, four each of 4, 8, 16, 32 and 64 CPUs with 4 GiB per CPU, fresh CPU load 0.05 to
0.60 and memory load 0.20 to 0.50 (every metric of a resource at the node's value), in a fixed shuffled
order; a burst of 120 pods, 40 x (100m, 128Mi), 40 x (500m, 512Mi), 30 x (2 CPU, 2Gi) and 10 x (4 CPU,
12Gi), arriving in a fixed shuffled order. A node's projected load of a resource is its annotated value
plus the estimates of the pods placed on it (0.85 x CPU, 0.70 x memory requests, over allocatable); its
dominant load is the larger of the two. The figure is the coefficient of variation (CV) of the nodes'
dominant loads; a node is over when a resource ends above 0.65 (the shipped policy's ``*_avg_5m``
limits).

    python -m bench.mixed_burst [--weights 0,12] [--seeds 1,2,3] [--layouts 60] [--policy FILE]

``--weights`` runs Ballast with each ``spec.dominantResourceWeight`` (the policy's own when not given);
``--seeds`` are the tie-break seeds; ``--layouts N`` also runs the burst over N other shuffles.
Goal: Ballast's CV at most 1.1x the online greedy's, 0 nodes over, 0 pending; the uniform burst
(``bench.burst_bench``) stays at its water-filling figure.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ballast.contract.annotations import format_load
from ballast.extender.extender import Extender
from ballast.extender.load_bind import LoadPreBind
from ballast.extender.metrics import ExtenderMetrics
from ballast.extender.wire import BindingArgs, ExtenderArgs
from ballast.model.ledger import Ledger
from ballast.model.nodestate import parse_node
from ballast.model.policy import Policy, load_policy
from ballast.model.policy_store import PolicyStore
from ballast.testing.node_source import StaticSource
from bench.spread import cv

ROOT = Path(__file__).resolve().parent.parent
POLICY = ROOT / "scheduler_config" / "policy.yaml"
NOW = 1_800_000_000.0

CPUS = (4, 8, 16, 32, 64)
NODES = 20
GIB = 1 << 30
MIB = 1 << 20
LAYOUT_SEED = 219
"""Fixes the shuffled order of node sizes, loads and pods: chosen among shuffles as one whose references
land where they were first measured on the loopback control plane (online greedy 0.090 there and here,
offline ideal 0.035 there, 0.033 here). ``--layouts`` runs others."""
BURST = ((40, 100, 128 * MIB), (40, 500, 512 * MIB), (30, 2000, 2 * GIB), (10, 4000, 12 * GIB))
"""(count, cpu millicores, memory bytes) in arrival order."""
CPU_FACTOR, MEMORY_FACTOR = 0.85, 0.70
LIMIT = 0.65


@dataclasses.dataclass(frozen=True)
class Node:
    name: str
    cpu_milli: int
    memory_bytes: int
    cpu: float
    memory: float


def scenario(layout: int = LAYOUT_SEED) -> list[Node]:
    """The 20 nodes: sizes and loads spread evenly, each list shuffled by a fixed permutation."""
    rng = random.Random(layout)
    sizes = [c for c in CPUS for _ in range(NODES // len(CPUS))]
    cpu = [0.05 + 0.55 * i / (NODES - 1) for i in range(NODES)]
    memory = [0.20 + 0.30 * i / (NODES - 1) for i in range(NODES)]
    for values in (sizes, cpu, memory):
        rng.shuffle(values)
    return [
        Node(f"n{i:02d}", c * 1000, c * 4 * GIB, round(u, 5), round(m, 5))
        for i, (c, u, m) in enumerate(zip(sizes, cpu, memory, strict=True))
    ]


def burst(layout: int = LAYOUT_SEED) -> list[tuple[int, int]]:
    """The 120 pods in their arrival order: the four kinds mixed by a fixed shuffle (a burst of several
    workloads at once; pods of one kind arriving together leave little to rank)."""
    pods = [(cpu, memory) for count, cpu, memory in BURST for _ in range(count)]
    random.Random(layout).shuffle(pods)
    return pods


# -- the reference: its own arithmetic ------------------------------------------------------------------


def _adds(node: Node, pod: tuple[int, int]) -> tuple[float, float]:
    return pod[0] * CPU_FACTOR / node.cpu_milli, pod[1] * MEMORY_FACTOR / node.memory_bytes


def loads_after(nodes: Sequence[Node], placed: Sequence[str | None], pods: Sequence[tuple[int, int]]):
    """Per node (cpu, memory) projected load after the pods placed as ``placed[i]`` (``None``: pending)."""
    at = {n.name: [n.cpu, n.memory] for n in nodes}
    by_name = {n.name: n for n in nodes}
    for pod, name in zip(pods, placed, strict=True):
        if name is not None:
            c, m = _adds(by_name[name], pod)
            at[name][0] += c
            at[name][1] += m
    return [tuple(at[n.name]) for n in nodes]


def online(
    nodes: Sequence[Node], pods: Sequence[tuple[int, int]], key: Callable[[float, float], float]
) -> list[str | None]:
    """Each pod in arrival order to the node with the lowest ``key(cpu, memory)`` of its loads after the
    pod, among those it keeps under the limit; ``None`` when none does."""
    at = [[n.cpu, n.memory] for n in nodes]
    out: list[str | None] = []
    for pod in pods:
        best, best_key = None, 0.0
        for i, n in enumerate(nodes):
            c, m = _adds(n, pod)
            cpu, mem = at[i][0] + c, at[i][1] + m
            if cpu > LIMIT + 1e-12 or mem > LIMIT + 1e-12:
                continue
            k = key(cpu, mem)
            if best is None or k < best_key:
                best, best_key = i, k
        if best is not None:
            c, m = _adds(nodes[best], pod)
            at[best][0] += c
            at[best][1] += m
        out.append(None if best is None else nodes[best].name)
    return out


def greedy(nodes: Sequence[Node], pods: Sequence[tuple[int, int]]) -> list[str | None]:
    """Each pod to the node whose dominant load after it is lowest, among those it keeps under the limit."""
    return online(nodes, pods, max)


def koordinator_form(
    nodes: Sequence[Node], pods: Sequence[tuple[int, int]], weight: float
) -> list[str | None]:
    """koordinator's LoadAware ranking with ``dominantResourceWeight`` ``weight`` (cpu and memory weighted
    alike, as crane's policy weighs them): each pod to the node with the lowest ``(cpu + memory + weight *
    max(cpu, memory)) / (2 + weight)``, every load *after* the pod, among those it keeps under the limits.
    Ballast's rule differs in one place: its dominant term takes the node's standing loads, before the
    pod. The bench's own arithmetic, to compare the two forms."""
    return online(nodes, pods, lambda cpu, mem: (cpu + mem + weight * max(cpu, mem)) / (2 + weight))


def offline_ideal(nodes: Sequence[Node], pods: Sequence[tuple[int, int]]) -> list[str | None]:
    """The greedy over the pods largest first (by the larger of their cpu and memory share of the
    cluster), placements reported in arrival order."""
    total_cpu = sum(n.cpu_milli for n in nodes)
    total_mem = sum(n.memory_bytes for n in nodes)
    order = sorted(range(len(pods)), key=lambda i: -max(pods[i][0] / total_cpu, pods[i][1] / total_mem))
    placed = greedy(nodes, [pods[i] for i in order])
    out: list[str | None] = [None] * len(pods)
    for i, name in zip(order, placed, strict=True):
        out[i] = name
    return out


@dataclasses.dataclass(frozen=True)
class Outcome:
    over: int
    pending: int
    cv: float
    max: float


def outcome(nodes: Sequence[Node], placed: Sequence[str | None], pods: Sequence[tuple[int, int]]) -> Outcome:
    loads = loads_after(nodes, placed, pods)
    dominant = [max(c, m) for c, m in loads]
    over = sum(c > LIMIT + 1e-9 or m > LIMIT + 1e-9 for c, m in loads)
    return Outcome(over, placed.count(None), cv(dominant), max(dominant))


# -- Ballast in process ---------------------------------------------------------------------------------


def _node_object(node: Node, policy: Policy) -> dict:
    annotations = {}
    for metric in policy.sync_periods:
        resource = policy.resource_of(metric)
        value = node.cpu if resource == "cpu" else node.memory if resource == "memory" else 0.0
        annotations[metric] = format_load(value, NOW - 30)
    return {
        "metadata": {"name": node.name, "annotations": annotations, "resourceVersion": "1"},
        "status": {"allocatable": {"cpu": f"{node.cpu_milli}m", "memory": str(node.memory_bytes)}},
    }


def _pod(i: int, cpu: int, memory: int) -> dict:
    return {
        "metadata": {"name": f"p{i:03d}", "namespace": "bench", "uid": f"u{i:03d}"},
        "spec": {
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": f"{cpu}m", "memory": str(memory)}}}
            ]
        },
    }


def ballast(
    policy: Policy, nodes: Sequence[Node], pods: Sequence[tuple[int, int]], seed: int = 1
) -> list[str | None]:
    """Place the burst through Ballast's verbs: filter, prioritize, the top score (ties at random), the
    load pre-bind check (a refused bind filters again, as kube-scheduler retries the pod)."""
    rng = random.Random(seed)
    loads = {n.name: parse_node(_node_object(n, policy), policy, NOW) for n in nodes}
    ledger = Ledger(policy, lambda: NOW)
    store = PolicyStore(policy)
    ext = Extender(store, ExtenderMetrics(), StaticSource(loads), ledger, lambda: NOW)
    prebind = LoadPreBind(None, ledger, store, loads.get, lambda: NOW)  # type: ignore[arg-type]
    names = list(loads)
    placed: list[str | None] = []
    for i, (cpu, memory) in enumerate(pods):
        body = _pod(i, cpu, memory)
        chosen = None
        for _attempt in range(3):
            passing = ext.filter(ExtenderArgs(body, None, names))["NodeNames"]
            if not passing:
                break
            answer = ext.prioritize(ExtenderArgs(body, None, passing)).entries()
            scores = {h["Host"]: h["Score"] for h in answer}
            top = max(scores.values())
            node = rng.choice([n for n in passing if scores[n] == top])
            args = BindingArgs(body["metadata"]["name"], "bench", body["metadata"]["uid"], node)
            try:
                asyncio.run(prebind(args))
            except Exception:
                continue
            chosen = node
            break
        placed.append(chosen)
    return placed


def with_weight(policy: Policy, weight: float | None) -> Policy:
    if weight is None:
        return policy
    return dataclasses.replace(policy, dominant_resource_weight=weight)


@dataclasses.dataclass(frozen=True)
class Row:
    label: str
    runs: list[Outcome]

    def line(self, greedy_cv: float) -> str:
        cvs = [r.cv for r in self.runs]
        med = statistics.median(cvs)
        spread = f"{med:.3f}" if min(cvs) == max(cvs) else f"{med:.3f} ({min(cvs):.3f}-{max(cvs):.3f})"
        return (
            f"| {self.label} | {max(r.over for r in self.runs)} | {max(r.pending for r in self.runs)} | "
            f"{spread} | {max(r.max for r in self.runs):.3f} | {med / greedy_cv:.2f}x |"
        )


def sweep(policies: dict[str, Policy], layouts: int, koordinator: float) -> None:
    """The same burst over ``layouts`` other shuffles: Ballast's CV over the online greedy's per layout,
    and koordinator's form at weight ``koordinator``'s."""
    print(f"\nover {layouts} other layouts (shuffle seeds 0-{layouts - 1}): Ballast's CV / the greedy's")
    print("| placement | median | 90th percentile | max | layouts within 1.1x | nodes over | pending |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    refs = []
    for layout in range(layouts):
        nodes, pods = scenario(layout), burst(layout)
        refs.append((nodes, pods, outcome(nodes, greedy(nodes, pods), pods)))
    placements = {
        label: (lambda n, p, policy=policy: ballast(policy, n, p)) for label, policy in policies.items()
    }
    placements[f"koordinator's form, weight {koordinator:g}"] = lambda n, p: koordinator_form(
        n, p, koordinator
    )
    for label, place in placements.items():
        ratios, over, pending = [], 0, 0
        for nodes, pods, ref in refs:
            got = outcome(nodes, place(nodes, pods), pods)
            ratios.append(got.cv / ref.cv)
            over += got.over
            pending += got.pending - ref.pending
        tenth = statistics.quantiles(ratios, n=10)[-1] if len(ratios) > 1 else ratios[0]
        within = sum(r <= 1.1 for r in ratios)
        print(
            f"| {label} | {statistics.median(ratios):.2f}x | {tenth:.2f}x | {max(ratios):.2f}x | "
            f"{within}/{len(ratios)} | {over} | {pending:+d} vs greedy |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", default=str(POLICY))
    parser.add_argument("--weights", default="", help="dominantResourceWeight values, comma-separated")
    parser.add_argument("--seeds", default="1,2,3", help="tie-break seeds")
    parser.add_argument("--layouts", type=int, default=0, help="also sweep this many other layouts")
    args = parser.parse_args(argv)
    policy = load_policy(args.policy)
    nodes, pods = scenario(), burst()
    weights = [float(w) for w in args.weights.split(",") if w] or [None]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    ref = outcome(nodes, greedy(nodes, pods), pods)
    ideal = outcome(nodes, offline_ideal(nodes, pods), pods)
    policies = {
        f"Ballast, dominantResourceWeight {p.dominant_resource_weight:g}": p
        for p in (with_weight(policy, w) for w in weights)
    }
    print(f"{NODES} nodes of {'/'.join(map(str, CPUS))} CPUs, a burst of {len(pods)} mixed pods, in process")
    print("| placement | nodes over | pending | CV of dominant load | max | CV / greedy |")
    print("|---|---:|---:|---|---:|---:|")
    for label, p in policies.items():
        print(Row(label, [outcome(nodes, ballast(p, nodes, pods, s), pods) for s in seeds]).line(ref.cv))
    koordinator = policy.dominant_resource_weight or 12.0
    form = outcome(nodes, koordinator_form(nodes, pods, koordinator), pods)
    print(
        Row(f"koordinator's form, weight {koordinator:g} (the pod in the dominant term)", [form]).line(ref.cv)
    )
    print(Row("online greedy (arrival order)", [ref]).line(ref.cv))
    print(Row("offline ideal (largest pod first)", [ideal]).line(ref.cv))
    if args.layouts:
        sweep(policies, args.layouts, koordinator)
    return 0


if __name__ == "__main__":
    sys.exit(main())
