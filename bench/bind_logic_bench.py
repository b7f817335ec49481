"""What Ballast's bind verb costs beyond its API calls: the pre-bind checks and the placement record.

In one process, without a server: the extender's app with a cluster cache fed by hand (100 nodes with fresh
load annotations) and a transport that answers every API call at once, so only Ballast's own work is
timed. Each pod goes through filter and prioritize (leaving its hold, as in a drain), then ``Binder.bind``
to the node of its hold (kube-scheduler's usual choice; ``--bind-to round-robin`` binds elsewhere, so both
nodes are worked out again), then the pod watch's event that it is bound; every ``--per-round`` pods the
pods go (as the cluster bench deletes them between drains). Per pod, for each step: this thread's CPU
time, median (p10-p90); ``--profile`` prints where the second half of the binds spends it.

    python -m bench.bind_logic_bench [--pods 1000] [--per-round 500] [--bind-to hold] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time
from collections.abc import Coroutine
from typing import Any

import orjson

from ballast.extender.cache import _Nodes, _Pods
from ballast.extender.main import create_app
from ballast.extender.wire import BindingArgs, parse_extender_args
from ballast.kube.client import Kube
from ballast.model.policy import load_policy
from ballast.testing.controlplane import node_body, pod_body
from bench.cluster_bench import POLICY, annotations


class AtOnce:
    """A transport that answers every call with success at once (``ballast.kube.lean``'s interface)."""

    async def request(
        self, method: str, path: str, body: Any, ct: Any, timeout: float, query: Any = None
    ) -> tuple:
        return 201, "Created", b'{"kind":"Status","status":"Success","code":201}', {}


def at_once(call: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine that never waits (its API calls are answered at once) to its end, as the bind verb's
    task does on the event loop, without timing a loop's turn around it."""
    try:
        call.send(None)
    except StopIteration as done:
        return done.value
    call.close()
    raise RuntimeError("the bind waited for something")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--per-round", type=int, default=500)
    ap.add_argument("--nodes", type=int, default=100)
    ap.add_argument("--bind-to", choices=("hold", "round-robin"), default="hold")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args(argv)
    kube = Kube(None, timeout=4.0)  # type: ignore[arg-type]
    app = create_app(load_policy(POLICY), kube=kube, policy_poll_seconds=0)
    svc = app.state.services
    cache, ext, binder, ledger = svc.cache, svc.extender, svc.binder, svc.extender.ledger
    encode_scores = app.verb_router.verbs["/prioritize"].encode  # prioritize's answer, as the app sends it
    binder.kube.transport = AtOnce()  # the pre-bind steps share the binder's client
    names = [f"n{i}" for i in range(args.nodes)]
    _Nodes(cache).replace([node_body(n, annotations=annotations(0.2)) for n in names], "1")
    _Pods(cache).replace([], "1")
    verbs: list[float] = []
    binds: list[float] = []
    events: list[float] = []
    profiler = cProfile.Profile(time.thread_time)
    placed: list[dict[str, Any]] = []
    for i in range(args.pods):
        if placed and i % args.per_round == 0:
            for pod in placed:
                _Pods(cache).apply("DELETED", pod)
            placed.clear()
        pod = pod_body(f"p{i}", scheduler_name="ballast-scheduler", requests={"cpu": "50m", "memory": "64Mi"})
        pod["metadata"].update(uid=f"uid-{i}", namespace="default")
        body = orjson.dumps({"Pod": pod, "NodeNames": names})
        t = time.thread_time()
        ext.answering(ext.filter, parse_extender_args(body))
        ext.settle()
        encode_scores(ext.answering(ext.prioritize, parse_extender_args(body)))
        ext.settle()
        verbs.append(time.thread_time() - t)
        held = ledger.known(f"uid-{i}")
        node = held.node if args.bind_to == "hold" and held is not None else names[i % len(names)]
        profiling = args.profile and i >= args.pods // 2
        if profiling:
            profiler.enable()
        t = time.thread_time()
        error = at_once(binder.bind(BindingArgs(f"p{i}", "default", f"uid-{i}", node)))
        binds.append(time.thread_time() - t)
        if profiling:
            profiler.disable()
        assert error == "", error
        pod["spec"]["nodeName"] = node
        t = time.thread_time()
        _Pods(cache).apply("ADDED", pod)
        events.append(time.thread_time() - t)
        placed.append(pod)
    if args.profile:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
        print(out.getvalue())

    def q(values: list[float]) -> str:
        qs = statistics.quantiles(values, n=10)
        return f"{statistics.median(values) * 1e6:.0f} ({qs[0] * 1e6:.0f}-{qs[-1] * 1e6:.0f})"

    print(f"filter + prioritize, in process: {q(verbs)} us CPU per pod")
    print(f"bind (pre-bind checks, placement record; API calls answered at once): {q(binds)} us CPU per pod")
    print(f"the pod watch's event that the pod is bound: {q(events)} us CPU per pod")
    total = [v + b + e for v, b, e in zip(verbs, binds, events, strict=True)]
    print(f"all three: {q(total)} us CPU per pod")


if __name__ == "__main__":
    main()
