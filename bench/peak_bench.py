"""Peaks that means hide: spiky nodes, the real kube-scheduler calling Ballast, the shipped policy against the
peak-aware example (``scheduler_config/examples/peak-aware-policy.yaml``).

20 nodes of 8 CPUs and 32Gi. Ten *steady* nodes run a background of 0.35 of their CPUs (each second drawn
from 0.33..0.37); ten *spiky* nodes idle at 0.12 and burst to 0.80 for 20 s in every 100 s, each at a
random phase. A spiky node's 5-minute mean (about 0.25) is lower than a steady node's, while a fifth of its
seconds are near full. Memory is 0.30 on every node.

Each node's annotations are what Ballast's agent would have written: two hours of 10-s samples (each the
mean of its 10 seconds) go through the agent's own history (``ballast.agent.load.history.LoadHistory``),
and each metric is the value at the node's last report on the metric's sync period (a random phase per
node), stamped with that time. The pressure metrics are modelled (the kernel's stall cannot be replayed):
``cpu_pressure_some_*`` is the share of the window's seconds in which the node's demand exceeded its CPUs,
0 for every node of this scenario before the pods come. Then a backlog of pods of 1 CPU (request; each
uses 0.85 of a CPU, 1Gi) is created and kube-scheduler (names mode, filter + prioritize + bind, as
``scheduler-config-node-cache.yaml`` ships it) places them.

Afterwards, over the next 30 minutes of the same series (18 burst cycles), with each placed pod using 0.85
of a CPU every second:
- *contention*: the share of a pod's seconds in which its node demands more than its CPUs, averaged over
  the pods (0: no pod ever waits for a CPU because of its neighbours' peaks);
- *seconds over*: per node, the share of seconds its demand exceeds its CPUs (the spiky nodes' range);
- *over the mean limit*: nodes whose mean demand over those 30 minutes is above ``cpu_usage_avg_5m``'s
  limit (0.65).

    python -m bench.peak_bench [--rounds 3] [--pods 30,40]

Each round draws a new scenario (seed = round number: phases and noise) and runs both policies on it with
each pod count. Goal (issue 47): with the peak-aware policy, 30 pods all placed and no pod's node over its
CPUs in any second; 40 pods all placed, no node over the mean limit, contention within 0.01 of the shipped
policy's in the same round.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ballast.agent.load.history import LoadHistory
from ballast.contract.annotations import format_load, is_pressure_metric
from ballast.model.policy import Policy, load_policy
from ballast.testing.controlplane import ControlPlane, node_body, pod_body
from bench.burst_bench import ballast
from bench.cluster_bench import POLICY, SCHEDULER, Api, drain, scheduler_config

ROOT = Path(__file__).resolve().parents[1]
PEAK_POLICY = ROOT / "scheduler_config" / "examples" / "peak-aware-policy.yaml"

CPUS = 8
MEMORY = 32 << 30
MEM_RATIO = 0.30
STEADY, STEADY_NOISE = 0.35, 0.02
SPIKY_BASE, SPIKY_PEAK, BURST_S, CYCLE_S = 0.12, 0.80, 20, 100
POD_USE = 0.85
SAMPLE_S = 10
HISTORY_S = 2 * 3600
HORIZON_S = 30 * 60
STEADY_NODES = SPIKY_NODES = 10


@dataclass(frozen=True)
class NodeModel:
    name: str
    spiky: bool
    background: tuple[float, ...]
    """CPU ratio per second from ``-HISTORY_S`` to ``HORIZON_S`` (index 0 is ``-HISTORY_S``)."""
    report_phase: float
    """Seconds after the start of each sync period at which this node's agent reports."""

    def at(self, second: int) -> float:
        return self.background[second + HISTORY_S]


