"""Binds per second through the extender's ``/bind``, against the real kube-apiserver v1.36 on loopback.

The extender runs in-process (``create_app`` with cluster access); the bench plays kube-scheduler and
calls ``/bind`` for pods that filter never saw (so each bind reads the pod once, then creates the Binding),
one at a time and from 8 threads. Each round uses fresh pods on one unannotated node; the figure is the
median of the rounds.

    python -m bench.bind_verb_bench [--pods 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from fastapi.testclient import TestClient

from app.extender.main import create_app
from app.model.policy import load_policy
from bench.nodes import ROOT
from common.kube import Kube, load_api_client
from tests.cluster.controlplane import ControlPlane, create_nodes, delete_all, node_body, pod_body


def _round(cp: ControlPlane, client: TestClient, pods: int, threads: int, tag: str) -> float:
    core = cp.core()
    uids = {}
    for i in range(pods):
        body = pod_body(f"{tag}-{i}", scheduler_name="ballast-scheduler", requests={"cpu": "10m"})
        uids[f"{tag}-{i}"] = core.create_namespaced_pod("default", body).metadata.uid

    def bind(item: tuple[str, str]) -> str:
        name, uid = item
        body = {"PodName": name, "PodNamespace": "default", "PodUID": uid, "Node": "bench"}
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
    args = p.parse_args(argv)
    with ControlPlane() as cp:
        create_nodes(cp.core(), [node_body("bench", cpu="64", pods="10000")])
        kube = Kube(load_api_client(str(cp.kubeconfig)), timeout=4.0)
        app = create_app(
            load_policy(ROOT / "scheduler_config" / "policy.yaml"),
            kube=kube,
            policy_poll_seconds=0,
            access_log=False,
        )
        with TestClient(app) as client:
            assert app.state.services.cache.wait_synced(60)
            for threads in (1, 8):
                rates = [
                    _round(cp, client, args.pods, threads, f"r{threads}x{r}") for r in range(args.rounds)
                ]
                print(
                    f"{threads} thread(s): median {statistics.median(rates):.0f} binds/s "
                    f"(rounds: {', '.join(f'{r:.0f}' for r in rates)})"
                )
        delete_all(cp.core())
    return 0


if __name__ == "__main__":
    sys.exit(main())
