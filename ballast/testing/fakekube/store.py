"""The fake's storage: objects, one global resourceVersion, an event history and watchers.

This is the part that stands in for etcd + the registry + the watch cache. It is transport-free (the
HTTP layer in `server.py` only parses requests and writes responses) and every public method takes the
one lock, so tests, HTTP handler threads and watch streams may call it concurrently.

Semantics copied from the real server because Ballast's informer-like code depends on them:
- a write that changes nothing keeps the resourceVersion and emits no event;
- watchers see events strictly after their resourceVersion, in order; a watch from a resourceVersion older
  than the retained history gets an ERROR event with a 410 `Expired` Status;
- with selectors, an update that moves an object into the selection is ADDED, out of it DELETED
  (carrying the previous state with the new resourceVersion), as the watch cache does;
- main endpoints of resources with a status subresource ignore status changes, and `/status` only
  changes status;
- DELETE of a bound pod is graceful (sets deletionTimestamp, MODIFIED) and objects with finalizers wait
  for them to be removed.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import itertools
import json
import math
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import errors
from .errors import StatusError
from .patches import PatchError, json_patch, merge_patch, strategic_merge_patch
from .resources import ResourceType, default_pod, pod_qos_class
from .selectors import Selector, build_selector

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
APPLY_PATCH_CBOR = "application/apply-patch+cbor"

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter, or use the continue token in "
    "this response to retrieve the remainder of the results. Continuing with the provided "
    "token results in an inconsistent list - objects that were created, modified, or "
    "deleted between the time the first chunk was returned and now may show up in the list."
)

_META_ORDER = (
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
)
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def accepted_patch_types(rt: ResourceType) -> list[str]:
    if rt.builtin:
        return [JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, APPLY_PATCH]
    return [JSON_PATCH, MERGE_PATCH, APPLY_PATCH]


def _ordered(obj: dict) -> dict:
    """Key order like Go's struct order (kind, apiVersion, metadata first), for readable dumps."""
    meta = obj.get("metadata") or {}
    ordered_meta = {k: meta[k] for k in _META_ORDER if k in meta}
    ordered_meta.update({k: v for k, v in meta.items() if k not in ordered_meta})
    out = {k: obj[k] for k in ("kind", "apiVersion") if k in obj}
    out["metadata"] = ordered_meta
    out.update({k: v for k, v in obj.items() if k not in out})
    return out


def _without(obj: dict, *keys: str) -> dict:
    return {k: v for k, v in obj.items() if k not in keys}


@dataclass
class StoredEvent:
    rv: int
    rt: ResourceType
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict
    prev: dict | None


