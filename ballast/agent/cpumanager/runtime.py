"""How cpusets reach containers: one small interface, three implementations side by side.

- ``CRIRuntime``: the real path. ``UpdateContainerResources`` over the CRI socket, which also updates the
  runtime's stored spec, so the cpuset survives a runtime restart.
- ``CgroupfsRuntime``: the fallback, writing ``cpuset.cpus`` under a cgroup root (cgroup v1 or v2,
  cgroupfs or systemd driver; paths as the kubelet and containerd lay them out). It bypasses the
  runtime, so a later CRI update or container restart reverts it; use it only where CRI cannot be used.
- ``MemoryRuntime``: an in-process runtime for tests and benchmarks, recording every call.

``CpusetReader`` reads a container's cpuset back from its cgroup; ``CgroupfsRuntime`` is one (its
``read_cpuset``), whichever runtime writes.

``set_cpuset`` raises ``RuntimeCallError`` (``reason`` is a short code for metrics; ``not_found`` means
the container is gone or unknown); the manager logs, counts and retries on its next pass.
"""

from __future__ import annotations

import errno
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ballast.agent.cgroup_paths import pod_cgroup_parts
from ballast.agent.cpuset import CPUSet, CPUSetParseError
from ballast.contract.pod import QOSClass

if TYPE_CHECKING:
    from ballast.agent.cpumanager.metrics import CPUManagerMetrics
    from ballast.agent.cri.client import CRIClient

__all__ = [
    "DEFAULT_CGROUP_ROOT",
    "CRIRuntime",
    "CgroupfsRuntime",
    "ContainerRef",
    "ContainerRuntime",
    "CpusetReader",
    "MemoryRuntime",
    "RuntimeCallError",
]

DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """One container of one pod, as the manager knows it."""

    pod_uid: str
    pod_namespace: str
    pod_name: str
    container_name: str
    container_id: str = ""
    """Without the ``<runtime>://`` prefix; empty when the pod status has none yet."""
    runtime: str = ""
    """The status's prefix (``containerd``, ``cri-o``, ``docker``); empty when unknown."""
    qos: QOSClass = QOSClass.BURSTABLE

    def with_id(self, container_id: str) -> ContainerRef:
        return ContainerRef(
            self.pod_uid,
            self.pod_namespace,
            self.pod_name,
            self.container_name,
            container_id,
            self.runtime,
            self.qos,
        )

    def __str__(self) -> str:
        cid = f" ({self.container_id[:13]})" if self.container_id else ""
        return f"{self.pod_namespace}/{self.pod_name} container {self.container_name}{cid}"


class RuntimeCallError(Exception):
    """A cpuset update or lookup that failed; ``reason`` is one of ``not-found``, ``unavailable``,
    ``invalid``, ``io``, ``error``."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)

    @property
    def not_found(self) -> bool:
        return self.reason == "not-found"


class ContainerRuntime(ABC):
    """Where cpusets are applied."""

    name: str = "runtime"

    @abstractmethod
    def set_cpuset(self, ref: ContainerRef, cpus: CPUSet) -> None:
        """Set the container's CPU list (``ref.container_id`` is set). Raises ``RuntimeCallError``."""

    def find_container_id(self, ref: ContainerRef) -> str | None:
        """The id of the running container ``ref`` names, when the pod status lacks it; ``None`` if none.

        Raises ``RuntimeCallError`` when the lookup itself fails."""
        return None

    def bind_metrics(self, metrics: CPUManagerMetrics) -> None:  # noqa: B027 - optional hook
        """Let the runtime count its own retries."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class CpusetReader(ABC):
    """Reads what a container's cgroup says its CPUs are."""

    @abstractmethod
    def read_cpuset(self, ref: ContainerRef) -> CPUSet:
        """The container's ``cpuset.cpus`` (its effective CPUs when that is empty: cgroup v2's "inherit").
        Raises ``RuntimeCallError`` (``not-found`` when it has no cgroup, ``io`` when unreadable)."""


# --- CRI ----------------------------------------------------------------------------------------------


