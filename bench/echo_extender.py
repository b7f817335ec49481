"""The floor: a bare extender that parses the request and returns its input, doing no scheduling work.

It does what any extender must do (read the JSON body, write a JSON answer) with the same server stack as
Ballast (FastAPI, uvicorn, orjson), so the ratio Ballast/echo is the cost of Ballast's own decisions. It
shares no code with Ballast: its bind creates the Binding through ``bench.bind_client`` (the standard
library's ``http.client`` over TLS, one keep-alive connection per worker thread), not through Ballast's
Kubernetes client, so whatever that client costs shows in the ratio instead of cancelling out of it.
"""

from __future__ import annotations

import asyncio

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from bench.bind_client import BindClient

app = FastAPI()


def _json(obj: object) -> Response:
    return Response(orjson.dumps(obj), media_type="application/json")


@app.post("/filter")
async def filter_(request: Request) -> Response:
    args = orjson.loads(await request.body())
    return _json(
        {
            "Nodes": args.get("Nodes"),
            "NodeNames": args.get("NodeNames"),
            "FailedNodes": {},
            "FailedAndUnresolvableNodes": {},
            "Error": "",
        }
    )


@app.post("/prioritize")
async def prioritize(request: Request) -> Response:
    args = orjson.loads(await request.body())
    if args.get("Nodes"):
        names = [n["metadata"]["name"] for n in args["Nodes"]["items"]]
    else:
        names = args.get("NodeNames") or []
    return _json([{"Host": n, "Score": 0} for n in names])


@app.get("/version")
async def version(request: Request) -> Response:
    """What serves the echo, seen from a request: the HTTP implementation owning the connection (the module
    of uvicorn's protocol, ``httptools_impl`` or ``h11_impl``) and the running event loop's package."""
    owner = getattr(request.receive, "__self__", None)
    http = type(owner).__module__.rpartition(".")[2].removesuffix("_impl") if owner is not None else "unknown"
    loop = type(asyncio.get_running_loop()).__module__.partition(".")[0]
    return _json({"component": "echo", "server": {"http": http, "loop": loop}})


_CLIENT: BindClient | None = None


def _client() -> BindClient:
    """The minimal client, from ``ECHO_KUBECONFIG`` (the cluster bench sets it)."""
    global _CLIENT
    if _CLIENT is None:
        import os

        _CLIENT = BindClient.from_kubeconfig(os.environ["ECHO_KUBECONFIG"])
    return _CLIENT


@app.post("/bind")
async def bind(request: Request) -> Response:
    """Create the Binding and nothing else: the floor for an extender that binds. The body is read as the
    other verbs read theirs, and the blocking call runs in asyncio's default executor, the plain way to
    call a blocking client from an async server (a FastAPI sync route would validate the body and run it
    in anyio's pool of 40 threads, each with its own TLS connection: more than a floor should cost)."""
    body = orjson.loads(await request.body())
    ns, name = body.get("PodNamespace", ""), body.get("PodName", "")
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": ns} | ({"uid": body["PodUID"]} if body.get("PodUID") else {}),
        "target": {"apiVersion": "v1", "kind": "Node", "name": body.get("Node", "")},
    }
    path = f"/api/v1/namespaces/{ns}/pods/{name}/binding"
    try:
        await asyncio.to_thread(_client().post, path, orjson.dumps(binding))
    except Exception as exc:  # the scheduler retries; the bench counts bindings, not errors
        return _json({"Error": str(exc)})
    return _json({"Error": ""})
