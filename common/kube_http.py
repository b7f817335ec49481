"""A lean request path to the API server for calls made while kube-scheduler waits (the bind verb).

``LeanKube`` is a ``Kube`` whose plain requests (get, create, patch) go through one pooled keep-alive
``httpx.Client`` instead of the official client's urllib3 pool. Two reasons:

- No hidden retries. urllib3 retried a failed GET four times at the full timeout each (16 s for one
  call while kube-scheduler gives up after 5 s and retries the bind). Here a call is made once, within
  what is left of the verb's deadline (``Kube.deadline``), and its failure is the verb's answer.
- Less work per call: no urllib3 ``Retry`` bookkeeping or response wrappers, one connection kept alive.

Everything the kubeconfig says is kept: the request (URL, query, auth header, User-Agent, body) is
serialised by the official ``ApiClient`` exactly as for any other call, and TLS (CA, client certificate,
verification, server name) comes from its ``Configuration``. Watches and lists stay on the official
client (``Kube``), where a long-lived stream and its reconnects belong.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Mapping
from typing import Any

import httpx
import orjson
from kubernetes import client as k8s_client

from common.kube import ApiError, Kube, _api_error

MAX_CONNECTIONS = 16
"""Connections kept to the API server; binds beyond that wait for one (within their deadline)."""


def ssl_context(cfg: k8s_client.Configuration) -> ssl.SSLContext | bool:
    """The TLS settings of a kubeconfig or service account, as the official client applies them."""
    if not str(cfg.host).startswith("https"):
        return False
    if not cfg.verify_ssl:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert or None, cadata=cfg.ca_cert_data or None)
        if cfg.assert_hostname is False:
            ctx.check_hostname = False
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file or None)
    return ctx


class LeanKube(Kube):
    """``Kube`` with get/create/replace/merge-patch over a pooled ``httpx.Client``: one attempt per call."""

    def __init__(self, api_client: k8s_client.ApiClient, timeout: float = 10.0) -> None:
        super().__init__(api_client, timeout)
        cfg = api_client.configuration
        server_name = getattr(cfg, "tls_server_name", None)
        self._extensions = {"sni_hostname": server_name} if server_name else None
        self._http = httpx.Client(
            verify=ssl_context(cfg),
            proxy=cfg.proxy or None,
            trust_env=False,
            limits=httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=MAX_CONNECTIONS),
        )
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        budget = self._budget(method, path)
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        _method, url, headers, _body, _post = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            auth_settings=["BearerToken"],
        )
        content = orjson.dumps(body) if body is not None else None
        try:
            resp = self._http.request(
                method,
                url,
                headers=headers,
                content=content,
                timeout=httpx.Timeout(budget),
                extensions=self._extensions,
            )
        except httpx.TimeoutException as exc:
            raise ApiError(0, "Timeout", f"{method} {path}: no answer within {budget:.1f}s") from exc
        except httpx.HTTPError as exc:  # connection refused or reset, TLS: no HTTP status at all
            raise ApiError(0, "Unavailable", f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        data = resp.content
        if not 200 <= resp.status_code < 300:
            raise _api_error(resp.status_code, resp.reason_phrase or "", data)
        if not data:
            return {}
        try:
            out = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ApiError(resp.status_code, "BadResponse", f"{method} {path}: response is not JSON") from exc
        return out if isinstance(out, dict) else {"items": out}
