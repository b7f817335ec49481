"""What creating one Binding costs the caller: Ballast's API clients against the echo floor's minimal one.

On the loopback control plane of ``ballast.testing.controlplane`` (etcd + kube-apiserver, no scheduler),
unbound pods are
bound one at a time, rotating between the clients, all in one run so they see the same machine:

- ``official``: ``ballast.kube.client.Kube.create`` through the ``kubernetes`` client (serialisation layers,
  urllib3's PoolManager);
- ``lean``: the bind verb's client, ``ballast.kube.async_client.AsyncKube.create`` over the lean transport
  (``ballast.kube.lean``: httptools over asyncio streams), awaited on the running event loop as the bind
  verb awaits it;
- ``urllib3``: urllib3's ``HTTPSConnectionPool.urlopen`` taken from the official client's pool manager,
  the body encoded by orjson, ``preload_content`` and no retries (what the lean transport is built on);
- ``httpx``: one pooled keep-alive ``httpx.Client`` with the same TLS context, the body pre-encoded;
- ``httpcore``: httpcore's ``AsyncConnectionPool`` (the core of httpx, on asyncio), the body pre-encoded;
- ``h11``: h11 over asyncio streams, one keep-alive connection (the parser of uvicorn's default server);
- ``stdlib``: ``bench.bind_client.BindClient`` (the standard library's ``http.client``, one keep-alive TLS
  connection), the echo floor's client, called directly;
- ``stdlib-thread``: the same, in asyncio's default executor, as the echo floor's bind calls it.

The calls run inside one event loop (the blocking clients block it; nothing else runs). Per call: the
process's CPU time (the caller's share: request building, TLS, parsing, and for ``stdlib-thread`` the
handing over to the worker thread and back) and the wall time, median (p10-p90), after a warm-up that
opens the connections.

    python -m bench.bind_bench [--binds 300] [--clients official,lean,urllib3,httpx,httpcore,h11,stdlib,
                                                        stdlib-thread] [--profile NAME]

``--profile NAME`` runs cProfile (on this thread's CPU time) over that client's calls and prints where
their time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import inspect
import io
import pstats
import statistics
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import h11
import httpcore
import httpx
import orjson

from ballast.kube.async_client import AsyncKube
from ballast.kube.client import Kube, load_api_client
from ballast.testing.controlplane import ControlPlane, node_body, pod_body
from bench.bind_client import BindClient
from bench.cluster_bench import Api


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


def candidates(cp: ControlPlane) -> dict[str, Callable[[str, dict], Any]]:
    """Each client as ``create(path, body)``; every one encodes the body itself, inside the timed call."""
    kube = Kube(load_api_client(str(cp.kubeconfig)))
    cfg = kube.api_client.configuration
    pool = load_api_client(str(cp.kubeconfig)).rest_client.pool_manager.connection_from_url(cfg.host)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    minimal = BindClient.from_kubeconfig(str(cp.kubeconfig))
    hx = httpx.Client(base_url=cfg.host, verify=minimal.context, timeout=10)

    def with_urllib3(path: str, body: dict) -> bytes:
        resp = pool.urlopen(
            "POST", path, body=orjson.dumps(body), headers=headers, retries=False, redirect=False,
            preload_content=True, timeout=10.0,
        )  # fmt: skip
        if resp.status >= 300:
            raise RuntimeError(resp.status)
        return resp.data

    def with_httpx(path: str, body: dict) -> bytes:
        resp = hx.post(path, content=orjson.dumps(body), headers=headers)
        if resp.status_code >= 300:
            raise RuntimeError(resp.status_code)
        return resp.content

    core_pool = httpcore.AsyncConnectionPool(ssl_context=minimal.context, max_connections=4)

    async def with_httpcore(path: str, body: dict) -> bytes:
        data = orjson.dumps(body)
        resp = await core_pool.request(
            "POST", cfg.host + path, headers=[*headers.items(), ("Content-Length", str(len(data)))],
            content=data, extensions={"timeout": {"connect": 10, "read": 10, "write": 10, "pool": 10}},
        )  # fmt: skip
        if resp.status >= 300:
            raise RuntimeError(resp.status)
        return resp.content

    h11_conn: list[Any] = []

    async def with_h11(path: str, body: dict) -> bytes:
        """One keep-alive connection over asyncio streams, h11 building the request and parsing the reply."""
        if not h11_conn:
            split = urllib.parse.urlsplit(cfg.host)
            streams = await asyncio.open_connection(split.hostname, split.port, ssl=minimal.context)
            h11_conn.extend([*streams, h11.Connection(h11.CLIENT), f"{split.hostname}:{split.port}"])
        reader, writer, conn, host = h11_conn
        data = orjson.dumps(body)
        head = [("Host", host), *headers.items(), ("Content-Length", str(len(data)))]
        writer.write(
            conn.send(h11.Request(method="POST", target=path, headers=head))
            + conn.send(h11.Data(data=data))
            + conn.send(h11.EndOfMessage())
        )
        status, chunks = 0, []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
        conn.start_next_cycle()
        if status >= 300:
            raise RuntimeError(status)
        return b"".join(chunks)

    return {
        "official": kube.create,
        "lean": lambda path, body: lean_kube(cp).create(path, body),
        "urllib3": with_urllib3,
        "httpx": with_httpx,
        "httpcore": with_httpcore,
        "h11": with_h11,
        "stdlib": lambda path, body: minimal.post(path, orjson.dumps(body)),
        "stdlib-thread": lambda path, body: asyncio.to_thread(minimal.post, path, orjson.dumps(body)),
    }


_LEAN: list[AsyncKube] = []


def lean_kube(cp: ControlPlane) -> AsyncKube:
    if not _LEAN:
        _LEAN.append(AsyncKube.lean(Kube(load_api_client(str(cp.kubeconfig)))))
    return _LEAN[0]


DESCRIBED = {
    "official": "official (`Kube.create`, the `kubernetes` client over urllib3's PoolManager)",
    "lean": "lean (`AsyncKube.create` over `ballast.kube.lean`: httptools over asyncio streams, keep-alive)",
    "urllib3": "urllib3 `HTTPSConnectionPool.urlopen`, pre-encoded body, no retries",
    "httpx": "httpx (one pooled keep-alive `httpx.Client`, pre-encoded body)",
    "httpcore": "httpcore's `AsyncConnectionPool` (httpx's core, asyncio), pre-encoded body",
    "h11": "h11 over asyncio streams, one keep-alive connection",
    "stdlib": "stdlib (`http.client`, keep-alive TLS; the echo floor's client), called directly",
    "stdlib-thread": "stdlib in asyncio's default executor, as the echo floor's bind calls it",
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binds", type=int, default=300, help="bindings per client")
    ap.add_argument("--clients", default=",".join(DESCRIBED), help="comma-separated subset of the clients")
    ap.add_argument("--profile", metavar="NAME", help="cProfile this client's calls")
    args = ap.parse_args(argv)
    with ControlPlane() as cp:
        api = Api(cp)
        api.post("/api/v1/nodes", node_body("node-0", cpu="64", memory="256Gi"))
        every = candidates(cp)
        clients = {k: every[k] for k in args.clients.split(",") if k}
        names = list(clients)
        cpu: dict[str, list[float]] = {k: [] for k in clients}
        wall: dict[str, list[float]] = {k: [] for k in clients}
        total = len(clients) * (args.binds + 5)
        profiler = cProfile.Profile(time.process_time)
        pods = [api.post("/api/v1/namespaces/default/pods", pod_body(f"b-{i:05d}")) for i in range(total)]

        async def drive() -> None:
            for i, pod in enumerate(pods):
                who = names[i % len(names)]
                meta = pod["metadata"]
                path = f"/api/v1/namespaces/default/pods/{meta['name']}/binding"
                profiling = who == args.profile and i >= 10
                if profiling:
                    profiler.enable()
                t, w = time.process_time(), time.perf_counter()
                result = clients[who](path, binding(meta["name"], meta["uid"], "node-0"))
                if inspect.isawaitable(result):
                    await result
                t, w = time.process_time() - t, time.perf_counter() - w
                if profiling:
                    profiler.disable()
                if i >= 3 * len(clients):  # the first calls open the connections
                    cpu[who].append(t)
                    wall[who].append(w)

        asyncio.run(drive())
    if args.profile:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(45)
        print(out.getvalue())
    print("| client | CPU us per Binding (caller) | wall us per Binding |")
    print("|---|---:|---:|")
    for who in clients:
        print(f"| {DESCRIBED[who]} | {q(cpu[who])} | {q(wall[who])} |")


if __name__ == "__main__":
    main()
