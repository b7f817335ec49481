"""A fault-injecting proxy of the tests' own between a program under test and the real kube-apiserver.

The program gets a kubeconfig pointing at the proxy (``FaultProxy.kubeconfig()``); the proxy terminates TLS
with the control plane's throwaway serving certificate, reads each HTTP/1.1 request, and sends it on over
a new TLS connection with the admin client certificate. Every request travels on its own upstream
connection with ``Connection: close``, so a reply ends when the API server closes it and nothing has to
parse response framing (watch streams included). Without a matching rule a request passes unchanged.

Rules (``add``) match the method and a regular expression searched in the request target (path and query),
and do one of:

- ``answer``: do not forward; answer ``status`` with ``body`` and ``headers`` (a Lease update failing with
  503, API-server throttling: 429 with ``Retry-After``);
- ``lose``: forward, let the API server finish, then give the client ``status`` instead of the real reply
  (``status=0``: reset the connection): the API server did it, the client does not know;
- ``hold``: forward, and pass no byte of the reply while the rule is in place: the client waits for its
  own timeout. A hold also applies to replies already streaming (a watch open before the rule was added
  stalls, its connection open); removing the rule lets the held bytes through, in order;
- ``stall``: do not forward, and answer nothing while the rule is in place (then close): the API server
  never sees the request, the client waits for its own timeout.

``seen`` records every request (method, target, the API server's status or ``None`` when not forwarded),
so a test can count what really reached the API server.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ballast.testing.controlplane import ControlPlane, free_port

__all__ = ["FaultProxy", "Rule", "Seen", "status_body"]

ANSWER, LOSE, HOLD, STALL = "answer", "lose", "hold", "stall"
REASONS = {
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def status_body(code: int, reason: str, message: str) -> bytes:
    """A ``meta/v1`` Status, as the API server writes its errors."""
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": message, "reason": reason, "code": code}).encode()  # fmt: skip


@dataclass
class Rule:
    path: str
    action: str
    method: str | None = None
    status: int = 503
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    times: int | None = None
    """How many requests this rule applies to (``None``: until removed)."""
    hits: int = 0

    def matches(self, method: str, target: str) -> bool:
        return (self.method is None or self.method == method) and re.search(self.path, target) is not None


@dataclass
class Seen:
    method: str
    target: str
    status: int | None = None
    """The API server's status code; ``None`` when not forwarded (or before the reply)."""
    at: float = field(default_factory=time.monotonic)
    """When the request arrived (``time.monotonic``)."""


