"""What one filter or prioritize costs inside the server process, without the HTTP server or the network.

Both apps are called through ASGI in this process, with the same scope, body and ``receive``/``send``
a server would give them: the echo extender (``bench.echo_extender``) and Ballast's app as ``create_app``
composes it (``ballast.extender.app.ExtenderApp``: the access log, the verb router, the verbs), answering in
names mode from a verdict board over ``--nodes`` parsed nodes (``ballast.testing.node_source.StaticSource``:
no watches; a bare FastAPI behind the verbs, which no request reaches). Each pod is new, as in a drain: a
filter, then a prioritize, whose hold stays on the ledger. Times are this thread's CPU time per request
(``time.thread_time``), until the answer's last byte is handed to ``send`` and including the work after it
(the board's recomputation of the held node), median (p10-p90).

    python -m bench.verbs_bench [--sizes 100,500,5000] [--pods 300] [--profile prioritize:5000]

``--profile VERB:SIZE`` runs cProfile over Ballast's requests of that verb and size and prints the top
functions by their own time.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import cProfile
import io
import logging
import pstats
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from fastapi import FastAPI

from ballast.extender.api.access import AccessLog
from ballast.extender.api.state import Services
from ballast.extender.api.verbs import verbs_for
from ballast.extender.app import ExtenderApp
from ballast.extender.extender import Extender
from ballast.extender.metrics import ExtenderMetrics
from ballast.model.ledger import Ledger
from ballast.model.nodestate import parse_node
from ballast.model.policy import load_policy
from ballast.model.policy_store import PolicyStore
from ballast.testing.node_source import StaticSource
from bench.echo_extender import app as echo_app
from bench.nodes import make_nodes, pod

POLICY = "scheduler_config/policy.yaml"

App = Callable[..., Any]


def ballast_app(size: int) -> App:
    """Ballast's app as ``create_app`` composes it, over ``size`` nodes in a static source."""
    policy = load_policy(POLICY)
    now = time.time()
    loads = {n["metadata"]["name"]: parse_node(n, policy, now) for n in make_nodes(size, now=now)}
    metrics = ExtenderMetrics()
    store = PolicyStore(policy)
    extender = Extender(store, metrics, StaticSource(loads), Ledger(policy))
    svc = Services(store=store, metrics=metrics, extender=extender)
    return ExtenderApp(svc, verbs_for(svc), FastAPI(), AccessLog())


def scope(path: str, body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8888),
        "state": {},
    }


async def call(app: App, path: str, body: bytes) -> tuple[float, float, bytes]:
    """CPU seconds until the answer's last byte went to ``send``, and until the call returned; the answer
    (which must be a 200)."""
    start = time.thread_time()
    sent_at = 0.0
    status = 0
    chunks: list[bytes] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if delivered:
            await asyncio.sleep(3600)
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal sent_at, status
        if message["type"] == "http.response.start":
            status = message["status"]
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                sent_at = time.thread_time()

    await app(scope(path, body), receive, send)
    end = time.thread_time()
    assert status == 200, f"{path}: {status} {b''.join(chunks)[:200]!r}"
    return sent_at - start, end - start, b"".join(chunks)


def pods(count: int) -> list[dict[str, Any]]:
    template = pod()
    out = []
    for i in range(count):
        p = copy.deepcopy(template)
        p["metadata"]["name"] = f"bench-{i:05d}"
        p["metadata"]["uid"] = str(uuid.UUID(int=i + 1))
        out.append(p)
    return out


def q(values: list[float]) -> str:
    qs = statistics.quantiles(values, n=10, method="inclusive")
    return f"{statistics.median(values) * 1e6:.0f} ({qs[0] * 1e6:.0f}-{qs[-1] * 1e6:.0f})"


async def run(size: int, count: int, profile: str | None) -> list[tuple[str, str, str, str, float]]:
    ballast = ballast_app(size)
    names = [n["metadata"]["name"] for n in make_nodes(size)]
    bodies = [orjson.dumps({"Pod": p, "Nodes": None, "NodeNames": names}) for p in pods(count)]
    times: dict[tuple[str, str], list[float]] = {}
    profiler = cProfile.Profile()
    for verb in ("filter", "prioritize"):  # warm-up: imports, first board reads, caches
        for app in (echo_app, ballast):
            await call(app, f"/{verb}", bodies[0])
    for body in bodies:
        for verb in ("filter", "prioritize"):
            for who, app in (("echo", echo_app), ("ballast", ballast)):
                profiling = who == "ballast" and profile == f"{verb}:{size}"
                if profiling:
                    profiler.enable()
                answered, total, answer = await call(app, f"/{verb}", body)
                if profiling:
                    profiler.disable()
                assert answer, f"{who} {verb}: no answer"
                times.setdefault((who, f"{verb} answered"), []).append(answered)
                times.setdefault((who, f"{verb} total"), []).append(total)
    if profile and profile.endswith(f":{size}"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
        print(out.getvalue())
    rows = []
    for verb in ("filter", "prioritize"):
        echo = times[("echo", f"{verb} total")]
        answered = times[("ballast", f"{verb} answered")]
        total = times[("ballast", f"{verb} total")]
        ratio = statistics.median(answered) / statistics.median(echo)
        rows.append((str(size), verb, q(echo), f"{q(answered)} / {q(total)}", ratio))
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,500,5000")
    ap.add_argument("--pods", type=int, default=300)
    ap.add_argument("--profile", default=None, help="VERB:SIZE to profile with cProfile")
    args = ap.parse_args(argv)
    # As deployed: one INFO access line per request, written to a stream (here one nobody reads).
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    logging.getLogger().handlers[:] = [handler]
    logging.getLogger().setLevel(logging.INFO)
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        rows += asyncio.run(run(size, args.pods, args.profile))
        handler.stream = io.StringIO()
    print("| names | verb | echo us | ballast us, answered / with the work after | ratio (answered) |")
    print("|---:|---|---:|---:|---:|")
    for size, verb, echo, ballast, ratio in rows:
        print(f"| {size} | {verb} | {echo} | {ballast} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