def scenario(seed: int) -> list[NodeModel]:
    rng = random.Random(seed)
    nodes = []
    span = range(-HISTORY_S, HORIZON_S)
    for i in range(STEADY_NODES):
        series = tuple(STEADY + rng.uniform(-STEADY_NOISE, STEADY_NOISE) for _ in span)
        nodes.append(NodeModel(f"steady-{i:02d}", False, series, rng.uniform(0, 3600)))
    for i in range(SPIKY_NODES):
        phase = rng.randrange(CYCLE_S)
        series = tuple(SPIKY_PEAK if (t + phase) % CYCLE_S < BURST_S else SPIKY_BASE for t in span)
        nodes.append(NodeModel(f"spiky-{i:02d}", True, series, rng.uniform(0, 3600)))
    return nodes


def stalled_share(node: NodeModel, end: int, seconds: int) -> float:
    """The modelled ``some`` stall: the share of the window's seconds in which demand exceeded the CPUs."""
    window = range(end - seconds, end)
    return sum(node.at(t) > 1.0 for t in window) / len(window)


def annotations(node: NodeModel, policy: Policy, wall_now: float) -> dict[str, str]:
    """Each policy metric as the agent would have published it by now (second 0 of the series)."""
    samples: list[tuple[int, float]] = []
    for end in range(-HISTORY_S + SAMPLE_S, 1, SAMPLE_S):
        cpu = statistics.fmean(node.at(t) for t in range(end - SAMPLE_S, end))
        samples.append((end, cpu))
    # the last report at or before now on each metric's period; metrics reported at one moment share a history
    due: dict[int, list[str]] = {}
    for metric, period in policy.sync_periods.items():
        due.setdefault(-int((HISTORY_S + node.report_phase) % period), []).append(metric)
    out: dict[str, str] = {}
    for report, metrics in due.items():
        history = LoadHistory()
        for end, cpu in samples:
            if end > report:
                break
            history.add_node(wall_now + end, cpu, cpu * CPUS, MEM_RATIO, int(MEM_RATIO * MEMORY))
        values = history.values(wall_now + report, metrics, SAMPLE_S)
        for metric in metrics:
            if is_pressure_metric(metric):
                values[metric] = stalled_share(node, report, 300)
            if metric in values:
                out[metric] = format_load(values[metric], wall_now + report)
    return out


@dataclass(frozen=True)
class Outcome:
    placed: int
    contention: float
    over_any_second: int
    """Pods whose node is over its CPUs in at least one second."""
    spiky_pods: int
    seconds_over: tuple[float, ...]
    """Per spiky node with pods: the share of seconds its demand exceeds its CPUs."""
    over_mean_limit: int


def outcome(nodes: Sequence[NodeModel], per_node: Counter[str], mean_limit: float) -> Outcome:
    shares: list[float] = []
    over_any = 0
    seconds_over = []
    over_mean = 0
    for node in nodes:
        pods = per_node.get(node.name, 0)
        demand = [node.at(t) + pods * POD_USE / CPUS for t in range(HORIZON_S)]
        over = sum(d > 1.0 + 1e-12 for d in demand) / HORIZON_S
        over_mean += statistics.fmean(demand) > mean_limit + 1e-12
        if pods:
            shares += [over] * pods
            over_any += pods if over > 0 else 0
            if node.spiky:
                seconds_over.append(over)
    spiky = sum(per_node.get(n.name, 0) for n in nodes if n.spiky)
    contention = statistics.fmean(shares) if shares else 0.0
    return Outcome(len(shares), contention, over_any, spiky, tuple(seconds_over), over_mean)


def run(
    cp: ControlPlane, api: Api, nodes: Sequence[NodeModel], policy_path: Path, pods: int, tag: str
) -> Counter[str]:
    policy = load_policy(policy_path)
    with ballast(cp, policy_path) as url:
        now = time.time()
        for node in nodes:
            api.patch(
                f"/api/v1/nodes/{node.name}", {"metadata": {"annotations": annotations(node, policy, now)}}
            )
        backlog = [
            pod_body(f"{tag}-{i:03d}", scheduler_name=SCHEDULER, requests={"cpu": "1", "memory": "1Gi"})
            for i in range(pods)
        ]
        _, placed, _ = drain(cp, api, scheduler_config(url, bind=True), backlog)
    return Counter(placed.values())


