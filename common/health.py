"""``/healthz``, ``/readyz`` and ``/metrics`` of the annotator, plain HTTP from a daemon thread.

- ``/healthz``: 200 while the main loop keeps turning (a stuck loop makes the kubelet restart the pod).
- ``/readyz``: 200 once start-up checks passed and the watches listed; a standby replica is ready too
  (readiness is not leadership).
- ``/metrics``: the annotator's own registry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["HealthServer"]

log = logging.getLogger("ballast.annotator.health")

Probe = Callable[[], tuple[bool, str]]


class HealthServer:
    """``port=0`` picks a free port (see ``.port``)."""

    def __init__(
        self, host: str, port: int, registry: CollectorRegistry, *, healthy: Probe, ready: Probe
    ) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path in ("/healthz", "/readyz"):
                    ok, why = (healthy if path == "/healthz" else ready)()
                    self._send(200 if ok else 503, (why or "ok").encode() + b"\n")
                elif path == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                else:
                    self._send(404, b"not found: try /healthz, /readyz or /metrics\n")

            def _send(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: debug only
                log.debug("health endpoint: " + format, *args)

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> HealthServer:
        self._thread = threading.Thread(
            target=self.server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="annotator-health",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.server.shutdown()
            self._thread.join(5)
        self.server.server_close()
