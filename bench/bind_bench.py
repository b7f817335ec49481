"""What creating one Binding costs the caller: Ballast's API client against the echo floor's minimal one.

On the loopback control plane of ``tests/cluster`` (etcd + kube-apiserver, no scheduler), unbound pods are
bound one at a time, rotating between ``common.kube.Kube.create`` (the client Ballast's bind verb uses)
and ``bench.bind_client.BindClient`` (the standard library's ``http.client``, one keep-alive TLS
connection). Per call: this thread's CPU time (the caller's share: request building, TLS, parsing) and the
wall time, median (p10-p90), after a warm-up that opens the connections.

    python -m bench.bind_bench [--binds 300] [--profile]

``--profile`` runs cProfile (on this thread's CPU time) over Ballast's client calls and prints where
their time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Callable

import orjson

from bench.bind_client import BindClient
from bench.cluster_bench import Api
from common.kube import Kube, load_api_client
from tests.cluster.controlplane import ControlPlane, node_body, pod_body


def binding(name: str, uid: str, node: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def q(values: list[float]) -> str:
    qs = statistics.quantiles(values, n=10, method="inclusive")
    return f"{statistics.median(values) * 1e6:.0f} ({qs[0] * 1e6:.0f}-{qs[-1] * 1e6:.0f})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binds", type=int, default=300, help="bindings per client")
    ap.add_argument("--profile", action="store_true", help="cProfile Ballast's client calls")
    args = ap.parse_args(argv)
    with ControlPlane() as cp:
        api = Api(cp)
        api.post("/api/v1/nodes", node_body("node-0", cpu="64", memory="256Gi"))
        kube = Kube(load_api_client(str(cp.kubeconfig)))
        minimal = BindClient.from_kubeconfig(str(cp.kubeconfig))
        clients: dict[str, Callable[[str, dict], object]] = {
            "ballast (common.kube.Kube.create)": kube.create,
            "minimal (http.client, keep-alive)": lambda path, body: minimal.post(path, orjson.dumps(body)),
        }
        cpu: dict[str, list[float]] = {k: [] for k in clients}
        wall: dict[str, list[float]] = {k: [] for k in clients}
        total = len(clients) * (args.binds + 5)
        profiler = cProfile.Profile(time.thread_time)
        pods = [api.post("/api/v1/namespaces/default/pods", pod_body(f"b-{i:05d}")) for i in range(total)]
        for i, pod in enumerate(pods):
            who = list(clients)[i % len(clients)]
            meta = pod["metadata"]
            path = f"/api/v1/namespaces/default/pods/{meta['name']}/binding"
            profiling = args.profile and i % len(clients) == 0 and i >= 10
            if profiling:
                profiler.enable()
            t, w = time.thread_time(), time.perf_counter()
            clients[who](path, binding(meta["name"], meta["uid"], "node-0"))
            t, w = time.thread_time() - t, time.perf_counter() - w
            if profiling:
                profiler.disable()
            if i >= 3 * len(clients):  # the first calls open the connections
                cpu[who].append(t)
                wall[who].append(w)
    if args.profile:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(45)
        print(out.getvalue())
    print("| client | CPU us per Binding (caller) | wall us per Binding |")
    print("|---|---:|---:|")
    for who in clients:
        print(f"| {who} | {q(cpu[who])} | {q(wall[who])} |")


if __name__ == "__main__":
    main()