class CRIRuntime(ContainerRuntime):
    """Cpusets through the CRI ``RuntimeService`` (containerd, CRI-O)."""

    name = "cri"

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        timeout: float = 2.0,
        retries: int = 3,
        client: CRIClient | None = None,
    ) -> None:
        from ballast.agent.cri.client import DEFAULT_ENDPOINT, CRIClient

        self.client = client or CRIClient(endpoint or DEFAULT_ENDPOINT, timeout=timeout, retries=retries)

    def check(self) -> str:
        """Ask the runtime for its version: ``"containerd 1.6.20 (CRI v1)"``; ``RuntimeCallError`` when it
        does not answer. For start-up logs and readiness."""
        from ballast.agent.cri.client import CRIError

        try:
            v = self.client.version()
        except CRIError as e:
            raise RuntimeCallError(_cri_reason(e), f"CRI runtime at {self.client.endpoint}: {e}") from None
        return f"{v.runtime_name} {v.runtime_version} (CRI {v.runtime_api_version})"

    def bind_metrics(self, metrics: CPUManagerMetrics) -> None:
        def count(method: str, code: object) -> None:
            metrics.runtime_retries.labels(method, getattr(code, "name", str(code))).inc()

        self.client.on_retry = count

    def set_cpuset(self, ref: ContainerRef, cpus: CPUSet) -> None:
        from ballast.agent.cri.client import CRIError

        try:
            self.client.update_cpuset(ref.container_id, cpus)
        except CRIError as e:
            raise RuntimeCallError(_cri_reason(e), f"{ref}: {e}") from None

    def find_container_id(self, ref: ContainerRef) -> str | None:
        from ballast.agent.cri.client import CRIError

        try:
            return self.client.find_container(ref.pod_uid, ref.container_name)
        except CRIError as e:
            raise RuntimeCallError(_cri_reason(e), f"{ref}: looking the container up: {e}") from None

    def close(self) -> None:
        self.client.close()


def _cri_reason(e: object) -> str:
    import grpc

    code = getattr(e, "code", None)
    if code == grpc.StatusCode.NOT_FOUND:
        return "not-found"
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return "unavailable"
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
        return "invalid"
    return "error"


# --- cgroupfs -----------------------------------------------------------------------------------------

# Container directory under the pod cgroup, by runtime (status prefix) and driver.
_LEAF_CGROUPFS = {"containerd": "{id}", "cri-o": "crio-{id}", "docker": "{id}"}
_LEAF_SYSTEMD = {
    "containerd": "cri-containerd-{id}.scope",
    "cri-o": "crio-{id}.scope",
    "docker": "docker-{id}.scope",
}