class Watcher:
    """One open watch: its filter and the queue of events not yet written to the client."""

    _ids = itertools.count(1)

    def __init__(
        self,
        rt: ResourceType,
        namespace: str | None,
        selector: Selector,
        bookmarks: bool,
        bookmark_interval: float,
        timeout: float | None,
    ) -> None:
        self.id = next(self._ids)
        self.rt = rt
        self.namespace = namespace
        self.selector = selector
        self.bookmarks = bookmarks
        self.bookmark_interval = bookmark_interval
        self.queue: deque[tuple[str, dict]] = deque()
        self.abort: str | None = None  # "drop", "end" or "stopped"
        self.finish_when_empty = False
        self.bookmark_now = False
        now = time.monotonic()
        self.next_bookmark = now + bookmark_interval if bookmarks else math.inf
        self.deadline = now + timeout if timeout is not None else math.inf

    def _visible(self, obj: dict | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and (obj.get("metadata") or {}).get("namespace") != self.namespace:
            return False
        return self.selector.matches(obj)

    def translate(self, event: StoredEvent) -> tuple[str, dict] | None:
        """The event as this watcher sees it (the watch cache's convertToWatchEvent)."""
        if event.rt is not self.rt:
            return None
        current = self._visible(event.obj) and event.type != "DELETED"
        previous = self._visible(event.prev)
        if event.type == "DELETED":
            return ("DELETED", event.obj) if self._visible(event.obj) else None
        if current and previous:
            return ("MODIFIED", event.obj)
        if current:
            return ("ADDED", event.obj)
        if previous and event.prev is not None:
            gone = copy.deepcopy(event.prev)
            gone["metadata"]["resourceVersion"] = str(event.rv)
            return ("DELETED", gone)
        return None


class Store:
    """Thread-safe object store with etcd-like revisions and watch-cache-like history."""

    def __init__(
        self,
        *,
        history_limit: int = 10_000,
        bookmark_interval: float = 60.0,
        too_large_rv_wait: float = 3.0,
        clock: Callable[[], dt.datetime] | None = None,
        start_rv: int = 1000,
    ) -> None:
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.history_limit = history_limit
        self.bookmark_interval = bookmark_interval
        self.too_large_rv_wait = too_large_rv_wait
        self.clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._rv = start_rv
        self._floor = start_rv
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        self._by_key: dict[str, ResourceType] = {}
        self._objects: dict[str, dict[tuple[str, str], dict]] = {}
        self._history: deque[StoredEvent] = deque()
        self._watchers: set[Watcher] = set()

    # ------------------------------------------------------------ registry

    def register(self, rt: ResourceType) -> ResourceType:
        with self.lock:
            self._types[(rt.group, rt.version, rt.plural)] = rt
            self._by_key[rt.key] = rt
            self._objects.setdefault(rt.key, {})
        return rt

    def types(self) -> list[ResourceType]:
        with self.lock:
            return list(self._types.values())

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        with self.lock:
            return self._types.get((group, version, plural))

    def resolve(self, name: str | ResourceType) -> ResourceType:
        """Find a resource by `ResourceType`, key (`leases.coordination.k8s.io`), plural, kind or short name.
        Find a resource by `ResourceType`, key (`leases.coordination.k8s.io`), plural, kind or short name."""
        if isinstance(name, ResourceType):
            return name
        with self.lock:
            if name in self._by_key:
                return self._by_key[name]
            matches = [
                rt
                for rt in self._types.values()
                if name in (rt.plural, rt.kind, rt.kind.lower()) or name in rt.short_names
            ]
        if len(matches) != 1:
            raise KeyError(f"unknown or ambiguous resource {name!r}")
        return matches[0]

    def resolve_object(self, obj: dict) -> ResourceType:
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        with self.lock:
            for rt in self._types.values():
                if rt.kind == kind and (api_version is None or rt.api_version == api_version):
                    return rt
        raise KeyError(f"no registered resource for apiVersion={api_version!r} kind={kind!r}")

    # ------------------------------------------------------------ helpers

    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    @property
    def floor(self) -> int:
        with self.lock:
            return self._floor

    def _now(self) -> str:
        return rfc3339(self.clock())

    def _next_rv(self) -> int:
        self._rv += 1
        return self._rv

    def _key(self, rt: ResourceType, namespace: str | None, name: str) -> tuple[str, str]:
        return ((namespace or "") if rt.namespaced else "", name)

    def _bucket(self, rt: ResourceType) -> dict[tuple[str, str], dict]:
        return self._objects[rt.key]

    def _emit(self, rt: ResourceType, kind: str, obj: dict, prev: dict | None) -> None:
        event = StoredEvent(int(obj["metadata"]["resourceVersion"]), rt, kind, obj, prev)
        self._history.append(event)
        while len(self._history) > self.history_limit:
            self._floor = self._history.popleft().rv
        for watcher in self._watchers:
            seen = watcher.translate(event)
            if seen is not None:
                watcher.queue.append(seen)
        self.cond.notify_all()

    def _check_type(self, rt: ResourceType, body: dict) -> None:
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if (kind and kind != rt.kind) or (api_version and api_version != rt.api_version):
            raise errors.bad_request(
                f'{kind or "Object"} in version "{api_version or ""}" cannot be handled as a {rt.kind}: '
                f"the object provided is unrecognized (must be of type {rt.kind})"
            )
        body["kind"] = rt.kind
        body["apiVersion"] = rt.api_version

    def _precondition_conflict(
        self, rt: ResourceType, current: dict, uid: str | None, rv: str | None
    ) -> None:
        meta = current["metadata"]
        key = rt.storage_key(meta.get("namespace"), meta["name"])
        if uid and uid != meta.get("uid"):
            msg = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta.get('uid')}"
            raise errors.conflict(rt.group, rt.plural, meta["name"], errors.storage_invalid_obj(key, msg))
        if rv and rv != meta.get("resourceVersion"):
            msg = (
                f"Precondition failed: ResourceVersion in precondition: {rv}, "
                f"ResourceVersion in object meta: {meta.get('resourceVersion')}"
            )
            raise errors.conflict(rt.group, rt.plural, meta["name"], errors.storage_invalid_obj(key, msg))

    def _get_existing(self, rt: ResourceType, namespace: str | None, name: str) -> dict:
        current = self._bucket(rt).get(self._key(rt, namespace, name))
        if current is None:
            raise errors.not_found(rt.group, rt.plural, name)
        return current

    # ------------------------------------------------------------ reads

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict:
        with self.lock:
            return copy.deepcopy(self._get_existing(rt, namespace, name))

    def selector(self, rt: ResourceType, label_selector: str | None, field_selector: str | None) -> Selector:
        return build_selector(
            label_selector, field_selector, rt.supported_field_labels(), rt.selectable_fields
        )

    def _state_at(self, rt: ResourceType, rv: int) -> dict[tuple[str, str], dict]:
        """The objects of `rt` as they were at revision `rv` (requires rv >= floor)."""
        state = dict(self._bucket(rt))
        for event in reversed(self._history):
            if event.rv <= rv:
                break
            if event.rt is not rt:
                continue
            meta = event.obj["metadata"]
            key = self._key(rt, meta.get("namespace"), meta["name"])
            if event.prev is None:
                state.pop(key, None)
            else:
                state[key] = event.prev
        return state

    def _wait_for_rv(self, wanted: int) -> None:
        deadline = time.monotonic() + self.too_large_rv_wait
        while self._rv < wanted:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise errors.too_large_rv(wanted, self._rv)
            self.cond.wait(remaining)

    def list(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> dict:
        """A `<Kind>List` body with list semantics of the real server (RV match rules, paging)."""
        selector = self.selector(rt, label_selector, field_selector)
        _validate_list_options(resource_version, resource_version_match, continue_token)
        with self.lock:
            start = ""
            if continue_token:
                snapshot_rv, start = _decode_continue(continue_token)
                if snapshot_rv < self._floor:
                    raise errors.expired(CONTINUE_EXPIRED)
                state = self._state_at(rt, snapshot_rv)
            elif not resource_version:
                snapshot_rv, state = self._rv, dict(self._bucket(rt))
            elif resource_version == "0":
                snapshot_rv, state = self._rv, dict(self._bucket(rt))
                limit = None  # served from the watch cache, which does not page
            else:
                wanted = _parse_rv(resource_version)
                exact = resource_version_match == "Exact" or (resource_version_match is None and bool(limit))
                if exact:
                    if wanted > self._rv:
                        self._wait_for_rv(wanted)
                    if wanted < self._floor:
                        raise errors.expired("The resourceVersion for the provided list is too old.")
                    snapshot_rv, state = wanted, self._state_at(rt, wanted)
                else:
                    self._wait_for_rv(wanted)
                    snapshot_rv, state = self._rv, dict(self._bucket(rt))
            keyed = sorted(
                ((f"{ns}/{name}" if rt.namespaced else name), obj) for (ns, name), obj in state.items()
            )
            matching = [
                (key, obj)
                for key, obj in keyed
                if key >= start
                and (namespace is None or obj["metadata"].get("namespace") == namespace)
                and selector.matches(obj)
            ]
            page = matching if not limit or limit <= 0 else matching[:limit]
            metadata: dict[str, Any] = {"resourceVersion": str(snapshot_rv)}
            if len(page) < len(matching):
                metadata["continue"] = _encode_continue(snapshot_rv, page[-1][0] + "\x00")
                if selector.empty:
                    metadata["remainingItemCount"] = len(matching) - len(page)
            items = [
                copy.deepcopy(obj if not rt.builtin else _without(obj, "kind", "apiVersion"))
                for _, obj in page
            ]
        return {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": metadata, "items": items}

    # ------------------------------------------------------------ writes

    def create(
        self, rt: ResourceType, namespace: str | None, body: dict, *, keep_status: bool = False
    ) -> dict:
        """POST. `keep_status` is for test set-up: keep the given status as a kubelet would have written it.
        POST. `keep_status` is for test set-up: keep the given status as a kubelet would have written it."""
        obj = copy.deepcopy(body)
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        self._check_type(rt, obj)
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(random.choices(_NAME_CHARS, k=5))
            else:
                raise errors.invalid(
                    rt.group,
                    rt.kind,
                    "",
                    [
                        (
                            "FieldValueRequired",
                            "metadata.name",
                            "Required value: name or generateName is required",
                        )
                    ],
                )
        for volatile in ("deletionTimestamp", "deletionGracePeriodSeconds", "managedFields", "selfLink"):
            meta.pop(volatile, None)
        if rt.builtin and rt.kind == "Pod":
            default_pod(obj)
            status = obj.get("status") if keep_status else None
            status = dict(status or {})
            status.setdefault("phase", "Pending")
            status.setdefault("qosClass", pod_qos_class(obj))
            obj["status"] = status
        elif rt.status_subresource and not rt.builtin and not keep_status:
            obj.pop("status", None)
        with self.lock:
            bucket = self._bucket(rt)
            key = self._key(rt, meta.get("namespace"), meta["name"])
            if key in bucket:
                raise errors.already_exists(rt.group, rt.plural, meta["name"])
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = self._now()
            if rt.track_generation:
                meta["generation"] = 1
            else:
                meta.pop("generation", None)
            meta["resourceVersion"] = str(self._next_rv())
            obj = _ordered(obj)
            bucket[key] = obj
            self._emit(rt, "ADDED", obj, None)
            return copy.deepcopy(obj)

    def replace(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: dict,
        *,
        subresource: str | None = None,
        full: bool = False,
    ) -> tuple[dict, bool]:
        """PUT. Returns (object, created). `full` (test control) also replaces status and skips RV rules."""
        obj = copy.deepcopy(body)
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        self._check_type(rt, obj)
        meta = obj.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        if rt.namespaced and meta.get("namespace") and namespace and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["name"] = name
        with self.lock:
            current = self._bucket(rt).get(self._key(rt, namespace, name))
            if current is None:
                if rt.allow_create_on_update and subresource is None:
                    return self.create(rt, namespace, obj), True
                raise errors.not_found(rt.group, rt.plural, name)
            wanted_rv = meta.get("resourceVersion")
            if not wanted_rv:
                if not rt.allow_unconditional_update and not full:
                    raise errors.invalid(
                        rt.group,
                        rt.kind,
                        name,
                        [
                            (
                                "FieldValueInvalid",
                                "metadata.resourceVersion",
                                "Invalid value: 0x0: must be specified for an update",
                            )
                        ],
                    )
            elif wanted_rv != current["metadata"]["resourceVersion"]:
                raise errors.conflict(rt.group, rt.plural, name)
            self._precondition_conflict(rt, current, meta.get("uid"), None)
            return self._commit(rt, current, obj, subresource=subresource, full=full), False

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        patch: Any,
        *,
        subresource: str | None = None,
    ) -> dict:
        """PATCH with the semantics picked by Content-Type, as the server's patcher does."""
        if content_type not in accepted_patch_types(rt) or content_type == APPLY_PATCH:
            if content_type == APPLY_PATCH:
                raise errors.unsupported_media_type(
                    [t for t in accepted_patch_types(rt) if t != APPLY_PATCH]
                    + ["(fakekube does not implement server-side apply)"]
                )
            raise errors.unsupported_media_type(accepted_patch_types(rt))
        with self.lock:
            current = self._get_existing(rt, namespace, name)
            try:
                if content_type == JSON_PATCH:
                    patched = json_patch(current, patch)
                elif content_type == MERGE_PATCH:
                    if not isinstance(patch, dict):
                        raise errors.bad_request("Invalid JSON Patch")
                    patched = merge_patch(current, patch)
                else:
                    patched = strategic_merge_patch(current, patch, rt.smp_strategy)
            except PatchError as exc:
                if content_type == JSON_PATCH:
                    raise errors.StatusError(
                        422, "Invalid", "the server rejected our request due to an error in our request", {}
                    ) from exc
                raise errors.bad_request(str(exc)) from exc
            if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
                raise errors.bad_request("the patched object is not a valid object")
            meta = patched["metadata"]
            if meta.get("name") != name:
                raise errors.invalid(
                    rt.group,
                    rt.kind,
                    name,
                    [
                        (
                            "FieldValueInvalid",
                            "metadata.name",
                            f'Invalid value: "{meta.get("name")}": field is immutable',
                        )
                    ],
                )
            patched_rv = meta.get("resourceVersion")
            if patched_rv and patched_rv != current["metadata"]["resourceVersion"]:
                raise errors.conflict(rt.group, rt.plural, name)
            self._precondition_conflict(rt, current, meta.get("uid"), None)
            return self._commit(rt, current, patched, subresource=subresource, full=False)

    def _commit(
        self, rt: ResourceType, current: dict, new: dict, *, subresource: str | None, full: bool
    ) -> dict:
        """Apply registry rules to an update and store it; a no-op update keeps the resourceVersion."""
        new = copy.deepcopy(new)
        if subresource == "status":
            merged = copy.deepcopy(current)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            new = merged
        elif rt.status_subresource and not full:
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        new["kind"], new["apiVersion"] = rt.kind, rt.api_version
        meta = new.setdefault("metadata", {})
        old_meta = current["metadata"]
        for fixed in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
            "generation",
        ):
            if fixed in old_meta:
                meta[fixed] = old_meta[fixed]
            else:
                meta.pop(fixed, None)
        if rt.builtin and rt.kind == "Pod":
            default_pod(new)
        new = _ordered(new)
        meta = new["metadata"]
        if new == current:
            return copy.deepcopy(current)
        if rt.track_generation:
            ignored = ("metadata", "status") if rt.status_subresource else ("metadata",)
            if _without(new, *ignored) != _without(current, *ignored):
                meta["generation"] = int(old_meta.get("generation") or 0) + 1
        delete_now = (
            bool(old_meta.get("deletionTimestamp"))
            and not meta.get("finalizers")
            and old_meta.get("deletionGracePeriodSeconds") == 0
        )
        meta["resourceVersion"] = str(self._next_rv())
        key = self._key(rt, meta.get("namespace"), meta["name"])
        if delete_now:
            del self._bucket(rt)[key]
            self._emit(rt, "DELETED", new, current)
        else:
            self._bucket(rt)[key] = new
            self._emit(rt, "MODIFIED", new, current)
        return copy.deepcopy(new)

    def delete(
        self, rt: ResourceType, namespace: str | None, name: str, options: dict | None = None
    ) -> tuple[dict, bool]:
        """DELETE. Returns (object, deleted_now); graceful pod deletion and finalizers return
        deleted_now=False."""
        options = options or {}
        with self.lock:
            current = self._get_existing(rt, namespace, name)
            preconditions = options.get("preconditions") or {}
            self._precondition_conflict(
                rt, current, preconditions.get("uid"), preconditions.get("resourceVersion")
            )
            meta = current["metadata"]
            grace = 0
            if rt.builtin and rt.kind == "Pod":
                requested = options.get("gracePeriodSeconds")
                grace = int(
                    requested
                    if requested is not None
                    else (current.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                )
                phase = (current.get("status") or {}).get("phase")
                if not (current.get("spec") or {}).get("nodeName") or phase in ("Succeeded", "Failed"):
                    grace = 0
                grace = 1 if grace < 0 else grace
            existing = meta.get("deletionGracePeriodSeconds")
            if grace > 0 or meta.get("finalizers"):
                if existing is not None and existing <= grace:
                    return copy.deepcopy(current), False  # already terminating at least as fast
                new = copy.deepcopy(current)
                new_meta = new["metadata"]
                new_meta["deletionTimestamp"] = rfc3339(self.clock() + dt.timedelta(seconds=grace))
                new_meta["deletionGracePeriodSeconds"] = grace
                if new_meta.get("generation"):
                    new_meta["generation"] = int(new_meta["generation"]) + 1
                new_meta["resourceVersion"] = str(self._next_rv())
                new = _ordered(new)
                self._bucket(rt)[self._key(rt, namespace, name)] = new
                self._emit(rt, "MODIFIED", new, current)
                return copy.deepcopy(new), False
            gone = copy.deepcopy(current)
            gone["metadata"]["resourceVersion"] = str(self._next_rv())
            del self._bucket(rt)[self._key(rt, namespace, name)]
            self._emit(rt, "DELETED", gone, current)
            return copy.deepcopy(gone), True

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        options: dict | None = None,
    ) -> dict:
        with self.lock:
            listed = self.list(rt, namespace, label_selector=label_selector, field_selector=field_selector)
            for item in listed["items"]:
                meta = item["metadata"]
                self.delete(rt, meta.get("namespace"), meta["name"], options)
            return listed

    def bind(self, namespace: str, name: str | None, binding: dict) -> dict:
        """POST pods/{name}/binding (or namespaces/{ns}/bindings): BindingREST.Create."""
        if not isinstance(binding, dict):
            raise errors.bad_request("not a Binding object")
        meta = binding.get("metadata") or {}
        if name is not None and meta.get("name") != name:
            raise errors.bad_request("name in URL does not match name in Binding object")
        name = meta.get("name") or ""
        if meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        target = binding.get("target") or {}
        causes = []
        if target.get("kind") not in (None, "", "Node"):
            causes.append(
                (
                    "FieldValueNotSupported",
                    "target.kind",
                    f'Unsupported value: "{target.get("kind")}": supported values: "Node", "<empty>"',
                )
            )
        if not target.get("name"):
            causes.append(("FieldValueRequired", "target.name", "Required value"))
        if causes:
            raise errors.invalid("", "Binding", name, causes)
        rt = self.resolve("pods")
        with self.lock:
            current = self._get_existing(rt, namespace, name)
            self._precondition_conflict(rt, current, meta.get("uid"), meta.get("resourceVersion"))
            spec = current.get("spec") or {}
            if current["metadata"].get("deletionTimestamp"):
                raise errors.conflict(
                    "", "pods/binding", name, f"pod {name} is being deleted, cannot be assigned to a host"
                )
            if spec.get("nodeName"):
                raise errors.conflict(
                    "", "pods/binding", name, f'pod {name} is already assigned to node "{spec["nodeName"]}"'
                )
            if spec.get("schedulingGates"):
                raise errors.conflict(
                    "", "pods/binding", name, f"pod {name} has non-empty .spec.schedulingGates"
                )
            new = copy.deepcopy(current)
            new.setdefault("spec", {})["nodeName"] = target["name"]
            for field in ("annotations", "labels"):
                if meta.get(field):
                    new["metadata"].setdefault(field, {}).update(meta[field])
            new.setdefault("status", {}).pop("nominatedNodeName", None)
            _set_condition(new.setdefault("status", {}), "PodScheduled", "True", self._now())
            new["metadata"]["resourceVersion"] = str(self._next_rv())
            new = _ordered(new)
            self._bucket(rt)[self._key(rt, namespace, name)] = new
            self._emit(rt, "MODIFIED", new, current)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # ------------------------------------------------------------ history and watches

    def set_history_limit(self, events: int) -> None:
        with self.lock:
            self.history_limit = events
            while len(self._history) > events:
                self._floor = self._history.popleft().rv

    def compact(self) -> int:
        """Forget all history: watches and Exact lists from any older resourceVersion now get 410."""
        with self.lock:
            self._history.clear()
            self._floor = self._rv
            return self._floor

    def watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
        send_initial_events: bool | None = None,
        allow_bookmarks: bool = False,
        timeout: float | None = None,
    ) -> Watcher:
        """Register a watcher and queue its initial events (synthetic ADDED, history replay or a 410 ERROR).
        Register a watcher and queue its initial events (synthetic ADDED, history replay or a 410 ERROR)."""
        selector = self.selector(rt, label_selector, field_selector)
        _validate_watch_options(
            resource_version, resource_version_match, send_initial_events, allow_bookmarks
        )
        with self.lock:
            watcher = Watcher(rt, namespace, selector, allow_bookmarks, self.bookmark_interval, timeout)
            if send_initial_events or not resource_version or resource_version == "0":
                keyed = sorted(
                    ((f"{ns}/{name}" if rt.namespaced else name), obj)
                    for (ns, name), obj in self._bucket(rt).items()
                )
                for _, obj in keyed:
                    if watcher._visible(obj):
                        watcher.queue.append(("ADDED", obj))
                if send_initial_events and allow_bookmarks:
                    mark = self.bookmark(rt)
                    mark["metadata"]["annotations"] = {INITIAL_EVENTS_END: "true"}
                    watcher.queue.append(("BOOKMARK", mark))
            else:
                since = _parse_rv(resource_version)
                if since < self._floor:
                    status = errors.expired(f"too old resource version: {since} ({self._floor})").status()
                    watcher.queue.append(("ERROR", status))
                    watcher.finish_when_empty = True
                else:
                    for event in self._history:
                        if event.rv > since:
                            seen = watcher.translate(event)
                            if seen is not None:
                                watcher.queue.append(seen)
            self._watchers.add(watcher)
            self.cond.notify_all()
            return watcher

    def bookmark(self, rt: ResourceType) -> dict:
        return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": {"resourceVersion": str(self._rv)}}

    def next_batch(self, watcher: Watcher, max_wait: float) -> tuple[list[tuple[str, dict]], str | None]:
        """Block up to `max_wait` for events; returns (events, end) where end is None or why the watch ends.
        Block up to `max_wait` for events; returns (events, end) where end is None or why the watch ends."""
        with self.cond:
            wait_until = time.monotonic() + max_wait
            while True:
                if watcher.abort in ("drop", "stopped"):
                    return [], watcher.abort
                if watcher.queue:
                    events = list(watcher.queue)
                    watcher.queue.clear()
                    return events, None
                if watcher.abort == "end" or watcher.finish_when_empty:
                    return [], "end"
                now = time.monotonic()
                if now >= watcher.deadline:
                    return [], "timeout"
                if watcher.bookmarks and (watcher.bookmark_now or now >= watcher.next_bookmark):
                    watcher.bookmark_now = False
                    watcher.next_bookmark = now + watcher.bookmark_interval
                    return [("BOOKMARK", self.bookmark(watcher.rt))], None
                remaining = min(wait_until, watcher.deadline, watcher.next_bookmark) - now
                if remaining <= 0:
                    return [], None
                self.cond.wait(remaining)

    def remove_watcher(self, watcher: Watcher) -> None:
        with self.cond:
            self._watchers.discard(watcher)
            self.cond.notify_all()

    def watchers(self, rt: ResourceType | None = None) -> list[Watcher]:
        with self.lock:
            return [w for w in self._watchers if rt is None or w.rt is rt]

    def abort_watchers(self, mode: str, rt: ResourceType | None = None) -> int:
        with self.cond:
            hit = [w for w in self._watchers if rt is None or w.rt is rt]
            for watcher in hit:
                watcher.abort = mode
            self.cond.notify_all()
            return len(hit)

    def request_bookmarks(self, rt: ResourceType | None = None) -> int:
        with self.cond:
            hit = [w for w in self._watchers if w.bookmarks and (rt is None or w.rt is rt)]
            for watcher in hit:
                watcher.bookmark_now = True
            self.cond.notify_all()
            return len(hit)

    def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(predicate, timeout)


