"""Memory the extender keeps per known node: RSS after whole-node filter + prioritize requests of N nodes.

Whole-node mode (``nodeCacheCapable: false``) remembers every node it was sent (up to 20 000, for 10
minutes) with its verdict board entry, so the retained memory grows with the cluster; this measures it.
Each size runs in a fresh process: the extender app is built in-process, warmed up with a small request,
then sent one filter and one prioritize of N nodes. Two figures:

- retained: bytes the extender's own code allocated and still holds (``tracemalloc``, exact and
  repeatable; the request body and the response are not the extender's to keep). This is what the
  test bounds (``tests/test_memory.py``): 5 KiB per known node.
- RSS: the process's resident memory after the garbage collector and ``malloc_trim`` (what the extender
  itself does after a huge request), before and after; it also holds heap pages the request's
  temporary objects left partly used.

    python -m bench.memory_bench                     # 5000 and 20000 nodes, a table
    python -m bench.memory_bench --nodes 5000 --json # one size, machine-readable (tests use this)
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
import tracemalloc


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def measure(nodes: int, traced: bool = True) -> dict[str, float]:
    """In this process: retained RSS (MiB) before and after the extender learnt ``nodes`` nodes."""
    import orjson
    from fastapi.testclient import TestClient

    from ballast.extender.api.answer import release_memory
    from ballast.extender.main import create_app
    from ballast.model.policy import load_policy
    from bench.nodes import ROOT, make_nodes
    from bench.nodes import pod as sample_pod

    now = time.time()
    app = create_app(
        load_policy(ROOT / "scheduler_config" / "policy.yaml"),
        policy_poll_seconds=0,
        access_log=False,
        max_body_bytes=1 << 30,
    )
    pod = sample_pod()
    with TestClient(app) as client:
        small = orjson.dumps({"Pod": pod, "Nodes": {"items": make_nodes(20, now=now)}})
        for verb in ("filter", "prioritize"):
            assert client.post(f"/{verb}", content=small).status_code == 200
        body = orjson.dumps({"Pod": pod, "Nodes": {"items": make_nodes(nodes, seed=11, now=now)}})
        release_memory()
        before = _rss_mib()
        if traced:
            tracemalloc.start()
            start = tracemalloc.take_snapshot()
        for verb in ("filter", "prioritize"):
            assert client.post(f"/{verb}", content=body).status_code == 200
        del body
        # What is counted is what the extender keeps, not what the test client still holds: it can keep the
        # last exchange (request and answer, 8 MiB each here) reachable a while, so a small request takes
        # its place, and a collection frees what the server's own release (in a worker thread, one at a
        # time: this call may return at once) ran too early to.
        assert client.get("/healthz").status_code == 200
        gc.collect()
        release_memory()
        after = _rss_mib()
        retained = 0
        if traced:
            mine = [  # allocations by Ballast's own lines and its caches'
                tracemalloc.Filter(True, "*/ballast/*"),
                tracemalloc.Filter(True, "*/cachetools/*"),
            ]
            end = tracemalloc.take_snapshot().filter_traces(mine)
            retained = sum(s.size_diff for s in end.compare_to(start.filter_traces(mine), "filename"))
            tracemalloc.stop()
        known = len(app.state.services.extender.request_board.derived)
    return {
        "nodes": nodes,
        "known": known,
        "retained_kib_per_node": round(retained / 1024 / nodes, 2),
        "rss_before_mib": round(before, 1),
        "rss_after_mib": round(after, 1),
        "rss_kib_per_node": round((after - before) * 1024 / nodes, 2),
    }


def _run(nodes: int, *extra: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.memory_bench", "--nodes", str(nodes), "--json", *extra],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, help="one size, in this process")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--untraced", action="store_true", help="RSS only (tracemalloc slows the run)")
    args = p.parse_args(argv)
    if args.nodes:
        result = measure(args.nodes, traced=not args.untraced)
        print(json.dumps(result) if args.json else result)
        return 0
    print("| nodes | retained by the extender | RSS before | RSS after | RSS per node |")
    print("|---:|---:|---:|---:|---:|")
    for n in (5000, 20000):
        r = _run(n)
        rss = _run(n, "--untraced")
        print(
            f"| {n} | {r['retained_kib_per_node']} KiB/node | {rss['rss_before_mib']} MiB | "
            f"{rss['rss_after_mib']} MiB | {rss['rss_kib_per_node']} KiB |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
