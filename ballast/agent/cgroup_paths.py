"""Where the kubelet puts a pod's cgroup: one rule for the cpuset writer and the load reader.

Three kubelet settings decide it (``CgroupLayout``):

- ``cgroupRoot`` (default ``/``): the parent of everything the kubelet makes. kind runs its nodes with
  ``/kubelet``, several kubelets on one host need one each.
- ``cgroupsPerQOS`` (default true): pods live under ``<cgroupRoot>/kubepods``: Guaranteed pods directly,
  the others under ``burstable`` / ``besteffort``; the pod's own cgroup is ``pod<uid>``. Without it the
  kubelet makes no pod cgroups at all (its containers sit straight under ``cgroupRoot``), so there is no
  pod cgroup to read: ``pod_parts`` is ``None``.
- ``cgroupDriver``: the cgroupfs driver joins those names as directories; the systemd driver escapes
  ``-`` to ``_`` in each name, joins the prefixes with ``-`` and nests them as ``.slice`` units (kubelet
  ``cgroup_manager_linux.go``, ``ToSystemd``), the root's names included: kind's ``/kubelet`` gives
  ``kubelet.slice/kubelet-kubepods.slice/...``.

Paths are relative: cgroup v1 puts them under each controller's hierarchy, v2 under the unified root.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ballast.contract.pod import QOSClass

__all__ = ["DRIVERS", "QOS_DIR", "CgroupLayout", "Driver", "pod_cgroup_parts"]

Driver = Literal["cgroupfs", "systemd"]
DRIVERS: tuple[Driver, ...] = ("cgroupfs", "systemd")

QOS_DIR = {QOSClass.GUARANTEED: "", QOSClass.BURSTABLE: "burstable", QOSClass.BEST_EFFORT: "besteffort"}
KUBEPODS = "kubepods"
"""The kubelet's node-allocatable cgroup below ``cgroupRoot`` (a constant in the kubelet)."""


def root_names(cgroup_root: str) -> tuple[str, ...]:
    """``cgroupRoot`` in the kubelet's cgroupfs form as names: ``/`` -> ``()``, ``/a/b`` -> ``("a", "b")``
    (``ParseCgroupfsToCgroupName``)."""
    return tuple(part for part in cgroup_root.split("/") if part)


def _to_systemd(names: tuple[str, ...]) -> tuple[str, ...]:
    escaped = [n.replace("-", "_") for n in names]
    return tuple("-".join(escaped[: i + 1]) + ".slice" for i in range(len(escaped)))


@dataclass(frozen=True, slots=True)
class CgroupLayout:
    """The kubelet's ``cgroupDriver``, ``cgroupRoot`` and ``cgroupsPerQOS``; defaults are the kubelet's."""

    driver: str = "cgroupfs"
    root: str = "/"
    per_qos: bool = True

    def __post_init__(self) -> None:
        if self.driver not in DRIVERS:
            raise ValueError(f"cgroup driver must be 'cgroupfs' or 'systemd', not {self.driver!r}")
        if not self.root.startswith("/"):
            raise ValueError(f"cgroupRoot must be an absolute path like '/' or '/kubelet', not {self.root!r}")

    def _path(self, names: tuple[str, ...]) -> tuple[str, ...]:
        return names if self.driver == "cgroupfs" else _to_systemd(names)

    def kubepods_parts(self) -> tuple[str, ...] | None:
        """The parent of every pod cgroup (``kubepods``, ``kubelet.slice/kubelet-kubepods.slice``), or
        ``None`` without ``cgroupsPerQOS``."""
        if not self.per_qos:
            return None
        return self._path((*root_names(self.root), KUBEPODS))

    def pod_parts(self, pod_uid: str, qos: QOSClass) -> tuple[str, ...] | None:
        """The pod cgroup's path components, e.g. ``("kubepods", "burstable", "pod<uid>")``, or with
        systemd ``("kubepods.slice", "kubepods-burstable.slice", "kubepods-burstable-pod<uid_>.slice")``;
        ``None`` without ``cgroupsPerQOS`` (the kubelet makes no pod cgroups then)."""
        if not self.per_qos:
            return None
        qos_dir = QOS_DIR[qos]
        names = (*root_names(self.root), KUBEPODS, *([qos_dir] if qos_dir else []), f"pod{pod_uid}")
        return self._path(names)

    def describe(self) -> str:
        qos = "" if self.per_qos else ", cgroupsPerQOS false: no pod cgroups"
        return f"{self.driver} driver, cgroupRoot {self.root}{qos}"


def pod_cgroup_parts(
    pod_uid: str, qos: QOSClass, driver: str = "cgroupfs", root: str = "/"
) -> tuple[str, ...]:
    """The pod cgroup's path components with ``cgroupsPerQOS`` (the kubelet's default)."""
    parts = CgroupLayout(driver, root).pod_parts(pod_uid, qos)
    assert parts is not None
    return parts
