"""Shared helpers of the annotator tests: command-line args, nodes and bound pods in the fake API server."""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import parse_qs, urlparse

from ballast.annotator.cli import COMMAND
from ballast.testing.fakekube import FakeKube, make_node, make_pod


def parse(*argv: str) -> argparse.Namespace:
    """``ballast annotator ARGV`` parsed by the real parser (registered on a parser of our own)."""
    parser = argparse.ArgumentParser(prog="ballast")
    sub = parser.add_subparsers(dest="command")
    COMMAND.register(sub)
    return parser.parse_args(["annotator", *argv])


def stamp(when: float) -> str:
    return datetime.fromtimestamp(when, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def add_node(fake: FakeKube, name: str, ip: str | None, annotations: dict[str, str] | None = None) -> None:
    node = make_node(name, annotations=annotations)
    if ip:
        node["status"]["addresses"].insert(0, {"type": "InternalIP", "address": ip})
    fake.add(node)


def bind_pod(fake: FakeKube, name: str, node: str, when: float, namespace: str = "default") -> dict[str, Any]:
    """A pod bound to ``node`` whose PodScheduled condition says it was bound at ``when``."""
    fake.add(make_pod(name, namespace=namespace, node_name=node))
    condition = {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(when)}
    return fake.patch(
        "pods",
        name,
        {"status": {"conditions": [condition]}},
        namespace=namespace,
        subresource="status",
    )


def annotations(fake: FakeKube, node: str) -> dict[str, str]:
    obj = fake.get("nodes", node)
    assert obj is not None, node
    return dict(obj["metadata"].get("annotations") or {})


def node_patches(fake: FakeKube) -> list[Any]:
    return [r for r in fake.requests if r.method == "PATCH" and r.path.startswith("/api/v1/nodes/")]


class StubPrometheus:
    """A tiny HTTP server that is 'ready' and answers every other GET with ``answer(path, query)``
    (status, JSON body). For what a real Prometheus cannot be made to do on demand (fail), or where
    only the caller's other side matters; Prometheus behaviour itself is tested against the real server."""

    def __init__(self, answer: Callable[[str, str], tuple[int, bytes]]) -> None:
        self.queries: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path == "/-/ready":
                    self._send(200, b"Prometheus Server is Ready.\n")
                    return
                query = parse_qs(url.query).get("query", [""])[0]
                outer.queries.append(query)
                self._send(*answer(url.path, query))

            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


class FailingPrometheus(StubPrometheus):
    """Answers every query with ``status`` and Prometheus's error body (a broken backend)."""

    def __init__(self, status: int = 500) -> None:
        body = b'{"status":"error","errorType":"internal","error":"storage is on fire"}'
        super().__init__(lambda path, query: (status, body))


def constant_prometheus(values: dict[str, float]) -> StubPrometheus:
    """Answers every instant query with one sample per instance (instance -> percentage), now."""

    def answer(path: str, query: str) -> tuple[int, bytes]:
        if path != "/api/v1/query":
            return 404, b'{"status":"error","errorType":"not_found","error":"not found"}'
        now = time.time()
        result = [
            {"metric": {"__name__": query, "instance": inst}, "value": [now, str(v)]}
            for inst, v in values.items()
        ]
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return 200, json.dumps(body).encode()

    return StubPrometheus(answer)
