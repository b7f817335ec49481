"""Where the kubelet puts a pod's cgroup: one rule for the cpuset writer and the load reader.

With ``cgroupsPerQOS`` (the kubelet's default) pods live under ``kubepods``: Guaranteed pods directly,
the others under ``burstable`` / ``besteffort``; the pod's own cgroup is ``pod<uid>``. The cgroupfs driver
joins those names as directories; the systemd driver escapes ``-`` to ``_`` in each, joins the prefixes
with ``-`` and nests them as ``.slice`` units (kubelet ``cgroup_manager_linux.go``, ``ToSystemd``). The
path is relative: cgroup v1 puts it under each controller's hierarchy, v2 under the unified root.
"""

from __future__ import annotations

from typing import Literal

from common.podspec import QOSClass

__all__ = ["DRIVERS", "QOS_DIR", "Driver", "pod_cgroup_parts"]

Driver = Literal["cgroupfs", "systemd"]
DRIVERS: tuple[Driver, ...] = ("cgroupfs", "systemd")

QOS_DIR = {QOSClass.GUARANTEED: "", QOSClass.BURSTABLE: "burstable", QOSClass.BEST_EFFORT: "besteffort"}


def pod_cgroup_parts(pod_uid: str, qos: QOSClass, driver: str, kubepods: str = "kubepods") -> tuple[str, ...]:
    """The pod cgroup's path components below the hierarchy root, e.g. ``("kubepods", "burstable",
    "pod<uid>")``, or with systemd ``("kubepods.slice", "kubepods-burstable.slice",
    "kubepods-burstable-pod<uid_>.slice")``."""
    qos_dir = QOS_DIR[qos]
    components = [kubepods, *([qos_dir] if qos_dir else []), f"pod{pod_uid}"]
    if driver == "cgroupfs":
        return tuple(components)
    if driver != "systemd":
        raise ValueError(f"cgroup driver must be 'cgroupfs' or 'systemd', not {driver!r}")
    escaped = [c.replace("-", "_") for c in components]
    return tuple("-".join(escaped[: i + 1]) + ".slice" for i in range(len(escaped)))
