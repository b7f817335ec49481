"""Each pod's CPU counter and memory working set, read from its pod cgroup as the kubelet reads them.

| quantity | cgroup v1 | cgroup v2 |
|---|---|---|
| cumulative CPU | ``cpuacct.usage`` (ns, children included) | ``cpu.stat`` ``usage_usec`` (µs) |
| memory usage | ``memory.usage_in_bytes`` | ``memory.current`` |
| inactive file pages | ``memory.stat`` ``total_inactive_file`` | ``memory.stat`` ``inactive_file`` |

The working set is ``max(0, usage - inactive file)`` (cAdvisor's, so the kubelet's and metrics-server's).
The pod cgroup's counters include every container and every exited process of the pod, and restart only
with a new pod (a new UID, a new cgroup), so a container restart never makes a rate negative.

v1 or v2: a ``cgroup.controllers`` file at the root means the unified (v2) tree; otherwise v1 with one
hierarchy per controller (``cpuacct``, else ``cpu,cpuacct``; ``memory``). The pod's path follows the
kubelet's cgroup layout (driver, ``cgroupRoot``, ``cgroupsPerQOS``: ``ballast.agent.cgroup_paths``) and the
pod's
QoS class; the other QoS parents are tried when the first guess is not there (the class is computed from
the spec, as the kubelet does, but a resize can move it).
A pod whose cgroup or CPU counter is missing, or vanishes during the read, is ``None``: skipped this
round. Missing memory files (the controller not enabled there) leave only the working set unknown.

Pressure (``read_pressure``, only when the policy names a pressure metric): the CPU time the pod's limit
held it, v2 ``cpu.stat`` ``throttled_usec``, v1 the ``cpu`` hierarchy's ``cpu.stat`` ``throttled_time``
(ns); and its ``{cpu,memory,io}.pressure`` ``some`` totals from the unified tree: the pod cgroup on v2, on a
hybrid v1 host the same path under ``unified`` when there is one (``ballast.agent.load.pressure``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ballast.agent.cgroup_paths import CgroupLayout
from ballast.agent.load.pressure import PRESSURE_RESOURCES, PressureError, parse_pressure
from ballast.contract.pod import QOSClass

__all__ = [
    "CgroupError",
    "PodCgroups",
    "PodCounters",
    "PodPressureCounters",
    "cgroup_version",
    "inactive_file",
    "throttled_us",
    "working_set",
]


class CgroupError(ValueError):
    """A cgroup file that does not hold what the kernel writes there."""


@dataclass(frozen=True, slots=True)
class PodCounters:
    """One read of a pod cgroup: cumulative CPU in nanoseconds, working set in bytes."""

    cpu_ns: int
    working_set: int | None
    """``None`` when the memory controller's files are missing (the pod's CPU still counts)."""


@dataclass(frozen=True, slots=True)
class PodPressureCounters:
    """One read of a pod cgroup's pressure counters, in microseconds (cumulative)."""

    throttled_us: int | None
    """CPU time its CPU limit held it, summed over CPUs; ``None`` without the CPU controller's files."""
    some_us: dict[str, int]
    """``cpu``/``memory``/``io`` -> the ``some`` total of that pressure file; empty without a unified tree."""


def cgroup_version(root: Path) -> int:
    """2 when ``root`` is a unified (v2) hierarchy, else 1."""
    return 2 if (root / "cgroup.controllers").exists() else 1


def inactive_file(memory_stat: str, version: int) -> int:
    """The inactive file pages of ``memory.stat``: v1's hierarchical ``total_inactive_file``, v2's
    ``inactive_file``; 0 when the key is absent (nothing to subtract)."""
    key = "total_inactive_file" if version == 1 else "inactive_file"
    for line in memory_stat.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                raise CgroupError(f"memory.stat: {key} is not a number: {value[:40]!r}") from None
    return 0


def working_set(usage: int, inactive: int) -> int:
    """cAdvisor's working set: usage minus inactive file pages, never below 0."""
    return max(0, usage - inactive)


def throttled_us(cpu_stat: str, version: int) -> int | None:
    """The throttled time of ``cpu.stat`` in microseconds: v2 ``throttled_usec``, v1 ``throttled_time``
    (ns); ``None`` when the key is absent (v2 without ``cpu`` in the parent's ``subtree_control``)."""
    key = "throttled_usec" if version == 2 else "throttled_time"
    for line in cpu_stat.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                n = int(value)
            except ValueError:
                raise CgroupError(f"cpu.stat: {key} is not a number: {value[:40]!r}") from None
            return n if version == 2 else n // 1000
    return None


