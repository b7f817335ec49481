"""A fake node for CPU manager tests: a CRI runtime served over gRPC, and pods as the API server shows them.

- ``FakeRuntimeService`` is a ``runtime.v1.RuntimeService`` servicer (Version, ListContainers,
  UpdateContainerResources) holding containers in memory and recording every update request, raw bytes
  included. ``fail_updates`` makes the next update calls fail with chosen gRPC codes.
- ``serve_fake_runtime()`` runs it in-process on a unix socket in a short temporary directory (socket
  paths are limited to ~107 bytes, which pytest's ``tmp_path`` can exceed) and yields the endpoint.
- ``container()`` / ``pod()`` build pod JSON with the fields the agent reads, and status entries with
  ``containerd://`` ids that follow the pod (``container_id(uid, name, restarts)``).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from ballast.agent.cri.client import (
    CONTAINER_NAME_LABEL,
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
    api_pb2,
    api_pb2_grpc,
)

NODE = "node-a"
SCHEDULER = "ballast-scheduler"


# --- the runtime --------------------------------------------------------------------------------------


@dataclass
class FakeContainer:
    id: str
    sandbox_id: str
    name: str
    attempt: int
    created_at: int
    labels: dict[str, str]
    state: int = api_pb2.CONTAINER_RUNNING
    cpuset: str = ""


@dataclass
class FakeRuntimeService(api_pb2_grpc.RuntimeServiceServicer):
    containers: dict[str, FakeContainer] = field(default_factory=dict)
    updates: list[tuple[str, str]] = field(default_factory=list)
    """(container id, cpuset_cpus) of every UpdateContainerResources that reached the servicer."""
    raw_updates: list[bytes] = field(default_factory=list)
    list_filters: list[dict[str, str]] = field(default_factory=list)
    fail_updates: list[grpc.StatusCode] = field(default_factory=list)
    """Codes for the next update calls to fail with, consumed one per call."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_container(
        self,
        container_id: str,
        pod_uid: str,
        name: str,
        *,
        pod_name: str = "pod",
        namespace: str = "default",
        attempt: int = 0,
        running: bool = True,
    ) -> FakeContainer:
        c = FakeContainer(
            id=container_id,
            sandbox_id=f"sandbox-{pod_uid}",
            name=name,
            attempt=attempt,
            created_at=time.time_ns(),
            labels={
                POD_UID_LABEL: pod_uid,
                POD_NAME_LABEL: pod_name,
                POD_NAMESPACE_LABEL: namespace,
                CONTAINER_NAME_LABEL: name,
            },
            state=api_pb2.CONTAINER_RUNNING if running else api_pb2.CONTAINER_EXITED,
        )
        with self.lock:
            self.containers[container_id] = c
        return c

    # --- servicer -----------------------------------------------------------------------------------

    def Version(self, request: Any, context: Any) -> Any:
        return api_pb2.VersionResponse(
            version="0.1.0", runtime_name="fake", runtime_version="1.0", runtime_api_version="v1"
        )

    def ListContainers(self, request: Any, context: Any) -> Any:
        flt = request.filter
        with self.lock:
            self.list_filters.append(dict(flt.label_selector))
            out = []
            for c in self.containers.values():
                if flt.id and c.id != flt.id:
                    continue
                if flt.HasField("state") and c.state != flt.state.state:
                    continue
                if flt.pod_sandbox_id and c.sandbox_id != flt.pod_sandbox_id:
                    continue
                if any(c.labels.get(k) != v for k, v in flt.label_selector.items()):
                    continue
                out.append(
                    api_pb2.Container(
                        id=c.id,
                        pod_sandbox_id=c.sandbox_id,
                        metadata=api_pb2.ContainerMetadata(name=c.name, attempt=c.attempt),
                        state=c.state,
                        created_at=c.created_at,
                        labels=c.labels,
                    )
                )
        return api_pb2.ListContainersResponse(containers=out)

    def UpdateContainerResources(self, request: Any, context: Any) -> Any:
        with self.lock:
            self.raw_updates.append(request.SerializeToString())
            if self.fail_updates:
                code = self.fail_updates.pop(0)
                context.abort(code, f"injected failure {code.name}")
            c = self.containers.get(request.container_id)
            if c is None:
                context.abort(grpc.StatusCode.NOT_FOUND, f"container {request.container_id!r} not found")
            self.updates.append((request.container_id, request.linux.cpuset_cpus))
            c.cpuset = request.linux.cpuset_cpus
        return api_pb2.UpdateContainerResourcesResponse()

    def cpuset_of(self, container_id: str) -> str:
        with self.lock:
            return self.containers[container_id].cpuset


