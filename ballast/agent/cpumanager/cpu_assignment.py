"""Which CPUs to hand out: the kubelet static policy's NUMA-packed best fit, in pure Python.

This is ``takeByTopologyNUMAPacked`` from the kubelet's ``cpu_assignment.go`` with the packed sorting
strategy and without the uncore-cache option, re-derived from its documented behaviour and test tables:

1. Whole free first-level units, then whole free second-level units. The levels are NUMA nodes then
   sockets when ``num_sockets >= num_numa_nodes`` (a NUMA node holds one or more sockets), else sockets
   then NUMA nodes (a socket holds several NUMA nodes: SNC, NPS). A unit larger than what is still
   needed is skipped, not a reason to stop.
2. Whole free cores.
3. Single CPUs, filling partly used cores first.

Every list is in the accumulator's order: ascending number of available CPUs, ties by ascending id,
built hierarchically (NUMA nodes, then the sockets in each, then the cores in each; or sockets first).
The effect is best-fit packing: the most used unit that still has room is drawn from first.

One deliberate difference: a unit is "free" when all of *its own* CPUs are available. The kubelet
compares with the machine-wide averages ``NumCPUs/NumSockets`` and ``NumCPUs/NumCores``, which is the
same on uniform machines but on non-uniform ones (offline CPUs, hybrid cores) can call a partly used
core free and hand out a CPU that is not available.

The accumulator works on plain ints and dicts of counters; ``CPUSet`` appears only at the boundary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import islice

from ballast.agent.cpuset import CPUSet
from ballast.agent.topology.model import CPUTopology

__all__ = ["NotEnoughCPUsError", "take_by_topology"]


class NotEnoughCPUsError(ValueError):
    """The request asks for more CPUs than are available in the topology."""

    def __init__(self, requested: int, available: CPUSet) -> None:
        self.requested = requested
        self.available = available
        super().__init__(
            f"not enough cpus available to satisfy request: requested={requested}, "
            f"available={len(available)} (free CPUs: {str(available) or 'none'})"
        )


def _unique(ids: Iterable[int]) -> list[int]:
    # A unit spanning two parents (odd firmware) would be listed under both; it keeps its first place.
    return list(dict.fromkeys(ids))


class _Accumulator:
    """Mutable allocation state: the CPUs still free, how many are free per unit, and the result."""

    __slots__ = (
        "available",
        "core_free",
        "needed",
        "numa_first",
        "numa_free",
        "pair_free",
        "result",
        "socket_free",
        "topo",
    )

    def __init__(self, topo: CPUTopology, available: frozenset[int], needed: int) -> None:
        self.topo = topo
        self.available = set(available)
        self.needed = needed
        self.result: list[int] = []
        self.numa_first = topo.num_sockets >= topo.num_numa_nodes
        # Counter over map() keeps the per-CPU loop in C: this is most of an allocation's cost.
        numas = list(map(topo.numa_of.__getitem__, available))
        sockets = list(map(topo.socket_of.__getitem__, available))
        self.core_free = Counter(map(topo.core_of.__getitem__, available))
        self.socket_free = Counter(sockets)
        self.numa_free = Counter(numas)
        self.pair_free = Counter(zip(numas, sockets, strict=True))

    def take(self, cpus: Iterable[int]) -> None:
        """Claim CPUs that are all still available."""
        core_of, socket_of, numa_of = self.topo.core_of, self.topo.socket_of, self.topo.numa_of
        # Most takes are one core (a few CPUs): a plain loop beats Counter.subtract's per-call overhead.
        for cpu in cpus:
            numa, socket = numa_of[cpu], socket_of[cpu]
            self.core_free[core_of[cpu]] -= 1
            self.socket_free[socket] -= 1
            self.numa_free[numa] -= 1
            self.pair_free[numa, socket] -= 1
            self.available.discard(cpu)
            self.result.append(cpu)
            self.needed -= 1

    def take_units(self, units: list[int], cpus_of: Callable[[int], CPUSet]) -> bool:
        """Take, in order, each (free) unit that fits in what is still needed; a bigger one is skipped.

        Returns whether anything was taken.
        """
        taken = False
        for unit in units:
            cpus = cpus_of(unit)
            if self.needed >= len(cpus):
                self.take(cpus)
                taken = True
        return taken

    # --- free units: all of their CPUs available, in the sorted order ------------------------------

    def free_numa_nodes(self) -> list[int]:
        cpus_in_numa, free = self.topo.cpus_in_numa, self.numa_free
        return [n for n in self.sorted_numas() if free[n] == len(cpus_in_numa(n))]

    def free_sockets(self) -> list[int]:
        cpus_in_socket, free = self.topo.cpus_in_socket, self.socket_free
        return [s for s in self.sorted_sockets() if free[s] == len(cpus_in_socket(s))]

    def free_cores(self, order: list[int] | None = None) -> list[int]:
        """Free cores in ``order`` (default: ``sorted_cores()``)."""
        cpus_in_core, free = self.topo.cpus_in_core, self.core_free
        return [
            c for c in (self.sorted_cores() if order is None else order) if free[c] == len(cpus_in_core(c))
        ]

    def free_cpus(self, order: list[int] | None = None) -> Iterator[int]:
        """Available CPUs core by core in ``order`` (default: ``sorted_cores()``), ascending within a core."""
        cpus_in_core = self.topo.cpus_in_core
        available = self.available
        cores = self.sorted_cores() if order is None else order
        return (cpu for core in cores for cpu in cpus_in_core(core) if cpu in available)

    # --- ordering: ascending free CPUs, ties by id, parents before children ------------------------

    def _children(
        self, ids: tuple[int, ...], free: Counter[int], pair: Callable[[int], tuple[int, int]]
    ) -> list[int]:
        """The ``ids`` with a free CPU inside the parent unit, by (free CPUs in the whole unit, id)."""
        pair_free = self.pair_free
        return sorted((i for i in ids if pair_free.get(pair(i))), key=lambda i: (free[i], i))

    def sorted_numas(self) -> list[int]:
        if self.numa_first:
            free = self.numa_free
            return sorted((n for n, k in free.items() if k), key=lambda n: (free[n], n))
        numas_of = self.topo.numa_nodes_of_socket
        return _unique(
            n
            for s in self.sorted_sockets()
            for n in self._children(numas_of(s), self.numa_free, lambda n, s=s: (n, s))
        )

    def sorted_sockets(self) -> list[int]:
        if not self.numa_first:
            free = self.socket_free
            return sorted((s for s, k in free.items() if k), key=lambda s: (free[s], s))
        sockets_of = self.topo.sockets_of_numa
        return _unique(
            s
            for n in self.sorted_numas()
            for s in self._children(sockets_of(n), self.socket_free, lambda s, n=n: (n, s))
        )

    def sorted_cores(self) -> list[int]:
        """Cores with a free CPU: per socket (NUMA-first) or per NUMA node (sockets-first), by free CPUs."""
        topo = self.topo
        if self.numa_first:
            groups = [topo.cores_in_socket(s) for s in self.sorted_sockets()]
        else:
            groups = [topo.cores_in_numa(n) for n in self.sorted_numas()]
        core_free = self.core_free
        cores: list[int] = []
        for group in groups:
            cores.extend(sorted((c for c in group if core_free.get(c)), key=lambda c: (core_free[c], c)))
        return cores


def take_by_topology(topology: CPUTopology, available: CPUSet, num_cpus: int) -> CPUSet:
    """Choose ``num_cpus`` CPUs from ``available`` the way the kubelet's static policy packs them.

    CPUs in ``available`` that the topology does not know (offline) are ignored. Raises
    ``NotEnoughCPUsError`` when fewer than ``num_cpus`` are available, ``ValueError`` for a negative count.
    """
    if num_cpus < 0:
        raise ValueError(f"cannot take a negative number of CPUs ({num_cpus})")
    usable = available.as_frozenset() & topology.all_cpus.as_frozenset()
    if num_cpus > len(usable):
        raise NotEnoughCPUsError(num_cpus, CPUSet._trusted(usable))
    if num_cpus == 0:
        return CPUSet()
    if num_cpus == len(usable):
        return CPUSet._trusted(usable)

    acc = _Accumulator(topology, usable, num_cpus)
    numa_level = (acc.free_numa_nodes, topology.cpus_in_numa)
    socket_level = (acc.free_sockets, topology.cpus_in_socket)
    for free_units, cpus_of in (numa_level, socket_level) if acc.numa_first else (socket_level, numa_level):
        acc.take_units(free_units(), cpus_of)
        if not acc.needed:
            return CPUSet._trusted(frozenset(acc.result))

    order = acc.sorted_cores()
    if acc.take_units(acc.free_cores(order), topology.cpus_in_core):
        order = acc.sorted_cores()  # counts changed; when nothing was taken the order still holds
    if acc.needed:
        acc.take(list(islice(acc.free_cpus(order), acc.needed)))
    return CPUSet._trusted(frozenset(acc.result))
