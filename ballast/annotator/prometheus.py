"""Prometheus HTTP API client (async, httpx): instant queries and a start-up reachability check.

What a real deployment needs, and crane lacked: a base URL with a path prefix (``https://host/prom``),
a bearer token file read on every request (so rotated tokens work), basic auth with the password in a
file, a CA bundle, client certificates or skipping verification, extra headers (``X-Scope-OrgID`` for
Mimir/Cortex) and extra query parameters (``dedup``, ``partial_response`` for Thanos), a per-request
timeout, and retries with exponential backoff on 5xx, 429, timeouts and connection errors. Responses
with ``warnings`` keep their data (crane discarded it).

``check_ready`` asks ``/-/ready`` and, where that endpoint does not exist behind a prefix, the build
info endpoint: it never runs PromQL.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from ballast.annotator.matching import Series

__all__ = ["PrometheusClient", "PrometheusConfig", "PrometheusError", "Vector", "parse_vector"]

log = logging.getLogger("ballast.annotator.prometheus")

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class PrometheusError(Exception):
    """A failed request: ``query`` (when there was one), HTTP ``status`` (0: no answer), and what to do."""

    def __init__(self, message: str, *, query: str | None = None, status: int = 0) -> None:
        self.query = query
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class PrometheusConfig:
    url: str
    timeout: float = 10.0
    bearer_token_file: str | None = None
    username: str | None = None
    password_file: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure_skip_verify: bool = False
    params: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    retries: int = 2
    """Extra attempts after a retryable failure (so ``retries=2`` is up to three requests)."""
    backoff: float = 0.5
    backoff_max: float = 8.0

    def validate(self) -> list[str]:
        """Problems a person must fix before start (unreadable files, a URL without a scheme)."""
        problems = []
        url = httpx.URL(self.url)
        if url.scheme not in ("http", "https") or not url.host:
            problems.append(f"--prometheus-url {self.url!r}: expected http(s)://host[:port][/prefix]")
        for flag, path in (
            ("--prometheus-bearer-token-file", self.bearer_token_file),
            ("--prometheus-password-file", self.password_file),
            ("--prometheus-ca-file", self.ca_file),
            ("--prometheus-cert-file", self.cert_file),
            ("--prometheus-key-file", self.key_file),
        ):
            if path and not Path(path).is_file():
                problems.append(f"{flag} {path}: no such file")
        if self.password_file and not self.username:
            problems.append("--prometheus-password-file needs --prometheus-username")
        if self.bearer_token_file and self.username:
            problems.append("use either a bearer token or basic auth for Prometheus, not both")
        if bool(self.cert_file) != bool(self.key_file):
            problems.append("--prometheus-cert-file and --prometheus-key-file go together")
        return problems


class Vector(list[Series]):
    """The series of one answer. ``malformed`` counts the items skipped because they were not a sample
    (not an object, no value, a value that is not a number): one bad item must not cost the others."""

    malformed: int = 0


def parse_vector(payload: Mapping[str, Any], query: str) -> Vector:
    """The series of an instant-query answer; a scalar becomes one series without labels."""
    if payload.get("status") != "success":
        raise PrometheusError(
            f"Prometheus refused {query!r}: {payload.get('errorType', 'error')}: {payload.get('error', '')}",
            query=query,
        )
    data = payload.get("data") or {}
    kind = data.get("resultType")
    result = data.get("result")
    out = Vector()
    if kind == "scalar" and isinstance(result, list):
        out.append(Series({}, float(result[1])))
        return out
    if kind != "vector" or not isinstance(result, list):
        raise PrometheusError(f"{query!r} returned a {kind}, not an instant vector", query=query)
    for item in result:
        labels = item.get("metric") if isinstance(item, Mapping) else None
        value = item.get("value") if isinstance(item, Mapping) else None
        try:
            labels = labels or {}
            if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
                raise TypeError("its metric is not an object of label strings")
            out.append(Series(labels, float(value[1])))  # type: ignore[index]
        except (IndexError, TypeError, ValueError):
            out.malformed += 1
            if out.malformed == 1:
                log.warning("skipping a malformed sample in the answer to %r: %.200r", query, item)
    return out


class PrometheusClient:
    """One ``httpx.AsyncClient`` per annotator; ``transport`` replaces the network in tests."""

    def __init__(
        self, config: PrometheusConfig, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.config = config
        self.queries = 0
        """Query requests sent (retries included): what the benchmark counts."""
        auth = None
        if config.username:
            password = Path(config.password_file).read_text().strip() if config.password_file else ""
            auth = httpx.BasicAuth(config.username, password)
        self._client = httpx.AsyncClient(
            base_url=config.url.rstrip("/") + "/",
            timeout=config.timeout,
            verify=self._ssl_context(),
            auth=auth,
            headers=dict(config.headers),
            transport=transport,
            follow_redirects=True,
        )

    def _ssl_context(self) -> ssl.SSLContext | bool:
        c = self.config
        if httpx.URL(c.url).scheme != "https":
            return True
        ctx = ssl.create_default_context(cafile=c.ca_file)
        if c.cert_file and c.key_file:
            ctx.load_cert_chain(c.cert_file, c.key_file)
        if c.insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _headers(self) -> dict[str, str]:
        if not self.config.bearer_token_file:
            return {}
        try:
            token = Path(self.config.bearer_token_file).read_text().strip()
        except OSError as exc:
            raise PrometheusError(
                f"cannot read the Prometheus bearer token file {self.config.bearer_token_file}: {exc}"
            ) from exc
        return {"Authorization": f"Bearer {token}"}

    @property
    def url(self) -> str:
        return self.config.url

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> PrometheusClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _get(self, path: str, params: Mapping[str, str], query: str | None) -> httpx.Response:
        """GET with retries; returns the last response (any status) or raises when none arrived."""
        attempt = 0
        delay = self.config.backoff
        what = f"query {query!r}" if query is not None else f"GET {path}"
        while True:
            try:
                resp = await self._client.get(path, params=params, headers=self._headers())
            except httpx.TimeoutException as exc:
                problem: str | None = f"timed out after {self.config.timeout:g}s ({type(exc).__name__})"
                resp = None
            except httpx.TransportError as exc:
                problem = f"cannot connect: {exc or type(exc).__name__}"
                resp = None
            else:
                problem = None if resp.status_code not in RETRY_STATUS else f"HTTP {resp.status_code}"
            if problem is None or attempt >= self.config.retries:
                if resp is None:
                    raise PrometheusError(
                        f"Prometheus at {self.config.url}: {what} failed: {problem}", query=query
                    )
                return resp
            attempt += 1
            sleep = min(delay, self.config.backoff_max) * (0.5 + random.random())
            log.debug("%s: %s; retry %d in %.1fs", what, problem, attempt, sleep)
            await asyncio.sleep(sleep)
            delay *= 2

    async def query(self, expr: str) -> Vector:
        """One instant query evaluated at the server's now; raises ``PrometheusError`` on any failure."""
        params = {**self.config.params, "query": expr}
        self.queries += 1
        resp = await self._get("api/v1/query", params, expr)
        try:
            payload = orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            payload = None
        if not isinstance(payload, dict):
            raise PrometheusError(
                f"Prometheus at {self.config.url}: query {expr!r}: HTTP {resp.status_code}, "
                f"not a Prometheus API answer: {resp.text[:200]!r}",
                query=expr,
                status=resp.status_code,
            )
        if resp.status_code >= 400 or payload.get("status") != "success":
            raise PrometheusError(
                f"Prometheus at {self.config.url}: query {expr!r}: HTTP {resp.status_code} "
                f"{payload.get('errorType', '')}: {payload.get('error', '')}".rstrip(": "),
                query=expr,
                status=resp.status_code,
            )
        for warning in payload.get("warnings") or ():
            log.warning("Prometheus warns about %r: %s (the data is used)", expr, warning)
        return parse_vector(payload, expr)

    async def check_ready(self) -> str:
        """Raise ``PrometheusError`` saying what is wrong unless the server answers as ready.

        Returns what answered (``/-/ready`` or the build info, with its version).
        """
        resp = await self._get("-/ready", {}, None)
        if resp.status_code == 200:
            return "/-/ready"
        if resp.status_code in (401, 403):
            raise PrometheusError(
                f"Prometheus at {self.config.url} refused the credentials (HTTP {resp.status_code}): "
                "check --prometheus-bearer-token-file or --prometheus-username/--prometheus-password-file",
                status=resp.status_code,
            )
        ready_status = resp.status_code
        if ready_status not in (404, 405):
            raise PrometheusError(
                f"Prometheus at {self.config.url} is not ready: /-/ready answered HTTP {ready_status}: "
                f"{resp.text.strip()[:200]}",
                status=ready_status,
            )
        # Behind a prefix (Thanos, Mimir, a proxy) /-/ready may not exist; the build info does.
        resp = await self._get("api/v1/status/buildinfo", {}, None)
        if resp.status_code == 200:
            try:
                version = orjson.loads(resp.content).get("data", {}).get("version", "?")
            except (orjson.JSONDecodeError, AttributeError):
                version = "?"
            return f"/api/v1/status/buildinfo (version {version})"
        raise PrometheusError(
            f"Prometheus at {self.config.url} is not ready: /-/ready answered HTTP {ready_status}, "
            f"/api/v1/status/buildinfo HTTP {resp.status_code}; check --prometheus-url (include any "
            "path prefix) and that the server is up",
            status=resp.status_code,
        )
