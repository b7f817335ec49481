"""The kube-scheduler extender v1 wire format: fast request reading, the answers' shapes, and models for
the docs.

Requests are parsed with orjson and only the fields Ballast uses are read; the pydantic models below
exist for the OpenAPI page and are never built on the request path (a 5000-node request would spend
most of its time constructing them). Field names are the Go field names (no json tags upstream);
the scheduler's Go decoder is case-insensitive, so lowercase request keys are accepted too. Answers are
encoded in one place, ``ballast.extender.encode``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from ballast.model.bad_request import BadRequest


def load_json(body: bytes) -> Any:
    if not body:
        raise BadRequest("(body)", "empty body; expected a JSON object")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest("(body)", f"not valid JSON: {exc}") from exc


def _fold(doc: Any, what: str) -> dict[str, Any]:
    """Top-level keys case-insensitively, as Go's decoder matches them."""
    if not isinstance(doc, dict):
        raise BadRequest("(body)", f"expected a JSON object ({what}), got {type(doc).__name__}")
    return {k.lower(): v for k, v in doc.items()}


def require_pod(folded: Mapping[str, Any]) -> dict[str, Any]:
    """The ``Pod`` of a request whose top-level keys are folded to lower case."""
    pod = folded.get("pod")
    if pod is None:
        raise BadRequest("Pod", "required: the pod being scheduled")
    if not isinstance(pod, dict):
        raise BadRequest("Pod", f"expected an object, got {type(pod).__name__}")
    meta = pod.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise BadRequest("Pod.metadata", f"expected an object, got {type(meta).__name__}")
    return pod


@dataclass(slots=True)
class ExtenderArgs:
    pod: dict[str, Any]
    nodes: list[dict[str, Any]] | None
    """Whole Node objects (``nodeCacheCapable: false``)."""
    node_names: list[str] | None
    """Names only (``nodeCacheCapable: true``)."""

    def names(self) -> list[str]:
        if self.nodes is not None:
            return [node_name(n) for n in self.nodes]
        return list(self.node_names or [])


@dataclass(slots=True)
class Scores:
    """A prioritize answer (HostPriorityList) as the verb decides it: the candidates in request order and
    each one's score, 0..10. Two lists rather than a dict per host: the answer is encoded from them
    (``ballast.extender.encode``) without building a dict per candidate."""

    hosts: list[str]
    scores: list[int]

    def entries(self) -> list[dict[str, Any]]:
        """``[{"Host": name, "Score": n}, ...]``, the answer as JSON has it."""
        return [{"Host": h, "Score": s} for h, s in zip(self.hosts, self.scores, strict=True)]


def filter_result(
    nodes: list[dict[str, Any]] | None = None,
    names: list[str] | None = None,
    failed: dict[str, str] | None = None,
    error: str = "",
) -> dict[str, Any]:
    """An ExtenderFilterResult: the passing Node objects or names, the failed nodes with reasons."""
    return {
        "Nodes": {"metadata": {}, "items": nodes} if nodes is not None else None,
        "NodeNames": names,
        "FailedNodes": failed if failed is not None else {},
        "FailedAndUnresolvableNodes": {},
        "Error": error,
    }


def node_name(node: Mapping[str, Any]) -> str:
    meta = node.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) else ""


MAX_NODES_PER_REQUEST = 50_000
"""Nodes (whole or by name) one request may carry: ten times Kubernetes' supported 5000-node cluster. One
request of 10^6 tiny nodes blocked the event loop ~40 s and left 1.1 GB resident."""


def parse_extender_args(body: bytes, require_nodes: bool = True) -> ExtenderArgs:
    """Read ExtenderArgs (filter, prioritize). Raises ``BadRequest`` naming the field at fault."""
    folded = _fold(load_json(body), "ExtenderArgs")
    pod = require_pod(folded)
    nodes_obj = folded.get("nodes")
    nodes: list[dict[str, Any]] | None = None
    if nodes_obj is not None:
        if not isinstance(nodes_obj, dict):
            raise BadRequest("Nodes", f"expected a NodeList object, got {type(nodes_obj).__name__}")
        items = nodes_obj.get("items")
        if items is None:
            items = []
        if not isinstance(items, list):
            raise BadRequest("Nodes.items", f"expected a list, got {type(items).__name__}")
        if len(items) > MAX_NODES_PER_REQUEST:
            raise BadRequest("Nodes.items", f"{len(items)} nodes; at most {MAX_NODES_PER_REQUEST} a request")
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise BadRequest(f"Nodes.items[{i}]", f"expected a Node object, got {type(item).__name__}")
            meta = item.get("metadata")
            if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
                raise BadRequest(f"Nodes.items[{i}].metadata.name", "required: a string")
            ann = meta.get("annotations")
            if ann is not None and not isinstance(ann, dict):
                raise BadRequest(f"Nodes.items[{i}].metadata.annotations", "expected an object")
            if ann and not all(map(str.__instancecheck__, ann.values())):
                # Kubernetes annotations are strings; anything else (a list nested 1000 deep) is bad input.
                key, value = next((k, v) for k, v in ann.items() if not isinstance(v, str))
                raise BadRequest(
                    f"Nodes.items[{i}].metadata.annotations.{key}",
                    f"expected a string, got {type(value).__name__}",
                )
        nodes = items
    names_obj = folded.get("nodenames")
    names: list[str] | None = None
    if names_obj is not None:
        if not isinstance(names_obj, list):
            raise BadRequest("NodeNames", f"expected a list of strings, got {type(names_obj).__name__}")
        if len(names_obj) > MAX_NODES_PER_REQUEST:
            raise BadRequest("NodeNames", f"{len(names_obj)} names; at most {MAX_NODES_PER_REQUEST} allowed")
        if not all(map(str.__instancecheck__, names_obj)):
            i, n = next((i, n) for i, n in enumerate(names_obj) if not isinstance(n, str))
            raise BadRequest(f"NodeNames[{i}]", f"expected a string, got {type(n).__name__}")
        names = names_obj
    if require_nodes and nodes is None and names is None:
        raise BadRequest("Nodes", "either Nodes (nodeCacheCapable: false) or NodeNames (true) is required")
    return ExtenderArgs(pod, nodes, names)


