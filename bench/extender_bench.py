"""Extender latency and throughput against the echo floor, measured in the same run.

    python -m bench.extender_bench [--sizes 100,1000,5000] [--requests N]

Each server runs in its own process (uvicorn, one worker, as deployed); requests are sequential, as
kube-scheduler sends them for one pod. Prints a markdown table of p50/p90/p99 latency (ms), requests/s
and the Ballast/echo ratio of mean time per request.
"""

from __future__ import annotations

import argparse

import httpx
import orjson

from bench.harness import ballast_cmd, echo_cmd, free_port, measure, serve
from bench.nodes import make_nodes, pod

POLICY = "scheduler_config/policy.yaml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,5000", help="node counts, comma separated")
    ap.add_argument("--requests", type=int, default=0, help="requests per cell (default: by size)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]

    p_echo, p_ballast = free_port(), free_port()
    rows = []
    with serve(echo_cmd(p_echo), p_echo) as echo, serve(ballast_cmd(p_ballast, POLICY), p_ballast) as ballast:
        client = httpx.Client(timeout=60)
        for size in sizes:
            nodes = make_nodes(size)
            body = orjson.dumps({"Pod": pod(), "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None})
            count = args.requests or max(10, min(200, 200_000 // size))
            for verb in ("filter", "prioritize"):
                e = measure(client, f"{echo}/{verb}", body, count)
                b = measure(client, f"{ballast}/{verb}", body, count)
                rows.append((size, verb, len(body) // size, e, b))
    print(
        "| nodes | verb | bytes/node | echo p50/p90/p99 ms | ballast p50/p90/p99 ms "
        "| echo req/s | ballast req/s | ratio |"
    )
    print("|---:|---|---:|---|---|---:|---:|---:|")
    for size, verb, per, e, b in rows:
        print(
            f"| {size} | {verb} (whole nodes) | {per} | {e.row()} | {b.row()} | {e.rps:.1f} | {b.rps:.1f} "
            f"| {e.rps / b.rps:.2f}x |"
        )


if __name__ == "__main__":
    main()
