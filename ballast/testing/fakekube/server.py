"""HTTP front end of the fake: real REST paths, query parameters, content types and chunked watch streams.

A threading `http.server` (HTTP/1.1, keep-alive, one thread per connection) is enough here and keeps the
fake synchronous: watch streams block on the store's condition variable while other connections serve
regular requests. Everything Kubernetes-specific is decided in `store.py`; this module maps requests to
store calls and results to responses.
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import traceback
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from . import errors
from .errors import StatusError
from .resources import ResourceType
from .store import Store


class Backend(Protocol):
    """What the HTTP front end asks of the fake that owns it (``FakeKube``): the store, the failures to
    inject, the request log, and the answers that are not objects of the store."""

    store: Store
    _bugs: list[str]

    def _injected(self, method: str, path: str, watch: bool) -> StatusError | None: ...

    def _configz_for(self, node: str, subresource: str) -> Any: ...

    def _record(self, record: RecordedRequest) -> None: ...

    def _track_connection(self, conn: socket.socket, *, add: bool) -> None: ...

    def _discovery(self, parts: tuple[str, ...]) -> dict: ...


_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def parse_bool(name: str, value: str | None) -> bool | None:
    """Go's strconv.ParseBool, which the server uses for `watch`, `allowWatchBookmarks`, ..."""
    if value is None:
        return None
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise errors.bad_request(f'strconv.ParseBool: parsing "{value}": invalid syntax for {name}')


def parse_int(name: str, value: str | None) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax for {name}') from None


