"""A CRI ``runtime.v1.RuntimeService`` client for the three calls the agent makes.

- ``update_cpuset(container_id, cpus)``: ``UpdateContainerResources`` with only ``linux.cpuset_cpus``
  set, as the kubelet's CPU manager sends it. Every other resource field is absent, which runtimes read
  as "not specified": the container keeps its CPU quota, shares and memory limit.
- ``list_containers(labels)`` / ``find_container(pod_uid, name)``: ``ListContainers`` filtered by the
  kubelet's labels (``io.kubernetes.pod.uid``, ``io.kubernetes.container.name``), for when the pod status
  does not carry a container id yet.
- ``version()``: ``Version``, to check the socket at start-up and log what answers.

Transient failures (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, ``RESOURCE_EXHAUSTED``, ``ABORTED``,
``UNKNOWN``, which is what containerd returns for a runc hiccup) are retried with capped exponential
backoff and jitter; the last failure is raised as ``CRIError``. ``NOT_FOUND`` and other definite answers
are raised at once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from ballast.agent.cpuset import CPUSet
from ballast.agent.cri import _stubs

__all__ = [
    "CONTAINER_NAME_LABEL",
    "DEFAULT_ENDPOINT",
    "POD_NAMESPACE_LABEL",
    "POD_NAME_LABEL",
    "POD_UID_LABEL",
    "CRIClient",
    "CRIError",
    "normalize_endpoint",
]

api_pb2, api_pb2_grpc = _stubs.load()

DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"

# Labels the kubelet puts on every container (pkg/kubelet/types/labels.go).
POD_UID_LABEL = "io.kubernetes.pod.uid"
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"

RETRYABLE = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
        grpc.StatusCode.UNKNOWN,
    }
)

_MAX_MESSAGE = 16 * 1024 * 1024
"""``ListContainers`` on a busy node can exceed gRPC's 4 MiB default reply size."""


class CRIError(Exception):
    """A CRI call that failed, after retries when the failure looked transient."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str, attempts: int) -> None:
        self.method = method
        self.code = code
        self.details = details
        self.attempts = attempts
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"CRI {method} failed{tries}: {code.name}: {details}")

    @property
    def not_found(self) -> bool:
        return self.code == grpc.StatusCode.NOT_FOUND

    @property
    def retryable(self) -> bool:
        return self.code in RETRYABLE


def normalize_endpoint(endpoint: str) -> str:
    """``/run/x.sock`` or ``unix:///run/x.sock`` -> ``unix:///run/x.sock``; other schemes are refused.

    The kubelet's ``containerRuntimeEndpoint`` is a ``unix://`` URL with an absolute path; a bare absolute
    path is accepted too because that is how sockets are usually written in flags.
    """
    text = endpoint.strip()
    if text.startswith("unix://"):
        path = text[len("unix://") :]
    elif text.startswith("unix:"):
        path = text[len("unix:") :]
    elif "://" in text:
        raise ValueError(
            f"CRI endpoint {endpoint!r}: only unix sockets are supported (unix:///path/to/runtime.sock)"
        )
    else:
        path = text
    if not path.startswith("/"):
        raise ValueError(
            f"CRI endpoint {endpoint!r}: the socket path must be absolute (unix:///path/to/runtime.sock)"
        )
    return f"unix://{path}"


class CRIClient:
    """A gRPC channel to one runtime socket. Thread-safe (gRPC channels are); close it when done."""

    def __init__(
        self,
        endpoint: str = DEFAULT_ENDPOINT,
        *,
        timeout: float = 2.0,
        retries: int = 3,
        backoff: float = 0.05,
        backoff_max: float = 1.0,
        sleep: Callable[[float], None] = time.sleep,
        on_retry: Callable[[str, grpc.StatusCode], None] | None = None,
    ) -> None:
        """``timeout`` bounds each attempt; ``retries`` is the number of extra attempts after a transient
        failure, waiting ``backoff * 2**n`` (capped at ``backoff_max``, with +-50 % jitter) in between.
        ``on_retry(method, code)`` is called before each retry (metrics)."""
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.endpoint = normalize_endpoint(endpoint)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.backoff_max = backoff_max
        self._sleep = sleep
        self.on_retry = on_retry
        """``on_retry(method, code)``, called before each retry; may be replaced after construction."""
        self._channel = grpc.insecure_channel(
            self.endpoint,
            options=[
                ("grpc.max_receive_message_length", _MAX_MESSAGE),
                ("grpc.enable_http_proxy", 0),
            ],
        )
        self._stub = api_pb2_grpc.RuntimeServiceStub(self._channel)

    # --- calls --------------------------------------------------------------------------------------

    def version(self) -> Any:
        """The runtime's ``VersionResponse`` (``runtime_name``, ``runtime_version``, ...)."""
        return self._call("Version", api_pb2.VersionRequest(version="v1"))

    def update_cpuset(self, container_id: str, cpus: CPUSet | str) -> None:
        """Set the container's ``cpuset.cpus``; an empty set is refused (the runtime would ignore it)."""
        text = str(cpus)
        if not container_id:
            raise ValueError("update_cpuset: empty container id")
        if not text:
            raise ValueError(
                f"update_cpuset({container_id}): an empty cpuset means 'not specified' to the runtime"
            )
        self._call(
            "UpdateContainerResources",
            api_pb2.UpdateContainerResourcesRequest(
                container_id=container_id, linux=api_pb2.LinuxContainerResources(cpuset_cpus=text)
            ),
        )

    def list_containers(self, labels: Mapping[str, str] | None = None, *, running_only: bool = True) -> list:
        """Containers whose labels include all of ``labels`` (exact match), running ones by default."""
        flt = api_pb2.ContainerFilter(label_selector=dict(labels or {}))
        if running_only:
            flt.state.state = api_pb2.CONTAINER_RUNNING
        return list(self._call("ListContainers", api_pb2.ListContainersRequest(filter=flt)).containers)

    def find_container(self, pod_uid: str, container_name: str) -> str | None:
        """Id of the newest running container of the pod with that name, or ``None``.

        "Newest" is the highest restart attempt, then the latest creation time, as the kubelet picks it.
        """
        found = self.list_containers({POD_UID_LABEL: pod_uid, CONTAINER_NAME_LABEL: container_name})
        if not found:
            return None
        best = max(found, key=lambda c: (c.metadata.attempt, c.created_at))
        return best.id

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> CRIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- plumbing -----------------------------------------------------------------------------------

    def _call(self, method: str, request: Any) -> Any:
        rpc = getattr(self._stub, method)
        attempt = 0
        while True:
            attempt += 1
            try:
                return rpc(request, timeout=self.timeout)
            except grpc.RpcError as e:
                code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
                details = (e.details() if hasattr(e, "details") else str(e)) or ""
                if code not in RETRYABLE or attempt > self.retries:
                    raise CRIError(method, code, details, attempt) from None
                if self.on_retry is not None:
                    self.on_retry(method, code)
                delay = min(self.backoff_max, self.backoff * 2 ** (attempt - 1))
                self._sleep(delay * (0.5 + random.random()))