def create(api: Api, nodes: Sequence[NodeModel]) -> None:
    for node in nodes:
        body = node_body(node.name, cpu=str(CPUS), memory="32Gi")
        api.post("/api/v1/nodes", body)
        api.patch(f"/api/v1/nodes/{node.name}/status", {"status": body["status"]})


def remove(api: Api, nodes: Sequence[NodeModel]) -> None:
    for node in nodes:
        api.delete(f"/api/v1/nodes/{node.name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pods", default="30,40", help="pod counts, comma-separated")
    parser.add_argument("--shipped", type=Path, default=POLICY)
    parser.add_argument("--peak", type=Path, default=PEAK_POLICY)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.pods.split(",")]
    policies = {"shipped": args.shipped, "peak-aware": args.peak}
    mean_limit = next(
        lim for name, lim, _, _ in load_policy(args.shipped).predicate_plan if name == "cpu_usage_avg_5m"
    )
    results: dict[tuple[str, int], list[Outcome]] = {(p, c): [] for c in counts for p in policies}
    with ControlPlane() as cp:
        api = Api(cp)
        for r in range(1, args.rounds + 1):
            nodes = scenario(r)
            create(api, nodes)
            try:
                for pods in counts:
                    for label, path in policies.items():
                        per_node = run(cp, api, nodes, path, pods, f"r{r}-{label[:4]}-{pods}")
                        got = outcome(nodes, per_node, mean_limit)
                        results[label, pods].append(got)
                        over = ", ".join(f"{s:.0%}" for s in got.seconds_over) or "-"
                        print(
                            f"  round {r} {label:10s} {pods} pods: placed {got.placed}, on spiky nodes "
                            f"{got.spiky_pods}, contention {got.contention:.3f}, pods on a node ever over "
                            f"{got.over_any_second}, nodes over the mean limit {got.over_mean_limit}, spiky "
                            f"nodes' seconds over: {over}",
                            flush=True,
                        )
            finally:
                remove(api, nodes)
    print(
        f"\n{STEADY_NODES} steady nodes at {STEADY} (+-{STEADY_NOISE}), {SPIKY_NODES} spiky at {SPIKY_BASE} "
        f"with {BURST_S} s at {SPIKY_PEAK} every {CYCLE_S} s; pods of 1 CPU using {POD_USE}; "
        f"{args.rounds} rounds"
    )
    print(
        "| pods | policy | placed (min) | on spiky nodes, median (range) | contention, median (range) "
        "| pods on a node ever over its CPUs (max) | nodes over the mean limit (max) "
        "| spiky nodes' seconds over (range) |"
    )
    print("|---:|---|---:|---|---|---:|---:|---|")
    for (label, pods), rows in results.items():
        spiky = [o.spiky_pods for o in rows]
        cont = [o.contention for o in rows]
        over = [s for o in rows for s in o.seconds_over]
        over_range = f"{min(over):.0%}-{max(over):.0%}" if over else "-"
        print(
            f"| {pods} | {label} | {min(o.placed for o in rows)} | {statistics.median(spiky):g} "
            f"({min(spiky)}-{max(spiky)}) | {statistics.median(cont):.3f} ({min(cont):.3f}-{max(cont):.3f}) "
            f"| {max(o.over_any_second for o in rows)} | {max(o.over_mean_limit for o in rows)} "
            f"| {over_range} |"
        )
    for pods in counts:
        deltas = [
            p.contention - s.contention
            for s, p in zip(results["shipped", pods], results["peak-aware", pods], strict=True)
        ]
        print(
            f"contention, peak-aware minus shipped, {pods} pods, per round: "
            + ", ".join(f"{d:+.3f}" for d in deltas)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
