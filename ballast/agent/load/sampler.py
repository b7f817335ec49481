"""One sample of the node and its pods: counters read now, rates against the previous read.

A rate needs two reads, so the first read of the node, and of each pod, only seeds: it yields no CPU
figure (memory is an instant value and is always there). Pod CPU is Δ(cgroup nanoseconds) over Δ(monotonic
time between that pod's two reads), in cores; the node's is crane's utilisation times the CPUs that
``/proc/stat`` lists. A pod whose cgroup is not there (not created yet, already gone) is skipped and
seeds again when it appears.

Pressure, when asked for (``sample(pressure=True)``: the policy names a pressure metric; the reporter asks
once per report interval, since the counters are cumulative and a share over a minute is as exact as six
over ten seconds, at a sixth of the file reads): the node's shares of the interval since the last
pressure read stalled (``cpu_pressure_some`` without the pods held at their own CPU limits,
``memory_pressure_some``/``_full``, ``io_pressure_some``/``_full``), each pod's ``some`` shares and the
share of the interval its limit held it (``ballast.agent.load.pressure``). A kernel without PSI gives no
pressure figures and is said once in the log; everything else is measured as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ballast.agent.load.cgroups import PodCgroups
from ballast.agent.load.pressure import (
    PRESSURE_RESOURCES,
    PressureError,
    PressureTotals,
    cpu_contention,
    share,
)
from ballast.agent.load.procfs import CPUTimes, ProcReader, cpu_utilisation
from ballast.contract.pod import QOSClass

__all__ = ["KernelReading", "PodReading", "PodRef", "Sampler"]

log = logging.getLogger("ballast.agent.load")


@dataclass(frozen=True, slots=True)
class PodRef:
    """A pod bound to this node, as the pod watch knows it."""

    uid: str
    namespace: str
    name: str
    qos: QOSClass


@dataclass(slots=True)
class PodReading:
    """One pod's figures in a ``KernelReading``."""

    cores: float | None
    """``None`` on the pod's first read (a rate needs two)."""
    working_set: int | None
    """``None`` when the pod cgroup has no memory files."""
    pressure: dict[str, float] = field(default_factory=dict)
    """``cpu``/``memory``/``io`` -> the share of the interval some of its tasks stalled (pressure asked
    for, its cgroup in a unified tree, and a previous read)."""
    throttled: float | None = None
    """The share of the interval its CPU limit held it (throttled CPU time over wall time, at most 1)."""


@dataclass
class KernelReading:
    """The node's and its pods' figures from one read of ``/proc`` and the pod cgroups (what a load
    annotation is made of, not one: that is ``ballast.contract.annotations.LoadSample``)."""

    when: float
    """Unix seconds."""
    cpu_ratio: float | None
    cpu_cores: float | None
    mem_ratio: float
    mem_bytes: int
    pods: dict[str, PodReading] = field(default_factory=dict)
    skipped: int = 0
    """Pods whose cgroup could not be read in this sample."""
    pressure: dict[str, float] = field(default_factory=dict)
    """``cpu_pressure_some`` (pods' own throttling taken out), ``memory_pressure_some`` and the like ->
    the node's share of the interval stalled; empty unless asked for, and without PSI."""


