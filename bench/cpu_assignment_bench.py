"""How long one ``take_by_topology`` call takes, on small and large machine shapes.

Run: ``python -m bench.cpu_assignment_bench``. The agent calls the assignment once per exclusive
container (and for the reserved set at start-up); the target is well under 1 ms on a 2-socket,
8-NUMA-node, 256-CPU machine (AMD EPYC 7742 with NPS=4, the kubelet's largest test topology).
"""

from __future__ import annotations

import random
import statistics
import timeit
from collections.abc import Callable

from ballast.agent.cpumanager.cpu_assignment import take_by_topology
from ballast.agent.cpuset import CPUSet
from ballast.agent.topology.model import CPUTopology


def epyc_2s_8numa_256() -> CPUTopology:
    """2 sockets x 64 cores x 2 threads, NPS=4: NUMA node N holds cores 16N..16N+15 and their siblings."""
    return CPUTopology.from_cpus((cpu, cpu % 128, (cpu % 128) // 64, (cpu % 128) // 16) for cpu in range(256))


def xeon_2s_4numa_80() -> CPUTopology:
    """Dual Xeon Gold 6230 with SNC: 2 sockets x 20 cores x 2 threads, 4 NUMA nodes."""
    return CPUTopology.from_cpus((cpu, cpu % 40, (cpu % 40) // 20, (cpu % 40) // 10) for cpu in range(80))


def single_socket_ht_8() -> CPUTopology:
    return CPUTopology.from_cpus((cpu, cpu % 4, 0, 0) for cpu in range(8))


def _fragmented(topology: CPUTopology, keep: float, seed: int = 7) -> CPUSet:
    """A repeatable, busy-looking free set: a random ``keep`` fraction of the CPUs."""
    rng = random.Random(seed)
    cpus = topology.all_cpus.sorted()
    return CPUSet(rng.sample(cpus, int(len(cpus) * keep)))


def _time(call: Callable[[], object], repeat: int = 7) -> tuple[float, float]:
    """(median, best) microseconds per call, with the loop count chosen to run ~0.1 s per repeat."""
    timer = timeit.Timer(call)
    number, _ = timer.autorange()
    runs = [t / number * 1e6 for t in timer.repeat(repeat=repeat, number=number)]
    return statistics.median(runs), min(runs)


def main() -> None:
    big = epyc_2s_8numa_256()
    mid = xeon_2s_4numa_80()
    small = single_socket_ht_8()
    cases = [
        ("1S HT 8 CPUs", small, small.all_cpus, 2),
        ("2S 4-NUMA 80 CPUs", mid, mid.all_cpus, 4),
        ("2S 4-NUMA 80 CPUs", mid, mid.all_cpus, 64),
        ("2S 8-NUMA 256 CPUs", big, big.all_cpus, 1),
        ("2S 8-NUMA 256 CPUs", big, big.all_cpus, 4),
        ("2S 8-NUMA 256 CPUs", big, big.all_cpus, 40),
        ("2S 8-NUMA 256 CPUs", big, big.all_cpus, 100),
        ("2S 8-NUMA 256 CPUs", big, big.all_cpus, 255),
        ("2S 8-NUMA 256 CPUs, half busy", big, _fragmented(big, 0.5), 7),
        ("2S 8-NUMA 256 CPUs, half busy", big, _fragmented(big, 0.5), 64),
        ("2S 8-NUMA 256 CPUs, 90% busy", big, _fragmented(big, 0.1), 20),
    ]
    print(f"{'topology':<32}{'free':>6}{'take':>6}{'median us':>12}{'best us':>10}")
    for name, topology, free, n in cases:
        median, best = _time(lambda t=topology, f=free, k=n: take_by_topology(t, f, k))
        print(f"{name:<32}{len(free):>6}{n:>6}{median:>12.1f}{best:>10.1f}")


if __name__ == "__main__":
    main()