def _read(path: str) -> str:
    """A small kernel file, whole: one ``open`` and one ``read`` (no buffered text wrapper)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 65536).decode()
    finally:
        os.close(fd)


def _usage_usec(cpu_stat: str) -> int:
    for line in cpu_stat.splitlines():
        name, _, value = line.partition(" ")
        if name == "usage_usec":
            return int(value)
    raise CgroupError("cpu.stat has no usage_usec")


class PodCgroups:
    """Reads pod cgroups under ``root`` (``/sys/fs/cgroup``, or a tree a test made)."""

    def __init__(self, root: Path | str, layout: CgroupLayout | None = None) -> None:
        self.root = Path(root)
        self.layout = layout or CgroupLayout()
        self.version = cgroup_version(self.root)
        if self.version == 2:
            self.cpu_base = self._memory_base = self.root
        else:
            cpuacct = self.root / "cpuacct"
            self.cpu_base = cpuacct if cpuacct.is_dir() else self.root / "cpu,cpuacct"
            self._memory_base = self.root / "memory"
        if self.version == 2:
            self._quota_base: Path = self.root
            self._pressure_base: Path | None = self.root
        else:
            cpu = self.root / "cpu"
            self._quota_base = cpu if cpu.is_dir() else self.root / "cpu,cpuacct"
            unified = self.root / "unified"
            self._pressure_base = unified if (unified / "cgroup.controllers").exists() else None
        self._found: dict[str, tuple[str, ...]] = {}
        """pod uid -> the path that held its cgroup last time (saves the QoS search on every read)."""

    def describe(self) -> str:
        return f"cgroup v{self.version}, {self.layout.describe()}, under {self.root}"

    def kubepods_dir(self) -> Path | None:
        """Where the pod cgroups should be (in the CPU hierarchy on v1), for messages; ``None`` when the
        kubelet makes no pod cgroups."""
        parts = self.layout.kubepods_parts()
        return None if parts is None else self.cpu_base.joinpath(*parts)

    def relayout(self, layout: CgroupLayout) -> None:
        """Follow another layout from now on (the kubelet's, once its settings could be read)."""
        if layout != self.layout:
            self.layout = layout
            self._found.clear()

    def _parts(self, uid: str, qos: QOSClass) -> tuple[str, ...] | None:
        known = self._found.get(uid)
        if known is not None:
            return known
        for candidate in (qos, *(q for q in QOSClass if q is not qos)):
            parts = self.layout.pod_parts(uid, candidate)
            if parts is None:
                return None
            if self.cpu_base.joinpath(*parts).is_dir():
                self._found[uid] = parts
                return parts
        return None

    def read(self, uid: str, qos: QOSClass) -> PodCounters | None:
        """The pod's counters, or ``None`` when its cgroup (or a file in it) is not there."""
        parts = self._parts(uid, qos)
        if parts is None:
            return None
        try:
            if self.version == 2:
                d = self.root.joinpath(*parts)
                cpu_ns = _usage_usec((d / "cpu.stat").read_text()) * 1000
            else:
                cpu_ns = int(self.cpu_base.joinpath(*parts, "cpuacct.usage").read_text())
                d = self._memory_base.joinpath(*parts)
        except (OSError, ValueError):
            self._found.pop(uid, None)  # gone, or moved to another QoS parent: search again next time
            return None
        return PodCounters(cpu_ns, self._working_set(d))

    def _working_set(self, d: Path) -> int | None:
        """``None`` when the memory controller's files are not there (v2 without ``memory`` in the
        parents' ``subtree_control``, v1 without the memory hierarchy) or vanished mid-read."""
        usage_file = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        try:
            usage = int((d / usage_file).read_text())
            inactive = inactive_file((d / "memory.stat").read_text(), self.version)
        except (OSError, ValueError):
            return None
        return working_set(usage, inactive)

    def read_pressure(self, uid: str, qos: QOSClass) -> PodPressureCounters | None:
        """The pod's throttled time and pressure totals (module docstring), ``None`` when its cgroup is
        not there; a file that is missing or unreadable leaves only its figure out. The files are opened by
        plain path strings and read whole in one call: four per pod, the most of any pressure read."""
        parts = self._parts(uid, qos)
        if parts is None:
            return None
        rel = "/".join(parts)
        try:
            stat = _read(f"{self._quota_base}/{rel}/cpu.stat")
            throttled = throttled_us(stat, self.version)
        except (OSError, ValueError):
            throttled = None
        some: dict[str, int] = {}
        if self._pressure_base is not None:
            d = f"{self._pressure_base}/{rel}/"
            for resource in PRESSURE_RESOURCES:
                try:
                    some[resource] = parse_pressure(_read(d + resource + ".pressure")).some
                except (OSError, PressureError, UnicodeDecodeError):
                    continue
        return PodPressureCounters(throttled, some)

    def forget(self, keep: set[str]) -> None:
        """Drop cached paths of pods no longer on the node."""
        for uid in [u for u in self._found if u not in keep]:
            del self._found[uid]
