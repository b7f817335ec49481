"""A lean HTTP transport for the API calls on kube-scheduler's critical path (the bind verb's), on the
extender's own event loop.

``ballast.kube.client.Kube`` sends every call through the official ``kubernetes`` client, whose layers cost
about
twice the CPU of the request itself, and it blocks, so a bind had to run in a worker thread. On two cores
busy with the control plane that thread is what costs: handing each bind to a worker and its answer back,
and the worker contending with the event loop for the GIL, cost several times the bind's own work
(measured under the real kube-scheduler, ``bench/cluster_bench.py``). Measured per Binding in one run
(``bench/bind_bench.py``, the caller's CPU): the official client about 1130 us, the standard library's
``http.client`` about 500 us called directly and 800 us handed to a worker thread (the echo floor's way),
httpcore's ``AsyncConnectionPool`` about 1650 us, h11 over asyncio streams about 510 us, httptools' reply
parser over asyncio streams about 420 us. So this transport writes the request line and headers itself (a
few fixed lines) and reads the reply with ``httptools`` (llhttp, the parser of uvicorn's ``httptools``
mode) over asyncio streams, with a small pool of keep-alive connections. It keeps what the official
client does for authentication and connections:

- TLS from the same ``Configuration`` the official client was built from (``load_api_client``): the CA
  (file or data), the client certificate and key from a kubeconfig, ``insecure-skip-tls-verify``,
  ``tls-server-name``;
- the bearer token asked of that ``Configuration`` at every call, so its refresh hook runs as it does for
  the official client: the in-cluster loader re-reads the service-account token file once a minute
  (``InClusterConfigLoader``: the kubelet rotates the projected token), a kubeconfig's exec plugin renews
  its token when it expires (that renewal runs on the event loop: once per token lifetime, not per call);
- the caller's timeout per call (``AsyncKube`` hands it what is left of the verb's deadline), one attempt
  per call and no retries: a call that fails answers ``TransportError`` and the caller decides;
- keep-alive with reuse, and recovery: an idle connection the API server has closed or reset is noticed
  before it is used (its stream saw EOF or an error) and replaced; a connection that failed in any way,
  that was cancelled mid-call, or that the server marked ``Connection: close`` is never reused.

A proxy in the configuration (``proxy-url``) is not supported here: ``from_api_client`` answers ``None``
and ``AsyncKube`` runs the official client in a worker thread instead.
"""

from __future__ import annotations

import asyncio
import select
import ssl
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import httptools

POOL_IDLE = 4
"""Idle connections kept at most: kube-scheduler binds from a few goroutines at once; more concurrent
calls than this still work, the extra connections are closed after their call."""

READ_SIZE = 64 * 1024


class TransportError(Exception):
    """No HTTP answer (connect, TLS, timeout, reset, a reply that is not HTTP); the message says which."""


def ssl_context(cfg: Any) -> ssl.SSLContext:
    """The TLS settings of an official ``Configuration`` as an ``SSLContext`` (what ``rest.py`` hands
    urllib3: ``ssl_ca_cert``/``ca_cert_data``, ``cert_file``/``key_file``, ``verify_ssl``,
    ``assert_hostname``)."""
    ctx = ssl.create_default_context(
        cafile=cfg.ssl_ca_cert or None, cadata=getattr(cfg, "ca_cert_data", None) or None
    )
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif cfg.assert_hostname is False:
        ctx.check_hostname = False
    return ctx


class Headers(dict[str, str]):
    """A reply's headers by lower-case name; ``get`` takes any case (``Retry-After``)."""

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(key.lower(), default)


class Reply:
    """httptools' callbacks: the reply's status, headers and body as they are parsed."""

    __slots__ = ("body", "complete", "headers", "keep_alive", "parser", "reason", "status")

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.headers = Headers()
        self.reason = ""
        self.complete = False
        self.status = 0
        self.keep_alive = False
        self.parser: Any = httptools.HttpResponseParser(self)

    def on_status(self, status: bytes) -> None:
        self.reason += status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        # Asked here, as uvicorn does: once the message is complete the parser has moved on to the next.
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


class _Connection:
    """One keep-alive connection, on the event loop that opened it."""

    __slots__ = ("loop", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.loop = asyncio.get_running_loop()
        self.reader = reader
        self.writer = writer

    def usable(self) -> bool:
        """Open, on this loop, and silent since its last reply: an idle connection has nothing to read,
        so EOF, an error or stray bytes mean the server closed, reset or broke it. The socket itself is
        asked (as urllib3 does before reusing a connection): the loop may not have read the EOF yet."""
        if (
            self.loop is not asyncio.get_running_loop()
            or self.writer.is_closing()
            or self.reader.at_eof()
            or self.reader.exception() is not None
        ):
            return False
        sock = self.writer.get_extra_info("socket")
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError, TypeError):
            return False
        return not readable

    def close(self) -> None:
        """Close it from any thread: on its own loop directly, else handed to that loop (a transport is
        not thread-safe); a connection of a loop that is gone is simply dropped."""
        if self.loop.is_closed():
            return
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is self.loop:
            self.writer.close()
        else:
            self.loop.call_soon_threadsafe(self.writer.close)

    async def reply(self) -> tuple[int, Reply, bool]:
        """Read one reply: its status, what was parsed, and whether the connection may be reused."""
        got = Reply()
        while not got.complete:
            chunk = await self.reader.read(READ_SIZE)
            if not chunk:
                raise ConnectionResetError("the API server closed the connection before its reply ended")
            got.parser.feed_data(chunk)
        got.parser = None  # the parser holds ``got``: no cycle left for the collector
        return got.status, got, got.keep_alive


