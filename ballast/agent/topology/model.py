"""The node's CPU topology (CPUs, cores, sockets, NUMA nodes) as the kubelet's CPU manager sees it.

``CPUTopology`` is immutable and precomputes every lookup once, because the CPU assignment asks "which
CPUs are in this core / socket / NUMA node" many times per allocation. It is built from a list of
``(cpu, core, socket, numa)`` rows (tests, the kubelet's fixtures) or read from a sysfs tree by
``ballast.agent.topology.sysfs.read_topology``; this module is the model only and does no I/O.

Core ids follow the kubelet (``getUniqueCoreID``): the lowest CPU id among a core's hardware threads,
not sysfs ``core_id``, which is only unique within one package.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ballast.agent.cpuset import CPUSet

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["CPUInfo", "CPUTopology", "NUMANode", "TopologyError"]


class TopologyError(ValueError):
    """Topology input that cannot be used; says which file (when there is one) and why."""

    def __init__(self, reason: str, path: Path | None = None) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}" if path is not None else reason)


@dataclass(frozen=True, slots=True)
class CPUInfo:
    """Where one logical CPU sits. ``core`` is machine-unique (lowest thread id of the core)."""

    cpu: int
    core: int
    socket: int
    numa: int
    die: int = 0


@dataclass(frozen=True, slots=True)
class NUMANode:
    """A NUMA node's memory and SLIT distances, when known (sysfs); its CPUs come from the topology.

    ``distances`` is ``((node_id, distance), ...)`` sorted by node id, a tuple so the node stays hashable.
    """

    id: int
    memory_bytes: int | None = None
    distances: tuple[tuple[int, int], ...] = ()

    def distance_map(self) -> dict[int, int]:
        return dict(self.distances)


def _sorted_tuple(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(set(values)))


@dataclass(frozen=True)
class CPUTopology:
    """CPUs (sorted by id) and NUMA nodes (sorted by id). Build with ``from_cpus`` or ``read_topology``.

    ``numa_nodes`` may include nodes without online CPUs (memory-only nodes); the NUMA counts and id lists
    below only count nodes that hold CPUs, as the kubelet does (``NumNUMANodes``).
    """

    cpus: tuple[CPUInfo, ...]
    numa_nodes: tuple[NUMANode, ...]

    _info: dict[int, CPUInfo] = field(init=False, repr=False, compare=False)
    _all: CPUSet = field(init=False, repr=False, compare=False)
    _core_cpus: dict[int, CPUSet] = field(init=False, repr=False, compare=False)
    _socket_cpus: dict[int, CPUSet] = field(init=False, repr=False, compare=False)
    _numa_cpus: dict[int, CPUSet] = field(init=False, repr=False, compare=False)
    _socket_cores: dict[int, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    _numa_cores: dict[int, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    _numa_sockets: dict[int, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    _socket_numas: dict[int, tuple[int, ...]] = field(init=False, repr=False, compare=False)
    _numa_by_id: dict[int, NUMANode] = field(init=False, repr=False, compare=False)
    core_of: Mapping[int, int] = field(init=False, repr=False, compare=False)
    """CPU id -> core id, read-only; with ``socket_of`` and ``numa_of`` the lookups for hot loops."""
    socket_of: Mapping[int, int] = field(init=False, repr=False, compare=False)
    numa_of: Mapping[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        info: dict[int, CPUInfo] = {}
        for c in self.cpus:
            if c.cpu in info:
                raise TopologyError(f"CPU {c.cpu} is listed twice")
            if min(c.cpu, c.core, c.socket, c.numa, c.die) < 0:
                raise TopologyError(f"CPU {c.cpu} has a negative id: {c}")
            info[c.cpu] = c
        cpus = tuple(info[k] for k in sorted(info))
        numa_by_id: dict[int, NUMANode] = {}
        for n in self.numa_nodes:
            if n.id in numa_by_id:
                raise TopologyError(f"NUMA node {n.id} is listed twice")
            numa_by_id[n.id] = n
        missing = sorted({c.numa for c in cpus} - numa_by_id.keys())
        if missing:
            raise TopologyError(f"CPUs refer to NUMA node(s) {missing} that are not listed")
        nodes = tuple(numa_by_id[k] for k in sorted(numa_by_id))

        core_cpus: dict[int, set[int]] = {}
        socket_cpus: dict[int, set[int]] = {}
        numa_cpus: dict[int, set[int]] = {}
        socket_cores: dict[int, set[int]] = {}
        numa_cores: dict[int, set[int]] = {}
        numa_sockets: dict[int, set[int]] = {}
        socket_numas: dict[int, set[int]] = {}
        core_home: dict[int, tuple[int, int]] = {}
        for c in cpus:
            home = core_home.setdefault(c.core, (c.socket, c.numa))
            if home != (c.socket, c.numa):
                raise TopologyError(
                    f"core {c.core} spans socket/NUMA {home} and {(c.socket, c.numa)} (CPU {c.cpu}); "
                    "a core's threads share one socket and one NUMA node"
                )
            core_cpus.setdefault(c.core, set()).add(c.cpu)
            socket_cpus.setdefault(c.socket, set()).add(c.cpu)
            numa_cpus.setdefault(c.numa, set()).add(c.cpu)
            socket_cores.setdefault(c.socket, set()).add(c.core)
            numa_cores.setdefault(c.numa, set()).add(c.core)
            numa_sockets.setdefault(c.numa, set()).add(c.socket)
            socket_numas.setdefault(c.socket, set()).add(c.numa)

        def frozen(groups: dict[int, set[int]]) -> dict[int, CPUSet]:
            return {k: CPUSet._trusted(frozenset(v)) for k, v in sorted(groups.items())}

        def ordered(groups: dict[int, set[int]]) -> dict[int, tuple[int, ...]]:
            return {k: _sorted_tuple(v) for k, v in sorted(groups.items())}

        set_ = object.__setattr__
        set_(self, "cpus", cpus)
        set_(self, "numa_nodes", nodes)
        set_(self, "_info", info)
        set_(self, "_all", CPUSet._trusted(frozenset(info)))
        set_(self, "_core_cpus", frozen(core_cpus))
        set_(self, "_socket_cpus", frozen(socket_cpus))
        set_(self, "_numa_cpus", frozen(numa_cpus))
        set_(self, "_socket_cores", ordered(socket_cores))
        set_(self, "_numa_cores", ordered(numa_cores))
        set_(self, "_numa_sockets", ordered(numa_sockets))
        set_(self, "_socket_numas", ordered(socket_numas))
        set_(self, "_numa_by_id", {n.id: n for n in nodes})
        # Plain dicts typed as Mapping: a read-only proxy would double the cost of every lookup.
        set_(self, "core_of", {c.cpu: c.core for c in cpus})
        set_(self, "socket_of", {c.cpu: c.socket for c in cpus})
        set_(self, "numa_of", {c.cpu: c.numa for c in cpus})

    # --- construction -------------------------------------------------------------------------------

    @classmethod
    def from_cpus(
        cls,
        rows: Iterable[tuple[int, int, int, int]],
        numa_nodes: Iterable[NUMANode] | None = None,
    ) -> CPUTopology:
        """Build from ``(cpu, core, socket, numa)`` rows, core ids taken as given.

        Without ``numa_nodes`` every NUMA id named by a row becomes a node with unknown memory and distances.
        """
        cpus = tuple(CPUInfo(cpu, core, socket, numa) for cpu, core, socket, numa in rows)
        if numa_nodes is None:
            nodes = tuple(NUMANode(n) for n in _sorted_tuple(c.numa for c in cpus))
        else:
            nodes = tuple(numa_nodes)
        return cls(cpus, nodes)

    # --- sizes --------------------------------------------------------------------------------------

    @property
    def num_cpus(self) -> int:
        return len(self._info)

    @property
    def num_cores(self) -> int:
        return len(self._core_cpus)

    @property
    def num_sockets(self) -> int:
        return len(self._socket_cpus)

    @property
    def num_numa_nodes(self) -> int:
        """NUMA nodes holding at least one CPU (the kubelet's ``NumNUMANodes``)."""
        return len(self._numa_cpus)

    @property
    def cpus_per_core(self) -> int:
        """``NumCPUs / NumCores`` rounded down, as the kubelet computes it (0 for an empty topology)."""
        return self.num_cpus // self.num_cores if self.num_cores else 0

    # --- id lists -----------------------------------------------------------------------------------

    @property
    def all_cpus(self) -> CPUSet:
        return self._all

    @property
    def core_ids(self) -> tuple[int, ...]:
        return tuple(self._core_cpus)

    @property
    def socket_ids(self) -> tuple[int, ...]:
        return tuple(self._socket_cpus)

    @property
    def numa_ids(self) -> tuple[int, ...]:
        """Ids of the NUMA nodes that hold CPUs; ``numa_nodes`` also lists memory-only ones."""
        return tuple(self._numa_cpus)

    # --- lookups ------------------------------------------------------------------------------------

    def info(self, cpu: int) -> CPUInfo:
        """Core, socket and NUMA node of ``cpu``; ``KeyError`` when the CPU is not online in this topology."""
        try:
            return self._info[cpu]
        except KeyError:
            raise KeyError(f"CPU {cpu} is not in this topology (online CPUs: {self._all})") from None

    def cpus_in_core(self, core: int) -> CPUSet:
        return self._core_cpus.get(core, _EMPTY)

    def cpus_in_socket(self, socket: int) -> CPUSet:
        return self._socket_cpus.get(socket, _EMPTY)

    def cpus_in_numa(self, numa: int) -> CPUSet:
        return self._numa_cpus.get(numa, _EMPTY)

    def cores_in_socket(self, socket: int) -> tuple[int, ...]:
        return self._socket_cores.get(socket, ())

    def cores_in_numa(self, numa: int) -> tuple[int, ...]:
        return self._numa_cores.get(numa, ())

    def numa_nodes_of_socket(self, socket: int) -> tuple[int, ...]:
        return self._socket_numas.get(socket, ())

    def sockets_of_numa(self, numa: int) -> tuple[int, ...]:
        return self._numa_sockets.get(numa, ())

    def numa_node(self, numa: int) -> NUMANode:
        try:
            return self._numa_by_id[numa]
        except KeyError:
            raise KeyError(f"NUMA node {numa} is not in this topology") from None

    def memory_bytes(self, numa: int) -> int | None:
        """Total memory of the NUMA node in bytes, or ``None`` when it is not known (``from_cpus``)."""
        return self.numa_node(numa).memory_bytes

    def distances(self, numa: int) -> Mapping[int, int]:
        """SLIT distances from ``numa`` to every node by node id; empty when unknown."""
        return self.numa_node(numa).distance_map()


_EMPTY = CPUSet()
