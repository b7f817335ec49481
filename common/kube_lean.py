"""A lean HTTP transport for the few API calls on kube-scheduler's critical path: the bind verb's.

``common.kube.Kube`` sends every call through the official ``kubernetes`` client, whose layers cost about
twice the CPU of the request itself: ``param_serialize`` and ``sanitize_for_serialization``, its
``rest.py`` wrapper, urllib3's PoolManager and its response object. For a Binding that is about 1 ms of
the extender's CPU per pod. Measured with ``bench/bind_bench.py`` in one run: the official client about
1000 us per Binding, urllib3's ``HTTPSConnectionPool.urlopen`` with a pre-encoded body about 650 us, a
pooled ``httpx.Client`` about 1350 us, the standard library's ``http.client`` about 425 us. So this
transport is ``http.client`` with a small pool of keep-alive connections, and it keeps what the official
client does for authentication and connections:

- TLS from the same ``Configuration`` the official client was built from (``load_api_client``): the CA
  (file or data), the client certificate and key from a kubeconfig, ``insecure-skip-tls-verify``,
  ``tls-server-name``;
- the bearer token asked of that ``Configuration`` at every call, so its refresh hook runs as it does for
  the official client: the in-cluster loader re-reads the service-account token file once a minute
  (``InClusterConfigLoader``: the kubelet rotates the projected token), a kubeconfig's exec plugin renews
  its token when it expires;
- the caller's timeout per call (``Kube`` hands it what is left of the verb's deadline), one attempt per
  call and no retries: a call that fails answers ``ApiError`` and the caller decides;
- keep-alive with reuse, and recovery: an idle connection the API server has closed or reset is noticed
  before it is used (the socket is readable: EOF or an RST) and replaced; a connection that failed in any
  way, or that the server marked ``Connection: close``, is never reused.

A proxy in the configuration (``proxy-url``) is not supported here: ``from_api_client`` answers ``None``
and the caller keeps the official client.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

POOL_IDLE = 4
"""Idle connections kept at most: kube-scheduler binds from a few goroutines at once; more threads than
this still work, the extra connections are closed after their call."""


class TransportError(Exception):
    """No HTTP answer (connect, TLS, timeout, reset); the message says which and where."""


class _TLSConnection(http.client.HTTPSConnection):
    """``HTTPSConnection`` that sends ``tls_server_name`` (a kubeconfig's ``tls-server-name``) as SNI and
    checks the certificate against it instead of the host connected to."""

    def __init__(self, host: str, port: int, timeout: float, context: ssl.SSLContext, sni: str) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._sni = sni

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._sni)


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """An idle keep-alive connection is dead when its socket is readable: the server sent EOF or reset it
    (an idle connection has nothing else to read). urllib3 checks the same before reusing one."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


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


class LeanTransport:
    """Requests over a pool of keep-alive ``http.client`` connections to one API server."""

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
        self.headers = {"Accept": "application/json"}
        if user_agent:
            self.headers["User-Agent"] = user_agent
        self.idle = idle
        self._pool: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self.opened = 0
        """Connections opened so far (reuse shows as far fewer than calls)."""

    @classmethod
    def from_api_client(cls, api_client: Any) -> LeanTransport | None:
        """The transport for an official ``ApiClient``'s server, TLS and credentials; ``None`` when its
        configuration needs what this transport does not do (a proxy)."""
        cfg = api_client.configuration
        if cfg.proxy:
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

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        with self._lock:
            while self._pool:
                conn = self._pool.pop()
                if not _dropped(conn):
                    conn.sock.settimeout(timeout)  # type: ignore[union-attr]
                    return conn
                conn.close()
            self.opened += 1
        if self.tls:
            assert self.context is not None
            return _TLSConnection(self.host, self.port, timeout, self.context, self.server_name)
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._pool) < self.idle:
                self._pool.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, []
        for conn in pool:
            conn.close()

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None,
        content_type: str | None,
        timeout: float,
        query: Mapping[str, str] | None = None,
    ) -> tuple[int, str, bytes, Any]:
        """One attempt: ``(status, reason, body, headers)`` of the answer, whatever its status;
        ``TransportError`` when there is no answer."""
        target = self.prefix + path
        if query:
            target += "?" + urllib.parse.urlencode(query)
        headers = dict(self.headers)
        auth = self.authorization()
        if auth:
            headers["Authorization"] = auth
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        conn = self._connection(timeout)
        try:
            conn.request(method, target, body, headers)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException, ssl.SSLError) as exc:
            conn.close()
            raise TransportError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        if resp.will_close:
            conn.close()
        else:
            self._release(conn)
        return resp.status, resp.reason or "", data, resp.headers