class LeanTransport:
    """Requests over a pool of keep-alive asyncio connections to one API server."""

    def __init__(
        self,
        url: str,
        context: ssl.SSLContext | None,
        authorization: Callable[[], str | None] = lambda: None,
        user_agent: str | None = None,
        server_name: str | None = None,
        idle: int = POOL_IDLE,
    ) -> None:
        split = urllib.parse.urlsplit(url)
        self.tls = split.scheme == "https"
        self.host = split.hostname or "localhost"
        self.port = split.port or (443 if self.tls else 80)
        self.prefix = split.path.rstrip("/")
        self.context = context
        self.server_name = server_name or self.host
        self.authorization = authorization
        """The ``Authorization`` header for the next call, or ``None``; asked at every call."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        fixed = [f"Host: {host}:{self.port}", "Accept: application/json"]
        if user_agent:
            fixed.append(f"User-Agent: {user_agent}")
        self.fixed = "\r\n".join(fixed)
        self.idle = idle
        self._pool: list[_Connection] = []
        self.opened = 0
        """Connections opened so far (reuse shows as far fewer than calls)."""

    @classmethod
    def from_api_client(cls, api_client: Any) -> LeanTransport | None:
        """The transport for an official ``ApiClient``'s server, TLS and credentials; ``None`` when its
        configuration needs what this transport does not do (a proxy)."""
        cfg = getattr(api_client, "configuration", None)
        if cfg is None or cfg.proxy:
            return None

        def authorization() -> str | None:
            # auth_settings() runs the refresh hook (in-cluster token file, exec plugins) as every official
            # call does, then gives the header's value.
            bearer = cfg.auth_settings().get("BearerToken")
            return bearer["value"] if bearer and bearer.get("value") else None

        tls = cfg.host.startswith("https")
        return cls(
            cfg.host,
            ssl_context(cfg) if tls else None,
            authorization,
            getattr(api_client, "user_agent", None),
            cfg.tls_server_name or None,
        )

    async def _connection(self) -> _Connection:
        while self._pool:
            conn = self._pool.pop()
            if conn.usable():
                return conn
            conn.close()
        self.opened += 1
        if self.tls:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=self.context, server_hostname=self.server_name
            )
        else:
            reader, writer = await asyncio.open_connection(self.host, self.port)
        return _Connection(reader, writer)

    def _release(self, conn: _Connection) -> None:
        if len(self._pool) < self.idle:
            self._pool.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        pool, self._pool = self._pool, []
        for conn in pool:
            conn.close()

    def head(self, method: str, path: str, body: bytes | None, content_type: str | None,
              query: Mapping[str, str] | None) -> bytes:  # fmt: skip
        target = self.prefix + path
        if query:
            target += "?" + urllib.parse.urlencode(query)
        if not target.isascii() or not target.isprintable() or " " in target:
            # A name from a request would otherwise end the request line (CR, LF, a space): refused, not sent.
            raise TransportError(f"{method} {path!r}: not a path that can be sent")
        lines = [f"{method} {target} HTTP/1.1", self.fixed]
        auth = self.authorization()
        if auth:
            lines.append(f"Authorization: {auth}")
        if body is not None:
            lines.append(f"Content-Type: {content_type or 'application/json'}")
            lines.append(f"Content-Length: {len(body)}")
        elif method in ("POST", "PUT", "PATCH"):
            lines.append("Content-Length: 0")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None,
        timeout: float,
        query: Mapping[str, str] | None = None,
    ) -> tuple[int, str, bytes, Headers]:
        """One attempt: ``(status, reason, body, headers)`` of the answer, whatever its status;
        ``TransportError`` when there is no answer within ``timeout`` seconds."""
        head = self.head(method, path, body, content_type, query)
        conn: _Connection | None = None
        try:
            async with asyncio.timeout(timeout):
                conn = await self._connection()
                conn.writer.write(head + body if body else head)
                status, got, keep = await conn.reply()
        except TimeoutError as exc:
            if conn is not None:
                conn.close()
            raise TransportError(f"{method} {path}: no answer within {timeout:.3g}s") from exc
        except (OSError, ssl.SSLError, httptools.HttpParserError, EOFError) as exc:
            if conn is not None:
                conn.close()
            raise TransportError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        except BaseException:  # cancelled mid-call: the reply may still come, on nobody's behalf
            if conn is not None:
                conn.close()
            raise
        if keep:
            self._release(conn)
        else:
            conn.close()
        return status, got.reason, b"".join(got.body), got.headers
