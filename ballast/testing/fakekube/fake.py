"""`FakeKube`: start/stop the fake API server and drive it from tests.

Tests act through this object as the *other* writers of a cluster would (kubelet, controllers, an
operator with kubectl): their writes go through the same store code as HTTP requests, so they get
resourceVersions and emit watch events. Failure injection and the request log let a test provoke and then
assert the exact API traffic of the component under test.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from . import errors
from .errors import StatusError
from .resources import DEFAULT_RESOURCES, ResourceType, custom_resource
from .server import RecordedRequest, _Server
from .store import MERGE_PATCH, Store

PATCH_TYPES = {
    "merge": MERGE_PATCH,
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


class FakeKubeError(Exception):
    """A control-API call the API server would have refused; `.error.status()` is the Status it would send."""

    def __init__(self, error: StatusError) -> None:
        super().__init__(str(error))
        self.error = error
        self.code = error.code
        self.reason = error.reason


@dataclass
class Injection:
    """A pending failure or delay; `remaining` is None for 'until cleared'."""

    method: str | None
    path: re.Pattern[str]
    watch: bool | None
    remaining: int | None
    error: StatusError | None = None
    delay: float = 0.0
    hits: int = 0

    def matches(self, method: str, path: str, watch: bool) -> bool:
        if self.remaining is not None and self.remaining <= 0:
            return False
        if self.method not in (None, "*") and self.method.upper() != method.upper():
            return False
        if self.watch is not None and self.watch != watch:
            return False
        return self.path.search(path) is not None


class FakeKube:
    """An in-process Kubernetes API server for tests (see README.md in this package)."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        history_limit: int = 10_000,
        bookmark_interval: float = 60.0,
        too_large_rv_wait: float = 3.0,
        clock: Callable[[], dt.datetime] | None = None,
        resources: tuple[ResourceType, ...] = DEFAULT_RESOURCES,
    ) -> None:
        self.host = host
        self._requested_port = port
        self.store = Store(
            history_limit=history_limit,
            bookmark_interval=bookmark_interval,
            too_large_rv_wait=too_large_rv_wait,
            clock=clock,
        )
        for rt in resources:
            self.store.register(rt)
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._injections: list[Injection] = []
        self._configz: dict[str, Any] = {}
        self._connections: set[socket.socket] = set()
        self._bugs: list[str] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        if self._server is not None:
            return self
        self._server = _Server((self.host, self._requested_port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="fakekube", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: end every watch abruptly, close keep-alive connections, join the accept loop."""
        server, self._server = self._server, None
        if server is None:
            return
        self.store.abort_watchers("stopped")
        server.shutdown()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        deadline = time.monotonic() + 5
        while self.open_watches() and time.monotonic() < deadline:
            time.sleep(0.01)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeKube is not started")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        """A kubeconfig (JSON is valid YAML) with one cluster at `url`, one context and an empty user."""
        target = Path(path)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fakekube", "cluster": {"server": self.url}}],
            "users": [{"name": "fakekube", "user": {}}],
            "contexts": [
                {
                    "name": "fakekube",
                    "context": {"cluster": "fakekube", "user": "fakekube", "namespace": namespace},
                }
            ],
            "current-context": "fakekube",
            "preferences": {},
        }
        target.write_text(json.dumps(config, indent=2))
        return target

    def api_client(self) -> Any:
        """A `kubernetes.client.ApiClient` for this server (the caller closes it)."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)

    @property
    def bugs(self) -> list[str]:
        """Tracebacks of exceptions inside the fake (answered as 500); a test suite may assert it is empty."""
        return list(self._bugs)

    # ------------------------------------------------------------ resources

    def register(self, rt: ResourceType) -> ResourceType:
        return self.store.register(rt)

    def register_custom_resource(
        self,
        group: str,
        version: str,
        plural: str,
        kind: str,
        *,
        namespaced: bool = False,
        status_subresource: bool = False,
    ) -> ResourceType:
        """Serve a CRD-backed resource at /apis/{group}/{version}/[namespaces/{ns}/]{plural}."""
        return self.store.register(
            custom_resource(
                group, version, plural, kind, namespaced=namespaced, status_subresource=status_subresource
            )
        )

    # ------------------------------------------------------------ objects (acting as other writers)

    @staticmethod
    def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StatusError as exc:
            raise FakeKubeError(exc) from None

    def add(self, obj: dict, *, resource: str | ResourceType | None = None) -> dict:
        """Create `obj` (kind/apiVersion pick the resource). A pod keeps the status given, as if the kubelet
        wrote it."""
        rt = self.store.resolve(resource) if resource is not None else self.store.resolve_object(obj)
        namespace = (obj.get("metadata") or {}).get("namespace")
        return self._call(self.store.create, rt, namespace, obj, keep_status=True)

    def update(self, obj: dict, *, resource: str | ResourceType | None = None) -> dict:
        """Replace `obj` wholesale, status included; conflicts only if `metadata.resourceVersion` is given and
        stale."""
        rt = self.store.resolve(resource) if resource is not None else self.store.resolve_object(obj)
        meta = obj.get("metadata") or {}
        obj_, _ = self._call(self.store.replace, rt, meta.get("namespace"), meta["name"], obj, full=True)
        return obj_

    def patch(
        self,
        resource: str | ResourceType,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: str = "merge",
        subresource: str | None = None,
    ) -> dict:
        """Patch like a client would (`patch_type` merge|json|strategic); `subresource="status"` to touch
        status."""
        rt = self.store.resolve(resource)
        content_type = PATCH_TYPES.get(patch_type, patch_type)
        return self._call(self.store.patch, rt, namespace, name, content_type, patch, subresource=subresource)

    def delete(self, resource: str | ResourceType, name: str, *, namespace: str | None = None) -> dict:
        """Delete now (grace period 0, as the kubelet's final delete); objects with finalizers only get
        marked."""
        rt = self.store.resolve(resource)
        obj, _ = self._call(self.store.delete, rt, namespace, name, {"gracePeriodSeconds": 0})
        return obj

    def get(self, resource: str | ResourceType, name: str, *, namespace: str | None = None) -> dict | None:
        rt = self.store.resolve(resource)
        try:
            return self.store.get(rt, namespace, name)
        except StatusError:
            return None

    def list(
        self,
        resource: str | ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict]:
        """Current objects (with kind/apiVersion, unlike list responses), sorted by namespace/name."""
        rt = self.store.resolve(resource)
        listed = self._call(
            self.store.list, rt, namespace, label_selector=label_selector, field_selector=field_selector
        )
        for item in listed["items"]:
            item.setdefault("kind", rt.kind)
            item.setdefault("apiVersion", rt.api_version)
        return listed["items"]

    @property
    def resource_version(self) -> str:
        """The current global resourceVersion (what a list right now would return)."""
        return str(self.store.resource_version)

    # ------------------------------------------------------------ history and watches

    def compact(self) -> str:
        """Drop the event history: a watch or Exact list from any older resourceVersion now gets 410 Expired.
        Drop the event history: a watch or Exact list from any older resourceVersion now gets 410 Expired."""
        return str(self.store.compact())

    def set_history_limit(self, events: int) -> None:
        """Keep only the last `events` events (a small watch cache); older resourceVersions expire."""
        self.store.set_history_limit(events)

    def drop_watches(self, resource: str | ResourceType | None = None, *, graceful: bool = False) -> int:
        """Close open watches. Abrupt (default) like a network drop: the client sees a broken chunked stream.
        `graceful=True` ends them cleanly like the server closing a watch (the client re-watches)."""
        rt = self.store.resolve(resource) if resource is not None else None
        return self.store.abort_watchers("end" if graceful else "drop", rt)

    def send_bookmarks(self, resource: str | ResourceType | None = None) -> int:
        """Send a BOOKMARK now on every watch that asked for bookmarks; returns how many."""
        rt = self.store.resolve(resource) if resource is not None else None
        return self.store.request_bookmarks(rt)

    def open_watches(self, resource: str | ResourceType | None = None) -> int:
        rt = self.store.resolve(resource) if resource is not None else None
        return len(self.store.watchers(rt))

    def wait_for_watches(
        self,
        count: int = 1,
        resource: str | ResourceType | None = None,
        timeout: float = 5.0,
        *,
        exactly: bool = False,
    ) -> bool:
        """Wait until at least (or `exactly`) `count` watches are open, e.g. so a test mutates only after the
        component under test is watching, or checks that a closed stream was released on the server."""
        rt = self.store.resolve(resource) if resource is not None else None

        def ready() -> bool:
            n = len(self.store.watchers(rt))
            return n == count if exactly else n >= count

        return self.store.wait_for(ready, timeout)

    # ------------------------------------------------------------ failure injection

    def fail_next(
        self,
        method: str | None,
        path_regex: str,
        status: int,
        reason: str | None = None,
        message: str | None = None,
        *,
        count: int | None = 1,
        watch: bool | None = None,
        details: dict[str, Any] | None = None,
    ) -> Injection:
        """Answer the next `count` matching requests (None: until cleared) with a Status error instead.

        `path_regex` is searched in the URL path (no query); `method` None or "*" matches any;
        `watch` True/False restricts to watch/non-watch GETs. Reason and message default to the server's.
        """
        error = errors.generic(status, reason, message)
        if details is not None:
            error.details = details
        injection = Injection(method, re.compile(path_regex), watch, count, error=error)
        with self._lock:
            self._injections.append(injection)
        return injection

    def delay_next(
        self,
        method: str | None,
        path_regex: str,
        seconds: float,
        *,
        count: int | None = 1,
        watch: bool | None = None,
    ) -> Injection:
        """Hold the next matching requests for `seconds` before serving them (to hit client timeouts)."""
        injection = Injection(method, re.compile(path_regex), watch, count, delay=seconds)
        with self._lock:
            self._injections.append(injection)
        return injection

    def clear_injections(self) -> None:
        with self._lock:
            self._injections.clear()

    def _injected(self, method: str, path: str, watch: bool) -> StatusError | None:
        delay, error = 0.0, None
        with self._lock:
            for injection in self._injections:
                if not injection.matches(method, path, watch):
                    continue
                if injection.error is not None and error is not None:
                    continue
                if injection.error is None and delay:
                    continue
                injection.hits += 1
                if injection.remaining is not None:
                    injection.remaining -= 1
                if injection.error is not None:
                    error = injection.error
                else:
                    delay = injection.delay
            self._injections = [i for i in self._injections if i.remaining is None or i.remaining > 0]
        if delay:
            deadline = time.monotonic() + delay
            while self._server is not None and time.monotonic() < deadline:
                time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))
        return error

    # ------------------------------------------------------------ node proxy

    def set_configz(self, node: str, payload: dict | None) -> None:
        """Answer GET /api/v1/nodes/{node}/proxy/configz with `payload` (None: kubelet unreachable, 503)."""
        with self._lock:
            if payload is None:
                self._configz.pop(node, None)
            else:
                self._configz[node] = payload

    def _configz_for(self, node: str, subresource: str) -> Any:
        self.store.get(self.store.resolve("nodes"), None, node)  # 404 if the node does not exist
        if subresource != "proxy/configz":
            raise errors.path_not_found()
        with self._lock:
            payload = self._configz.get(node)
        if payload is None:
            raise StatusError(
                503,
                "ServiceUnavailable",
                f"error trying to reach service: dial tcp {node}:10250: connect: connection refused",
            )
        return payload

    # ------------------------------------------------------------ request log

    def _record(self, record: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(record)

    def _track_connection(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def find_requests(
        self,
        method: str | None = None,
        path: str | None = None,
        *,
        content_type: str | None = None,
        watch: bool | None = None,
        status: int | None = None,
    ) -> list[RecordedRequest]:
        """Recorded requests filtered by method, path regex (searched), content type, watch flag and status.
        Recorded requests filtered by method, path regex (searched), content type, watch flag and status."""
        pattern = re.compile(path) if path is not None else None
        return [
            r
            for r in self.requests
            if (method is None or r.method == method.upper())
            and (pattern is None or pattern.search(r.path))
            and (content_type is None or r.content_type == content_type)
            and (watch is None or r.watch == watch)
            and (status is None or r.status == status)
        ]

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    # ------------------------------------------------------------ discovery

    def _discovery(self, parts: tuple[str, ...]) -> dict:
        types = self.store.types()
        if parts == ("version",):
            return {
                "major": "1",
                "minor": "36",
                "gitVersion": "v1.36.0-fakekube",
                "gitCommit": "0000000000000000000000000000000000000000",
                "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.25.0",
                "compiler": "gc",
                "platform": "linux/amd64",
            }
        if parts == ("api",):
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        groups: dict[str, list[str]] = {}
        for rt in types:
            if rt.group:
                versions = groups.setdefault(rt.group, [])
                if rt.version not in versions:
                    versions.append(rt.version)

        def group_doc(name: str) -> dict:
            versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in groups[name]]
            return {"name": name, "versions": versions, "preferredVersion": versions[0]}

        if parts == ("apis",):
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [group_doc(g) for g in sorted(groups)],
            }
        if len(parts) == 2 and parts[0] == "apis":
            if parts[1] not in groups:
                raise errors.path_not_found()
            return {"kind": "APIGroup", "apiVersion": "v1", **group_doc(parts[1])}
        group, version = ("", "v1") if parts == ("api", "v1") else (parts[1], parts[2])
        served = [rt for rt in types if rt.group == group and rt.version == version]
        if not served:
            raise errors.path_not_found()
        resources = []
        for rt in served:
            resources.append(
                {
                    "name": rt.plural,
                    "singularName": rt.kind.lower(),
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": list(rt.verbs),
                    **({"shortNames": list(rt.short_names)} if rt.short_names else {}),
                }
            )
            subresources = (
                (["status"] if rt.status_subresource else [])
                + (["binding"] if rt.builtin and rt.kind == "Pod" else [])
                + (["proxy"] if rt.builtin and rt.kind == "Node" else [])
            )
            for sub in subresources:
                verbs = {"status": ["get", "patch", "update"], "binding": ["create"], "proxy": ["get"]}[sub]
                kind = {"binding": "Binding", "proxy": "NodeProxyOptions"}.get(sub, rt.kind)
                resources.append(
                    {
                        "name": f"{rt.plural}/{sub}",
                        "singularName": "",
                        "namespaced": rt.namespaced,
                        "kind": kind,
                        "verbs": verbs,
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }
