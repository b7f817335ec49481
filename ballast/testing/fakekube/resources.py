"""Resource types the fake serves, with the per-resource rules of the real registry strategies.

Each `ResourceType` records what differs between resources on a real API server: scope, whether a
`/status` subresource exists (then the main endpoint ignores status changes), whether `generation` is
tracked, create-on-update and unconditional-update rules, what DELETE returns, the supported field
selector labels and the strategic-merge-patch strategy. Custom resources are generic: register
group/version/plural/kind/scope and they behave like CRD-backed objects (merge and JSON patch only,
`resourceVersion` required on PUT, list items keep kind/apiVersion).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .patches import META_STRATEGY, NODE_STRATEGY, POD_STRATEGY


def _meta_fields(obj: dict, namespaced: bool) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    fields = {"metadata.name": meta.get("name", "")}
    if namespaced:
        fields["metadata.namespace"] = meta.get("namespace", "")
    return fields


def _get(obj: dict, *path: str) -> Any:
    node: Any = obj
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _bool_str(value: Any) -> str:
    return "true" if value else "false"


def pod_fields(obj: dict) -> dict[str, str]:
    """pod.ToSelectableFields: the field labels a pod list/watch can select on."""
    fields = _meta_fields(obj, True)
    fields.update(
        {
            "spec.nodeName": _get(obj, "spec", "nodeName") or "",
            "spec.restartPolicy": _get(obj, "spec", "restartPolicy") or "",
            "spec.schedulerName": _get(obj, "spec", "schedulerName") or "",
            "spec.serviceAccountName": _get(obj, "spec", "serviceAccountName") or "",
            "spec.hostNetwork": _bool_str(_get(obj, "spec", "hostNetwork")),
            "status.phase": _get(obj, "status", "phase") or "",
            "status.podIP": _get(obj, "status", "podIP") or "",
            "status.nominatedNodeName": _get(obj, "status", "nominatedNodeName") or "",
        }
    )
    return fields


def node_fields(obj: dict) -> dict[str, str]:
    fields = _meta_fields(obj, False)
    fields["spec.unschedulable"] = _bool_str(_get(obj, "spec", "unschedulable"))
    return fields


def event_fields(obj: dict) -> dict[str, str]:
    fields = _meta_fields(obj, True)
    involved = obj.get("involvedObject") or {}
    for key in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath"):
        fields[f"involvedObject.{key}"] = str(involved.get(key) or "")
    fields["reason"] = obj.get("reason") or ""
    fields["reportingComponent"] = obj.get("reportingComponent") or ""
    fields["source"] = _get(obj, "source", "component") or ""
    fields["type"] = obj.get("type") or ""
    return fields


@dataclass(frozen=True, eq=False)
class ResourceType:
    """One served resource (`group/version/plural`) and the registry rules that apply to it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    builtin: bool = True
    status_subresource: bool = False
    track_generation: bool = False
    allow_create_on_update: bool = False
    allow_unconditional_update: bool = True
    return_deleted_object: bool = False
    short_names: tuple[str, ...] = ()
    fields: Callable[[dict], dict[str, str]] | None = None
    field_labels: frozenset[str] = frozenset()
    smp_strategy: Mapping[tuple[str, ...], str] = field(default_factory=lambda: META_STRATEGY)
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def key(self) -> str:
        """Unique id used in the store and in `FakeKube` calls: `pods`, `leases.coordination.k8s.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def selectable_fields(self, obj: dict) -> dict[str, str]:
        if self.fields is not None:
            return self.fields(obj)
        return _meta_fields(obj, self.namespaced)

    def supported_field_labels(self) -> frozenset[str]:
        if self.field_labels:
            return self.field_labels
        return frozenset({"metadata.name", "metadata.namespace"} if self.namespaced else {"metadata.name"})

    def storage_key(self, namespace: str | None, name: str) -> str:
        """The etcd key, used in error messages exactly as the real server prints it."""
        prefix = f"/registry/{self.plural}" if self.builtin else f"/registry/{self.group}/{self.plural}"
        return f"{prefix}/{namespace}/{name}" if self.namespaced else f"{prefix}/{name}"

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


def custom_resource(
    group: str,
    version: str,
    plural: str,
    kind: str,
    *,
    namespaced: bool = False,
    status_subresource: bool = False,
) -> ResourceType:
    """A CRD-backed resource as the apiextensions server serves it."""
    return ResourceType(
        group=group,
        version=version,
        plural=plural,
        kind=kind,
        namespaced=namespaced,
        builtin=False,
        status_subresource=status_subresource,
        track_generation=True,
        allow_create_on_update=False,
        allow_unconditional_update=False,
        return_deleted_object=False,
    )


NODES = ResourceType(
    "",
    "v1",
    "nodes",
    "Node",
    namespaced=False,
    status_subresource=True,
    short_names=("no",),
    fields=node_fields,
    field_labels=frozenset({"metadata.name", "spec.unschedulable"}),
    smp_strategy=NODE_STRATEGY,
)
PODS = ResourceType(
    "",
    "v1",
    "pods",
    "Pod",
    namespaced=True,
    status_subresource=True,
    track_generation=True,
    return_deleted_object=True,
    short_names=("po",),
    fields=pod_fields,
    field_labels=frozenset(pod_fields({}).keys()),
    smp_strategy=POD_STRATEGY,
)
EVENTS = ResourceType(
    "",
    "v1",
    "events",
    "Event",
    namespaced=True,
    allow_create_on_update=True,
    short_names=("ev",),
    fields=event_fields,
    field_labels=frozenset(event_fields({}).keys()),
)
LEASES = ResourceType(
    "coordination.k8s.io",
    "v1",
    "leases",
    "Lease",
    namespaced=True,
    allow_create_on_update=True,
)
NODE_RESOURCE_TOPOLOGIES = custom_resource(
    "topology.crane.io", "v1alpha1", "noderesourcetopologies", "NodeResourceTopology", namespaced=False
)

DEFAULT_RESOURCES: tuple[ResourceType, ...] = (NODES, PODS, EVENTS, LEASES, NODE_RESOURCE_TOPOLOGIES)


# ---------------------------------------------------------------- quantities and pod defaulting

_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
_QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


def parse_quantity(value: Any) -> Decimal:
    """resource.Quantity -> Decimal (only used to compare requests and limits for the QoS class)."""
    text = str(value).strip()
    match = _QUANTITY_RE.match(text)
    if not match:
        raise ValueError(f"quantities must match the regular expression: {text!r}")
    number, suffix = match.groups()
    if suffix[:1] in ("e", "E"):
        return Decimal(number) * (Decimal(10) ** int(suffix[1:]))
    return Decimal(number) * _SUFFIXES[suffix]


_QOS_RESOURCES = ("cpu", "memory")


def pod_qos_class(pod: dict) -> str:
    """qos.GetPodQOS: Guaranteed, Burstable or BestEffort from container requests and limits."""
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for container in containers:
        resources = container.get("resources") or {}
        for name, quantity in (resources.get("requests") or {}).items():
            if name in _QOS_RESOURCES and parse_quantity(quantity) > 0:
                requests[name] = requests.get(name, Decimal(0)) + parse_quantity(quantity)
        found = set()
        for name, quantity in (resources.get("limits") or {}).items():
            if name in _QOS_RESOURCES and parse_quantity(quantity) > 0:
                found.add(name)
                limits[name] = limits.get(name, Decimal(0)) + parse_quantity(quantity)
        if not set(_QOS_RESOURCES) <= found:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    same = all(limits.get(name) == value for name, value in requests.items())
    if guaranteed and same and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"


def _default_container(container: dict) -> None:
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, quantity in limits.items():
            requests.setdefault(name, quantity)
    image = container.get("image") or ""
    tag = image.rsplit("/", 1)[-1]
    if "imagePullPolicy" not in container:
        latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
        container["imagePullPolicy"] = "Always" if latest else "IfNotPresent"
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")


def default_pod(pod: dict) -> None:
    """The subset of v1 Pod defaulting that scheduling code reads (schedulerName, requests from limits...)."""
    spec = pod.setdefault("spec", {})
    for container in spec.get("containers") or []:
        _default_container(container)
    for container in spec.get("initContainers") or []:
        _default_container(container)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    spec.setdefault("priority", 0)
