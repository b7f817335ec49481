"""In-process fake Kubernetes API server for Ballast's tests (see README.md)."""

from .errors import StatusError
from .fake import FakeKube, FakeKubeError, Injection
from .objects import make_event, make_lease, make_node, make_nrt, make_pod
from .resources import (
    DEFAULT_RESOURCES,
    EVENTS,
    LEASES,
    NODE_RESOURCE_TOPOLOGIES,
    NODES,
    PODS,
    ResourceType,
    custom_resource,
)
from .server import RecordedRequest

__all__ = [
    "DEFAULT_RESOURCES",
    "EVENTS",
    "LEASES",
    "NODES",
    "NODE_RESOURCE_TOPOLOGIES",
    "PODS",
    "FakeKube",
    "FakeKubeError",
    "Injection",
    "RecordedRequest",
    "ResourceType",
    "StatusError",
    "custom_resource",
    "make_event",
    "make_lease",
    "make_node",
    "make_nrt",
    "make_pod",
]