@contextlib.contextmanager
def serve_fake_runtime(service: FakeRuntimeService | None = None) -> Iterator[tuple[FakeRuntimeService, str]]:
    """Serve ``service`` on a fresh unix socket; yields ``(service, "unix:///.../cri.sock")``."""
    service = service or FakeRuntimeService()
    directory = Path(tempfile.mkdtemp(prefix="ballast-cri-"))
    socket_path = directory / "cri.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_RuntimeServiceServicer_to_server(service, server)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    try:
        yield service, f"unix://{socket_path}"
    finally:
        server.stop(grace=None).wait(5)
        shutil.rmtree(directory, ignore_errors=True)


# --- pods ---------------------------------------------------------------------------------------------


def container(
    name: str,
    cpu: str | None = "1",
    memory: str | None = "128Mi",
    *,
    request_cpu: str | None = None,
    restart_policy: str | None = None,
) -> dict[str, Any]:
    """A container with limits ``cpu``/``memory`` and requests equal to them unless ``request_cpu``."""
    limits = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    requests = dict(limits)
    if request_cpu is not None:
        requests["cpu"] = request_cpu
    c: dict[str, Any] = {
        "name": name,
        "image": "busybox",
        "resources": {"limits": limits, "requests": requests},
    }
    if restart_policy:
        c["restartPolicy"] = restart_policy
    return c


def container_id(uid: str, name: str, restarts: int = 0) -> str:
    return f"{uid.replace('-', '')[:12]}{name}{restarts}"


def zones(**cpus: int) -> list[dict[str, Any]]:
    """``zones(node0=2, node1=1)`` -> a topology-result list."""
    return [
        {"name": zone, "type": "Node", "resources": {"capacity": {"cpu": str(n)}}} for zone, n in cpus.items()
    ]


def pod(
    name: str,
    containers: Sequence[dict[str, Any]],
    *,
    init: Sequence[dict[str, Any]] = (),
    uid: str | None = None,
    namespace: str = "default",
    node: str = NODE,
    policy: str | None = None,
    result: list[dict[str, Any]] | str | None = None,
    scheduler: str = SCHEDULER,
    phase: str = "Running",
    statuses: str = "running",
    restarts: dict[str, int] | None = None,
    runtime: str = "containerd",
    created: str = "2026-01-01T00:00:00Z",
) -> dict[str, Any]:
    """Pod JSON. ``statuses``: ``running`` (every container running, with ids), ``no-ids`` (running,
    ids not known yet), ``waiting`` (not started), ``none`` (no container statuses at all)."""
    uid = uid or str(uuid.uuid4())
    annotations: dict[str, str] = {}
    if policy is not None:
        annotations["topology.crane.io/cpu-policy"] = policy
    if result is not None:
        annotations["topology.crane.io/topology-result"] = (
            result if isinstance(result, str) else __import__("json").dumps(result)
        )
    restarts = restarts or {}

    def status(c: dict[str, Any]) -> dict[str, Any]:
        n = restarts.get(c["name"], 0)
        s: dict[str, Any] = {"name": c["name"], "restartCount": n, "ready": statuses == "running"}
        if statuses == "waiting":
            s["state"] = {"waiting": {"reason": "ContainerCreating"}}
            return s
        s["state"] = {"running": {"startedAt": created}}
        if statuses == "running":
            s["containerID"] = f"{runtime}://{container_id(uid, c['name'], n)}"
        return s

    st: dict[str, Any] = {"phase": phase}
    if statuses != "none":
        st["containerStatuses"] = [status(c) for c in containers]
        if init:
            # Completed init containers are terminated; sidecars run.
            st["initContainerStatuses"] = [
                status(c)
                if c.get("restartPolicy") == "Always"
                else {"name": c["name"], "state": {"terminated": {"exitCode": 0}}}
                for c in init
            ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "annotations": annotations,
            "creationTimestamp": created,
        },
        "spec": {
            "nodeName": node,
            "schedulerName": scheduler,
            "containers": list(containers),
            **({"initContainers": list(init)} if init else {}),
        },
        "status": st,
    }