# ---------------------------------------------------------------- module helpers


def _set_condition(status: dict, kind: str, value: str, now: str) -> None:
    """podutil.UpdatePodCondition: lastTransitionTime changes only when the status does."""
    conditions = status.setdefault("conditions", [])
    for condition in conditions:
        if condition.get("type") == kind:
            if condition.get("status") != value:
                condition["lastTransitionTime"] = now
            condition["status"] = value
            return
    conditions.append({"type": kind, "status": value, "lastProbeTime": None, "lastTransitionTime": now})


def _parse_rv(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise errors.bad_request(f'invalid resource version "{text}"') from None
    if value < 0:
        raise errors.bad_request(f'invalid resource version "{text}"')
    return value


def _list_options_invalid(field: str, body: str) -> StatusError:
    return errors.invalid("meta.k8s.io", "ListOptions", "", [("FieldValueForbidden", field, body)])


def _validate_list_options(rv: str | None, match: str | None, cont: str | None) -> None:
    if match is not None and match not in ("Exact", "NotOlderThan", ""):
        raise errors.invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            [
                (
                    "FieldValueNotSupported",
                    "resourceVersionMatch",
                    f'Unsupported value: "{match}": supported values: "Exact", "NotOlderThan"',
                )
            ],
        )
    if match and not rv:
        raise _list_options_invalid(
            "resourceVersionMatch",
            "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
        )
    if match == "Exact" and rv == "0":
        raise _list_options_invalid(
            "resourceVersionMatch",
            'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"',
        )
    if cont and rv and rv != "0":
        raise _list_options_invalid(
            "resourceVersion", "Forbidden: specifying resource version is not allowed when using continue"
        )


def _validate_watch_options(
    rv: str | None, match: str | None, send_initial: bool | None, bookmarks: bool
) -> None:
    if send_initial is None:
        if match:
            raise _list_options_invalid(
                "resourceVersionMatch",
                "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )
        return
    if match != "NotOlderThan":
        raise _list_options_invalid(
            "resourceVersionMatch",
            'Forbidden: sendInitialEvents requires setting resourceVersionMatch to "NotOlderThan"',
        )
    if send_initial and not bookmarks:
        raise _list_options_invalid(
            "allowWatchBookmarks", "Forbidden: allowWatchBookmarks required when sendInitialEvents is true"
        )


def _encode_continue(rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded))
        if data.get("v") != "meta.k8s.io/v1":
            raise ValueError("unexpected version")
        return int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from None