class Sampler:
    """Reads ``/proc`` and the pod cgroups and turns counters into rates (module docstring)."""

    def __init__(
        self,
        proc: ProcReader,
        cgroups: PodCgroups | None,
        *,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.proc = proc
        self.cgroups = cgroups
        self._throttle_known = 0
        self._clock = clock
        self._monotonic = monotonic
        self._cpu: CPUTimes | None = None
        self._pods: dict[str, tuple[int, int]] = {}
        """pod uid -> (monotonic ns of the read, cgroup CPU ns)."""
        self._psi: tuple[int, dict[str, int]] | None = None
        """The node's last pressure read: (monotonic ns, series -> total µs)."""
        self._psi_cpu: CPUTimes | None = None
        """``/proc/stat`` at the node's last pressure read: its busy cores over the same interval."""
        self._pod_psi: dict[str, tuple[int, int | None, dict[str, int]]] = {}
        """pod uid -> (monotonic ns, throttled µs, resource -> some µs) of its last pressure read."""
        self.psi_unavailable: str | None = None
        """Why the node's PSI could not be read, once it could not (said once in the log)."""
        self.throttling_unknown = False
        """Pods were measured with pressure but none of their cgroups gave its throttled time: the node's
        CPU pressure then still holds pods held at their own limits (said once in the log)."""

    def sample(self, pods: Iterable[PodRef], *, pressure: bool = False) -> KernelReading:
        """Read everything once; ``ProcError``/``OSError`` from ``/proc`` propagate (the node's own
        figures are not optional), pod cgroups and pressure files never raise."""
        pods = list(pods)
        node_psi = self._node_pressure() if pressure else None
        times = self.proc.cpu_times()
        memory = self.proc.meminfo()
        when = self._clock()
        ratio = cpu_utilisation(self._cpu, times) if self._cpu is not None else None
        self._cpu = times
        sample = KernelReading(
            when,
            ratio,
            ratio * times.cpus if ratio is not None else None,
            memory.utilisation,
            memory.used,
        )
        throttled_total = 0.0
        self._throttle_known = 0
        if self.cgroups is None:
            self._finish_pressure(sample, node_psi, throttled_total, times)
            return sample
        seen: set[str] = set()
        for pod in pods:
            counters = self.cgroups.read(pod.uid, pod.qos)
            now = self._monotonic()
            if counters is None:
                sample.skipped += 1
                self._pods.pop(pod.uid, None)
                continue
            seen.add(pod.uid)
            before = self._pods.get(pod.uid)
            self._pods[pod.uid] = (now, counters.cpu_ns)
            cores = None
            if before is not None and now > before[0] and counters.cpu_ns >= before[1]:
                cores = (counters.cpu_ns - before[1]) / (now - before[0])
            reading = PodReading(cores, counters.working_set)
            if pressure:
                throttled_total += self._pod_pressure(pod, reading)
            sample.pods[pod.uid] = reading
        for uid in [u for u in self._pods if u not in seen]:
            del self._pods[uid]
        for uid in [u for u in self._pod_psi if u not in seen]:
            del self._pod_psi[uid]
        self.cgroups.forget(seen)
        self._finish_pressure(sample, node_psi, throttled_total, times)
        if pressure and sample.pods:
            self._say_throttling(self._throttle_known == 0)
        return sample

    def _say_throttling(self, unknown: bool) -> None:
        if unknown and not self.throttling_unknown:
            log.warning(
                "cpu_pressure_some: no pod cgroup gives its throttled time (cpu.stat throttled_usec, v1 "
                "throttled_time), so pods held at their own CPU limits cannot be told from contention and "
                "still count in the node's CPU pressure"
            )
        elif not unknown and self.throttling_unknown:
            log.info("cpu_pressure_some: the pods' throttled time can be read again")
        self.throttling_unknown = unknown

    # --- pressure -----------------------------------------------------------------------------------

    def _node_pressure(self) -> tuple[int, dict[str, int]] | None:
        """The node's PSI totals now, ``None`` (said once) when the kernel has none."""
        totals: dict[str, int] = {}
        try:
            for resource in PRESSURE_RESOURCES:
                read: PressureTotals = self.proc.pressure(resource)
                totals[f"{resource}_pressure_some"] = read.some
                if read.full is not None and resource != "cpu":
                    totals[f"{resource}_pressure_full"] = read.full
        except (OSError, PressureError) as e:
            if self.psi_unavailable is None:
                log.warning(
                    "pressure metrics are not measured: the kernel's PSI cannot be read (%s; a kernel "
                    "built with CONFIG_PSI needs psi=1 on its command line when it is off by default)",
                    e,
                )
            self.psi_unavailable = str(e)
            self._psi = None
            return None
        if self.psi_unavailable is not None:
            log.info("the kernel's PSI can be read again: pressure metrics are measured")
            self.psi_unavailable = None
        return self._monotonic(), totals

    def _pod_pressure(self, pod: PodRef, reading: PodReading) -> float:
        """Fill the pod's pressure shares and its throttled share; its throttled CPU time over the
        interval's wall time (not capped: the node's rule sums CPU time), 0 on a first read."""
        assert self.cgroups is not None
        counters = self.cgroups.read_pressure(pod.uid, pod.qos)
        now = self._monotonic()
        if counters is None:
            self._pod_psi.pop(pod.uid, None)
            return 0.0
        before = self._pod_psi.get(pod.uid)
        self._pod_psi[pod.uid] = (now, counters.throttled_us, counters.some_us)
        if counters.throttled_us is not None:
            self._throttle_known += 1
        if before is None:
            return 0.0
        wall_us = (now - before[0]) / 1000
        for resource, total in counters.some_us.items():
            if resource in before[2] and (value := share(before[2][resource], total, wall_us)) is not None:
                reading.pressure[resource] = value
        if counters.throttled_us is None or before[1] is None or counters.throttled_us < before[1]:
            return 0.0
        throttled = (counters.throttled_us - before[1]) / wall_us if wall_us > 0 else 0.0
        reading.throttled = min(1.0, throttled)
        return throttled

    def _finish_pressure(
        self,
        sample: KernelReading,
        node_psi: tuple[int, dict[str, int]] | None,
        throttled: float,
        times: CPUTimes,
    ) -> None:
        """The node's shares against its previous pressure read (the interval since: pressure may be read
        less often than the rest), the pods' throttling out of its CPU pressure."""
        if node_psi is None:
            return
        before, self._psi = self._psi, node_psi
        cpu_before, self._psi_cpu = self._psi_cpu, times
        if before is None:
            return
        ratio = cpu_utilisation(cpu_before, times) if cpu_before is not None else None
        busy = ratio * times.cpus if ratio is not None else None
        wall_us = (node_psi[0] - before[0]) / 1000
        for series, total in node_psi[1].items():
            if series in before[1] and (value := share(before[1][series], total, wall_us)) is not None:
                sample.pressure[series] = value
        if "cpu_pressure_some" in sample.pressure:
            sample.pressure["cpu_pressure_some"] = cpu_contention(
                sample.pressure["cpu_pressure_some"], throttled, busy, times.cpus
            )
