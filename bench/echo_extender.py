"""The floor: a bare extender that parses the request and returns its input, doing no scheduling work.

It does what any extender must do (read the JSON body, write a JSON answer) with the same stack as
Ballast (FastAPI, uvicorn, orjson), so the ratio Ballast/echo is the cost of Ballast's own decisions.
"""

from __future__ import annotations

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

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
