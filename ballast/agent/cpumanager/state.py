"""CPU assignment state: the shared (default) cpuset and the CPUs assigned per pod and container.

Shaped like the kubelet's ``cpumanager/state`` package (``state.go``, ``state_mem.go``):

- ``StateReader``: the read-only view. Code that only decides (the policy) gets this and cannot write.
- ``State``: reader plus the writers (``set_cpuset``, ``set_default_cpuset``, ``delete``, ...), plus
  ``batch()`` to group several writes into one checkpoint write.
- ``MemoryState``: the in-memory implementation.

The persistent implementation, ``MemoryState`` plus the kubelet-format checkpoint file, is
``ballast.agent.cpumanager.state_checkpoint.CheckpointState`` (``state_checkpoint.go``). This module does no
I/O.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import NamedTuple

from ballast.agent.cpuset import CPUSet

__all__ = ["POLICY_NAME", "Assignments", "HeldCPUs", "MemoryState", "State", "StateReader"]

POLICY_NAME = "static"
"""Written as ``policyName``: assignments follow the kubelet static policy's rules (as crane's do)."""

Assignments = Mapping[str, Mapping[str, CPUSet]]
"""pod UID -> container name -> cpuset."""


class HeldCPUs(NamedTuple):
    """The CPUs one pod holds (``CPUManager.held``), with its namespace and name (``""`` until the pod
    watch names it)."""

    namespace: str
    name: str
    cpus: CPUSet


# --- the interfaces -----------------------------------------------------------------------------------


class StateReader(ABC):
    """Read-only view of the assignments."""

    @abstractmethod
    def get_cpuset(self, pod_uid: str, container: str) -> CPUSet | None:
        """The container's assigned CPUs, or ``None`` when it has no assignment."""

    @abstractmethod
    def get_default_cpuset(self) -> CPUSet:
        """The shared pool as recorded: every CPU not assigned to a container (reserved CPUs included)."""

    @abstractmethod
    def get_assignments(self) -> Assignments:
        """A read-only snapshot: pod UID -> container name -> cpuset."""

    def pod_cpus(self, pod_uid: str) -> CPUSet:
        """Union of the pod's assignments (empty when it has none)."""
        return CPUSet().union(*self.get_assignments().get(pod_uid, {}).values())

    def has_pod(self, pod_uid: str) -> bool:
        return pod_uid in self.get_assignments()


class State(StateReader):
    """Reader plus writers."""

    @abstractmethod
    def set_cpuset(self, pod_uid: str, container: str, cpus: CPUSet) -> None: ...

    @abstractmethod
    def set_default_cpuset(self, cpus: CPUSet) -> None: ...

    @abstractmethod
    def delete(self, pod_uid: str, container: str) -> None:
        """Drop one container's assignment (a pod without containers left is dropped too)."""

    @abstractmethod
    def delete_pod(self, pod_uid: str) -> None: ...

    @abstractmethod
    def clear(self) -> None:
        """Forget everything: empty default set, no assignments."""

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Group writes: a persistent state saves once when the outermost ``batch`` exits."""
        yield


# --- in memory ----------------------------------------------------------------------------------------


class MemoryState(State):
    """The state in memory. Not thread-safe: the manager serialises access."""

    def __init__(self, default: CPUSet | None = None, assignments: Assignments | None = None) -> None:
        self._default = default if default is not None else CPUSet()
        self._assignments: dict[str, dict[str, CPUSet]] = {}
        if assignments:
            self._replace(assignments)

    def _replace(self, assignments: Assignments) -> None:
        self._assignments = {uid: dict(ctrs) for uid, ctrs in assignments.items() if ctrs}

    def _changed(self) -> None:
        """Hook for subclasses: called after every write."""

    # reader
    def get_cpuset(self, pod_uid: str, container: str) -> CPUSet | None:
        return self._assignments.get(pod_uid, {}).get(container)

    def get_default_cpuset(self) -> CPUSet:
        return self._default

    def get_assignments(self) -> Assignments:
        return MappingProxyType({uid: MappingProxyType(dict(c)) for uid, c in self._assignments.items()})

    def has_pod(self, pod_uid: str) -> bool:
        return pod_uid in self._assignments

    def pod_cpus(self, pod_uid: str) -> CPUSet:
        return CPUSet().union(*self._assignments.get(pod_uid, {}).values())

    # writers
    def set_cpuset(self, pod_uid: str, container: str, cpus: CPUSet) -> None:
        self._assignments.setdefault(pod_uid, {})[container] = cpus
        self._changed()

    def set_default_cpuset(self, cpus: CPUSet) -> None:
        self._default = cpus
        self._changed()

    def delete(self, pod_uid: str, container: str) -> None:
        ctrs = self._assignments.get(pod_uid)
        if ctrs is None or container not in ctrs:
            return
        del ctrs[container]
        if not ctrs:
            del self._assignments[pod_uid]
        self._changed()

    def delete_pod(self, pod_uid: str) -> None:
        if self._assignments.pop(pod_uid, None) is not None:
            self._changed()

    def clear(self) -> None:
        self._default = CPUSet()
        self._assignments = {}
        self._changed()
