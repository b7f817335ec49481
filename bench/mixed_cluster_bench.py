"""The mixed burst (``bench.mixed_burst``) through the real kube-scheduler on the loopback control plane.

The same 20 nodes (Node objects with their allocatable and load annotations, fresh) and the same 120 pods,
created in arrival order before kube-scheduler starts (it queues pods of one priority in the order it
lists them, by name), placed by kube-scheduler alone and by kube-scheduler with Ballast (names mode,
filter + prioritize + bind, as ``scheduler-config-node-cache.yaml`` ships it) under each
``dominantResourceWeight``. The figures are ``bench.mixed_burst``'s, from where the pods were bound:
the CV of each node's dominant projected load against the bench's own online greedy.

    python -m bench.mixed_cluster_bench [--rounds 2] [--weights 0,12]

Goal: Ballast within 1.1x of the online greedy's CV in every round, 0 nodes over a limit, 0 pending.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import yaml

from ballast.model.policy import load_policy
from ballast.testing.controlplane import ControlPlane, node_body, pod_body
from bench.burst_bench import ballast
from bench.cluster_bench import POLICY, SCHEDULER, Api, drain, scheduler_config
from bench.mixed_burst import Node, Outcome, burst, greedy, offline_ideal, outcome, scenario


def _annotations(node: Node, policy_path: Path) -> dict[str, str]:
    policy = load_policy(policy_path)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = {}
    for metric in policy.sync_periods:
        resource = policy.resource_of(metric)
        value = node.cpu if resource == "cpu" else node.memory if resource == "memory" else 0.0
        out[metric] = f"{value:.5f},{now}"
    return out


def create_nodes(api: Api, nodes: list[Node]) -> None:
    for n in nodes:
        body = node_body(
            n.name,
            cpu=f"{n.cpu_milli // 1000}",
            memory=str(n.memory_bytes),
            pods="250",
            annotations=_annotations(n, POLICY),
        )
        api.post("/api/v1/nodes", body)
        api.patch(f"/api/v1/nodes/{n.name}/status", {"status": body["status"]})


def refresh(api: Api, nodes: list[Node]) -> None:
    """Fresh timestamps before each run, so no value goes stale during the bench."""
    for n in nodes:
        api.patch(f"/api/v1/nodes/{n.name}", {"metadata": {"annotations": _annotations(n, POLICY)}})


def pod_bodies(pods: list[tuple[int, int]], prefix: str) -> list[dict]:
    return [
        pod_body(f"{prefix}-{i:03d}", scheduler_name=SCHEDULER, requests={"cpu": f"{c}m", "memory": str(m)})
        for i, (c, m) in enumerate(pods)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--weights", default="0,12", help="dominantResourceWeight values, comma-separated")
    args = parser.parse_args(argv)
    weights = [float(w) for w in args.weights.split(",") if w]
    nodes, pods = scenario(), burst()
    ref = outcome(nodes, greedy(nodes, pods), pods)
    ideal = outcome(nodes, offline_ideal(nodes, pods), pods)
    labels = ["kube-scheduler alone"] + [f"Ballast, dominantResourceWeight {w:g}" for w in weights]
    results: dict[str, list[Outcome]] = {label: [] for label in labels}
    with tempfile.TemporaryDirectory() as tmp, ControlPlane() as cp:
        policies = {}
        for w in weights:
            doc = yaml.safe_load(POLICY.read_text())
            doc["spec"]["dominantResourceWeight"] = w
            policies[w] = Path(tmp) / f"policy-{w:g}.yaml"
            policies[w].write_text(yaml.safe_dump(doc))
        api = Api(cp)
        create_nodes(api, nodes)
        for r in range(args.rounds):
            for label in labels:
                prefix = f"r{r}-{labels.index(label)}"
                if label == labels[0]:
                    refresh(api, nodes)
                    _, placed, _ = drain(
                        cp, api, scheduler_config(None, bind=False), pod_bodies(pods, prefix)
                    )
                else:
                    w = weights[labels.index(label) - 1]
                    with ballast(cp, policies[w]) as url:
                        refresh(api, nodes)
                        config = scheduler_config(url, bind=True)
                        _, placed, _ = drain(cp, api, config, pod_bodies(pods, prefix), timeout=300)
                got = outcome(nodes, [placed.get(f"{prefix}-{i:03d}") for i in range(len(pods))], pods)
                results[label].append(got)
                print(
                    f"  round {r + 1} {label}: over {got.over}, pending {got.pending}, CV {got.cv:.3f} "
                    f"({got.cv / ref.cv:.2f}x the greedy), max {got.max:.3f}",
                    flush=True,
                )
    print(f"\nthe mixed burst under the real kube-scheduler, {args.rounds} rounds")
    header = "| placement | nodes over (max) | pending (max) | CV of dominant load, each round | max |"
    print(header + " CV / greedy |")
    print("|---|---:|---:|---|---:|---:|")
    for label, rows in results.items():
        cvs = [r.cv for r in rows]
        print(
            f"| {label} | {max(r.over for r in rows)} | {max(r.pending for r in rows)} | "
            f"{', '.join(f'{c:.3f}' for c in cvs)} | {max(r.max for r in rows):.3f} | "
            f"{statistics.median(cvs) / ref.cv:.2f}x ({min(cvs) / ref.cv:.2f}-{max(cvs) / ref.cv:.2f}x) |"
        )
    print(f"| online greedy | {ref.over} | {ref.pending} | {ref.cv:.3f} | {ref.max:.3f} | 1.00x |")
    print(
        f"| offline ideal | {ideal.over} | {ideal.pending} | {ideal.cv:.3f} | {ideal.max:.3f} | "
        f"{ideal.cv / ref.cv:.2f}x |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
