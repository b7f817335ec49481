"""A minimal Kubernetes API client for the echo floor's bind: the standard library and nothing of Ballast's.

The echo extender's bind must cost what creating a Binding costs at least, not what Ballast's client costs:
a floor that shared Ballast's client would carry its overhead too, and the ratio would hide it. So this
reads the kubeconfig itself (server, CA, client certificate or bearer token) and POSTs with
``http.client`` over TLS, one keep-alive connection per thread (the server's worker threads each keep
theirs), reconnecting once when the API server has closed an idle connection and dropping a connection
after any other failure.
"""

from __future__ import annotations

import base64
import http.client
import ssl
import tempfile
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import yaml


class ApiError(Exception):
    """The API server answered with an error status."""


def _file(entry: dict[str, Any], key: str, tmp: Path) -> str | None:
    """``key`` as a file path: the path itself, or ``key-data`` (base64) written to a private file."""
    if entry.get(key):
        return str(entry[key])
    data = entry.get(f"{key}-data")
    if not data:
        return None
    path = tmp / key
    path.write_bytes(base64.b64decode(data))
    return str(path)


class BindClient:
    """POST JSON to one API server with keep-alive connections, one per calling thread."""

    def __init__(self, server: str, context: ssl.SSLContext | None, token: str | None = None) -> None:
        url = urllib.parse.urlsplit(server)
        self.host = url.hostname or "localhost"
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.context = context if url.scheme == "https" else None
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.local = threading.local()

    @classmethod
    def from_kubeconfig(cls, path: str) -> BindClient:
        config = yaml.safe_load(Path(path).read_text())
        current = config.get("current-context")
        ctx = next(c["context"] for c in config["contexts"] if c["name"] == current)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == ctx["cluster"])
        user = next((u["user"] for u in config.get("users", []) if u["name"] == ctx.get("user")), {})
        with tempfile.TemporaryDirectory() as tmp:
            ca = _file(cluster, "certificate-authority", Path(tmp))
            context = ssl.create_default_context(cafile=ca)
            if cluster.get("insecure-skip-tls-verify"):
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            cert = _file(user, "client-certificate", Path(tmp))
            key = _file(user, "client-key", Path(tmp))
            if cert:
                context.load_cert_chain(cert, key)
        return cls(cluster["server"], context, user.get("token"))

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self.local, "conn", None)
        if conn is None:
            if self.context is not None:
                conn = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=10)
            else:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
            self.local.conn = conn
        return conn

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self.local.conn = None

    def post(self, path: str, body: bytes) -> bytes:
        """POST ``body``; returns the answer's bytes, raises ``ApiError`` on an error status. A connection
        that failed in any way is dropped (a timed-out one is left mid-request and would refuse every
        later request); one the server closed while idle is retried once on a new connection."""
        for attempt in (0, 1):
            conn = self._connection()
            try:
                conn.request("POST", path, body, self.headers)
                resp = conn.getresponse()
                data = resp.read()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self._drop(conn)
                if attempt:
                    raise
            except BaseException:
                self._drop(conn)
                raise
        if resp.status >= 300:
            raise ApiError(f"{resp.status}: {data[:300].decode(errors='replace')}")
        return data