class FaultProxy:
    """``with FaultProxy(cp) as proxy:``; ``proxy.kubeconfig()`` for the program under test."""

    def __init__(self, cp: ControlPlane) -> None:
        assert cp.workdir
        self.cp = cp
        self.port = free_port()
        self.rules: list[Rule] = []
        self.seen: list[Seen] = []
        self.errors: list[str] = []
        """What ended a connection without a reply of the API server's (for a failing test to show)."""
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._conns: set[socket.socket] = set()
        pki = cp.pki
        self._server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_ctx.load_cert_chain(str(pki / "server.crt"), str(pki / "server.key"))
        self._upstream_ctx = cp.ssl_context()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._thread = threading.Thread(target=self._accept, name=f"faultproxy-{self.port}", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def kubeconfig(self) -> Path:
        """A copy of the admin kubeconfig whose server is this proxy."""
        config = json.loads(self.cp.kubeconfig.read_text())
        config["clusters"][0]["cluster"]["server"] = self.url
        assert self.cp.workdir
        path = self.cp.workdir / f"proxy-{self.port}.kubeconfig"
        path.write_text(json.dumps(config, indent=1))
        return path

    # --- rules ---------------------------------------------------------------------------------------------

    def add(self, path: str, action: str, **kw: object) -> Rule:
        rule = Rule(path, action, **kw)  # type: ignore[arg-type]
        with self._lock:
            self.rules.append(rule)
        return rule

    def remove(self, rule: Rule) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self.rules.remove(rule)

    def clear(self) -> None:
        with self._lock:
            self.rules.clear()

    def requests(self, method: str, path: str) -> list[Seen]:
        """The requests seen whose method is ``method`` and whose target matches ``path``."""
        with self._lock:
            return [s for s in self.seen if s.method == method and re.search(path, s.target)]

    def _rule_for(self, method: str, target: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.action != HOLD and rule.matches(method, target):
                    if rule.times is not None and rule.hits >= rule.times:
                        continue
                    rule.hits += 1
                    return rule
        return None

    def _held(self, method: str, target: str) -> bool:
        with self._lock:
            return any(r.action == HOLD and r.matches(method, target) for r in self.rules)

    # --- serving -------------------------------------------------------------------------------------------

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.close()
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                raw, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _track(self, sock: socket.socket, add: bool) -> None:
        with self._lock:
            (self._conns.add if add else self._conns.discard)(sock)

    def _serve(self, raw: socket.socket) -> None:
        self._track(raw, True)
        upstream: socket.socket | None = None
        client: socket.socket | None = None
        try:
            client = self._server_ctx.wrap_socket(raw, server_side=True)
            self._track(client, True)
            request = _read_request(client)
            if request is None:
                return
            method, target, head, body = request
            seen = Seen(method, target)
            with self._lock:
                self.seen.append(seen)
            rule = self._rule_for(method, target)
            if rule is not None and rule.action == ANSWER:
                client.sendall(_response(rule.status, rule.body, rule.headers))
                return
            if rule is not None and rule.action == STALL:
                while rule in self.rules and not self._closed.is_set():
                    time.sleep(0.05)
                return
            upstream = self._upstream_ctx.wrap_socket(
                socket.create_connection(("127.0.0.1", self.cp.apiserver_port), timeout=30),
                server_hostname="127.0.0.1",
            )
            upstream.settimeout(None)
            self._track(upstream, True)
            upstream.sendall(head + body)
            if rule is not None and rule.action == LOSE:
                reply = _read_all(upstream)
                seen.status = _status_of(reply)
                if rule.status == 0:
                    _reset(client)
                else:
                    client.sendall(_response(rule.status, rule.body, rule.headers))
                return
            first = True
            while not self._closed.is_set():
                chunk = upstream.recv(65536)
                if not chunk:
                    return
                if first:
                    seen.status = _status_of(chunk)
                    first = False
                # checked after the read: a rule added while this thread waited in recv holds what came
                while self._held(method, target) and not self._closed.is_set():
                    time.sleep(0.05)
                client.sendall(chunk)
        except (OSError, ssl.SSLError, ValueError) as exc:
            with self._lock:
                self.errors.append(f"{type(exc).__name__}: {exc}")
            return
        finally:
            for sock in (upstream, client, raw):
                if sock is not None:
                    self._track(sock, False)
                    with contextlib.suppress(OSError):
                        sock.close()


def _read_request(client: ssl.SSLSocket) -> tuple[str, str, bytes, bytes] | None:
    """One request: (method, target, its head rewritten to ``Connection: close``, its body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = client.recv(65536)
        if not chunk:
            return None
        buf += chunk
        if len(buf) > 1 << 20:
            raise ValueError("request head too long")
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers = []
    length = 0
    chunked = False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        low = name.strip().lower()
        if low in ("connection", "keep-alive", "proxy-connection"):
            continue
        if low == "content-length":
            length = int(value.strip())
        if low == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
        headers.append(line)
    headers.append("Connection: close")
    if chunked:
        while not rest.endswith(b"0\r\n\r\n"):
            chunk = client.recv(65536)
            if not chunk:
                break
            rest += chunk
        body = rest
    else:
        while len(rest) < length:
            chunk = client.recv(65536)
            if not chunk:
                break
            rest += chunk
        body = rest[:length]
    new_head = ("\r\n".join([lines[0], *headers]) + "\r\n\r\n").encode("latin-1")
    return method, target, new_head, body


def _read_all(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def _status_of(reply: bytes) -> int | None:
    parts = reply.split(b"\r\n", 1)[0].split(b" ")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


def _response(status: int, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}"]
    fields = {"Content-Type": "application/json", **headers}
    lines += [f"{k}: {v}" for k, v in fields.items()]
    lines += [f"Content-Length: {len(body)}", "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0): the client sees "connection reset", not a clean end."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()