# ---------------------------------------------------------------------------------------------------
# Models for the OpenAPI page only (see module docstring).

_OPEN = ConfigDict(extra="allow")


class ObjectMeta(BaseModel):
    model_config = _OPEN
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resourceVersion: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    ownerReferences: list[dict[str, Any]] | None = None


class KubeObject(BaseModel):
    """A Kubernetes object (Pod or Node); only ``metadata`` is described, every other field passes."""

    model_config = _OPEN
    metadata: ObjectMeta | None = None
    spec: dict[str, Any] | None = None
    status: dict[str, Any] | None = None


class NodeList(BaseModel):
    model_config = _OPEN
    metadata: dict[str, Any] | None = None
    items: list[KubeObject] | None = None


class ExtenderArgsModel(BaseModel):
    """Body of ``filter`` and ``prioritize`` (k8s.io/kube-scheduler/extender/v1 ExtenderArgs)."""

    model_config = ConfigDict(title="ExtenderArgs")
    Pod: KubeObject
    Nodes: NodeList | None = Field(None, description="Whole nodes, sent when nodeCacheCapable is false")
    NodeNames: list[str] | None = Field(None, description="Node names, sent when nodeCacheCapable is true")


class ExtenderFilterResult(BaseModel):
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict, description="node -> reason (Unschedulable)")
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class HostPriority(BaseModel):
    Host: str
    Score: int = Field(ge=0, le=10)


class ExtenderBindingArgs(BaseModel):
    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class ExtenderBindingResult(BaseModel):
    Error: str = ""


class MetaPod(BaseModel):
    UID: str


class MetaVictims(BaseModel):
    Pods: list[MetaPod] = Field(default_factory=list)
    NumPDBViolations: int = 0


class Victims(BaseModel):
    Pods: list[KubeObject] = Field(default_factory=list)
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(BaseModel):
    Pod: KubeObject
    NodeNameToVictims: dict[str, Victims] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


class ExtenderPreemptionResult(BaseModel):
    NodeNameToMetaVictims: dict[str, MetaVictims] = Field(default_factory=dict)


class ErrorBody(BaseModel):
    """Every error answer: ``field`` names what was wrong when one thing was (absent for a fault)."""

    error: str
    field: str | None = None
    reason: str | None = None


@dataclass(slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = (
    re.compile(rf"{_LABEL}(?:\.{_LABEL})*"),
    253,
    "a DNS subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, "
    "at most 253 characters",
)
_NAMES = {
    # the API server's own rules for these names: a pod or node name is a DNS subdomain, a namespace a label
    "podname": _SUBDOMAIN,
    "podnamespace": (
        re.compile(_LABEL),
        63,
        "a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit, "
        "at most 63 characters",
    ),
    "node": _SUBDOMAIN,
}


def parse_binding_args(body: bytes) -> BindingArgs:
    """Read ExtenderBindingArgs; every field is a required, non-empty string (UID may be empty), and the
    names are names the API server could hold: they go into the Binding's URL, where a ``/``, a space or a
    line break would change what is asked."""
    folded = _fold(load_json(body), "ExtenderBindingArgs")
    values = {}
    for key, field in (
        ("podname", "PodName"),
        ("podnamespace", "PodNamespace"),
        ("poduid", "PodUID"),
        ("node", "Node"),
    ):
        v = folded.get(key)
        if v is None and key == "poduid":
            v = ""
        if not isinstance(v, str):
            raise BadRequest(field, "required: a string")
        if not v and key != "poduid":
            raise BadRequest(field, "must not be empty")
        if key in _NAMES:
            pattern, longest, what = _NAMES[key]
            if len(v) > longest or not pattern.fullmatch(v):
                raise BadRequest(field, f"{v[:80]!r} is not a Kubernetes name, which is {what}")
        values[key] = v
    return BindingArgs(values["podname"], values["podnamespace"], values["poduid"], values["node"])


def parse_object(body: bytes, what: str) -> dict[str, Any]:
    doc = load_json(body)
    if not isinstance(doc, dict):
        raise BadRequest("(body)", f"expected a JSON object ({what}), got {type(doc).__name__}")
    return doc
