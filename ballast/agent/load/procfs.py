"""The node's CPU and memory from ``/proc``: crane's rules, read from the files the kernel keeps.

CPU: the aggregate ``cpu`` line of ``/proc/stat`` holds cumulative ticks per mode. crane's utilisation
is ``1 - idle rate``: every mode but ``idle`` is busy, so ``iowait`` and ``steal`` count as busy, and
``guest``/``guest_nice`` are never added because the kernel already counts them inside ``user``/``nice``.
Over an interval, utilisation = Δbusy / Δtotal of the eight fields ``user`` .. ``steal``. A mode whose
counter went backwards (``iowait`` may, and an idle counter after CPU hotplug) contributes 0, so one
bad counter never yields a negative or >1 rate.

Memory: ``1 - MemAvailable / MemTotal`` (crane's rule); used bytes are ``MemTotal - MemAvailable``.

Pressure (PSI): ``pressure/cpu``, ``pressure/memory``, ``pressure/io``, read only when the policy names a
pressure metric (``ballast.agent.load.pressure`` has the parsing and the rules).

These files are the host's even inside a container, so no host mount is needed. Parsing is pure
(``parse_stat``, ``parse_meminfo``); ``ProcReader`` only opens the files under ``--proc-root``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ballast.agent.load.pressure import PressureTotals, parse_pressure

__all__ = [
    "CPUTimes",
    "MemInfo",
    "ProcError",
    "ProcReader",
    "cpu_utilisation",
    "parse_meminfo",
    "parse_stat",
]

_FIELDS = 8
"""user nice system idle iowait irq softirq steal; guest and guest_nice are inside user and nice."""
_IDLE = 3


class ProcError(ValueError):
    """A ``/proc`` file that does not hold what the kernel writes there; the message names it."""


@dataclass(frozen=True, slots=True)
class CPUTimes:
    """The aggregate ``cpu`` line's first eight counters (ticks) and how many CPUs the file lists."""

    modes: tuple[int, ...]
    cpus: int

    @property
    def idle(self) -> int:
        return self.modes[_IDLE]


@dataclass(frozen=True, slots=True)
class MemInfo:
    total: int
    """``MemTotal`` in bytes."""
    available: int
    """``MemAvailable`` in bytes."""

    @property
    def used(self) -> int:
        return max(0, self.total - self.available)

    @property
    def utilisation(self) -> float:
        """crane's ``1 - MemAvailable/MemTotal``, clamped to [0, 1]."""
        if self.total <= 0:
            return 0.0
        return min(1.0, max(0.0, 1.0 - self.available / self.total))


def parse_stat(text: str, source: str = "/proc/stat") -> CPUTimes:
    """The aggregate ``cpu`` line and the number of ``cpuN`` lines (the online CPUs)."""
    modes: tuple[int, ...] | None = None
    cpus = 0
    for line in text.splitlines():
        if not line.startswith("cpu"):
            continue
        name, _, rest = line.partition(" ")
        if name == "cpu":
            fields = rest.split()
            if len(fields) < 4:
                raise ProcError(f"{source}: the cpu line has {len(fields)} fields, expected at least 4")
            try:
                values = [int(f) for f in fields[:_FIELDS]]
            except ValueError:
                raise ProcError(f"{source}: the cpu line is not a list of integers: {line[:80]!r}") from None
            modes = tuple(values + [0] * (_FIELDS - len(values)))
        elif name[3:].isdigit():
            cpus += 1
    if modes is None:
        raise ProcError(f"{source}: no aggregate cpu line")
    return CPUTimes(modes, max(cpus, 1))


def cpu_utilisation(before: CPUTimes, after: CPUTimes) -> float | None:
    """Share of the interval the CPUs were not idle (crane's ``1 - idle rate``), in [0, 1]; ``None`` when
    no tick passed. A counter that went backwards contributes nothing."""
    deltas = [max(0, a - b) for a, b in zip(after.modes, before.modes, strict=True)]
    total = sum(deltas)
    if total <= 0:
        return None
    return min(1.0, max(0.0, (total - deltas[_IDLE]) / total))


def parse_meminfo(text: str, source: str = "/proc/meminfo") -> MemInfo:
    """``MemTotal`` and ``MemAvailable`` in bytes (the file says kB, meaning KiB)."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            parts = rest.split()
            try:
                value = int(parts[0])
            except (IndexError, ValueError):
                raise ProcError(f"{source}: {key} is not a number: {line[:80]!r}") from None
            found[key] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    if "MemTotal" not in found or "MemAvailable" not in found:
        missing = sorted({"MemTotal", "MemAvailable"} - set(found))
        raise ProcError(f"{source}: no {' or '.join(missing)} (MemAvailable needs Linux 3.14 or later)")
    return MemInfo(found["MemTotal"], found["MemAvailable"])


class ProcReader:
    """Reads ``stat`` and ``meminfo`` under a proc root (``/proc``, or a tree a test made)."""

    def __init__(self, root: Path | str = "/proc") -> None:
        self.root = Path(root)
        self.ticks_per_second = os.sysconf("SC_CLK_TCK")

    def cpu_times(self) -> CPUTimes:
        path = self.root / "stat"
        return parse_stat(path.read_text(), str(path))

    def meminfo(self) -> MemInfo:
        path = self.root / "meminfo"
        return parse_meminfo(path.read_text(), str(path))

    def pressure(self, resource: str) -> PressureTotals:
        """``pressure/<resource>``'s totals; ``OSError`` when the kernel has no PSI (no file, or
        ``EOPNOTSUPP`` with ``psi=0``), ``PressureError`` when it holds something else."""
        path = self.root / "pressure" / resource
        return parse_pressure(path.read_text(), str(path))
