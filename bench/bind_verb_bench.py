"""Binds per second through the extender's ``/bind``, against the real kube-apiserver v1.36 on loopback.

The extender runs in-process (``create_app`` with cluster access); the bench plays kube-scheduler and
calls ``/bind`` for pods that filter never saw (so each bind reads the pod once, then creates the Binding),
one at a time and from 8 threads, round-robin over ``--nodes`` unannotated nodes. Each round uses fresh
pods; the figure is the median of the rounds, with the CPU time of the bind verb itself (``Binder.bind``:
the pre-bind steps and every API call, in the thread that runs it), median (p10-p90) per bind.

    python -m bench.bind_verb_bench [--pods 200] [--rounds 3] [--official] [--profile]

``--official`` binds through the official client instead of the lean transport; ``--profile`` runs
cProfile (on the bind thread's CPU time) over the one-thread rounds' binds and prints where it goes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from fastapi.testclient import TestClient

from app.extender.main import create_app
from app.model.policy import load_policy
from bench.nodes import ROOT
from common.kube import Kube, load_api_client
from tests.cluster.controlplane import ControlPlane, create_nodes, delete_all, node_body, pod_body


def _round(cp: ControlPlane, client: TestClient, pods: int, threads: int, tag: str, nodes: int) -> float:
    core = cp.core()
    uids = {}
    for i in range(pods):
        body = pod_body(f"{tag}-{i}", scheduler_name="ballast-scheduler", requests={"cpu": "10m"})
        uids[f"{tag}-{i}"] = core.create_namespaced_pod("default", body).metadata.uid

    def bind(item: tuple[str, str]) -> str:
        name, uid = item
        node = f"bench-{int(name.rpartition('-')[2]) % nodes}"
        body = {"PodName": name, "PodNamespace": "default", "PodUID": uid, "Node": node}
        return client.post("/bind", json=body).json()["Error"]

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        errors = [e for e in pool.map(bind, uids.items()) if e]
    elapsed = time.perf_counter() - start
    if errors:
        raise SystemExit(f"{len(errors)} binds failed, e.g. {errors[0]}")
    core.delete_collection_namespaced_pod("default", grace_period_seconds=0)
    return pods / elapsed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pods", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--nodes", type=int, default=100, help="pods are bound round-robin over this many nodes")
    p.add_argument("--official", action="store_true", help="bind through the official client")
    p.add_argument("--profile", action="store_true", help="cProfile the one-thread rounds' binds")
    args = p.parse_args(argv)
    with ControlPlane() as cp:
        create_nodes(cp.core(), [node_body(f"bench-{i}", cpu="64", pods="10000") for i in range(args.nodes)])
        kube = Kube(load_api_client(str(cp.kubeconfig)), timeout=4.0)
        app = create_app(
            load_policy(ROOT / "scheduler_config" / "policy.yaml"),
            kube=kube,
            policy_poll_seconds=0,
            access_log=False,
            lean_bind=not args.official,
        )
        binder = app.state.services.binder
        inner = binder.bind
        cpu: list[float] = []
        profiler = cProfile.Profile(time.thread_time)
        profiling = threading.Event()

        def measured(bind_args):  # type: ignore[no-untyped-def]
            t = time.thread_time()
            if profiling.is_set():
                profiler.enable()
            try:
                return inner(bind_args)
            finally:
                if profiling.is_set():
                    profiler.disable()
                cpu.append(time.thread_time() - t)

        binder.bind = measured
        with TestClient(app) as client:
            assert app.state.services.cache.wait_synced(60)
            for threads in (1, 8):
                cpu.clear()
                if args.profile and threads == 1:
                    profiling.set()
                rates = [
                    _round(cp, client, args.pods, threads, f"r{threads}x{r}", args.nodes)
                    for r in range(args.rounds)
                ]
                profiling.clear()
                qs = statistics.quantiles(cpu, n=10)
                print(
                    f"{threads} thread(s): median {statistics.median(rates):.0f} binds/s "
                    f"(rounds: {', '.join(f'{r:.0f}' for r in rates)}); bind verb CPU "
                    f"{statistics.median(cpu) * 1e6:.0f} us ({qs[0] * 1e6:.0f}-{qs[-1] * 1e6:.0f})"
                )
        delete_all(cp.core())
    if args.profile:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(40)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
