"""Names mode (nodeCacheCapable: true): Ballast answering from its watch-driven cache, against the floor.

    python -m bench.names_bench [--sizes 1000,5000] [--requests N] [--updates-per-second 100]

A fake API server (the tests' one, real REST paths and watches) holds the nodes; the extender runs in
its own process with --kubeconfig pointing at it. Echo and Ballast requests alternate, so load swings on a
shared machine hit both alike. Then the same requests run while a writer patches
node annotations at --updates-per-second, to show that watch events do not slow requests down.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import threading
import time
from pathlib import Path

import httpx
import orjson

from ballast.contract.annotations import CPU_USAGE_AVG_5M, format_load
from ballast.testing.fakekube import FakeKube
from bench.harness import Timing, ballast_cmd, echo_cmd, free_port, measure, measure_pair, serve
from bench.nodes import make_nodes, pod

POLICY = "scheduler_config/policy.yaml"


def _wait_ready(url: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if httpx.get(url + "/readyz", timeout=5).status_code == 200:
            return
        time.sleep(0.2)
    raise RuntimeError("extender did not become ready")


def _writer(fake: FakeKube, names: list[str], rate: float, stop: threading.Event, done: list[int]) -> None:
    rng = random.Random(3)
    interval = 1.0 / rate
    nxt = time.perf_counter()
    while not stop.is_set():
        name = rng.choice(names)
        fake.patch(
            "nodes",
            name,
            {"metadata": {"annotations": {CPU_USAGE_AVG_5M: format_load(rng.random(), time.time())}}},
        )
        done[0] += 1
        nxt += interval
        delay = nxt - time.perf_counter()
        if delay > 0:
            time.sleep(delay)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,5000")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--updates-per-second", type=float, default=100.0)
    ap.add_argument(
        "--hot-fraction", type=float, default=0.1, help="share of nodes over a limit (1.0: worst case)"
    )
    args = ap.parse_args()
    rows: list[tuple[int, str, Timing, Timing]] = []
    churn: list[tuple[int, Timing, Timing, float]] = []
    for size in (int(s) for s in args.sizes.split(",")):
        with FakeKube() as fake, tempfile.TemporaryDirectory() as tmp:
            nodes = make_nodes(size, hot_fraction=args.hot_fraction)
            for n in nodes:
                n["metadata"].pop("resourceVersion", None)
                n["metadata"].pop("uid", None)
                fake.add(n | {"kind": "Node", "apiVersion": "v1"})
            names = [n["metadata"]["name"] for n in nodes]
            kubeconfig = fake.write_kubeconfig(Path(tmp) / "kubeconfig")
            body = orjson.dumps({"Pod": pod(), "Nodes": None, "NodeNames": names})
            pe, pb = free_port(), free_port()
            with (
                serve(echo_cmd(pe), pe) as echo,
                serve(ballast_cmd(pb, POLICY, "--kubeconfig", str(kubeconfig)), pb) as ballast,
            ):
                _wait_ready(ballast)
                client = httpx.Client(timeout=60)
                for verb in ("filter", "prioritize"):
                    e, b = measure_pair(client, (f"{echo}/{verb}", f"{ballast}/{verb}"), body, args.requests)
                    rows.append((size, verb, e, b))
                quiet = measure(client, f"{ballast}/filter", body, args.requests)
                stop = threading.Event()
                done = [0]
                t = threading.Thread(target=_writer, args=(fake, names, args.updates_per_second, stop, done))
                start = time.perf_counter()
                t.start()
                time.sleep(1.0)
                busy = measure(client, f"{ballast}/filter", body, args.requests)
                stop.set()
                t.join()
                rate = done[0] / (time.perf_counter() - start)
                churn.append((size, quiet, busy, rate))
    print(
        "| nodes | verb (names mode) | echo p50/p90/p99 ms | ballast p50/p90/p99 ms | echo req/s "
        "| ballast req/s | ratio |"
    )
    print("|---:|---|---|---|---:|---:|---:|")
    for size, verb, e, b in rows:
        print(
            f"| {size} | {verb} | {e.row()} | {b.row()} | {e.rps:.0f} | {b.rps:.0f} | {e.rps / b.rps:.2f}x |"
        )
    print()
    print("| nodes | filter p50/p90/p99 ms, quiet | with node updates | updates/s | mean latency change |")
    print("|---:|---|---|---:|---:|")
    for size, quiet, busy, rate in churn:
        change = (quiet.rps / busy.rps - 1) * 100
        print(f"| {size} | {quiet.row()} | {busy.row()} | {rate:.0f} | {change:+.0f}% |")


if __name__ == "__main__":
    main()
