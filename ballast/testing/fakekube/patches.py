"""JSON merge patch (RFC 7386), JSON patch (RFC 6902) and a strategic merge patch for core types.

The official Python client sends `application/strategic-merge-patch+json` for a dict body on built-in
types and `application/json-patch+json` for a list body, and `application/merge-patch+json` for custom
objects; the fake applies each with the server's semantics so that a patch that would misbehave on a real
cluster misbehaves here too.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


class PatchError(Exception):
    """A patch that cannot be applied (the server answers 422 for JSON patch, 400 for malformed input)."""


# ---------------------------------------------------------------- RFC 7386


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes, everything else (lists too) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# ---------------------------------------------------------------- RFC 6902


def _json_equal(a: Any, b: Any) -> bool:
    """JSON equality: unlike Python, `true != 1` and `1 == 1.0`."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(container: list, token: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise PatchError(f"invalid array index {token!r}")
    index = int(token)
    limit = len(container) if allow_end else len(container) - 1
    if index > limit:
        raise PatchError(f"array index {index} out of bounds")
    return index


def _parent(doc: Any, tokens: list[str], op: str, path: str) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise PatchError(f"{op} operation does not apply: doc is missing path: {path!r}")
    return node


def _get(doc: Any, path: str, op: str) -> Any:
    node = doc
    for token in _pointer(path):
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise PatchError(f"{op} operation does not apply: doc is missing key: {path!r}")
    return node


def _add(doc: Any, path: str, value: Any, op: str = "add") -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, op, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, allow_end=True), value)
    else:
        raise PatchError(f"{op} operation does not apply: doc is missing path: {path!r}")
    return doc


def _remove(doc: Any, path: str, op: str = "remove") -> tuple[Any, Any]:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError(f"{op} operation does not apply: cannot remove the whole document")
    parent = _parent(doc, tokens, op, path)
    last = tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, allow_end=False))
    raise PatchError(f"{op} operation does not apply: doc is missing key: {path!r}")


def json_patch(doc: Any, operations: Any) -> Any:
    """Apply RFC 6902 operations to a copy of `doc`; any failing operation fails the whole patch."""
    if not isinstance(operations, list):
        raise PatchError("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    result = copy.deepcopy(doc)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation:
            raise PatchError("invalid JSON patch operation")
        op = operation["op"]
        path = operation.get("path")
        if not isinstance(path, str):
            raise PatchError(f"{op} operation: missing path")
        if op == "add":
            result = _add(result, path, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            result, _ = _remove(result, path)
        elif op == "replace":
            _get(result, path, "replace")
            tokens = _pointer(path)
            if not tokens:
                result = copy.deepcopy(operation.get("value"))
            else:
                parent = _parent(result, tokens, "replace", path)
                if isinstance(parent, list):
                    parent[_index(parent, tokens[-1], allow_end=False)] = copy.deepcopy(
                        operation.get("value")
                    )
                else:
                    parent[tokens[-1]] = copy.deepcopy(operation.get("value"))
        elif op == "move":
            source = operation.get("from")
            if not isinstance(source, str):
                raise PatchError("move operation: missing from")
            result, value = _remove(result, source, "move")
            result = _add(result, path, value, "move")
        elif op == "copy":
            source = operation.get("from")
            if not isinstance(source, str):
                raise PatchError("copy operation: missing from")
            result = _add(result, path, copy.deepcopy(_get(result, source, "copy")), "copy")
        elif op == "test":
            try:
                current = _get(result, path, "test")
            except PatchError:
                current = None
            if not _json_equal(current, operation.get("value")):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {op}")
    return result


# ---------------------------------------------------------------- strategic merge patch

MERGE_PRIMITIVES = "<merge-primitives>"
"""Marker in a strategy table: a list of scalars merged as a set (e.g. metadata.finalizers)."""

# Patch strategies of the core/v1 fields Ballast touches, from the Go struct tags
# (`patchStrategy:"merge" patchMergeKey:"..."`). Paths use "*" for "every element of the list".
POD_STRATEGY: dict[tuple[str, ...], str] = {
    ("metadata", "finalizers"): MERGE_PRIMITIVES,
    ("metadata", "ownerReferences"): "uid",
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "ephemeralContainers"): "name",
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "hostAliases"): "ip",
    ("spec", "resourceClaims"): "name",
    ("spec", "schedulingGates"): "name",
    ("status", "conditions"): "type",
    ("status", "podIPs"): "ip",
    ("status", "hostIPs"): "ip",
    ("status", "resourceClaimStatuses"): "name",
}
for _list in ("containers", "initContainers", "ephemeralContainers"):
    POD_STRATEGY[("spec", _list, "*", "env")] = "name"
    POD_STRATEGY[("spec", _list, "*", "ports")] = "containerPort"
    POD_STRATEGY[("spec", _list, "*", "volumeMounts")] = "mountPath"
    POD_STRATEGY[("spec", _list, "*", "volumeDevices")] = "devicePath"

NODE_STRATEGY: dict[tuple[str, ...], str] = {
    ("metadata", "finalizers"): MERGE_PRIMITIVES,
    ("metadata", "ownerReferences"): "uid",
    ("spec", "podCIDRs"): MERGE_PRIMITIVES,
    ("status", "conditions"): "type",
    ("status", "addresses"): "type",
}

META_STRATEGY: dict[tuple[str, ...], str] = {
    ("metadata", "finalizers"): MERGE_PRIMITIVES,
    ("metadata", "ownerReferences"): "uid",
}


def strategic_merge_patch(original: Any, patch: Any, strategy: Mapping[tuple[str, ...], str]) -> Any:
    """Apply a strategic merge patch.

    Maps merge like RFC 7386; lists listed in `strategy` merge by their merge key (or as a set of
    scalars); every other list is replaced. Directives honoured: `$patch: replace|delete` (maps and list
    items), `$deleteFromPrimitiveList/<field>`, `$retainKeys`; `$setElementOrder/<field>` is accepted and
    dropped (element order is not enforced).
    """
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object")
    return _smp_map(original if isinstance(original, dict) else {}, patch, (), strategy)


def _smp_map(
    original: dict, patch: dict, path: tuple[str, ...], strategy: Mapping[tuple[str, ...], str]
) -> Any:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    result = copy.deepcopy(original)
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [item for item in result[field] if item not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        child_path = (*path, key)
        current = result.get(key)
        if isinstance(value, dict):
            merged = _smp_map(current if isinstance(current, dict) else {}, value, child_path, strategy)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _smp_list(current if isinstance(current, list) else [], value, child_path, strategy)
        else:
            result[key] = copy.deepcopy(value)
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _smp_list(
    original: list, patch: list, path: tuple[str, ...], strategy: Mapping[tuple[str, ...], str]
) -> list:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and i.get("$patch") == "replace")]
    rule = strategy.get(path)
    if rule is None:
        return copy.deepcopy(patch)
    if rule == MERGE_PRIMITIVES:
        result = copy.deepcopy(original)
        for item in patch:
            if item not in result:
                result.append(copy.deepcopy(item))
        return result
    result = copy.deepcopy(original)
    for item in patch:
        if not isinstance(item, dict) or rule not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {rule}")
        position = next(
            (
                i
                for i, existing in enumerate(result)
                if isinstance(existing, dict) and existing.get(rule) == item[rule]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                result.pop(position)
            continue
        if position is None:
            merged = _smp_map({}, item, (*path, "*"), strategy)
            result.append(merged)
        else:
            result[position] = _smp_map(result[position], item, (*path, "*"), strategy)
    return result