class CgroupfsRuntime(ContainerRuntime, CpusetReader):
    """Write ``cpuset.cpus`` directly (the fallback to CRI).

    ``root`` is what ``/sys/fs/cgroup`` is (tests pass a temporary tree). ``version`` ``"auto"`` reads the
    tree: ``cgroup.controllers`` at the root means v2 (unified), otherwise v1 with a ``cpuset``
    hierarchy. ``driver`` and ``cgroup_root`` are the kubelet's ``cgroupDriver`` and ``cgroupRoot``
    (``ballast.agent.cgroup_paths``). ``lookup`` (usually a ``CRIRuntime``) finds container ids the pod
    status lacks; without it such containers are skipped until the status has their id.

    After writing, the effective CPU list (``cpuset.effective_cpus`` v1, ``cpuset.cpus.effective`` v2) is
    read back when the kernel provides it, and a mismatch is an error.
    """

    name = "cgroupfs"

    def __init__(
        self,
        root: Path | str = DEFAULT_CGROUP_ROOT,
        *,
        driver: Literal["cgroupfs", "systemd"] = "cgroupfs",
        version: Literal["auto", 1, 2] = "auto",
        cgroup_root: str = "/",
        default_runtime: str = "containerd",
        lookup: ContainerRuntime | None = None,
    ) -> None:
        if driver not in ("cgroupfs", "systemd"):
            raise ValueError(f"cgroup driver must be 'cgroupfs' or 'systemd', not {driver!r}")
        if default_runtime not in _LEAF_CGROUPFS:
            raise ValueError(f"runtime must be one of {sorted(_LEAF_CGROUPFS)}, not {default_runtime!r}")
        self.root = Path(root)
        self.driver = driver
        self.cgroup_root = cgroup_root
        self.default_runtime = default_runtime
        self.lookup = lookup
        if version == "auto":
            version = 2 if (self.root / "cgroup.controllers").exists() else 1
        if version not in (1, 2):
            raise ValueError(f"cgroup version must be 1, 2 or 'auto', not {version!r}")
        self.version = version
        self._base = self.root / "cpuset" if version == 1 else self.root
        self._effective_name = "cpuset.effective_cpus" if version == 1 else "cpuset.cpus.effective"

    # --- paths --------------------------------------------------------------------------------------

    def pod_dir(self, pod_uid: str, qos: QOSClass) -> Path:
        """The pod cgroup directory (under the cpuset hierarchy on v1)."""
        return self._base.joinpath(*pod_cgroup_parts(pod_uid, qos, self.driver, self.cgroup_root))

    def container_dir(self, ref: ContainerRef, qos: QOSClass | None = None) -> Path:
        runtime = ref.runtime if ref.runtime in _LEAF_CGROUPFS else self.default_runtime
        leaves = _LEAF_CGROUPFS if self.driver == "cgroupfs" else _LEAF_SYSTEMD
        return self.pod_dir(ref.pod_uid, qos or ref.qos) / leaves[runtime].format(id=ref.container_id)

    def _existing_dir(self, ref: ContainerRef) -> Path:
        first = self.container_dir(ref)
        if first.is_dir():
            return first
        # Our QoS class is computed like the kubelet's; still, look in the other QoS dirs before failing.
        for qos in QOSClass:
            if qos is not ref.qos:
                other = self.container_dir(ref, qos)
                if other.is_dir():
                    return other
        raise RuntimeCallError("not-found", f"{ref}: no cgroup directory {first}")

    # --- writes -------------------------------------------------------------------------------------

    def set_cpuset(self, ref: ContainerRef, cpus: CPUSet) -> None:
        if not ref.container_id:
            raise RuntimeCallError("invalid", f"{ref}: no container id")
        if not cpus:
            raise RuntimeCallError("invalid", f"{ref}: refusing to write an empty cpuset")
        directory = self._existing_dir(ref)
        target = directory / "cpuset.cpus"
        try:
            with open(target, "w") as f:
                f.write(str(cpus))
        except FileNotFoundError:
            raise RuntimeCallError("not-found", f"{ref}: {target} does not exist") from None
        except OSError as e:
            reason = "invalid" if e.errno in (errno.EINVAL, errno.ERANGE) else "io"
            hint = " (not a subset of the parent cgroup's cpuset.cpus?)" if e.errno == errno.EINVAL else ""
            raise RuntimeCallError(reason, f"{ref}: writing {cpus} to {target}: {e.strerror}{hint}") from None
        effective_path = directory / self._effective_name
        if not effective_path.exists():
            return
        try:
            effective = CPUSet.parse(effective_path.read_text().strip())
        except (OSError, CPUSetParseError) as e:
            raise RuntimeCallError("io", f"{ref}: reading back {effective_path}: {e}") from None
        if effective != cpus:
            raise RuntimeCallError(
                "invalid", f"{ref}: wrote {cpus} but {effective_path} says {effective or '(empty)'}"
            )

    def read_cpuset(self, ref: ContainerRef) -> CPUSet:
        if not ref.container_id:
            raise RuntimeCallError("invalid", f"{ref}: no container id")
        directory = self._existing_dir(ref)
        try:
            text = (directory / "cpuset.cpus").read_text().strip()
            if not text:
                text = (directory / self._effective_name).read_text().strip()
            return CPUSet.parse(text)
        except FileNotFoundError:
            raise RuntimeCallError("not-found", f"{ref}: {directory} is gone") from None
        except (OSError, CPUSetParseError) as e:
            raise RuntimeCallError("io", f"{ref}: reading {directory}/cpuset.cpus: {e}") from None

    def find_container_id(self, ref: ContainerRef) -> str | None:
        return self.lookup.find_container_id(ref) if self.lookup is not None else None

    def bind_metrics(self, metrics: CPUManagerMetrics) -> None:
        if self.lookup is not None:
            self.lookup.bind_metrics(metrics)

    def close(self) -> None:
        if self.lookup is not None:
            self.lookup.close()


# --- in memory ----------------------------------------------------------------------------------------


class MemoryRuntime(ContainerRuntime):
    """A runtime in a dict: ``containers`` maps (pod UID, container name) to the running container's
    id (used by ``find_container_id``), ``cpusets`` holds what was last set per container id, ``calls``
    every ``set_cpuset`` in order. ``fail`` (a callable returning a ``RuntimeCallError`` or ``None``)
    injects failures. Thread-safe."""

    name = "memory"

    def __init__(self, fail: Callable[[ContainerRef, CPUSet], RuntimeCallError | None] | None = None) -> None:
        self.containers: dict[tuple[str, str], str] = {}
        self.cpusets: dict[str, CPUSet] = {}
        self.calls: list[tuple[str, CPUSet]] = []
        self.lookups: list[tuple[str, str]] = []
        self.fail = fail
        self._lock = threading.Lock()

    def set_cpuset(self, ref: ContainerRef, cpus: CPUSet) -> None:
        with self._lock:
            if self.fail is not None:
                error = self.fail(ref, cpus)
                if error is not None:
                    raise error
            self.calls.append((ref.container_id, cpus))
            self.cpusets[ref.container_id] = cpus

    def find_container_id(self, ref: ContainerRef) -> str | None:
        with self._lock:
            self.lookups.append((ref.pod_uid, ref.container_name))
            return self.containers.get((ref.pod_uid, ref.container_name))
