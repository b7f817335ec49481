"""``/healthz``, ``/readyz`` and ``/metrics`` over plain HTTP from a daemon thread: the annotator's and the
agent's endpoint (the extender serves its own through FastAPI).

- ``/healthz``: 200 while ``healthy()`` says so (by default always: the process serves); the annotator
  fails it when its main loop stops turning, so the kubelet restarts the pod.
- ``/readyz``: 200 while ``ready()`` says so (the annotator: start-up checks passed and the watches
  listed, leader or standby; the agent: the NodeResourceTopology was published); 503 with its reason else.
- ``/metrics``: the program's own registry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["HealthServer", "Probe"]

log = logging.getLogger("ballast.health")

Probe = Callable[[], tuple[bool, str]]
"""``(ok, why)``: the status and the body line (``"ok"`` when ``why`` is empty)."""


def serving() -> tuple[bool, str]:
    """The default ``/healthz``: the process answers, so it is alive."""
    return True, "ok"


class HealthServer:
    """``port=0`` picks a free port (see ``.port``); ``name`` names the serving thread."""

    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        *,
        ready: Probe,
        healthy: Probe = serving,
        name: str = "health",
        pages: Mapping[str, Callable[[], bytes]] | None = None,
    ) -> None:
        """``pages``: more read-only JSON endpoints by path (the rebalancer's ``/rebalance``)."""
        extra = dict(pages or {})

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path in ("/healthz", "/readyz"):
                    ok, why = (healthy if path == "/healthz" else ready)()
                    self._send(200 if ok else 503, (why or "ok").encode() + b"\n")
                elif path == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif path in extra:
                    self._send(200, extra[path](), "application/json")
                else:
                    known = ", ".join(["/healthz", "/readyz", "/metrics", *extra])
                    self._send(404, f"not found: try {known}\n".encode())

            def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: debug only
                log.debug("health endpoint: " + format, *args)

        self.name = name
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @classmethod
    def serve(cls, host: str, port: int, registry: CollectorRegistry, **probes: Any) -> HealthServer | None:
        """Started, its address logged; ``None`` (the error logged) when it cannot listen, which the callers
        turn into exit code 1. ``probes``: ``ready``, ``healthy`` and ``name`` as for the constructor."""
        try:
            server = cls(host, port, registry, **probes).start()
        except OSError as exc:
            log.error("cannot serve health and metrics on %s:%d: %s", host, port, exc)
            return None
        log.info("health and metrics on http://%s:%d (/healthz, /readyz, /metrics)", host, server.port)
        return server

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> HealthServer:
        self._thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, name=self.name, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.server.shutdown()
            self._thread.join(5)
        self.server.server_close()
