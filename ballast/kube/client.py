"""Kubernetes API access through the official ``kubernetes`` client, as plain JSON.

Two things live here because every Ballast program needs them:

- ``Kube``: get, list, create, replace, merge-patch and watch, dicts in and dicts out. It goes through the
  official client's configuration, authentication and TLS (``ApiClient.param_serialize`` + ``call_api``)
  but skips its model deserialisation, which costs far more than the decisions Ballast makes with the
  objects. Errors become ``ApiError`` carrying the API server's ``Status`` (code, reason, message).
- ``Reflector``: list + watch of one collection with resourceVersion, bookmarks, ``410 Gone`` -> relist,
  reconnects with capped exponential backoff and a periodic relist, feeding a handler. It is client-go's
  reflector in miniature; callers do their per-object parsing in the handler, when events arrive.

Patches name their content type (merge-patch): client v37 defaults every PATCH to ``json-patch+json``,
which a merge-patch body would violate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any, Protocol
from urllib.parse import quote

import httptools
import orjson
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from urllib3 import exceptions as urllib3_exceptions

from ballast.kube.lean import LeanTransport, TransportError
from ballast.kube.watch_stream import LoopReader, StreamRefused, StreamSilent, open_stream

log = logging.getLogger("ballast.kube")

MERGE_PATCH = "application/merge-patch+json"

WATCH_STALL_SECONDS = 120.0
"""How long a watch may send nothing, not even a bookmark, before it counts as broken (``Reflector``): the
default of every program's ``--watch-stall-timeout``. Watches ask for bookmarks, and kube-apiserver sends
one about every minute on a quiet collection, so a healthy watch is never silent this long; a stalled one
is relisted, and its cache counts as not synced until that list succeeds."""
LIST_PAGE_SIZE = 500
"""Objects per page of a list (client-go's reflector pages by 500 too)."""


class KubeConfigError(RuntimeError):
    """No usable cluster configuration; the message says what was tried."""


class ApiError(Exception):
    """A failed API call, with the API server's Status fields when it sent one."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        body: Mapping[str, Any] | None = None,
        retry_after: str | None = None,
    ) -> None:
        self.code = code
        self.reason = reason
        self.message = message
        self.body = body or {}
        self.retry_after = retry_after
        """The reply's ``Retry-After`` header, as sent (API-server throttling sends one with its 429)."""
        super().__init__(f"{code} {reason}: {message}")


def cluster_configured(kubeconfig: str | None) -> bool:
    """Whether any cluster access is configured: a flag, ``KUBECONFIG``, or in-cluster service account."""
    return bool(kubeconfig or os.environ.get("KUBECONFIG") or os.environ.get("KUBERNETES_SERVICE_HOST"))


def load_api_client(kubeconfig: str | None = None, user_agent: str | None = None) -> k8s_client.ApiClient:
    """Build an ApiClient from an explicit kubeconfig, else ``KUBECONFIG``, else the in-cluster account.

    urllib3's retries are off: every caller already retries on its own schedule (reflectors back off,
    loops run again), and hidden retries multiplied a call's time (four attempts at the full timeout)
    and logged a WARNING line per attempt. ``user_agent`` names the program in the API's audit log
    (``ballast-extender/<version>``) instead of the generic ``OpenAPI-Generator/...``.
    """
    cfg = k8s_client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    try:
        if path:
            k8s_config.load_kube_config(config_file=path, client_configuration=cfg)
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            k8s_config.load_incluster_config(client_configuration=cfg)
        else:
            raise KubeConfigError(
                "no cluster configuration: pass --kubeconfig, set KUBECONFIG, "
                "or run in a pod with a service account"
            )
    except KubeConfigError:
        raise
    except Exception as exc:  # the loaders raise several unrelated types
        where = f"kubeconfig {path}" if path else "in-cluster service account"
        raise KubeConfigError(f"cannot load {where}: {exc}") from exc
    cfg.retries = False
    api_client = k8s_client.ApiClient(cfg)
    if user_agent:
        api_client.user_agent = user_agent
    return api_client


def connect(kubeconfig: str | None, user_agent: str, timeout: float = 10.0) -> Kube:
    """A program's API access, set up one way: the client ``load_api_client`` builds (it raises
    ``KubeConfigError``, which every program turns into exit status 2), named ``user_agent`` in the API's
    audit log, each call bounded by ``timeout`` (``--api-timeout``). ``Kube.close`` releases it."""
    return Kube(load_api_client(kubeconfig, user_agent=user_agent), timeout=timeout)


def _api_error(status: int, reason: str, data: bytes | None, headers: Any = None) -> ApiError:
    body: dict[str, Any] = {}
    if data:
        try:
            parsed = orjson.loads(data)
            if isinstance(parsed, dict):
                body = parsed
        except orjson.JSONDecodeError:
            pass
    message = body.get("message") or (data.decode("utf-8", "replace")[:500] if data else "") or reason
    retry_after = headers.get("Retry-After") if headers is not None else None
    code = int(body.get("code") or status)
    return ApiError(code, str(body.get("reason") or reason or ""), str(message), body, retry_after)


def decode_reply(
    method: str, path: str, status: int, reason: str, data: bytes, headers: Any
) -> dict[str, Any]:
    """A reply as the caller sees it, whichever client carried it: the JSON object (a list as
    ``{"items": ...}``), or ``ApiError`` with the API server's Status."""
    if not 200 <= status < 300:
        raise _api_error(status, reason, data, headers)
    if not data:
        return {}
    try:
        out = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ApiError(status, "BadResponse", f"{method} {path}: response is not JSON") from exc
    return out if isinstance(out, dict) else {"items": out}


def call_budget(until: float | None, timeout: float, method: str, path: str) -> float:
    """Seconds the next call may take: ``timeout``, or less when a verb's deadline (monotonic ``until``)
    is nearer; ``ApiError(0, "Timeout")`` when that deadline has passed (the call is not made)."""
    if until is None:
        return timeout
    left = until - time.monotonic()
    if left <= 0:
        raise ApiError(0, "Timeout", f"{method} {path}: the verb's deadline passed before this call")
    return min(timeout, left)


class Kube:
    """JSON requests to the API server through an official ``ApiClient``.

    ``deadline(seconds)`` bounds every call a thread makes inside it by one shared deadline: a verb that
    makes several calls (bind: a GET, a patch, the Binding) answers within its budget, however the time
    is spent; a call that would start after the deadline fails at once with ``ApiError(0, "Timeout")``.
    """

    def __init__(self, api_client: k8s_client.ApiClient, timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.timeout = timeout
        self._local = threading.local()

    def close(self) -> None:
        """Release the client's connection pool (at exit; a failure to close changes nothing)."""
        with contextlib.suppress(Exception):
            self.api_client.close()

    @contextlib.contextmanager
    def deadline(self, seconds: float) -> Iterator[None]:
        """Every call of this thread inside the block shares ``seconds`` (nested blocks keep the earlier)."""
        outer = getattr(self._local, "until", None)
        until = time.monotonic() + seconds
        self._local.until = until if outer is None else min(outer, until)
        try:
            yield
        finally:
            self._local.until = outer

    def _budget(self, method: str, path: str) -> float:
        """Seconds the next call may take: ``timeout``, or what is left of the thread's deadline."""
        return call_budget(getattr(self._local, "until", None), self.timeout, method, path)

    def _open(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: Any = None,
    ):
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        req = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            return self.api_client.call_api(
                *req, _request_timeout=timeout if timeout is not None else self._budget(method, path)
            )
        except ApiException as exc:
            raise _api_error(
                exc.status or 0,
                exc.reason or "",
                exc.body if isinstance(exc.body, bytes) else None,
                getattr(exc, "headers", None),
            ) from exc
        except Exception as exc:  # connection refused, timeouts, TLS: no HTTP status at all
            raise ApiError(0, "Unavailable", f"{method} {path}: {type(exc).__name__}: {exc}") from exc

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        """One call; ``body`` is a JSON-able value."""
        resp = self._open(method, path, query=query, body=body, content_type=content_type)
        return decode_reply(method, path, resp.status, resp.reason or "", resp.read(), resp.headers)

    def get(self, path: str, query: Mapping[str, str] | None = None) -> dict[str, Any]:
        return self.request("GET", path, query=query)

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, body=body)

    def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("PUT", path, body=body)

    def merge_patch(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path, body=patch, content_type=MERGE_PATCH)

    def get_dated(self, path: str, query: Mapping[str, str] | None = None) -> tuple[dict[str, Any], float]:
        """GET, with the API server's clock when it answered (the reply's ``Date``, whole seconds): ages of
        server-stamped times (``creationTimestamp``) are then measured on one clock, whatever this
        machine's clock says. Without a readable ``Date`` the call fails like a bad reply."""
        resp = self._open("GET", path, query=query)
        data = resp.read()
        if not 200 <= resp.status < 300:
            raise _api_error(resp.status, resp.reason or "", data, resp.headers)
        try:
            date = parsedate_to_datetime(resp.headers.get("Date") or "").timestamp()
            out = orjson.loads(data)
        except (TypeError, ValueError, orjson.JSONDecodeError) as exc:
            raise ApiError(resp.status, "BadResponse", f"GET {path}: no JSON or no Date") from exc
        return (out if isinstance(out, dict) else {}), date

    def list_pages(
        self,
        path: str,
        params: Mapping[str, str] | None = None,
        page: int = LIST_PAGE_SIZE,
        on_page: Callable[[], None] | None = None,
    ) -> tuple[Iterator[dict[str, Any]], str]:
        """List a collection in pages of ``page`` objects (``limit`` + ``continue``, client-go's pager):
        returns the objects as an iterator that fetches the next page only when the previous one is used
        up, and the list's resourceVersion (every page of a list is served at the first page's). The first
        page is fetched here; a later page's failure is raised by the iterator, a ``410`` when the
        ``continue`` token expired (etcd compacted past the list's revision) included: the caller lists
        again from the start, as client-go's reflector does. So a list of 100 000 pods never holds more
        than one page of raw objects, whatever the caller keeps of each."""
        query = dict(params or {})
        query["limit"] = str(page)
        first = self.get(path, query)
        if on_page is not None:
            on_page()
        meta = first.get("metadata") or {}
        return self._pages(path, query, first, on_page), str(meta.get("resourceVersion") or "")

    def _pages(
        self, path: str, query: dict[str, str], out: dict[str, Any], on_page: Callable[[], None] | None
    ) -> Iterator[dict[str, Any]]:
        while True:
            items = out.get("items") or []
            token = (out.get("metadata") or {}).get("continue")
            del out  # the page's objects live as long as ``items`` does, no longer
            yield from items
            if not token:
                return
            del items
            query["continue"] = token
            out = self.get(path, query)
            if on_page is not None:
                on_page()

    def list_all(
        self, path: str, params: Mapping[str, str] | None = None, page: int = LIST_PAGE_SIZE
    ) -> tuple[list, str]:
        """List a collection, following ``continue`` tokens; returns (items, resourceVersion). Holds the
        whole list: for small collections only (``list_pages`` for the rest)."""
        items, rv = self.list_pages(path, params, page)
        return list(items), rv

    def watch(
        self,
        path: str,
        params: Mapping[str, str],
        timeout_seconds: int,
        stop: threading.Event | None = None,
        on_open: Any = None,
        silence: float | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yield watch events (``{"type", "object"}``) until the server ends the stream.

        ``silence``: seconds without a byte (the reply's head included) after which the stream counts as
        stalled: ``WatchStalled`` is raised (the socket's read timeout; by default the watch's own timeout
        plus 30 s)."""
        query = dict(params)
        query.update({"watch": "true", "timeoutSeconds": str(timeout_seconds)})
        read = silence if silence is not None else timeout_seconds + 30
        try:
            resp = self._open("GET", path, query=query, timeout=(self.timeout, read))
        except ApiError as exc:
            if _read_timeout(exc):
                raise WatchStalled(path, read) from exc
            raise
        if not 200 <= resp.status < 300:
            raise _api_error(resp.status, resp.reason or "", resp.read())
        raw = resp.response
        if on_open is not None:
            on_open(raw)
        buf = b""
        try:
            for chunk in _stalls_raised(raw.stream(64 * 1024, decode_content=True), path, read):
                if stop is not None and stop.is_set():
                    return
                buf += chunk
                while True:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        break
                    line, buf = buf[:nl], buf[nl + 1 :]
                    if line.strip():
                        yield orjson.loads(line)
            if buf.strip():
                yield orjson.loads(buf)
        finally:
            raw.release_conn()

    def follow(
        self,
        path: str,
        params: Mapping[str, str],
        timeout_seconds: int,
        stop: threading.Event,
        on_event: Callable[[dict[str, Any]], None],
        *,
        on_open: Any = None,
        silence: float | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Hand every watch event to ``on_event`` until the server ends the stream or ``stop`` is set;
        raise what ended it otherwise (as ``watch`` does).

        With ``loop`` (a running event loop, the extender's), the stream is opened here and then read,
        and ``on_event`` called, on that loop (``ballast.kube.watch_stream``): this thread only waits. Without
        one, or when the configuration needs a proxy, it is read and applied in this thread."""
        read = silence if silence is not None else timeout_seconds + 30
        transport = self._stream_transport() if loop is not None and not loop.is_closed() else None
        if loop is None or transport is None:
            for event in self.watch(path, params, timeout_seconds, stop, on_open=on_open, silence=silence):
                on_event(event)
                if stop.is_set():
                    return
            return
        query = dict(params)
        query.update({"watch": "true", "timeoutSeconds": str(timeout_seconds)})
        try:
            sock, reply = open_stream(transport, path, query, self.timeout, read)
        except StreamRefused as exc:
            raise _api_error(exc.status, exc.reason, exc.body) from exc
        except StreamSilent as exc:
            raise WatchStalled(path, read) from exc
        except (OSError, httptools.HttpParserError, TransportError) as exc:
            raise ApiError(0, "Unavailable", f"GET {path}: {type(exc).__name__}: {exc}") from exc
        reader = LoopReader(loop, sock, reply, on_event, stop)
        if on_open is not None:
            on_open(reader)
        try:
            reader.wait(read)
        except StreamSilent as exc:
            raise WatchStalled(path, read) from exc

    def _stream_transport(self) -> LeanTransport | None:
        """The server, TLS and credentials for watches read on an event loop (built once); ``None``
        when the configuration needs a proxy."""
        if not hasattr(self, "_lean"):
            self._lean = LeanTransport.from_api_client(self.api_client)
        return self._lean


def _read_timeout(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is a socket read that waited its whole timeout."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, urllib3_exceptions.ReadTimeoutError | TimeoutError):
            return not isinstance(exc, urllib3_exceptions.ConnectTimeoutError)
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _stalls_raised(chunks: Iterator[bytes], path: str, silence: float) -> Iterator[bytes]:
    """``chunks``, with a read that timed out turned into ``WatchStalled``."""
    try:
        yield from chunks
    except Exception as exc:
        if _read_timeout(exc):
            raise WatchStalled(path, silence) from exc
        raise


class WatchStalled(Exception):
    """A watch sent nothing, not even a bookmark, for longer than its bound: the connection may be open,
    but the stream is not moving (a stuck proxy, a half-dead connection), so what the cache holds may no
    longer be true."""

    def __init__(self, path: str, silence: float) -> None:
        self.silence = silence
        super().__init__(f"watch of {path} stalled: no event and no bookmark for {silence:g}s")


def path_for(api_version: str, plural: str, namespace: str | None = None, name: str | None = None) -> str:
    """REST path of a collection or object: ``/api/v1/...`` for core, ``/apis/<group>/<version>/...`` else."""
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    if namespace:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{plural}"
    if name:
        base += f"/{quote(name, safe='')}"
    return base


class Handler(Protocol):
    def replace(self, objects: Iterable[dict[str, Any]], resource_version: str) -> None:
        """The whole collection, once through: a list arrives page by page as it is read, so a handler
        keeps what it needs of each object and drops the rest. Reading a page may raise (the API server
        went away, a ``continue`` token expired): the handler must then keep its previous state, which
        building the new state aside and swapping it in at the end does."""
        ...

    def apply(self, event_type: str, obj: dict[str, Any]) -> None: ...


@dataclass
class ReflectorStats:
    lists: int = 0
    watches: int = 0
    events: int = 0
    expired: int = 0
    errors: int = 0
    object_errors: int = 0
    """Events whose object the handler could not take (logged; the watch went on)."""
    last_error: str = ""
    last_event: float | None = None
    """``time.monotonic()`` of the last list, event or bookmark: the age of what the handler knows."""
    failing_since: float | None = None
    """``time.monotonic()`` of the first failure since the last good list or watch; ``None`` while healthy."""
    stalls: int = 0
    """Watches that sent nothing, not even a bookmark, for longer than the stall bound (then relisted)."""
    pages: int = 0
    """List pages read (``limit`` + ``continue``)."""

    def silent_for(self, now: float) -> float:
        """Seconds since the last list, event or bookmark (0 before the first list)."""
        return 0.0 if self.last_event is None else max(0.0, now - self.last_event)

    def disconnected_for(self, now: float) -> float:
        """Seconds the collection has been unreachable (0 while healthy)."""
        return 0.0 if self.failing_since is None else max(0.0, now - self.failing_since)


class Reflector:
    """Keep a handler in step with one collection: list, then watch from the list's resourceVersion.

    - A watch that ends normally (server timeout) resumes from the last resourceVersion seen, including
      bookmarks, so nothing is missed and nothing is replayed.
    - ``410 Gone`` (as an HTTP status or as an ERROR event in the stream) means the history is compacted:
      relist and replace the handler's state.
    - Any other failure reconnects after a capped exponential backoff with jitter. The cap is
      ``backoff_max`` for a collection never reached, and ``recover_max`` (a few seconds) once it was:
      after an API-server outage the cache must follow again within seconds, not after 45 s.
    - Every ``resync_seconds`` it relists anyway, repairing any drift a lost event could have caused.
    - Lists are read in pages of ``page_size`` and handed to the handler as they arrive, so a relist never
      holds a whole collection of raw objects; a ``continue`` token that expired (``410``) lists again
      from the start.
    - A watch that sends nothing, not even one of the bookmarks it asks for, for ``stall_seconds`` is
      broken even if its connection is open: the collection counts as failing (``failing``, ``stalled``;
      consumers that must not act on stale data wait) and is relisted at once.
    """

    def __init__(
        self,
        api_client: k8s_client.ApiClient | Kube,
        path: str,
        handler: Handler,
        *,
        params: Mapping[str, str] | None = None,
        name: str = "",
        resync_seconds: float = 300.0,
        watch_timeout_seconds: int = 300,
        backoff_initial: float = 0.5,
        backoff_max: float = 30.0,
        recover_max: float = 4.0,
        optional: bool = False,
        stall_seconds: float = WATCH_STALL_SECONDS,
        page_size: int = LIST_PAGE_SIZE,
    ) -> None:
        self.kube = api_client if isinstance(api_client, Kube) else Kube(api_client)
        self.stall_seconds = stall_seconds
        self.page_size = page_size
        self.stalled = ""
        """Why the watch counts as stalled, until a list succeeds again; empty otherwise."""
        self.path = path
        self.handler = handler
        self.params = dict(params or {})
        self.name = name or path
        self.resync_seconds = resync_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.recover_max = recover_max
        self._reached = False
        """Whether a list ever succeeded: then reconnects back off at most ``recover_max``."""
        self.optional = optional
        """A missing collection (404, e.g. a CRD not installed) counts as empty, and is retried."""
        self.missing = False
        self.failing = ""
        """The last error while the list or watch is down; empty once a list or a watch succeeds again
        (a consumer that must not act on stale data, the rebalancer, waits while it is set)."""
        self.synced = threading.Event()
        self.stats = ReflectorStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: Any = None
        self.resource_version = ""
        self.loop: asyncio.AbstractEventLoop | None = None
        """The event loop to read and apply the watch on (the extender's, ``ClusterCache.start``);
        ``None``: in the reflector's own thread."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name=f"reflector-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        resp = self._response
        if resp is not None:
            with contextlib.suppress(Exception):
                resp.shutdown() if hasattr(resp, "shutdown") else resp.close()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_synced(self, timeout: float | None = None) -> bool:
        return self.synced.wait(timeout)

    def _paged(self) -> None:
        self.stats.pages += 1

    def problem(self, now: float | None = None) -> str | None:
        """Why what the handler holds may not be the collection's current state, or ``None``: not listed
        yet, the list or watch failing, the watch stalled, or nothing heard (no event, no bookmark, no
        list) for longer than the stall bound. A missing optional collection has no problem."""
        if not self.synced.is_set():
            return f"the {self.name} watch has not listed yet"
        if self.stalled:
            return f"the {self.name} watch is stalled ({self.stalled})"
        if self.failing:
            return f"the {self.name} watch is down ({self.failing})"
        silent = self.stats.silent_for(time.monotonic() if now is None else now)
        if not self.missing and silent > self.stall_seconds:
            return f"the {self.name} watch is stalled: no event and no bookmark for {silent:.0f}s"
        return None

    def _relist(self) -> None:
        items, rv = self.kube.list_pages(self.path, self.params, self.page_size, on_page=self._paged)
        if self.missing:
            log.info("%s: %s is available now", self.name, self.path)
            self.missing = False
        self.handler.replace(items, rv)
        self.stalled = ""
        self.resource_version = rv
        self.failing = ""
        self.stats.lists += 1
        self.stats.last_event = time.monotonic()
        self.stats.failing_since = None
        self._reached = True
        self.synced.set()
        log.debug("%s: listed at resourceVersion %s", self.name, rv)

    def run(self) -> None:
        need_list = True
        backoff = self.backoff_initial
        last_list = 0.0
        while not self._stop.is_set():
            try:
                if need_list or time.monotonic() - last_list >= self.resync_seconds:
                    self._relist()
                    need_list = False
                    last_list = time.monotonic()
                need_list = self._watch(last_list)
                backoff = self.backoff_initial
            except ApiError as exc:
                if self._stop.is_set():
                    return
                if exc.code == 404 and self.optional:
                    if not self.missing:
                        log.warning(
                            "%s: %s not found (%s); treating it as empty and retrying every %.0fs",
                            self.name,
                            self.path,
                            exc.message,
                            self.backoff_max,
                        )
                        self.handler.replace([], "")  # once: every retry would redo the consumers' work
                    self.missing = True
                    self.synced.set()
                    need_list = True
                    self._stop.wait(self.backoff_max)
                    continue
                if exc.code == 410:
                    self.stats.expired += 1
                    log.info(
                        "%s: resourceVersion %s or a list's continue token expired (410), listing from "
                        "the start",
                        self.name,
                        self.resource_version,
                    )
                    need_list = True
                    continue
                backoff = self._failed(exc, backoff)
            except WatchStalled as exc:
                if self._stop.is_set():
                    return
                self.stats.stalls += 1
                self.stalled = self.failing = str(exc)
                if self.stats.failing_since is None:
                    self.stats.failing_since = time.monotonic()
                log.warning("%s: %s; relisting", self.name, exc)
                need_list = True
            except Exception as exc:
                if self._stop.is_set():
                    return
                backoff = self._failed(exc, backoff)

    def _failed(self, exc: Exception, backoff: float) -> float:
        self.stats.errors += 1
        self.stats.last_error = str(exc)
        self.failing = str(exc) or type(exc).__name__
        if self.stats.failing_since is None:
            self.stats.failing_since = time.monotonic()
        cap = self.recover_max if self._reached else self.backoff_max
        delay = min(backoff, cap) * (0.5 + random.random())
        log.warning("%s: watch failed (%s); reconnecting in %.1fs", self.name, exc, delay)
        self._stop.wait(delay)
        return min(cap, backoff * 2)

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        """Hand one event to the handler. An object the handler cannot take is logged and counted, and
        the watch goes on: one bad object must not stop the cache from following every other one."""
        try:
            self.handler.apply(kind, obj)
        except Exception:
            self.stats.object_errors += 1
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            log.exception("%s: could not apply %s of %r; skipped, the watch goes on", self.name, kind, name)

    def _watch(self, last_list: float) -> bool:
        """Watch until the stream ends; return True when a relist is needed."""
        params = dict(self.params)
        params["resourceVersion"] = self.resource_version
        params["allowWatchBookmarks"] = "true"
        remaining = self.resync_seconds - (time.monotonic() - last_list)
        timeout = max(1, min(self.watch_timeout_seconds, int(remaining) + 1))
        self.stats.watches += 1

        def opened(resp: Any) -> None:
            self._response = resp
            self.failing = ""
            self.stats.failing_since = None

        try:
            self.kube.follow(
                self.path,
                params,
                timeout,
                self._stop,
                self._event,
                on_open=opened,
                silence=self.stall_seconds,
                loop=self.loop,
            )
        finally:
            self._response = None
        return False

    def _event(self, event: dict[str, Any]) -> None:
        """One watch event: an ERROR is raised (``410``: relist), a bookmark moves the resourceVersion,
        a change goes to the handler."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            raise ApiError(code, str(obj.get("reason") or ""), str(obj.get("message") or ""), obj)
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        self.stats.last_event = time.monotonic()
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = str(rv)
            return
        if kind in ("ADDED", "MODIFIED", "DELETED"):
            self.stats.events += 1
            self._apply(kind, obj)
            if rv:
                self.resource_version = str(rv)
