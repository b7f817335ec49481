"""One sample of the node and its pods: counters read now, rates against the previous read.

A rate needs two reads, so the first read of the node, and of each pod, only seeds: it yields no CPU
figure (memory is an instant value and is always there). Pod CPU is Δ(cgroup nanoseconds) over Δ(monotonic
time between that pod's two reads), in cores; the node's is crane's utilisation times the CPUs that
``/proc/stat`` lists. A pod whose cgroup is not there (not created yet, already gone) is skipped and
seeds again when it appears.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ballast.agent.load.cgroups import PodCgroups
from ballast.agent.load.procfs import CPUTimes, ProcReader, cpu_utilisation
from ballast.contract.pod import QOSClass

__all__ = ["KernelReading", "PodReading", "PodRef", "Sampler"]


@dataclass(frozen=True, slots=True)
class PodRef:
    """A pod bound to this node, as the pod watch knows it."""

    uid: str
    namespace: str
    name: str
    qos: QOSClass


@dataclass(frozen=True, slots=True)
class PodReading:
    """One pod's figures in a ``KernelReading``."""

    cores: float | None
    """``None`` on the pod's first read (a rate needs two)."""
    working_set: int | None
    """``None`` when the pod cgroup has no memory files."""


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
        self._clock = clock
        self._monotonic = monotonic
        self._cpu: CPUTimes | None = None
        self._pods: dict[str, tuple[int, int]] = {}
        """pod uid -> (monotonic ns of the read, cgroup CPU ns)."""

    def sample(self, pods: Iterable[PodRef]) -> KernelReading:
        """Read everything once; ``ProcError``/``OSError`` from ``/proc`` propagate (the node's own
        figures are not optional), pod cgroups never raise."""
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
        if self.cgroups is None:
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
            sample.pods[pod.uid] = PodReading(cores, counters.working_set)
        for uid in [u for u in self._pods if u not in seen]:
            del self._pods[uid]
        self.cgroups.forget(seen)
        return sample