@dataclass
class RecordedRequest:
    """One request as the fake saw it, for assertions about which API calls a component made."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    body: Any
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def watch(self) -> bool:
        return self.query.get("watch") in _TRUE


@dataclass
class Route:
    kind: str  # "resource", "bindings", "configz", "discovery"
    rt: ResourceType | None = None
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    parts: tuple[str, ...] = ()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], fake: Backend) -> None:
        self.fake = fake
        super().__init__(address, RequestHandler)


class RequestHandler(BaseHTTPRequestHandler):
    """Per-connection handler; `server.fake` holds the state."""

    protocol_version = "HTTP/1.1"
    server: _Server

    # Quiet: the default handler logs every request to stderr.
    def log_message(self, format: str, *args: Any) -> None:
        return

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle + delayed ACK add ~40 ms each.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.fake._track_connection(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._track_connection(self.connection, add=False)

    def do_GET(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_PUT(self) -> None:
        self._dispatch()

    def do_PATCH(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    # ------------------------------------------------------------ plumbing

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send_json(self, status: int, body: Any) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Cache-Control", "no-cache, private")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if not readable:
                return False
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _dispatch(self) -> None:
        fake = self.server.fake
        split = urllib.parse.urlsplit(self.path)
        path = split.path
        query = {k: v[0] for k, v in urllib.parse.parse_qs(split.query, keep_blank_values=True).items()}
        raw = self._read_body()
        content_type = self.headers.get("Content-Type")
        media_type = content_type.split(";")[0].strip() if content_type else None
        body: Any = None
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        record = RecordedRequest(
            self.command, path, query, media_type, body, headers=dict(self.headers.items())
        )
        try:
            injected = fake._injected(self.command, path, record.watch)
            if injected is not None:
                raise injected
            if isinstance(body, str):
                raise errors.bad_request(f"error decoding request body: invalid JSON: {body[:80]!r}")
            route = self._route(path)
            self._serve(route, record)
        except StatusError as exc:
            record.status = exc.code
            fake._record(record)
            self._send_json(exc.code, exc.status())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the fake: answer like the server would and keep the trace
            fake._bugs.append(traceback.format_exc())
            record.status = 500
            fake._record(record)
            error = errors.internal(f"fakekube: {type(exc).__name__}: {exc}")
            self._send_json(500, error.status())

    def _route(self, path: str) -> Route:
        fake = self.server.fake
        parts = tuple(p for p in path.split("/") if p)
        if parts in (("api",), ("apis",), ("version",), ("api", "v1")) or (
            len(parts) in (2, 3) and parts[0] == "apis"
        ):
            return Route("discovery", parts=parts)
        if len(parts) < 3 or parts[0] not in ("api", "apis") or (parts[0] == "apis" and len(parts) < 4):
            raise errors.path_not_found()
        group, version, rest = (
            ("", parts[1], list(parts[2:])) if parts[0] == "api" else (parts[1], parts[2], list(parts[3:]))
        )
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if group == "" and namespace and rest == ["bindings"]:
            return Route("bindings", namespace=namespace)
        rt = fake.store.lookup(group, version, rest[0])
        if rt is None:
            raise errors.path_not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = "/".join(rest[2:]) or None
        if namespace is not None and not rt.namespaced:
            raise errors.path_not_found()
        if rt.namespaced and namespace is None and name is not None:
            raise errors.path_not_found()
        if rt.key == "nodes" and sub and (sub == "proxy" or sub.startswith("proxy/")):
            return Route("configz", rt=rt, name=name, subresource=sub)
        return Route("resource", rt, namespace, name, sub)

    # ------------------------------------------------------------ endpoints

    def _respond(self, record: RecordedRequest, status: int, body: Any) -> None:
        record.status = status
        self.server.fake._record(record)
        self._send_json(status, body)

    def _serve(self, route: Route, record: RecordedRequest) -> None:
        fake = self.server.fake
        store = fake.store
        method, query, body = record.method, record.query, record.body
        if route.kind == "discovery":
            if method != "GET":
                raise errors.method_not_allowed()
            self._respond(record, 200, fake._discovery(route.parts))
            return
        if route.kind == "bindings":
            if method != "POST":
                raise errors.method_not_allowed()
            assert route.namespace is not None
            self._respond(record, 201, store.bind(route.namespace, None, body))
            return
        if route.kind == "configz":
            if method != "GET":
                raise errors.method_not_allowed()
            self._respond(record, 200, fake._configz_for(route.name or "", route.subresource or ""))
            return
        rt = route.rt
        assert rt is not None
        ns, name, sub = route.namespace, route.name, route.subresource
        if name is None:
            if method == "GET":
                if parse_bool("watch", query.get("watch")):
                    self._watch(rt, ns, record)
                    return
                listed = store.list(
                    rt,
                    ns,
                    label_selector=query.get("labelSelector"),
                    field_selector=query.get("fieldSelector"),
                    resource_version=query.get("resourceVersion"),
                    resource_version_match=query.get("resourceVersionMatch"),
                    limit=parse_int("limit", query.get("limit")),
                    continue_token=query.get("continue"),
                )
                self._respond(record, 200, listed)
            elif method == "POST" and (ns is not None or not rt.namespaced):
                self._respond(record, 201, store.create(rt, ns, body if body is not None else {}))
            elif method == "DELETE" and (ns is not None or not rt.namespaced):
                listed = store.delete_collection(
                    rt,
                    ns,
                    label_selector=query.get("labelSelector"),
                    field_selector=query.get("fieldSelector"),
                    options=self._delete_options(query, body),
                )
                self._respond(record, 200, listed)
            else:
                raise errors.method_not_allowed()
            return
        if sub is None:
            if method == "GET":
                self._respond(record, 200, store.get(rt, ns, name))
            elif method == "PUT":
                obj, created = store.replace(rt, ns, name, body if body is not None else {})
                self._respond(record, 201 if created else 200, obj)
            elif method == "PATCH":
                self._respond(record, 200, store.patch(rt, ns, name, record.content_type or "", body))
            elif method == "DELETE":
                obj, deleted = store.delete(rt, ns, name, self._delete_options(query, body))
                if deleted and not rt.return_deleted_object:
                    meta = obj["metadata"]
                    details = {
                        "name": meta["name"],
                        "group": rt.group,
                        "kind": rt.plural,
                        "uid": meta.get("uid"),
                    }
                    status = {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": {k: v for k, v in details.items() if v},
                    }
                    self._respond(record, 200, status)
                else:
                    self._respond(record, 200, obj)
            else:
                raise errors.method_not_allowed()
            return
        if sub == "status" and rt.status_subresource:
            if method == "GET":
                self._respond(record, 200, store.get(rt, ns, name))
            elif method == "PUT":
                obj, _ = store.replace(rt, ns, name, body if body is not None else {}, subresource="status")
                self._respond(record, 200, obj)
            elif method == "PATCH":
                obj = store.patch(rt, ns, name, record.content_type or "", body, subresource="status")
                self._respond(record, 200, obj)
            else:
                raise errors.method_not_allowed()
            return
        if sub == "binding" and rt.builtin and rt.kind == "Pod":
            if method != "POST":
                raise errors.method_not_allowed()
            assert ns is not None
            self._respond(record, 201, store.bind(ns, name, body if body is not None else {}))
            return
        raise errors.path_not_found()

    @staticmethod
    def _delete_options(query: dict[str, str], body: Any) -> dict:
        options = dict(body) if isinstance(body, dict) else {}
        grace = parse_int("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        return options

    def _watch(self, rt: ResourceType, namespace: str | None, record: RecordedRequest) -> None:
        fake = self.server.fake
        query = record.query
        timeout = parse_int("timeoutSeconds", query.get("timeoutSeconds"))
        send_initial = parse_bool("sendInitialEvents", query.get("sendInitialEvents"))
        watcher = fake.store.watch(
            rt,
            namespace,
            label_selector=query.get("labelSelector"),
            field_selector=query.get("fieldSelector"),
            resource_version=query.get("resourceVersion"),
            resource_version_match=query.get("resourceVersionMatch"),
            send_initial_events=send_initial,
            allow_bookmarks=bool(parse_bool("allowWatchBookmarks", query.get("allowWatchBookmarks"))),
            timeout=float(timeout) if timeout is not None and timeout > 0 else None,
        )
        try:
            record.status = 200
            fake._record(record)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Cache-Control", "no-cache, private")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while True:
                events, end = fake.store.next_batch(watcher, 0.1)
                for kind, obj in events:
                    line = json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                if end in ("drop", "stopped"):
                    # A network drop: no terminating chunk, the client sees a broken stream.
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if end in ("end", "timeout"):
                    self.wfile.write(b"0\r\n\r\n")
                    return
                if not events and self._client_gone():
                    self.close_connection = True
                    return
        except OSError:
            self.close_connection = True
        finally:
            fake.store.remove_watcher(watcher)
