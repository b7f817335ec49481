"""Pressure stall information (PSI): the kernel's count of the time tasks waited for a CPU, for memory or
for IO, read as shares of wall time; and the rule that keeps a pod held at its own CPU limit out of the
node's CPU pressure. Pure: no I/O (``procfs.ProcReader.pressure`` and ``cgroups.PodCgroups`` read the
files).

**What is read.** ``/proc/pressure/{cpu,memory,io}`` (the node) and, on cgroup v2, each pod cgroup's
``{cpu,memory,io}.pressure`` hold lines ``some avg10=.. avg60=.. avg300=.. total=<µs>`` and ``full ...``.
The agent uses only ``total``, the cumulative stalled time in microseconds: a share over an interval is
Δtotal / Δwall, and a window's value is the mean of its samples' shares (Δtotal / Δwall over the window
when the samples are evenly spaced). The kernel's ``avg*`` are exponentially decaying averages with their
own clock: no window the policy names is one of theirs.

**The trap, and the rule.** A task held by its cgroup's CFS quota (``cpu.max``, the container's CPU limit)
is still runnable, so the kernel counts it as stalled on the CPU, in its cgroup and in every ancestor up to
the node: one burner under a 500m limit alone on an idle 2-CPU node shows a node ``cpu some`` near 0.5,
as much as three unlimited burners fighting for the two CPUs, although nothing waits for a CPU another task
holds. The kernel keeps the throttling apart: the pod cgroup's ``cpu.stat`` counts it (v2
``throttled_usec``, v1 ``throttled_time`` in ns), summed over the CPUs the pod was throttled on.

The node's ``some`` is the per-CPU stall time weighted by each CPU's non-idle time (the kernel aggregates
it so), so a CPU-second of throttling weighs 1/n of the node's figure, n being the CPUs that were not idle.
The rule (``cpu_contention``): the node's CPU pressure is

    max(0, some - T / n),   n = min(CPUs, busy cores + T)

with ``some`` and ``T`` (the pods' throttled CPU-seconds, summed) as shares of the interval's wall time
and ``busy cores`` the node's CPU use over it (a CPU whose only task is throttled is idle to ``/proc/stat``
but not to PSI, hence the sum). Alone on an idle node, a pod throttled half the time gives n = 1 and
takes its 0.5 off; on a busy node of eight CPUs it takes 0.5/8 off. It is a lower bound of the
contention: where a throttled pod and a task waiting for a CPU stall on the same CPU at the same moment,
that moment is taken off too. Throttled cgroups that are not pods (a systemd unit with ``CPUQuota``) are
not known to the agent and still count.

cgroup v1 and v2 alike give the throttled time, so the rule holds on both; each pod's own pressure
(``PodPressure``) needs its cgroup in a unified (v2) tree: on v2 the pod cgroup; on a hybrid v1 host, a
cgroup of the same path under the unified mount when one exists (systemd makes its slices there; the
cgroupfs driver does not), else the pod has no pressure figures.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "PRESSURE_RESOURCES",
    "PressureError",
    "PressureTotals",
    "cpu_contention",
    "parse_pressure",
    "share",
]

PRESSURE_RESOURCES = ("cpu", "memory", "io")


class PressureError(ValueError):
    """A pressure file that does not hold what the kernel writes there."""


@dataclass(frozen=True, slots=True)
class PressureTotals:
    """One pressure file's cumulative stalled time, in microseconds: ``some`` and, when the file has the
    line, ``full``."""

    some: int
    full: int | None


def parse_pressure(text: str, source: str = "pressure") -> PressureTotals:
    """The ``total=`` of the ``some`` and ``full`` lines (``full`` is absent before Linux 5.13 for CPU)."""
    totals: dict[str, int] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind not in ("some", "full"):
            continue
        for field in rest.split():
            key, _, value = field.partition("=")
            if key == "total":
                try:
                    totals[kind] = int(value)
                except ValueError:
                    raise PressureError(f"{source}: total is not a number: {value[:40]!r}") from None
                if totals[kind] < 0:
                    raise PressureError(f"{source}: total is negative")
                break
        else:
            raise PressureError(f"{source}: the {kind} line has no total: {line[:80]!r}")
    if "some" not in totals:
        raise PressureError(f"{source}: no some line")
    return PressureTotals(totals["some"], totals.get("full"))


def share(before: int, after: int, wall_us: float) -> float | None:
    """Δ of a cumulative microsecond counter over ``wall_us``, clamped to [0, 1]; ``None`` when no time
    passed or the counter went backwards (a new cgroup under the same path)."""
    if wall_us <= 0 or after < before:
        return None
    return min(1.0, (after - before) / wall_us)


def cpu_contention(some: float, throttled: float, busy_cores: float | None, cpus: int) -> float:
    """The node's CPU pressure without the pods held at their own limits (the module docstring's rule).

    ``some``: the node's ``cpu some`` share of the interval; ``throttled``: the pods' throttled CPU-time
    over the interval's wall time (may exceed 1: it sums over CPUs); ``busy_cores``: the node's CPU use in
    cores (``None`` when unknown: every CPU is taken as busy, which takes the least off)."""
    if throttled <= 0:
        return min(1.0, max(0.0, some))
    busy = float(cpus) if busy_cores is None else busy_cores
    nonidle = min(float(max(cpus, 1)), max(busy + throttled, 1e-9))
    return min(1.0, max(0.0, some - throttled / nonidle))
